"""Management work proportional to the answer (router_core/corepage.py): a READ or a one-row
QUERY touches a constant number of the core's records whatever it holds, a listing in pages
touches each record a bounded number of times, and the answers are the ones a whole snapshot
gives (same rows, same order, same hiding of the router's internal connections).

Work is counted (``corepage.TOUCHED``), never timed.
"""
from __future__ import annotations

import pytest
from proton import Message

from agent.management.entities import View
from agent.management.operations import core_query, execute
from agent.management.protocol import ManagementError, parse_request
from agent.management.store import ConfigStore
from common.ipc import ConnClosed
from router_core import corepage
from router_core.corestate import router_view

from test_core import Harness, core_cls  # noqa: F401 - the fixture over both builds
from test_management_ops import SPEC

T = "org.apache.qpid.dispatch."


def populated(cls, n):
    """A core with the agent's internal connection (and its management link) and ``n`` client
    connections, each with a receiver on an address of its own."""
    h = Harness(cls)
    h.conn(1, role="internal").receiver(2, 1, "$management")
    for i in range(n):
        conn = 100 + 2 * i
        h.conn(conn).receiver(conn + 1, conn, f"addr.{i}")
    h.effects()
    return h


def ask(h, pager, props, body=None):
    """(the answer from a whole snapshot, the answer from the scoped query, the scope)."""
    store = ConfigStore(SPEC)
    req = parse_request(Message(properties=props, body=body, reply_to="r", correlation_id=1))
    what = core_query(req, store.schema)
    full = h.core.snapshot()
    if what == "snapshot":
        scoped = full
    else:
        scoped = pager.answer(corepage.parse(what), router_view(h.core, 0))

    def answer(state):
        try:
            reply = execute(req, View(state, store, version="1.19.0", started=0.0, now=0.0))
            return reply.status, reply.body
        except ManagementError as exc:
            return exc.status, exc.description
    return answer(full), answer(scoped), what


def touched(pager, what):
    before = corepage.TOUCHED["records"]
    pager.answer(corepage.parse(what), {})
    return corepage.TOUCHED["records"] - before


@pytest.fixture(autouse=True)
def _steady_memory(monkeypatch):
    """The router entity's memoryUsage/memoryResident read /proc for this process's parent and
    its children: under pytest-xdist that is the other workers too, whose memory moves between
    the two answers compared here. A constant instead: these tests compare the answers' rows."""
    from agent.management import entities
    monkeypatch.setattr(entities, "router_memory", lambda field="VmSize": 1 << 20)


@pytest.fixture
def big(core_cls):  # noqa: F811
    h = populated(core_cls, 1500)
    return h, corepage.Pager(h.core)


QUERIES = [
    {"operation": "QUERY", "entityType": T + "connection"},
    {"operation": "QUERY", "entityType": "connection", "offset": 500, "count": 500},
    {"operation": "QUERY", "entityType": T + "connection", "offset": 1499, "count": 5},
    {"operation": "QUERY", "entityType": T + "connection", "offset": 4000, "count": 5},
    {"operation": "QUERY", "entityType": T + "router.link", "offset": 0, "count": 1},
    {"operation": "QUERY", "entityType": T + "router.link", "offset": 700, "count": 500},
    {"operation": "QUERY", "entityType": T + "router.address", "offset": 0, "count": 500},
    {"operation": "QUERY", "entityType": T + "router.address", "offset": 1000, "count": 600},
    {"operation": "QUERY", "entityType": T + "router"},
    {"operation": "READ", "type": T + "connection", "identity": "1000"},
    {"operation": "READ", "type": T + "connection", "identity": "1"},  # internal: hidden
    {"operation": "READ", "type": T + "connection", "identity": "77777"},
    {"operation": "READ", "type": T + "router.link", "identity": "1001"},
    {"operation": "READ", "type": T + "router.link", "identity": "2"},  # internal: hidden
    {"operation": "READ", "type": T + "router.address", "name": "M0addr.7"},
    {"operation": "READ", "type": T + "router.address", "identity": "router.address/M0addr.8"},
    {"operation": "READ", "type": T + "router.address", "name": "M0$management"},
    {"operation": "READ", "type": T + "router.address", "name": "M0nothing"},
    {"operation": "READ", "type": T + "router", "name": "router/R1"},
]


@pytest.mark.parametrize("props", QUERIES, ids=lambda p: " ".join(
    str(v) for k, v in p.items() if k != "operation").replace(T, ""))
def test_scoped_answers_are_the_whole_snapshots_answers(big, props):
    h, pager = big
    body = {"attributeNames": []} if props["operation"] == "QUERY" else None
    full, scoped, what = ask(h, pager, props, body)
    assert what != "snapshot"
    assert scoped == full


def test_requests_the_core_cannot_scope_ask_for_the_snapshot():
    store = ConfigStore(SPEC)

    def what(props):
        req = parse_request(Message(properties=props, body=None, reply_to="r"))
        return core_query(req, store.schema)
    assert what({"operation": "READ", "type": T + "connection",
                 "name": "connection/127.0.0.1:1"}) == "snapshot"  # names are not keys
    assert what({"operation": "QUERY"}) == "snapshot"
    assert what({"operation": "QUERY", "entityType": "listener"}) == "snapshot"
    assert what({"operation": "QUERY", "entityType": "nosuchtype"}) == "snapshot"
    assert what({"operation": "QUERY", "entityType": "connection", "offset": 3,
                 "count": 4}) == "page connection 3 4"
    assert corepage.parse("page connection x 4") is None
    assert corepage.parse("snapshot+gone>4") is None


def test_a_read_touches_the_same_few_records_with_10_or_3000_entities(core_cls):  # noqa: F811
    counts = []
    for n in (10, 3000):
        h = populated(core_cls, n)
        pager = corepage.Pager(h.core)
        counts.append((touched(pager, "one connection 104"),
                       touched(pager, "one router.link 105"),
                       touched(pager, "one router.address M0addr.2"),
                       touched(pager, "page connection 0 1"),
                       touched(pager, "page router.address 0 1"),
                       touched(pager, "counts")))
    assert counts[0] == counts[1]
    # the one record (rendered; a page visits it first and skips the agent's connection) and
    # the agent's connection, which every answer carries; its link only in an address's
    # answer (the agent counts an address's in-process consumers from it)
    assert counts[1] == (2, 2, 3, 4, 4, 0), counts


def test_a_listing_in_pages_touches_each_record_a_bounded_number_of_times(big):
    h, pager = big
    n = 1500
    for kind in ("connection", "router.link", "router.address"):
        before = corepage.TOUCHED["records"]
        rows, offset = [], 0
        while True:
            page = pager.page(kind, offset, 500)
            rows += page
            offset += 500
            if len(page) < 500:
                break
        work = corepage.TOUCHED["records"] - before
        assert len(rows) >= n
        assert work <= 4 * n + 20, (kind, work)  # a snapshot a page: 4 pages x 1500 each


def test_a_page_after_a_change_is_the_page_of_a_snapshot_taken_then(big):
    h, pager = big
    pager.page("connection", 0, 500)
    second = pager.page("connection", 500, 500)
    h.do(ConnClosed(int(second[10]["identity"]), False))  # one of a page already read
    h.do(ConnClosed(int(second[-1]["identity"]) + 2, False))  # one of the next page
    third = pager.page("connection", 1000, 500)
    visible = [c for c in h.core.snapshot()["connections"] if c["role"] != "internal"]
    assert [c["identity"] for c in third] == [c["identity"] for c in visible[1000:1500]]
    assert len(third) == 498
