"""router allowResumableLinkRoute (configurable in 1.19) through a real router to a real broker
(tests/brokers.py), with real proton clients. Kept apart from test_link_routes.py, whose
helpers it uses::

    client ── R (allowResumableLinkRoute: no, linkRoute queue in/out) ── broker
"""
import pytest
from proton import Message
from proton.utils import BlockingConnection, LinkDetached

from test_link_routes import TIMEOUT, route_config, wait_active


class _Resumable:
    """A link option: the terminus outlives the link (a timeout, or expiry-policy never)."""

    def __init__(self, timeout=0, never=False):
        self.timeout, self.never = timeout, never

    def apply(self, link):
        from proton import Terminus
        term = link.source if link.is_receiver else link.target
        term.timeout = self.timeout
        if self.never:
            term.expiry_policy = Terminus.EXPIRE_NEVER

    def test(self, link):
        return True


def test_allow_resumable_link_route_no(router_factory, c_broker):
    """router allowResumableLinkRoute: no (configurable in 1.19): a routed attach asking for a
    terminus that outlives its link is refused with 1.19's condition; the others are routed."""
    broker = c_broker("broker.resume")
    router = router_factory(route_config(broker), router_attrs="allowResumableLinkRoute: no")
    wait_active(router)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        for n, option in enumerate((_Resumable(timeout=30), _Resumable(never=True))):
            with pytest.raises(LinkDetached) as info:
                conn.create_receiver("queue.r", name=f"resume{n}", options=option)
            assert "qd:link-expiration" in str(info.value)
            assert "Requested link expiration not allowed" in str(info.value)
        with pytest.raises(LinkDetached, match="qd:link-expiration"):
            conn.create_sender("queue.r", name="resume-s", options=_Resumable(timeout=5))
        snd = conn.create_sender("queue.r")
        snd.send(Message(body="plain"))
        rcv = conn.create_receiver("queue.r", credit=1)
        assert rcv.receive(timeout=TIMEOUT).body == "plain"
    finally:
        conn.close()
