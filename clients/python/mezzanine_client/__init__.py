"""The Mezzanine cell API over HTTP, for Python apps.

Standard library only. A ``Client`` holds a list of workers
(``mezzanine worker``) and spreads calls over them in turn. A call that
fails in a way another worker may not -- the connection refused or reset,
no answer in time, a 502, 503 or 504 (a 503 may carry ``Retry-After``) --
is sent to the next worker after an exponential backoff with full jitter,
until the deadline. Any other answer is final.

Puts are retried too: a put is idempotent by design. The same cell
written again is ``already_present``, never a second copy and never an
overwrite, so a put whose answer was lost comes back ``already_present``
from the retry; both mean the cell is stored.

Numbers are exact both ways: JSON numbers are read as ``int`` or
``decimal.Decimal`` (never ``float``) and ``Decimal`` values are written
with every digit.

    from mezzanine_client import Client
    store = Client(["http://127.0.0.1:9500", "http://127.0.0.1:9501"],
                   token=os.environ["MEZZANINE_TOKEN_APP"])
    store.put_cells([{"row_key": trip, "column": "BASE", "ref_key": 1,
                      "body": {"status": "requested"}}])
    cell = store.get_cell_latest(trip, "BASE")
"""

from __future__ import annotations

import decimal
import http.client
import itertools
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = [
    "Client",
    "ApiError",
    "Unavailable",
    "Answer",
    "dumps",
    "loads",
    "row_tombstone",
    "cell_tombstone",
]

RETRIED_STATUSES = (502, 503, 504)

# ``capture.tombstone_column``'s default.
TOMBSTONE_COLUMN = "DELETED"

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def row_tombstone(row_key: str, tombstone_column: str = TOMBSTONE_COLUMN) -> dict:
    """The cell that deletes row ``row_key`` (every cell of it, also ones
    written later: the key is retired), to pass to ``put_cells``. It
    deletes the row from the legacy tables too, in every mode."""
    return {"row_key": row_key, "column": tombstone_column, "ref_key": 0, "body": {"row": True}}


def cell_tombstone(
    row_key: str, column: str, ref_key: int, tombstone_column: str = TOMBSTONE_COLUMN
) -> dict:
    """The cell that deletes the cell (``column``, ``ref_key``) of row
    ``row_key`` (a child row), to pass to ``put_cells``. Its ref key is
    derived from what it deletes, as ``schemaless::tombstone::cell_ref_key``
    derives it, so every writer of one deletion writes the same cell."""
    h = _FNV_OFFSET
    for b in f"{column}\0{ref_key}".encode():
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return {
        "row_key": row_key,
        "column": tombstone_column,
        "ref_key": 1 + h % (2**63 - 2),
        "body": {"column": column, "ref_key": ref_key},
    }


