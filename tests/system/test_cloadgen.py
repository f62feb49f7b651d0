"""The compiled load generator (benchmarks/cloadgen.c): built by benchmarks/cloadgen.py, it moves
messages with and without a router and writes the loadgen/1 line the benchmarks read.

Skipped only when proton-C's headers are missing (``scripts/install.sh --test`` installs
``libqpid-proton11-dev``); no timing is asserted.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("bench_cloadgen", _BENCH / "cloadgen.py")
cloadgen = importlib.util.module_from_spec(_spec)
sys.modules["bench_cloadgen"] = cloadgen
_spec.loader.exec_module(cloadgen)

try:
    EXE = str(cloadgen.build())
    NO_BUILD = None
except cloadgen.BuildError as e:
    EXE, NO_BUILD = None, str(e)

pytestmark = pytest.mark.skipif(EXE is None, reason=f"cloadgen cannot be built: {NO_BUILD}")

KEYS = {"schema", "run_id", "role", "pid", "url", "address", "listen", "count", "target_count",
        "body_size", "presettled", "credit", "window", "start_ts", "end_ts", "elapsed_s",
        "msgs_per_s", "cpu_user_s", "cpu_sys_s", "cpu_us_per_msg", "lat_p50_us", "lat_p90_us",
        "lat_p99_us", "lat_max_us", "lat_missing", "accepted", "released", "rejected",
        "modified", "settled", "error", "per_second"}


def run_pair(tmp_path, url, count, sender_args=(), receiver_args=(), receiver_cmd=None):
    out = tmp_path / "out.jsonl"
    ready = tmp_path / "ready"
    rcv_cmd = receiver_cmd or [EXE, "receiver"]
    rcv = subprocess.Popen(rcv_cmd + ["--url", url, "--address", "q", "--count", str(count),
                                      "--out", str(out), "--ready-file", str(ready),
                                      "--timeout", "60", *receiver_args],
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(500):
            if ready.exists() or rcv.poll() is not None:
                break
            subprocess.run(["sleep", "0.02"])
        assert ready.exists(), rcv.stderr.read() if rcv.poll() is not None else "not ready"
        snd = subprocess.run([EXE, "sender", "--url", url, "--address", "q", "--count", str(count),
                              "--out", str(out), "--timeout", "60", *sender_args],
                             capture_output=True, text=True, timeout=90)
        assert snd.returncode == 0, snd.stderr
        rcv.wait(60)
    finally:
        if rcv.poll() is None:
            rcv.kill()
            rcv.wait(5)
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {line["role"]: line for line in lines}


def free_url():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_direct_unsettled_pair_reports_every_message(tmp_path):
    lines = run_pair(tmp_path, free_url(), 5000, receiver_args=["--listen", "--credit", "500"])
    snd, rcv = lines["sender"], lines["receiver"]
    assert KEYS <= set(snd) and KEYS <= set(rcv)
    assert (snd["error"], rcv["error"]) == (None, None)
    assert snd["settled"] == snd["accepted"] == snd["count"] == 5000
    assert rcv["count"] == 5000 and rcv["lat_missing"] == 0
    assert 0 <= rcv["lat_p50_us"] <= rcv["lat_p99_us"] <= rcv["lat_p999_us"] <= rcv["lat_max_us"]
    assert sum(s["received"] for s in rcv["per_second"]) == 5000


def test_through_our_router_presettled_and_paced(router, tmp_path):
    url = f"127.0.0.1:{router.port}"
    lines = run_pair(tmp_path, url, 2000, sender_args=["--presettled", "--rate", "2000"])
    snd, rcv = lines["sender"], lines["receiver"]
    assert snd["presettled"] and rcv["presettled"]
    assert snd["count"] == 2000 and rcv["count"] == 2000 and rcv["error"] is None
    # paced at 2000/s: the first and last send are about a second apart (not a timing check on
    # the router; a bound on the client's own pacing that holds on any machine)
    assert snd["elapsed_s"] >= 0.9


def test_python_receiver_reads_the_c_senders_timestamps(router, tmp_path):
    url = f"127.0.0.1:{router.port}"
    lines = run_pair(tmp_path, url, 1000,
                     receiver_cmd=[sys.executable, str(_BENCH / "loadgen.py"), "receiver"])
    rcv = lines["receiver"]
    assert rcv["count"] == 1000 and rcv["lat_missing"] == 0 and rcv["error"] is None
    assert lines["sender"]["accepted"] == 1000


def test_bad_options_are_refused():
    out = subprocess.run([EXE, "sender", "--body-size", "4"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 2 and "--body-size" in out.stderr
    out = subprocess.run([EXE, "bogus"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "usage" in out.stderr
