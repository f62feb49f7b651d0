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


# --------------------------------------------------------------------------- link index
# scripts/patches/...-link-index.patch: a session finds the link an attach names through an
# index by name, and allocates a local handle without probing from 0. Two proton engines are
# pumped in memory; handles are read from the frame trace (the API does not show them).
import re  # noqa: E402

from proton import Collector, Connection, Transport  # noqa: E402


class _Side:
    def __init__(self, server: bool) -> None:
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        self.conn = Connection()
        self.events = Collector()
        self.conn.collect(self.events)
        self.attaches: list[tuple[str, int]] = []  # (name, handle) of every attach sent
        self.transport.trace(Transport.TRACE_FRM)
        self.transport.tracer = self._trace
        self.transport.bind(self.conn)

    def _trace(self, _transport, line: str) -> None:
        m = re.search(r'-> @attach\(18\) \[name="([^"]*)", handle=(0x[0-9a-f]+|\d+)', line)
        if m:
            self.attaches.append((m.group(1), int(m.group(2), 0)))

    def drain(self) -> list:
        got = []
        while self.events.peek():
            got.append(self.events.peek())
            self.events.pop()
        return got


def _pump(a: _Side, b: _Side) -> None:
    for _ in range(100_000):
        moved = False
        for src, dst in ((a, b), (b, a)):
            size = min(src.transport.pending(), dst.transport.capacity())
            if size > 0:
                dst.transport.push(src.transport.peek(size))
                src.transport.pop(size)
                moved = True
        if not moved:
            return
    raise AssertionError("the engines kept talking")


def _pair() -> tuple[_Side, _Side, object, object]:
    client, server = _Side(False), _Side(True)
    client.conn.open()
    cs = client.conn.session()
    cs.open()
    _pump(client, server)
    ss = server.conn.session_head(0)
    server.conn.open()
    ss.open()
    _pump(client, server)
    return client, server, cs, ss


def _remote_links(side: _Side) -> list:
    """Links the peer opened since the last call, opened locally in return."""
    from proton import Event
    opened = [e.link for e in side.drain() if e.type == Event.LINK_REMOTE_OPEN]
    for link in opened:
        if link.state & link.LOCAL_UNINIT:
            link.open()
    return opened


def test_a_new_link_takes_the_handle_after_the_last_one_not_a_freed_lower_one():
    client, server, cs, _ = _pair()
    links = [cs.receiver(f"r{i}") for i in range(4)]
    for link in links:
        link.source.address = "a"
        link.open()
    _pump(client, server)
    assert [h for _, h in client.attaches] == [0, 1, 2, 3]
    links[0].close()  # handle 0 is free again once the detach is sent
    _pump(client, server)
    _remote_links(server)
    late = cs.receiver("r4")
    late.open()
    _pump(client, server)
    # unpatched proton probes the handle map from 0 for every new link (O(links)), so it
    # hands out 0 here; the patched allocator tries the handle after the last one first
    assert client.attaches[-1] == ("r4", 4)


def test_an_attach_finds_the_link_opened_locally_under_its_name_and_role():
    client, server, cs, ss = _pair()
    # the server attaches first (as a router does for its own links); the client's attach of
    # the same name and opposite role is the answer on that same link object
    mine = [ss.sender(f"x{i}") for i in range(50)] + [ss.receiver("x7")]
    for link in mine:
        link.open()
    _pump(client, server)
    server.drain()
    answers = [e.link for e in client.drain() if e.link is not None and e.type.name ==
               "PN_LINK_REMOTE_OPEN"]
    assert len(answers) == 51
    for link in answers:
        link.open()
    _pump(client, server)
    # no new link on the server: each answer found the sender or receiver it names
    assert not [e for e in server.drain() if e.type.name == "PN_LINK_INIT"]
    assert all(link.state == link.LOCAL_ACTIVE | link.REMOTE_ACTIVE for link in mine)
    assert mine[7].remote_target is not None and mine[-1].name == mine[7].name


def test_a_name_detached_then_attached_again_is_a_new_link():
    client, server, cs, _ = _pair()
    first = cs.sender("same")
    first.open()
    _pump(client, server)
    old = _remote_links(server)
    assert len(old) == 1
    first.close()
    _pump(client, server)
    old[0].close()
    _pump(client, server)
    second = cs.sender("same")
    second.open()
    _pump(client, server)
    new = _remote_links(server)
    assert len(new) == 1 and new[0] is not old[0] and new[0].name == "same"


def test_many_links_of_one_session_each_get_their_own_link_and_handle():
    # the index's chains: thousands of names, a few pairs of names sharing a role-less hash
    client, server, cs, _ = _pair()
    n = 3000
    for i in range(n):
        link = cs.receiver(f"link-{i}")
        link.open()
    _pump(client, server)
    got = _remote_links(server)
    _pump(client, server)
    assert len(got) == n and len({link.name for link in got}) == n
    assert sorted(h for _, h in client.attaches) == list(range(n))
    assert sorted(h for name, h in server.attaches) == list(range(n))
