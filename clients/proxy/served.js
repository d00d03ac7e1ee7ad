// Reads answered by `mezzanine proxy` from Schemaless, for Node's `pg`: one
// statement with one parameter ($1, the row key), as an unnamed and as a
// named prepared statement, results in text and in binary. Run straight
// against PostgreSQL and through the proxy; the test compares the outputs
// (tests/it/proxy_modes.rs).
//
//     node served.js postgres://user@host:port/db "SELECT ... WHERE k = $1" KEY...

const { Client } = require("pg");

async function main() {
  const [url, sql, ...keys] = process.argv.slice(2);
  const out = [];
  const shown = (v) =>
    JSON.stringify(v, (k, x) => (x instanceof Date ? x.toISOString() : x && x.type === "Buffer" ? Buffer.from(x.data).toString("hex") : x));
  for (const binary of [false, true]) {
    const client = new Client({ connectionString: url, binary });
    await client.connect();
    await client.query("SET TimeZone = 'UTC'");
    for (const key of keys) {
      const unnamed = await client.query({ text: sql, values: [key] });
      out.push(`${key} unnamed binary=${binary}: ${shown(unnamed.rows)}`);
      out.push(`  fields: ${shown(unnamed.fields.map((f) => [f.name, f.tableID, f.columnID, f.dataTypeID, f.dataTypeModifier, f.format]))}`);
      const named = await client.query({ name: "served_by_key", text: sql, values: [key] });
      out.push(`${key} named binary=${binary}: ${shown(named.rows)}`);
    }
    await client.end();
  }
  console.log(out.join("\n"));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
