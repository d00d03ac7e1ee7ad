"""The Python client against real workers: every operation, auth, bad
input, exact numbers, and retries across workers (a worker that is down,
one that answers 503, one killed under load)."""

import decimal
import http.server
import threading
import time
import uuid

import pytest

from mezzanine_client import ApiError, Client, cell_tombstone, dumps, loads, row_tombstone


def base_cell(row, ref_key=1, status="requested", city_id=3):
    # A full BASE cell of the example layout, accepted in every mode.
    return {
        "row_key": row,
        "column": "BASE",
        "ref_key": ref_key,
        "body": {
            "driver_uuid": "00000000-0000-4000-8000-000000000001",
            "rider_uuid": "00000000-0000-4000-8000-000000000002",
            "city_id": city_id,
            "status": status,
            "currency": "EUR",
            "requested_at": "2015-03-08T07:30:00.000000Z",
        },
    }


def test_json_numbers_are_exact_both_ways():
    text = '{"a": 123456789012345678901234567890, "b": 0.1000000000000000055511151231257827, "c": -0.0}'
    value = loads(text)
    assert value["a"] == 123456789012345678901234567890
    assert isinstance(value["b"], decimal.Decimal)
    assert dumps(value) == '{"a":123456789012345678901234567890,"b":0.1000000000000000055511151231257827,"c":-0.0}'
    with pytest.raises(ValueError):
        dumps({"x": decimal.Decimal("NaN")})


def test_a_connection_idle_for_half_the_workers_idle_timeout_is_reopened(workers, tokens):
    # The worker closes a keep-alive connection idle for its header read
    # timeout; reusing one at that moment would fail the send.
    (w,) = workers(1)
    store = Client([w.url], token=tokens["read"])
    info = store.info()
    assert info["idle_timeout_ms"] > 0
    assert store._idle == info["idle_timeout_ms"] / 2000
    first = store._workers[0].local.conn
    store.info()
    assert store._workers[0].local.conn is first, "a busy connection is kept"
    time.sleep(store._idle + 0.05)
    store.info()
    assert store._workers[0].local.conn is not first


def test_every_operation_reads_back_what_was_written(workers, tokens):
    (w,) = workers(1)
    store = Client([w.url], token=tokens["admin"])
    info = store.info()
    assert info["shard_count"] > 0
    row = str(uuid.uuid4())
    cell = base_cell(row)
    assert store.put_cells([cell]) == ["written"]
    # Idempotent: the same cell again changes nothing.
    assert store.put_cells([cell]) == ["already_present"]
    latest = store.get_cell_latest(row, "BASE")
    assert latest.stale is False
    assert latest.value["body"]["status"] == "requested"
    assert latest.value["body"]["city_id"] == 3
    assert store.get_cell(row, "BASE", latest.value["ref_key"]).value == latest.value
    assert store.get_cell(row, "BASE", 999).value is None
    cells = store.get_cells_for_row(row).value
    assert [c["column"] for c in cells] == ["BASE"]
    try:
        versions = store.get_column_cells([row], "BASE").value
        assert versions and all(c["row_key"] == row for c in versions)
    except ApiError as e:
        # The legacy model keeps no history: unsupported in that mode.
        assert e.status == 422 and e.code == "unsupported"
    try:
        entries = store.query_index(
            "trips_by_driver",
            "00000000-0000-4000-8000-000000000001",
            filters=[("city_id", "ge", 0)],
            order_by="requested_at",
            descending=True,
            limit=5,
        ).value
        assert isinstance(entries, list) and len(entries) <= 5
    except ApiError as e:
        assert e.status < 500, e
    try:
        page = store.get_cells_for_shard(0, after=0, limit=10)
        assert len(page["cells"]) <= 10 and page["next"] >= 0
    except ApiError as e:
        assert e.status == 422 and e.code == "unsupported"


