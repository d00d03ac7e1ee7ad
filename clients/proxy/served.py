"""Reads answered by `mezzanine proxy` from Schemaless, for psycopg 3: one
statement with one parameter (`$1`, the row key), prepared on the server
from the first execution (prepare_threshold=0), run for each key with the
key as text and as a binary UUID, results in text and in binary. Run
straight against PostgreSQL and through the proxy; the test compares the
outputs (tests/it/proxy_modes.rs).

    python3 served.py postgres://user@host:port/db "SELECT ... WHERE k = $1" KEY...
"""

import sys
import uuid

import psycopg

url, sql, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
out = []
with psycopg.connect(url, prepare_threshold=0, autocommit=True) as conn:
    conn.execute("SET TimeZone = 'UTC'")
    with conn.cursor() as cur:
        for key in keys:
            for binary in (False, True):
                for label, query, value in (
                    ("text key", sql.replace("$1", "%s"), key),
                    ("binary key", sql.replace("$1", "%b"), uuid.UUID(key)),
                ):
                    cur.execute(query, (value,), binary=binary)
                    rows = cur.fetchall()
                    out.append(f"{key} {label} binary={binary}: {rows!r}")
                    out.append(f"  description: {[(c.name, c.type_code) for c in cur.description]!r}")
print("\n".join(out))
