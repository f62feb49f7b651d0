"""The core's link routing (router_core/linkroute.py), command by command, on both builds:
the link-route table, route-container reachability, and (with the foundation's router-initiated
links) attach routing and the routed pair."""
import pytest

from common.ipc import ConnClosed, ConnOpened, LinkAttach, LinkRefuse, DIR_IN, DIR_OUT
from test_core import BUILDS, Harness

LR_IN = {"identity": "1", "name": "lr-in", "prefix": "queue", "direction": "in",
         "connection": "broker", "distribution": "linkBalanced"}
LR_OUT = {"identity": "2", "name": "lr-out", "prefix": "queue", "direction": "out",
          "connection": "broker", "distribution": "linkBalanced"}
LR_PATTERN = {"identity": "3", "pattern": "a.*.b", "direction": "in", "containerId": "bx"}


@pytest.fixture(params=BUILDS)
def core_cls(request):
    return request.param


def container(h, conn_id, listener="broker", container_id="bk"):
    return h.do(ConnOpened(conn_id, "route-container", "out", "127.0.0.1:2", container_id,
                           listener, "", "", False, 250, 1))


def status(h):
    return h.core.snapshot()["linkRoutes"]


def route_addresses(h):
    return {a["key"]: a for a in h.core.snapshot()["addresses"]
            if a["distribution"] == "linkBalanced"}


def test_route_addresses_are_keyed_as_1_19_keys_them(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT, LR_PATTERN,
                                       {"identity": "4", "pattern": "x.y.#", "direction": "out",
                                        "containerId": "bx"}])
    assert set(route_addresses(h)) == {"Cqueue", "Dqueue", "Ea.*.b", "Dx.y"}
    assert status(h) == {"1": "inactive", "2": "inactive", "3": "inactive", "4": "inactive"}
    assert h.core.snapshot()["router"]["addrCount"] == 4


def test_route_container_by_connection_name_activates_and_deactivates(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT, LR_PATTERN])
    container(h, 5, listener="other")          # serves nothing
    h.conn(6)                                  # a normal connection named broker does not count
    assert set(status(h).values()) == {"inactive"}
    container(h, 7)
    assert status(h) == {"1": "active", "2": "active", "3": "inactive"}
    assert route_addresses(h)["Cqueue"]["containerCount"] == 1
    h.do(ConnClosed(7, ""))
    assert set(status(h).values()) == {"inactive"}
    assert route_addresses(h)["Cqueue"]["containerCount"] == 0


def test_route_container_by_container_id(core_cls):
    h = Harness(core_cls, link_routes=[LR_PATTERN])
    container(h, 5, listener="x", container_id="bx")
    assert status(h) == {"3": "active"}


def test_created_and_deleted_at_run_time(core_cls):
    h = Harness(core_cls)
    container(h, 5)
    h.core.create_link_route(LR_IN)
    assert status(h) == {"1": "active"}
    h.core.create_link_route(dict(LR_IN, identity="9", name="again"))  # same address, shared
    assert list(route_addresses(h)) == ["Cqueue"]
    assert h.core.delete_link_route("1") and list(route_addresses(h)) == ["Cqueue"]
    assert h.core.delete_link_route("9") and route_addresses(h) == {}
    assert not h.core.delete_link_route("9")


@pytest.mark.parametrize("direction, address", [(DIR_IN, "queue.a"), (DIR_OUT, "queue/b"),
                                                (DIR_IN, "queue"), (DIR_IN, "amqp:/queue.c")])
def test_attach_matching_a_route_without_destination_is_refused_no_route(core_cls, direction,
                                                                         address):
    h = Harness(core_cls, link_routes=[LR_IN, LR_OUT])
    h.conn(1)
    h.do(LinkAttach(10, 1, direction, "l", address, False, False, 10))
    assert h.core.take_effects()[0] == [
        LinkRefuse(10, "qd:no-route-to-dest", "No route to the destination node")]
    assert 10 not in h.core.links


def test_attach_not_matching_is_message_routed(core_cls):
    h = Harness(core_cls, link_routes=[LR_IN])
    h.conn(1)
    h.do(LinkAttach(10, 1, DIR_IN, "l", "queuex", False, False, 10),
         LinkAttach(11, 1, DIR_OUT, "m", "queue.a", False, False, 10))  # LR_IN is in only
    assert 10 in h.core.links and 11 in h.core.links
