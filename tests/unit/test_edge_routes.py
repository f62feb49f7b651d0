"""The edge's link-route proxy state machine (router_core/edgeroutes.py) and its messages
(router_core/edgemsg.py), without a core: what 1.19's edge link_route_proxy does when a route
comes and goes while its requests are out."""
import proton

from router_core import edgemsg
from router_core.edgeroutes import CREATED, DELETED, NEW, LinkRouteProxy


def _sent(proxy, now=0.0):
    out = []
    for payload in proxy.requests("amqp:/_topo/0/I/temp.r", now):
        msg = proton.Message()
        msg.decode(payload)
        out.append(msg)
    return out


def _answer(proxy, msg, status, identity=None):
    body = {} if identity is None else {"identity": identity}
    reply = proton.Message(correlation_id=msg.correlation_id,
                           properties={"statusCode": status}, body=body).encode()
    proxy.reply(*edgemsg.read_management_reply(reply))


def test_removed_while_its_create_is_out_is_deleted_when_answered():
    p = LinkRouteProxy("E1")
    p.added("Ea.*.b")
    [create] = _sent(p)
    assert create.body["pattern"] == "a.*.b" and create.body["direction"] == "in"
    p.removed("Ea.*.b")
    assert _sent(p) == []  # nothing to delete yet: no identity
    _answer(p, create, 201, "7")
    assert p.proxies["Ea.*.b"].state == DELETED
    [delete] = _sent(p)
    assert delete.properties["operation"] == "DELETE" and delete.properties["identity"] == "7"
    _answer(p, delete, 404)  # (not found counts as deleted, as in 1.19)
    assert p.proxies == {} and p.logs == []


def test_back_before_its_delete_went_keeps_the_route():
    p = LinkRouteProxy("E1")
    p.added("Dq")
    [create] = _sent(p)
    assert create.body["direction"] == "out" and create.body["pattern"] == "q/#"
    _answer(p, create, 201, "3")
    p.removed("Dq")
    p.added("Dq")
    assert p.proxies["Dq"].state == CREATED and _sent(p) == []


def test_back_while_its_delete_is_out_is_created_again():
    p = LinkRouteProxy("E1")
    p.added("Cq")
    [create] = _sent(p)
    _answer(p, create, 201, "3")
    p.removed("Cq")
    [delete] = _sent(p)
    p.added("Cq")
    [again] = _sent(p)
    assert again.properties["operation"] == "CREATE"
    _answer(p, delete, 204)  # the old proxy's answer leaves the new one alone
    _answer(p, again, 201, "4")
    assert p.proxies["Cq"].state == CREATED and p.proxies["Cq"].identity == "4"


def test_a_201_without_identity_is_a_bad_answer():
    p = LinkRouteProxy("E1")
    p.added("Cq")
    [create] = _sent(p)
    _answer(p, create, 201)
    assert p.proxies == {}
    assert p.take_logs() == [("error", "Link route proxy CREATE failed: invalid response "
                                       "message, address=q/# proxy name=E1/proxyLinkRoute/Cq")]


def test_uplink_lost_makes_created_routes_new():
    p = LinkRouteProxy("E1")
    p.added("Cq")
    p.added("Cr")
    first = _sent(p)
    _answer(p, first[0], 201, "1")
    p.lost()
    assert {k: v.state for k, v in p.proxies.items()} == {"Cq": NEW, "Cr": NEW}
    assert len(_sent(p)) == 2


def test_unreadable_replies():
    assert edgemsg.read_management_reply(b"") is None
    assert edgemsg.read_management_reply(b"garbage") is None
    # no statusCode: 500, as 1.19 reads a bad reply
    reply = proton.Message(correlation_id="lrp-1", body={}).encode()
    assert edgemsg.read_management_reply(reply) == ("lrp-1", 500, None, None)
