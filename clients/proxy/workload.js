// The same workload for Node's `pg`, run straight against PostgreSQL and
// through `mezzanine proxy`: its output must be identical. Unnamed and
// named prepared statements (the extended protocol), results in text and
// in binary, NULLs, numeric, jsonb, arrays, timestamps, bytea, a
// transaction rolled back, errors with their SQLSTATE, notices and
// notifications.
//
//     node workload.js postgres://user@host:port/db

const { Client } = require("pg");

async function main() {
  const url = process.argv[2];
  const out = [];
  const show = (label, value) =>
    out.push(`${label}: ${JSON.stringify(value, (k, v) => (v instanceof Date ? v.toISOString() : v))}`);
  for (const binary of [false, true]) {
    const client = new Client({ connectionString: url, binary });
    const notices = [];
    client.on("notice", (n) => notices.push([n.severity, n.code, n.message]));
    await client.connect();
    await client.query("SET TimeZone = 'UTC'");
    await client.query(
      "CREATE TEMP TABLE v (id int PRIMARY KEY, n numeric, j jsonb, a int[], t timestamptz, b bytea, s text, f float8)"
    );
    const rows = [
      [1, "12.50", '{"k": [1, 2.5, null]}', [1, null, 3], "2026-12-03 10:00:00.123456+00", Buffer.from([0, 255]), "tab\tand 'quote'", 0.1],
      [2, null, null, null, null, null, null, null],
      [3, "-0.000000000000000000001", '"x"', [], "infinity", Buffer.alloc(0), "", -1e300],
    ];
    for (const r of rows) {
      await client.query("INSERT INTO v VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", r);
    }
    const described = await client.query({ text: "SELECT * FROM v WHERE id > $1 ORDER BY id", values: [0] });
    show(`rows binary=${binary}`, described.rows.map((r) => ({ ...r, b: r.b && r.b.toString("hex") })));
    show("fields", described.fields.map((f) => [f.name, f.dataTypeID, f.format]));
    for (const id of [1, 2, 3]) {
      const r = await client.query({ name: "by_id", text: "SELECT id, s, n FROM v WHERE id = $1", values: [id] });
      show(`named ${id}`, r.rows);
    }
    await client.query("BEGIN");
    await client.query("INSERT INTO v (id) VALUES (20)");
    show("inside", (await client.query("SELECT count(*) AS c FROM v")).rows);
    await client.query("ROLLBACK");
    show("after rollback", (await client.query("SELECT count(*) AS c FROM v")).rows);
    for (const sql of ["SELECT * FROM no_such_table", "SELECT 1/0", "INSERT INTO v (id) VALUES (1)", "SELEC 1"]) {
      try {
        await client.query(sql);
      } catch (e) {
        show("error", [e.code, e.message]);
      }
    }
    await client.query("DO $$ BEGIN RAISE NOTICE 'a notice from %', 'plpgsql'; END $$");
    show("notices", notices);
    const notified = new Promise((resolve) => client.on("notification", (n) => resolve([n.channel, n.payload])));
    await client.query("LISTEN proxy_clients");
    await client.query("NOTIFY proxy_clients, 'a payload'");
    show("notify", await notified);
    await client.end();
  }
  console.log(out.join("\n"));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
