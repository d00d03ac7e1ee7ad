"""Reads answered by `mezzanine proxy` from Schemaless, for asyncpg: it
parses every statement without parameter types, learns them from
PostgreSQL's answer to a Describe, and binds them in binary (the row key
as a binary uuid), results in binary. One statement with one parameter
(`$1`, the row key), run for each key four ways: fetch with a UUID and
with a string, and a prepared statement's fetch and fetchrow. Run
straight against PostgreSQL and through the proxy; the test compares the
outputs (tests/it/proxy_modes.rs).

    python3 served_asyncpg.py postgres://user@host:port/db "SELECT ... WHERE k = $1" KEY...
"""

import asyncio
import sys
import uuid

import asyncpg


async def main(url, sql, keys):
    out = []
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET TimeZone = 'UTC'")
        statement = await conn.prepare(sql)
        out.append(f"  attributes: {[(a.name, a.type.name) for a in statement.get_attributes()]!r}")
        for key in keys:
            rows = await conn.fetch(sql, uuid.UUID(key))
            out.append(f"{key} fetch uuid: {[tuple(r.items()) for r in rows]!r}")
            rows = await conn.fetch(sql, key)
            out.append(f"{key} fetch text: {[tuple(r.items()) for r in rows]!r}")
            rows = await statement.fetch(uuid.UUID(key))
            out.append(f"{key} prepared fetch: {[tuple(r.items()) for r in rows]!r}")
            row = await statement.fetchrow(key)
            rows = [] if row is None else [tuple(row.items())]
            out.append(f"{key} prepared fetchrow: {rows!r}")
    finally:
        await conn.close()
    print("\n".join(out))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
