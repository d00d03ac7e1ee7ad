"""The same workload for psycopg 3, run straight against PostgreSQL and
through `mezzanine proxy`: its output must be identical.

Server-side prepared statements from the first execution
(prepare_threshold=0), results in text and in binary, NULLs, numeric,
jsonb, arrays, timestamps, bytea, COPY both ways, a transaction rolled
back, a cancel request, errors with their SQLSTATE, notices and notifications.

    python3 workload.py postgres://user@host:port/db
"""

import sys
import threading

import psycopg

url = sys.argv[1]
out = []


def show(label, value):
    out.append(f"{label}: {value!r}")


with psycopg.connect(url, prepare_threshold=0, autocommit=True) as conn:
    notices = []
    conn.add_notice_handler(lambda d: notices.append((d.severity_nonlocalized, d.sqlstate, d.message_primary)))
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute(
        "CREATE TEMP TABLE v (id int PRIMARY KEY, n numeric, j jsonb, a int[], "
        "t timestamptz, b bytea, s text, f float8)"
    )
    rows = [
        (1, "12.50", '{"k": [1, 2.5, null]}', [1, None, 3], "2026-12-03 10:00:00.123456+00", b"\x00\xff", "tab\tand 'quote'", 0.1),
        (2, None, None, None, None, None, None, None),
        (3, "-0.000000000000000000001", '"x"', [], "0001-01-01 00:00:00+00", b"", "", -1e300),
    ]
    with conn.cursor() as cur:
        for r in rows:
            cur.execute(
                "INSERT INTO v VALUES (%s, %s::numeric, %s::jsonb, %s, %s::timestamptz, %s, %s, %s)", r
            )
        for binary in (False, True):
            cur.execute("SELECT * FROM v WHERE id > %s ORDER BY id", (0,), binary=binary)
            show(f"rows binary={binary}", cur.fetchall())
            show("description", [(c.name, c.type_code) for c in cur.description])
            cur.execute("SELECT n * 3, j -> 'k', a[1], t + interval '1 day', length(b) FROM v ORDER BY id", binary=binary)
            show(f"computed binary={binary}", cur.fetchall())
        with cur.copy("COPY v (id, s) FROM STDIN") as copy:
            copy.write_row((10, "copied"))
            copy.write_row((11, None))
        with cur.copy("COPY (SELECT id, s FROM v ORDER BY id) TO STDOUT") as copy:
            show("copy out", [bytes(chunk) for chunk in copy])
        # A named prepared statement, executed many times.
        for i in (1, 2, 3, 10):
            cur.execute("SELECT id, s FROM v WHERE id = %s", (i,))
            show(f"prepared {i}", cur.fetchall())
    with conn.transaction(force_rollback=True):
        conn.execute("INSERT INTO v (id) VALUES (20)")
        show("inside", conn.execute("SELECT count(*) FROM v").fetchone())
    show("after rollback", conn.execute("SELECT count(*) FROM v").fetchone())
    for sql in ("SELECT * FROM no_such_table", "SELECT 1/0", "INSERT INTO v (id) VALUES (1)", "SELEC 1"):
        try:
            conn.execute(sql)
        except psycopg.Error as e:
            show("error", (e.sqlstate, e.diag.message_primary))
    # A cancel request (a connection of its own, carrying the key
    # BackendKeyData gave) stops a running statement.
    timer = threading.Timer(0.5, conn.cancel_safe)
    timer.start()
    try:
        conn.execute("SELECT pg_sleep(30)")
        show("cancel", "not cancelled")
    except psycopg.errors.QueryCanceled as e:
        show("cancel", (e.sqlstate, e.diag.message_primary))
    timer.join()
    conn.execute("DO $$ BEGIN RAISE NOTICE 'a notice from %', 'plpgsql'; END $$")
    show("notices", notices)
    conn.execute("LISTEN proxy_clients")
    conn.execute("NOTIFY proxy_clients, 'a payload'")
    for n in conn.notifies(timeout=5, stop_after=1):
        show("notify", (n.channel, n.payload))

print("\n".join(out))
