#!/usr/bin/env python3
"""The hand-written backfill `bench backfill` is compared with.

What a team writes in an afternoon instead of using Mezzanine: a
multiprocessing pool, each worker reading a chunk of parent ids from
PostgreSQL with one query per table, building each cell's body as a dict,
encoding it as the store does (MessagePack, then zlib at level 1), and
writing one multi-row `INSERT IGNORE` per shard per chunk.

It knows the schema of the sample trips data set that `bench backfill`
seeds (the tables and fields of `config/examples/local.toml`'s layout),
as such a script would; it is a yardstick, not part of the product. It
writes into databases of its own (`pyscript_NNNN`, created and emptied on
each run) on the dev cluster's masters and is timed, like the benchmark,
until every minion has applied the writes.

    pip install 'psycopg[binary]' pymysql msgpack
    target/release/mezzanine bench backfill --trips 400000 --small-trips 0
    python3 bench/backfill_script.py   # reads the trips that run left behind

Prints one JSON object: cells, seconds, cells_per_s.
"""

import argparse
import json
import multiprocessing
import time
import zlib

import msgpack
import psycopg
import pymysql

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3

CHILDREN = {
    "NOTES": ("trip_notes", {"author": "author", "text": "body", "at": "created_at"}),
    "BILLING": (
        "billing_attempts",
        {f: f for f in ["amount", "currency", "succeeded", "processor_response", "attempted_at"]},
    ),
    "FARE_ADJUSTMENTS": (
        "fare_adjustments",
        {f: f for f in ["amount", "reason", "codes", "created_at"]},
    ),
}
BASE = ["driver_uuid", "rider_uuid", "city_id", "status", "fare", "currency",
        "distance_km", "requested_at", "completed_at"]

ENTITY = """CREATE TABLE IF NOT EXISTS `{db}`.`entity` (
    added_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    row_key BINARY(16) NOT NULL,
    column_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    ref_key BIGINT NOT NULL,
    body MEDIUMBLOB NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (added_id),
    UNIQUE KEY cell (row_key, column_name, ref_key)
) ENGINE=InnoDB"""


def shard_of(key: bytes, shards: int) -> int:
    h = FNV_OFFSET
    for b in key:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h % shards


def value(v):
    """JSON-ready value: timestamps and decimals as text, JSON as is."""
    if v is None or isinstance(v, (bool, int, float, str, dict, list)):
        return v
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def parse_master(url):
    rest = url.split("://", 1)[1]
    user, hostport = rest.split("@", 1)
    host, port = hostport.split(":")
    return dict(host=host, port=int(port), user=user)


def copy_chunk(args):
    lo, hi, opts = args
    now = int(time.time() * 1e6)
    cells = []
    with psycopg.connect(opts["pg"]) as pg:
        rows = pg.execute(
            f"SELECT uuid, version, {', '.join(BASE)} FROM trips WHERE id >= %s AND id < %s",
            (lo, hi),
        ).fetchall()
        for row in rows:
            body = {f: value(v) for f, v in zip(BASE, row[2:])}
            cells.append((row[0].bytes, "BASE", row[1], body))
        for column, (table, fields) in CHILDREN.items():
            cols = ", ".join(f"c.{sql}" for sql in fields.values())
            rows = pg.execute(
                f"SELECT t.uuid, c.seq, {cols} FROM {table} c JOIN trips t ON t.id = c.trip_id "
                "WHERE c.trip_id >= %s AND c.trip_id < %s",
                (lo, hi),
            ).fetchall()
            for row in rows:
                body = {j: value(v) for j, v in zip(fields.keys(), row[2:])}
                cells.append((row[0].bytes, column, row[1], body))
    by_shard = {}
    for key, column, ref, body in cells:
        encoded = zlib.compress(msgpack.packb(body), 1)
        by_shard.setdefault(shard_of(key, opts["shards"]), []).append(
            f"(X'{key.hex()}','{column}',{ref},X'{encoded.hex()}',{now})"
        )
    conns = {}
    try:
        for shard, values in sorted(by_shard.items()):
            master = opts["masters"][shard * len(opts["masters"]) // opts["shards"]]
            conn = conns.get(master)
            if conn is None:
                conn = conns[master] = pymysql.connect(**parse_master(master), autocommit=True)
            with conn.cursor() as cur:
                cur.execute(
                    f"INSERT IGNORE INTO `pyscript_{shard:04}`.`entity` "
                    "(row_key, column_name, ref_key, body, created_at) VALUES " + ",".join(values)
                )
    finally:
        for conn in conns.values():
            conn.close()
    return len(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:55432/mzbench_backfill")
    parser.add_argument("--masters", default="mysql://root@127.0.0.1:33061,mysql://root@127.0.0.1:33071",
                        help="the masters in shard order, each owning an equal range")
    parser.add_argument("--minions", default="mysql://root@127.0.0.1:33062,mysql://root@127.0.0.1:33063;"
                        "mysql://root@127.0.0.1:33072,mysql://root@127.0.0.1:33073",
                        help="each master's minions, masters separated by ';'")
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=1000)
    args = parser.parse_args()
    masters = args.masters.split(",")
    minions = [group.split(",") for group in args.minions.split(";")]
    for shard in range(args.shards):
        master = masters[shard * len(masters) // args.shards]
        with pymysql.connect(**parse_master(master), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `pyscript_{shard:04}`")
            cur.execute(ENTITY.format(db=f"pyscript_{shard:04}"))
            cur.execute(f"TRUNCATE `pyscript_{shard:04}`.`entity`")
    with psycopg.connect(args.pg) as pg:
        first, last = pg.execute("SELECT min(id), max(id) FROM trips").fetchone()
    opts = {"pg": args.pg, "masters": masters, "shards": args.shards}
    chunks = [(lo, lo + args.chunk, opts) for lo in range(first, last + 1, args.chunk)]
    started = time.monotonic()
    with multiprocessing.Pool(args.workers) as pool:
        cells = sum(pool.imap_unordered(copy_chunk, chunks))
    for master, group in zip(masters, minions):
        with pymysql.connect(**parse_master(master)) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            (position,) = cur.fetchone()
        for minion in group:
            with pymysql.connect(**parse_master(minion)) as conn, conn.cursor() as cur:
                cur.execute("SELECT MASTER_GTID_WAIT(%s, 600)", (position,))
    seconds = time.monotonic() - started
    print(json.dumps({"cells": cells, "seconds": round(seconds, 2), "cells_per_s": round(cells / seconds)}))


if __name__ == "__main__":
    main()
