"""procutil.presize_fd_table: the descriptor table grows once, at start, to RLIMIT_NOFILE (at
most FD_TABLE_CAP), so no accept4() of the worker waits for it to double (Linux's FDSize in
/proc/PID/status is the table's size); no open descriptor is touched."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(SRC)})
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _limit(want: int) -> int:
    """``want``, or the hard limit of descriptors if that is lower."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return want if hard == resource.RLIM_INFINITY else min(want, hard)


def test_the_table_is_as_large_as_the_limit_after_one_call():
    limit = _limit(5000)
    before, size, after, still = _run(f"""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        from common.procutil import presize_fd_table
        fdsize = lambda: [l.split()[1] for l in open("/proc/self/status") if l.startswith("FDSize:")][0]
        r, w = os.pipe()
        before = fdsize()
        size = presize_fd_table()
        os.write(w, b"x")
        print(before, size, fdsize(), os.read(r, 1) == b"x")
    """)
    assert int(before) < limit and size == str(limit) and int(after) >= limit and still == "True"


def test_the_cap_bounds_the_table_and_a_small_limit_leaves_it():
    limit = _limit(3000)
    capped, small = _run(f"""
        import resource
        from common.procutil import presize_fd_table
        resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        capped = presize_fd_table(cap=2048)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(capped, presize_fd_table())
    """)
    assert (capped, small) == (str(min(2048, limit)), "0")
