"""Every script under benchmarks/ starts: its ``--help`` exits 0.

The scripts share option builders (run_router_bench.add_load_options); an option added there
once made bench_network.py stop at start (two ``--rate`` options) without any test noticing.
Only ``--help`` is run: no router, no client, nothing built."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_the_scripts_are_found():
    assert "bench_network.py" in SCRIPTS and "side_by_side.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_zero(script):
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], cwd=BENCH,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
