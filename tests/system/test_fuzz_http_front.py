"""The http listener against hostile HTTP and WebSocket streams: no process dies, every
connection ends (or is answered) within a bound.

Loopback only, every wait bounded, the router stopped at the end. The bounded fuzz sends
FUZZ_HTTP_FRONT_CASES (default 200) mutated streams from benchmarks/fuzz_http_front.py, all at
once: a case answered and kept alive waits the whole bound (20 s), so the run takes about that;
run that script for more cases or other seeds.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_http_front.py"
_spec = importlib.util.spec_from_file_location("bench_fuzz_http_front", _PATH)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_fuzz_http_front", fuzz)
_spec.loader.exec_module(fuzz)

CASES = int(os.environ.get("FUZZ_HTTP_FRONT_CASES", "200"))
SEED = int(os.environ.get("FUZZ_HTTP_FRONT_SEED", "7"))


def test_bounded_fuzz_of_the_http_listener(tmp_path):
    proc, port, log = fuzz.start_router(tmp_path)
    try:
        result = fuzz.run_cases(port, CASES, SEED, parallel=CASES, bound=20.0)
        alive = proc.poll() is None
        # the router still answers a plain request after all of them
        healthz = fuzz.run_case(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", False, 10.0)
    finally:
        fuzz.stop_router(proc, log)
    text = (tmp_path / "fuzz-http.log").read_text()
    assert alive and fuzz.deaths(text) == 0, text[-3000:]
    assert result["still_open"] == [], result
    assert sum(result["endings"].values()) == CASES
    assert healthz == ("eof", "HTTP/1.1 200 OK"), healthz
