"""Router annotations (x-opt-qd.*) and stripAnnotations on normal listeners."""
from __future__ import annotations

import textwrap

from proton import Message, symbol
from proton.utils import BlockingConnection

from conftest import free_port

TIMEOUT = 10


def roundtrip(url: str, address: str, msg: Message, anonymous: bool = False) -> Message:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        rcv = conn.create_receiver(address, credit=5)
        snd = conn.create_sender(None if anonymous else address)
        dlv = snd.link.send(msg)
        got = rcv.receive(timeout=TIMEOUT)
        rcv.accept()
        conn.wait(lambda: dlv.settled, timeout=TIMEOUT)
        return got
    finally:
        conn.close()


def test_default_strips_router_annotations_but_keeps_user_ones(router):
    msg = Message(body=b"payload-bytes", annotations={
        symbol("user-key"): "user-value",
        symbol("x-opt-qd.trace"): ["0/Elsewhere"],
        symbol("x-opt-qd.ingress"): "0/Elsewhere",
    })
    got = roundtrip(router.url, "annotated", msg)
    assert got.body == b"payload-bytes"
    assert got.annotations == {symbol("user-key"): "user-value"}


def test_plain_message_passes_byte_for_byte(router):
    msg = Message(body="untouched", properties={"k": 1}, subject="s", priority=7)
    got = roundtrip(router.url, "plain", msg)
    assert got.annotations in (None, {})
    assert (got.body, got.properties, got.subject, got.priority) == ("untouched", {"k": 1},
                                                                     "s", 7)


def test_strip_no_adds_ingress_and_trace(router_factory):
    port = free_port()
    r = router_factory(router_id="Router.Ann", extra=textwrap.dedent(f"""\
        listener {{
            host: 127.0.0.1
            port: {port}
            stripAnnotations: no
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """))
    got = roundtrip(f"amqp://127.0.0.1:{port}", "traced",
                    Message(body=1, annotations={symbol("app"): 5}))
    ann = got.annotations
    assert ann[symbol("app")] == 5
    assert ann[symbol("x-opt-qd.ingress")] == "0/Router.Ann"
    assert ann[symbol("x-opt-qd.trace")] == ["0/Router.Ann"]
    assert list(ann)[0] == symbol("app")  # user annotations first, router ones after
    # an existing trace is appended to, an existing ingress kept
    got = roundtrip(f"amqp://127.0.0.1:{port}", "traced", Message(body=2, annotations={
        symbol("x-opt-qd.trace"): ["0/Upstream"], symbol("x-opt-qd.ingress"): "0/Upstream"}))
    assert got.annotations[symbol("x-opt-qd.trace")] == ["0/Upstream", "0/Router.Ann"]
    assert got.annotations[symbol("x-opt-qd.ingress")] == "0/Upstream"


def test_to_override_honoured_from_non_stripping_listener(router_factory):
    port = free_port()
    router_factory(extra=textwrap.dedent(f"""\
        listener {{
            host: 127.0.0.1
            port: {port}
            stripAnnotations: out
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """))
    msg = Message(address="not-here", body="redirected",
                  annotations={symbol("x-opt-qd.to"): "over-here"})
    got = roundtrip(f"amqp://127.0.0.1:{port}", "over-here", msg, anonymous=True)
    assert got.body == "redirected"
    assert not any(str(k).startswith("x-opt-qd.") for k in (got.annotations or {}))