def test_tombstones_delete_a_child_row_then_the_row(workers, tokens):
    (w,) = workers(1)
    store = Client([w.url], token=tokens["write"])
    row = str(uuid.uuid4())
    note = {"author": "ops", "text": "x", "at": "2015-03-08T07:31:00Z"}
    assert store.put_cells([base_cell(row), {"row_key": row, "column": "NOTES", "ref_key": 1, "body": note}]) == ["written", "written"]
    # The ref key derived here is the server's: a wrong one is a 400.
    assert store.put_cells([cell_tombstone(row, "NOTES", 1)]) == ["written"]
    assert store.get_cell_latest(row, "NOTES").value is None
    assert store.get_cell_latest(row, "BASE").value is not None
    assert store.put_cells([row_tombstone(row)]) == ["written"]
    assert store.get_cell_latest(row, "BASE").value is None
    wrong = cell_tombstone(row, "NOTES", 1)
    wrong["ref_key"] += 1
    with pytest.raises(ApiError) as e:
        store.put_cells([wrong])
    assert e.value.status == 400 and "ref_key" in str(e.value)


def test_tokens_decide_and_nothing_is_written_without_one(workers, tokens):
    (w,) = workers(1)
    row = str(uuid.uuid4())
    with pytest.raises(ApiError) as e:
        Client([w.url]).put_cells([base_cell(row)])
    assert e.value.status == 401 and e.value.code == "unauthorized"
    with pytest.raises(ApiError) as e:
        Client([w.url], token="not-a-valid-secret-at-all").get_cell_latest(row, "BASE")
    assert e.value.status == 401
    reader = Client([w.url], token=tokens["read"])
    reader._info = {"max_batch_cells": 100}
    with pytest.raises(ApiError) as e:
        reader.put_cells([base_cell(row)])
    assert e.value.status == 403 and e.value.code == "forbidden"
    assert reader.get_cell_latest(row, "BASE").value is None


def test_bad_input_is_a_4xx_naming_the_field(workers, tokens):
    (w,) = workers(1)
    store = Client([w.url], token=tokens["write"])
    with pytest.raises(ApiError) as e:
        store.put_cells([base_cell("not-a-uuid")])
    assert e.value.status == 400 and "row_key" in e.value.message
    with pytest.raises(ApiError) as e:
        store.put_cells([base_cell(str(uuid.uuid4()), ref_key=-1)])
    assert e.value.status == 400 and "ref_key" in e.value.message
    with pytest.raises(ApiError) as e:
        store.get_cell_latest("nope", "BASE")
    assert e.value.status == 400


def test_a_worker_that_is_down_is_skipped(workers, tokens):
    (w,) = workers(1)
    # Port 9 on loopback: nothing listens there.
    store = Client(["http://127.0.0.1:9", w.url], token=tokens["write"], deadline=10)
    for _ in range(6):
        row = str(uuid.uuid4())
        assert store.put_cells([base_cell(row)]) == ["written"]
        assert store.get_cell_latest(row, "BASE").value is not None


def test_a_503_with_retry_after_moves_to_the_next_worker(workers, tokens):
    (w,) = workers(1)
    hits = []

    class Saturated(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"code": "saturated", "message": "busy"}'
            self.send_response(503)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    busy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Saturated)
    threading.Thread(target=busy.serve_forever, daemon=True).start()
    try:
        store = Client([f"http://127.0.0.1:{busy.server_port}", w.url], token=tokens["read"])
        for _ in range(4):
            assert store.get_cell_latest(str(uuid.uuid4()), "BASE").value is None
        assert len(hits) == 2, hits  # every other call started at the busy one
    finally:
        busy.shutdown()


def test_a_worker_killed_under_load_fails_no_call_and_loses_no_write(workers, tokens):
    doomed, survivor = workers(2)
    store = Client([doomed.url, survivor.url], token=tokens["write"], deadline=20)
    acknowledged = []
    for i in range(60):
        if i == 20:
            doomed.kill()
        row = str(uuid.uuid4())
        cell = base_cell(row, city_id=i)
        assert store.put_cells([cell]) == ["written"]
        acknowledged.append(cell)
    reader = Client([survivor.url], token=tokens["read"])
    for cell in acknowledged:
        stored = reader.get_cell_latest(cell["row_key"], "BASE").value
        assert stored is not None and stored["body"]["city_id"] == cell["body"]["city_id"]
