"""The installed proton is the one scripts/install.sh patched: SASL frames a client must not
send end the transport instead of crashing it (scripts/patches/). Each stream runs in its own
process: unpatched, the process dies of SIGSEGV."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fuzz_front_door as fuzz  # noqa: E402

FEED = """
import sys
from proton import Collector, Connection, Transport
data = sys.stdin.buffer.read()
t = Transport(Transport.SERVER)
c = Connection(); coll = Collector(); c.collect(coll)
t.sasl().allowed_mechs("ANONYMOUS")
t.bind(c)
t.push(data[:max(0, t.capacity())])  # in one piece, as inside TLS where no guard sees it
while coll.peek():
    coll.pop()
print(t.condition.name if t.condition else "")
"""


@pytest.mark.parametrize("name", ["failed-init-then-frames", "sasl-response-first",
                                  "amqp-frame-then-response", "bad-init-then-response"])
def test_bare_proton_survives_sasl_frames_out_of_order(name):
    out = subprocess.run([sys.executable, "-c", FEED], input=fuzz.KNOWN_BAD[name],
                         capture_output=True, timeout=30)
    assert out.returncode == 0, f"proton died on {name} (rc {out.returncode}): is the " \
                                f"patched build installed? {out.stderr[-300:]!r}"
