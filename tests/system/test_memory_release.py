"""After a burst of connections closes, the I/O worker gives the memory back (issue #28 item 21).

A worker holding 1,000 connections grows by tens of MB (proton transports and their buffers, the
engine's records). Once they are all closed and the worker is idle, most of that must go back to
the OS: before the fix the heap trim ran only from ``process_events``, once every 256 calls, so an
idle worker kept its peak RSS (2,000 connections: 35 -> 138 MB, for good). The bound is on memory,
not time: the wait for it is bounded by ``settle_rss``.

Uses the raw client of ``benchmarks/bench_memory.py`` (which prints the same figures over many
cycles).
"""
from __future__ import annotations

import sys
from pathlib import Path

import proton

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_memory as bm  # noqa: E402

CONNS = 1000


def test_idle_worker_returns_memory_of_closed_connections(tmp_path):
    bm.raise_nofile(CONNS * 2 + 200)
    router = bm.start_router(tmp_path, 1, "memrel")
    try:
        idle = bm.settle_rss(router, 0.5)
        clients = [bm.Client(router.port, f"memrel-{i}") for i in range(CONNS)]
        for i, c in enumerate(clients):
            rcv = c.session.receiver(f"r{i}")
            rcv.source.address = f"memrel{i % 10}"
            rcv.open()
            rcv.flow(10)
            c.links = (rcv,)
        bm.pump(clients, lambda: all(c.links[0].remote_source.address is not None
                                     for c in clients), 120, "attaches")
        held = bm.rss(router)
        for c in clients:
            c.conn.close()
        bm.pump(clients, lambda: all(c.conn.state & proton.Endpoint.REMOTE_CLOSED or c.eos
                                     for c in clients), 120, "closes")
        for c in clients:
            c.close()
        after = bm.settle_rss(router, 1.5)
    finally:
        router.stop()
    grown = held["worker"] - idle["worker"]
    kept = after["worker"] - idle["worker"]
    assert grown > 10, (idle, held)  # the connections did cost memory while open
    assert kept < grown / 2, f"worker kept {kept:.1f} of {grown:.1f} MB: idle {idle}, " \
                             f"with {CONNS} connections {held}, after closing {after}"
