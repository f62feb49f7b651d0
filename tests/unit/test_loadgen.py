"""The load generator's pure parts: percentiles, timestamp embedding, result-line shape.

No processes, no sockets, no timing assertions.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "loadgen.py"
_spec = importlib.util.spec_from_file_location("bench_loadgen", _PATH)
loadgen = importlib.util.module_from_spec(_spec)
sys.modules["bench_loadgen"] = loadgen
_spec.loader.exec_module(loadgen)


# percentiles ---------------------------------------------------------------

def test_percentile_of_empty_is_none():
    assert loadgen.percentile([], 50) is None


def test_percentile_nearest_rank():
    values = list(range(1, 101))          # 1..100
    assert loadgen.percentile(values, 50) == 50
    assert loadgen.percentile(values, 90) == 90
    assert loadgen.percentile(values, 99) == 99
    assert loadgen.percentile(values, 100) == 100
    assert loadgen.percentile(values, 0) == 1


def test_percentile_small_samples():
    assert loadgen.percentile([7], 50) == 7
    assert loadgen.percentile([7], 99) == 7
    assert loadgen.percentile([1, 2], 50) == 1
    assert loadgen.percentile([1, 2], 51) == 2
    assert loadgen.percentile([1, 2, 3, 4], 99) == 4


# timestamp embedding -------------------------------------------------------

@pytest.mark.parametrize("body_size", [16, 17, 100, 255, 256, 4096, 70_000])
def test_template_timestamp_round_trip(body_size):
    buf, offset = loadgen.encode_template("q1", body_size)
    assert offset == len(buf) - 8             # body is the last section
    ts = 1_795_000_000_123_456_789
    loadgen.embed_timestamp(buf, offset, ts)
    assert loadgen.extract_timestamp(buf, len(buf)) == ts
    loadgen.embed_timestamp(buf, offset, ts + 1)   # overwritten in place, same length
    assert loadgen.extract_timestamp(bytes(buf), len(buf)) == ts + 1


def test_embedded_message_still_decodes_with_body_size_and_address():
    import proton

    buf, offset = loadgen.encode_template("bench/q", 100)
    loadgen.embed_timestamp(buf, offset, 42)
    msg = proton.Message()
    msg.decode(bytes(buf))
    assert msg.address == "bench/q"
    assert len(msg.body) == 100
    assert bytes(msg.body).endswith(loadgen.TS_MAGIC + (42).to_bytes(8, "big"))


def test_extract_falls_back_when_something_follows_the_body():
    buf, offset = loadgen.encode_template("q1", 64)
    loadgen.embed_timestamp(buf, offset, 123456)
    # e.g. a footer appended by an intermediary, inside a larger receive buffer
    data = bytearray(buf) + b"\x00\x53\x78\xc1\x01\x00" + bytes(50)
    assert loadgen.extract_timestamp(data, len(buf) + 6) == 123456


def test_extract_without_marker_is_none():
    assert loadgen.extract_timestamp(bytes(64), 64) is None
    assert loadgen.extract_timestamp(b"", 0) is None
    truncated = loadgen.TS_MAGIC + b"\x01\x02"    # marker without 8 bytes after it
    assert loadgen.extract_timestamp(truncated, len(truncated)) is None


def test_body_too_small_is_rejected():
    with pytest.raises(ValueError):
        loadgen.make_body(loadgen.MIN_BODY_SIZE - 1)
    assert len(loadgen.make_body(loadgen.MIN_BODY_SIZE)) == loadgen.MIN_BODY_SIZE


# result lines --------------------------------------------------------------

def test_result_line_has_every_key_in_order():
    record = loadgen.result_line(role="sender", count=3)
    assert tuple(record) == loadgen.RESULT_KEYS
    assert record["schema"] == loadgen.SCHEMA
    assert record["per_second"] == []
    assert record["lat_p50_us"] is None
    json.loads(json.dumps(record))           # plain JSON types only


def test_result_line_rejects_unknown_keys():
    with pytest.raises(KeyError):
        loadgen.result_line(role="sender", msgs_per_sec=1.0)


def test_throughput_fields():
    f = loadgen.throughput_fields(1000, 1_000_000_000, 3_000_000_000, 0.002, 0.001)
    assert f["count"] == 1000
    assert f["elapsed_s"] == 2.0
    assert f["msgs_per_s"] == 500.0
    assert f["cpu_us_per_msg"] == 3.0
    assert f["start_ts"] == 1.0 and f["end_ts"] == 3.0


def test_throughput_fields_without_messages():
    f = loadgen.throughput_fields(0, None, None, 0.0, 0.0)
    assert f["msgs_per_s"] is None and f["cpu_us_per_msg"] is None and f["elapsed_s"] is None


def test_per_second_series_shape():
    series = loadgen.per_second_series(sent={10: 5, 11: 2}, settled={11: 7},
                                       received={12: 3}, latencies_by_second={12: [30, 10, 20]})
    assert [s["t"] for s in series] == [10, 11, 12]
    for entry in series:
        assert tuple(entry) == loadgen.PER_SECOND_KEYS
    assert series[0] == {"t": 10, "sent": 5, "settled": 0, "received": 0,
                         "p50_us": None, "p99_us": None}
    assert series[1]["settled"] == 7
    assert series[2]["received"] == 3
    assert series[2]["p50_us"] == 20 and series[2]["p99_us"] == 30


def test_second_buckets():
    b = loadgen.SecondBuckets()
    b.add(5_000_000_000)
    b.add(5_900_000_000, 3)
    b.add(6_000_000_000, 2)
    assert b.as_dict() == {5: 4, 6: 2}


def test_full_record_is_one_json_line(tmp_path):
    record = loadgen.result_line(
        role="receiver", address="q", **loadgen.throughput_fields(2, 0, 1_000_000_000, 0, 0),
        per_second=loadgen.per_second_series(received={0: 2}, latencies_by_second={0: [5, 6]}))
    out = tmp_path / "r.jsonl"
    loadgen.write_result(record, str(out))
    loadgen.write_result(record, str(out))
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0]) == record


def test_parse_url():
    assert loadgen.parse_url("127.0.0.1:5800") == ("127.0.0.1", 5800)
    assert loadgen.parse_url("amqp://127.0.0.1:5801") == ("127.0.0.1", 5801)
    assert loadgen.parse_url("localhost") == ("localhost", 5672)


# pacing and arrivals (sender --rate, receiver --arrivals) -----------------------------------

def test_paced_quota_first_message_at_once_then_one_per_interval():
    assert loadgen.paced_quota(200, 0.0, 0) == 1          # the first goes at once
    assert loadgen.paced_quota(200, 0.0, 1) == 0
    assert loadgen.paced_quota(200, 0.004, 1) == 0        # the second is due at 5 ms
    assert loadgen.paced_quota(200, 0.005, 1) == 1
    assert loadgen.paced_quota(200, 1.0, 1) == 200        # behind schedule: catch up
    assert loadgen.paced_quota(200, 1.0, 500) == 0        # never negative


def test_paced_wait_is_the_time_until_the_next_message_is_due():
    # a paced sender sleeps this long between messages (it used to poll with 0 ms and spin)
    assert loadgen.paced_wait(10_000, 0.0, 1) == pytest.approx(0.0001)
    assert loadgen.paced_wait(200, 0.004, 1) == pytest.approx(0.001)
    assert loadgen.paced_wait(200, 0.005, 1) == 0.0
    assert loadgen.paced_wait(200, 1.0, 1) == 0.0             # behind schedule: no wait
    for elapsed in (0.0, 0.0003, 0.0049, 0.01, 0.5):
        for sent in range(0, 120, 7):
            # nothing due <=> a positive wait, and once waited the next one is due
            wait = loadgen.paced_wait(200, elapsed, sent)
            assert (loadgen.paced_quota(200, elapsed, sent) == 0) == (wait > 0)
            assert loadgen.paced_quota(200, elapsed + wait + 1e-9, sent) >= 1


def test_arrivals_round_trip(tmp_path):
    from array import array

    path = str(tmp_path / "arrivals.txt")
    loadgen.write_arrivals(path, array("q", [10, 15, 20, 31, 1_795_000_000_000_000_000,
                                             1_795_000_000_000_500_000]))
    assert loadgen.read_arrivals(path) == [(10, 15), (20, 31), (1_795_000_000_000_000_000,
                                                                 1_795_000_000_000_500_000)]
    loadgen.write_arrivals(path, [])
    assert loadgen.read_arrivals(path) == []


# --record-trace --------------------------------------------------------------

def test_trace_path_from_the_message_annotation():
    import proton
    msg = proton.Message(body=b"x", address="q")
    assert loadgen.trace_path(msg.encode()) is None
    msg.annotations = {"x-opt-qd.trace": ["0/Router.A", "0/Router.B"]}
    assert loadgen.trace_path(msg.encode()) == ("Router.A", "Router.B")
    assert loadgen.paths_field({("A",): 2, ("B", "A"): 5}) == [
        {"path": ["B", "A"], "count": 5}, {"path": ["A"], "count": 2}]