class ApiError(Exception):
    """A worker's final error answer: ``status``, ``code``, ``message``."""

    def __init__(self, status: int, code: str, message: str, worker: str):
        super().__init__(f"{worker}: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.worker = worker


class Unavailable(Exception):
    """No worker answered before the deadline; ``last`` is the last failure."""

    def __init__(self, attempts: int, last: str):
        super().__init__(f"no worker answered after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


@dataclass
class Answer:
    """A read's value, and whether a minion answered for a master that is
    down (acknowledged writes may be missing from it)."""

    value: Any
    stale: bool = False


def loads(text: bytes | str) -> Any:
    """JSON with exact numbers: decimals as ``Decimal``."""
    return json.loads(text, parse_float=decimal.Decimal)


def dumps(value: Any) -> str:
    """Compact JSON, ``Decimal`` written with every digit."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} has no JSON form")
        return str(value)
    if isinstance(value, (int, float, str)):
        return json.dumps(value, allow_nan=False)
    if isinstance(value, dict):
        return "{" + ",".join(
            json.dumps(str(k)) + ":" + dumps(v) for k, v in value.items()
        ) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} is not JSON")


@dataclass
class _Worker:
    url: urllib.parse.SplitResult
    # One keep-alive connection per thread and worker.
    local: threading.local = field(default_factory=threading.local)

    def __str__(self) -> str:
        return urllib.parse.urlunsplit(self.url)


class Client:
    """The cell API over a list of workers."""

    def __init__(
        self,
        workers: list[str],
        token: Optional[str] = None,
        *,
        deadline: float = 10.0,
        request_timeout: float = 5.0,
        backoff_base: float = 0.02,
        backoff_max: float = 1.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ):
        if not workers:
            raise ValueError("no worker URL given")
        self._workers = []
        for url in workers:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"worker URL {url!r}: use http://host:port or https://host:port")
            self._workers.append(_Worker(parts))
        self._token = token
        self._deadline = deadline
        self._timeout = request_timeout
        self._base = backoff_base
        self._max = backoff_max
        self._ssl = ssl_context
        self._next = itertools.count()
        self._info: Optional[dict] = None
        # A worker closes a connection idle for its header read timeout;
        # one reused at that moment fails. A connection idle for longer
        # than this is reopened instead: a second until ``info()`` says
        # the worker's timeout, then half of it.
        self._idle = 1.0

    # -- transport -------------------------------------------------------

    def _connection(self, worker: _Worker) -> http.client.HTTPConnection:
        conn = getattr(worker.local, "conn", None)
        if conn is not None and time.monotonic() - worker.local.used > self._idle:
            self._drop(worker)
            conn = None
        if conn is None:
            host, port = worker.url.hostname, worker.url.port
            if worker.url.scheme == "https":
                conn = http.client.HTTPSConnection(
                    host, port or 443, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(host, port or 80, timeout=self._timeout)
            worker.local.conn = conn
            worker.local.used = time.monotonic()
        return conn

    def _drop(self, worker: _Worker) -> None:
        conn = getattr(worker.local, "conn", None)
        if conn is not None:
            conn.close()
            worker.local.conn = None

    def _delay(self, attempt: int) -> float:
        ceiling = min(self._max, self._base * (2 ** min(attempt - 1, 16)))
        return random.uniform(0, ceiling)

    def call(self, method: str, path: str, body: Any = None) -> tuple[Any, bool]:
        """Sends one call, retried on other workers as the module says;
        returns the decoded answer and whether it may be stale."""
        started = time.monotonic()
        first = next(self._next)
        payload = None if body is None else dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        attempt = 0
        while True:
            worker = self._workers[(first + attempt) % len(self._workers)]
            retry_after = 0.0
            try:
                conn = self._connection(worker)
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                data = response.read()
                worker.local.used = time.monotonic()
                status = response.status
                if response.getheader("Connection", "").lower() == "close":
                    self._drop(worker)
                if status in RETRIED_STATUSES:
                    failure = f"{worker}: {status} {data[:200]!r}"
                    try:
                        retry_after = float(response.getheader("Retry-After", "0"))
                    except ValueError:
                        retry_after = 0.0
                elif status == 200:
                    stale = response.getheader("mezzanine-stale", "false") == "true"
                    return loads(data), stale
                else:
                    try:
                        error = loads(data)
                        code, message = error["code"], error["message"]
                    except (ValueError, KeyError, TypeError):
                        code, message = "error", data[:200].decode(errors="replace")
                    raise ApiError(status, code, message, str(worker))
            except (OSError, http.client.HTTPException, socket.timeout) as e:
                # Refused, reset, timed out: this connection is done.
                self._drop(worker)
                failure = f"{worker}: {e!r}"
            attempt += 1
            delay = self._delay(attempt)
            if len(self._workers) == 1:
                delay = max(delay, min(retry_after, 60.0))
            if time.monotonic() - started + delay >= self._deadline:
                raise Unavailable(attempt, failure)
            time.sleep(delay)

    # -- the cell API ----------------------------------------------------

    def info(self) -> dict:
        """The instance: ``shard_count``, ``mode``, limits."""
        value, _ = self.call("GET", "/v1/info")
        self._info = value
        if value.get("idle_timeout_ms"):
            self._idle = value["idle_timeout_ms"] / 2000
        return value

    def put_cells(self, cells: list[dict]) -> list[str]:
        """Writes cells (dicts of ``row_key``, ``column``, ``ref_key``,
        ``body``) in order; one outcome per cell: ``written``,
        ``already_present``, ``conflict``, ``superseded``, ``buffered``."""
        if self._info is None:
            self.info()
        size = max(1, int(self._info["max_batch_cells"]))
        outcomes: list[str] = []
        for start in range(0, len(cells), size):
            chunk = cells[start : start + size]
            value, _ = self.call("POST", "/v1/cells", {"cells": chunk})
            outcomes.extend(r["outcome"] for r in value["results"])
        return outcomes

    def put_cell(self, row_key: str, column: str, ref_key: int, body: dict) -> str:
        """Writes one cell; its outcome."""
        return self.put_cells(
            [{"row_key": row_key, "column": column, "ref_key": ref_key, "body": body}]
        )[0]

    @staticmethod
    def _q(text: str) -> str:
        return urllib.parse.quote(str(text), safe="")

    def get_cell(self, row_key: str, column: str, ref_key: int, minion: bool = False) -> Answer:
        """One cell by its address (``value`` is None when absent)."""
        value, stale = self.call(
            "GET",
            f"/v1/rows/{self._q(row_key)}/columns/{self._q(column)}/refs/{int(ref_key)}"
            f"?from={'minion' if minion else 'master'}",
        )
        return Answer(value["cell"], stale or value["stale"])

    def get_cell_latest(self, row_key: str, column: str, minion: bool = False) -> Answer:
        """The cell of the column with the highest ref key."""
        value, stale = self.call(
            "GET",
            f"/v1/rows/{self._q(row_key)}/columns/{self._q(column)}/latest"
            f"?from={'minion' if minion else 'master'}",
        )
        return Answer(value["cell"], stale or value["stale"])

    def get_cells_for_row(self, row_key: str, minion: bool = False) -> Answer:
        """The latest cell of every column of a row."""
        value, stale = self.call(
            "GET", f"/v1/rows/{self._q(row_key)}?from={'minion' if minion else 'master'}"
        )
        return Answer(value["cells"], stale or value["stale"])

    def get_column_cells(self, rows: list[str], column: str, minion: bool = False) -> Answer:
        """Every stored version of a column in these rows."""
        value, stale = self.call(
            "POST",
            f"/v1/columns/{self._q(column)}/cells",
            {"rows": list(rows), "from": "minion" if minion else "master"},
        )
        return Answer(value["cells"], stale or value["stale"])

    def query_index(
        self,
        index: str,
        shard_value: Any,
        filters: Optional[list[tuple[str, str, Any]]] = None,
        order_by: Optional[str] = None,
        descending: bool = False,
        limit: int = 100,
        minion: bool = False,
    ) -> Answer:
        """Entries of an index; ``filters`` are (field, op, value) with op
        one of eq, lt, le, gt, ge, in."""
        body = {
            "shard_value": shard_value,
            "filters": [{"field": f, "op": op, "value": v} for f, op, v in (filters or [])],
            "order_by": order_by,
            "descending": descending,
            "limit": limit,
            "from": "minion" if minion else "master",
        }
        value, stale = self.call("POST", f"/v1/indexes/{self._q(index)}/query", body)
        return Answer(value["entries"], stale or value["stale"])

    def get_cells_for_shard(self, shard: int, after: int = 0, limit: int = 100) -> dict:
        """A page of a shard's change log: ``cells`` and ``next``."""
        value, _ = self.call(
            "GET", f"/v1/shards/{int(shard)}/changes?after={int(after)}&limit={int(limit)}"
        )
        return value
