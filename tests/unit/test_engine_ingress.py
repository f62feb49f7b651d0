"""A client's message on an endpoint link, at the worker: the router annotations it carries
are stripped (stripAnnotations in/both), its 'to' chosen, and vhost policy judges the message
as the client sent it (in memory: engine + core, both builds)."""
from __future__ import annotations

import proton
from proton import Message, symbol

from memrouter import MemRouter

POLICY = {"enableVhostPolicy": True, "defaultVhost": "$default"}
VHOSTS = [{"hostname": "$default", "allowUnknownUser": True,
           "groups": {"$default": {"remoteHosts": "*", "sources": "*", "targets": "*",
                                   "allowAnonymousSender": True}}}]
ROUTER_ANNOTATIONS = {symbol("x-opt-qd.trace"): ["0/Router.X"],
                      symbol("x-opt-qd.ingress"): "0/Router.X", symbol("user-key"): 7}


def _send(snd, msg: Message) -> proton.Delivery:
    dlv = snd.delivery(b"t%d" % msg.body if isinstance(msg.body, int) else msg.body.encode())
    snd.send(msg.encode())
    snd.advance()
    return dlv


def _router(engine_cls) -> tuple:
    r = MemRouter(engine_cls=engine_cls)
    r.engine.set_policy(dict(POLICY), [dict(v) for v in VHOSTS])
    rc = r.client("receiver")
    rcv = rc.receiver("q", credit=10)
    sc = r.client("sender")
    snd = sc.sender("q")
    r.run()
    return r, rc, rcv, sc, snd


def test_user_id_proxy_is_judged_on_the_message_as_sent(engine_cls):
    """allowUserIdProxy false: a user-id that is not the connection's user is REJECTED
    (amqp:unauthorized-access), also when the message carries router annotations that the
    connection strips. (The check once read the user-id at the offset of the annotations as
    sent in the message as stripped: router annotations let a client proxy any user-id.)"""
    r, rc, rcv, sc, snd = _router(engine_cls)
    spoofed = [_send(snd, Message(body=n, user_id=b"mallory", annotations=ann))
               for n, ann in ((1, None), (2, dict(ROUTER_ANNOTATIONS)))]
    honest = _send(snd, Message(body=3, user_id=b"anonymous",
                                    annotations=dict(ROUTER_ANNOTATIONS)))
    r.run()
    for dlv in spoofed:
        assert dlv.remote_state == proton.Delivery.REJECTED, dlv.tag
        assert dlv.remote.condition.name == "amqp:unauthorized-access"
    got = rc.receive_all(rcv)
    assert [m.body for _, m in got] == [3]
    assert got[0][1].annotations == {symbol("user-key"): 7}  # stripped on the way in
    assert honest.remote_state == 0 or honest.remote_state == proton.Delivery.ACCEPTED


def test_anonymous_sender_routes_by_properties_to_once_annotations_are_stripped(engine_cls):
    """An anonymous sender's message goes by its properties 'to', not by an x-opt-qd.to the
    stripping connection removed (and a policed target is judged on that 'to')."""
    r = MemRouter(engine_cls=engine_cls)
    r.engine.set_policy(dict(POLICY), [dict(v) for v in VHOSTS])
    rc = r.client("receiver")
    rcv_q = rc.receiver("q", credit=10)
    rcv_elsewhere = rc.receiver("elsewhere", credit=10)
    sc = r.client("sender")
    anon = sc.sender(None)
    r.run()
    _send(anon, Message(address="q", body="by-to", user_id=b"anonymous",
                            annotations={symbol("x-opt-qd.to"): "elsewhere"}))
    r.run()
    assert [m.body for _, m in rc.receive_all(rcv_q)] == ["by-to"]
    assert rc.receive_all(rcv_elsewhere) == []
