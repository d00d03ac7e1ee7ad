// Writes through `mezzanine proxy` for Node's `pg`: each statement (one
// parameter, $1, the row key) run once, in order, as a named prepared
// statement, with results in text and then (a second connection) in
// binary for RETURNING. Prints each one's command, row count, rows and
// fields (with their table and column ids), or its SQLSTATE, with the key
// written as KEY. Run straight against PostgreSQL and through the proxy
// (in primary); the test compares the outputs (tests/it/proxy_writes.rs).
//
//     node writes.js postgres://user@host:port/db KEY "INSERT ... $1 ..." ...

const { Client } = require("pg");

async function main() {
  const [url, key, ...statements] = process.argv.slice(2);
  const out = [];
  const shown = (v) =>
    JSON.stringify(v, (k, x) => (x instanceof Date ? x.toISOString() : x && x.type === "Buffer" ? Buffer.from(x.data).toString("hex") : x));
  const clients = [false, true].map((binary) => new Client({ connectionString: url, binary }));
  for (const client of clients) {
    await client.connect();
    await client.query("SET TimeZone = 'Pacific/Chatham'");
  }
  for (const [i, text] of statements.entries()) {
    const client = clients[i % 2];
    try {
      const r = await client.query({ name: `write_${i}`, text, values: [key] });
      out.push(`${i}: ${r.command} ${r.rowCount} rows ${shown(r.rows)}`);
      out.push(`  fields: ${shown(r.fields.map((f) => [f.name, f.tableID, f.columnID, f.dataTypeID, f.dataTypeModifier, f.format]))}`);
    } catch (e) {
      out.push(`${i}: error ${e.code}`);
    }
  }
  for (const client of clients) {
    await client.end();
  }
  console.log(out.join("\n").split(key).join("KEY"));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
