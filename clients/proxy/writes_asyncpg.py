"""Writes through `mezzanine proxy` for asyncpg: each statement (one
parameter, `$1`, the row key) prepared without parameter types (asyncpg
learns them from PostgreSQL's answer to a Describe) and run once, in
order, the key alternately as a string and as a UUID, both sent in
binary, results in binary. Prints each one's status, rows and columns,
or its SQLSTATE, with the key written as KEY. Run straight against
PostgreSQL and through the proxy (in primary, where the proxy runs writes
through the facade); the test compares the outputs
(tests/it/proxy_writes.rs).

    python3 writes_asyncpg.py postgres://user@host:port/db KEY "INSERT ... $1 ..." ...
"""

import asyncio
import sys
import uuid

import asyncpg


async def main(url, key, statements):
    out = []
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET TimeZone = 'Europe/Lisbon'")
        for i, sql in enumerate(statements):
            value = uuid.UUID(key) if i % 2 == 1 else key
            try:
                statement = await conn.prepare(sql)
                rows = await statement.fetch(value)
            except asyncpg.PostgresError as e:
                out.append(f"{i}: error {e.sqlstate}")
                continue
            line = f"{i}: status {statement.get_statusmsg()}"
            columns = [(a.name, a.type.name) for a in statement.get_attributes()]
            if columns:
                line += f" rows {[tuple(r.values()) for r in rows]!r} columns {columns!r}"
            out.append(line)
    finally:
        await conn.close()
    print("\n".join(out).replace(key, "KEY"))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
