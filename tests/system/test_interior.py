"""Interior routers: the inter-router connection and its links (no forwarding across yet)."""
from __future__ import annotations

import csv
import io
import subprocess
import sys
import time

import pytest
from proton import symbol
from proton.utils import BlockingConnection, LinkDetached

from conftest import free_port

TIMEOUT = 20


def qdstat(port: int, *args: str) -> list:
    out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                          f"127.0.0.1:{port}", *args, "--csv"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return list(csv.reader(io.StringIO(out.stdout)))


def link_types(port: int) -> dict:
    counts: dict = {}
    for row in qdstat(port, "-l"):
        if row:
            counts[row[0]] = counts.get(row[0], 0) + 1
    return counts


def wait_for(check, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last is True or time.monotonic() > deadline:
            return last
        time.sleep(0.3)


@pytest.fixture
def two_interior(router_factory):
    ir_port = free_port()
    b = router_factory(router_id="Router.B", mode="interior", extra=f"""
        listener {{
            host: 127.0.0.1
            port: {ir_port}
            role: inter-router
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    a = router_factory(router_id="Router.A", mode="interior", extra=f"""
        connector {{
            name: to-b
            host: 127.0.0.1
            port: {ir_port}
            role: inter-router
            cost: 3
        }}
        """)
    return a, b


def test_inter_router_connection_and_links(two_interior):
    a, b = two_interior
    want = {"router-control": 2, "inter-router": 20}
    for r in (a, b):
        got = wait_for(lambda r=r: {k: v for k, v in link_types(r.port).items()
                                    if k in want} == want or link_types(r.port))
        assert got is True, f"{r.id}: {got}"
    for r, peer, direction in ((a, "Router.B", "out"), (b, "Router.A", "in")):
        rows = [row for row in qdstat(r.port, "-c") if "inter-router" in row]
        assert len(rows) == 1, rows
        assert peer in rows[0] and direction in rows[0]
    # data links: priorities 0..9 in each direction, on both sides
    for r in (a, b):
        table = qdstat(r.port, "-l")
        heads = next(row for row in table if row and row[0] == "type")
        type_col, dir_col, pri_col = heads.index("type"), heads.index("dir"), heads.index("pri")
        for direction in ("in", "out"):
            pris = sorted(int(row[pri_col]) for row in table
                          if row and row[type_col] == "inter-router" and row[dir_col] == direction)
            assert pris == list(range(10)), (r.id, direction, table)


def test_router_capability_refused_on_a_normal_listener(router_factory):
    r = router_factory(router_id="Router.N", mode="interior")
    conn = BlockingConnection(r.url, timeout=TIMEOUT)
    try:
        with pytest.raises(LinkDetached) as info:
            conn.create_sender(None, name="sneaky", options=_Caps([symbol("qd.router")]))
        text = str(info.value)
        assert "not-allowed" in text and "inter-router" in text, text
    finally:
        conn.close()


class _Caps:
    """A link option putting capabilities on both termini."""

    def __init__(self, caps) -> None:
        self.caps = caps

    def apply(self, link) -> None:
        for terminus in (link.source, link.target):
            for cap in self.caps:
                terminus.capabilities.put_symbol(cap)

    def test(self, link) -> bool:
        return True
