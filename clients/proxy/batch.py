"""A batch of writes through `mezzanine proxy` for Python's drivers: one
statement (one parameter, `$1`, the row key) run for every key with the
driver's executemany, which pipelines the rows with one Sync, so
PostgreSQL runs them in one implicit transaction: psycopg 3 (pipeline
mode) or asyncpg; or ("pipeline") one psycopg execute per key inside a
pipeline block, each statement with its own Parse (psycopg prepares a
statement only from its fifth execution), one Sync at the block's end.
Prints "ok" or the SQLSTATE of the error. Run straight
against PostgreSQL and through the proxy (in primary, where the proxy runs
the batch through the facade as one); the test compares the outputs
(tests/it/proxy_writes.rs).

    python3 batch.py psycopg|asyncpg|pipeline postgres://user@host:port/db "INSERT ... $1 ..." KEY...
"""

import asyncio
import sys
import uuid

import asyncpg
import psycopg


def with_psycopg(url, sql, keys):
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            with conn.cursor() as cur:
                cur.executemany(sql.replace("$1", "%s"), [(uuid.UUID(k),) for k in keys])
        except psycopg.Error as e:
            return f"error {e.sqlstate}"
    return "ok"


def with_pipeline(url, sql, keys):
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            with conn.pipeline(), conn.cursor() as cur:
                for k in keys:
                    cur.execute(sql.replace("$1", "%s"), (uuid.UUID(k),))
        except psycopg.Error as e:
            return f"error {e.sqlstate}"
    return "ok"


async def with_asyncpg(url, sql, keys):
    conn = await asyncpg.connect(url)
    try:
        await conn.executemany(sql, [(uuid.UUID(k),) for k in keys])
    except asyncpg.PostgresError as e:
        return f"error {e.sqlstate}"
    finally:
        await conn.close()
    return "ok"


driver, url, sql, keys = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
if driver == "psycopg":
    print(with_psycopg(url, sql, keys))
elif driver == "pipeline":
    print(with_pipeline(url, sql, keys))
else:
    print(asyncio.run(with_asyncpg(url, sql, keys)))
