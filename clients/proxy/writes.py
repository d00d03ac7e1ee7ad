"""Writes through `mezzanine proxy` for psycopg 3: each statement (one
parameter, `$1`, the row key) prepared on the server (prepare_threshold=0)
and run once, in order, the key alternately as text and as a binary UUID
and the results alternately in text and in binary. Prints each one's row
count, rows and columns, or its SQLSTATE, with the key written as KEY.
Run straight against PostgreSQL and through the proxy (in primary, where
the proxy runs writes through the facade); the test compares the outputs
(tests/it/proxy_writes.rs).

    python3 writes.py postgres://user@host:port/db KEY "INSERT ... $1 ..." ...
"""

import sys
import uuid

import psycopg

url, key, statements = sys.argv[1], sys.argv[2], sys.argv[3:]
out = []
with psycopg.connect(url, prepare_threshold=0, autocommit=True) as conn:
    conn.execute("SET TimeZone = 'Europe/Lisbon'")
    with conn.cursor() as cur:
        for i, sql in enumerate(statements):
            binary = i % 2 == 1
            if binary:
                query, value = sql.replace("$1", "%b"), uuid.UUID(key)
            else:
                query, value = sql.replace("$1", "%s"), key
            try:
                cur.execute(query, (value,), binary=binary)
            except psycopg.Error as e:
                out.append(f"{i}: error {e.sqlstate}")
                continue
            line = f"{i}: rowcount {cur.rowcount} status {cur.statusmessage}"
            if cur.description is not None:
                line += f" rows {cur.fetchall()!r}"
                line += f" columns {[(c.name, c.type_code) for c in cur.description]!r}"
            out.append(line)
print("\n".join(out).replace(key, "KEY"))
