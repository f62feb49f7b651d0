"""Blocked links (1.19's zero-credit detection, with ``-T`` timings: a sweep every 5 s, blocked
after more than 3 s at zero credit): a real proton receiver grants no credit while a sender's
message waits for it, and a second receiver grants none and has nothing waiting. Both are
counted in the router's ``linksBlocked``, show ``zeroCreditSeconds``, are logged once ("Link
blocked with zero credit for N seconds"); credit unblocks one, and the other's detach line says
``blocked=yes``. Run against our router and, when ``QDROUTERD_1X`` names one, a real 1.x router
(the same assertions hold for both). Bounded waits."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

from test_delayed_deliveries import query
from test_test_hooks import start

TIMEOUT = 10.0
# the first -T sweep is 5 s after start, the next 5 s later: blocked by the second at the latest
BLOCKED_WITHIN = 15.0


@pytest.fixture(params=["ours", "1.x"])
def hooked(request, tmp_path):
    proc, url = start(tmp_path, request.param, True)
    yield proc, url
    proc.stop()


def links_blocked(url: str) -> int:
    """The router's ``linksBlocked`` (1.19's agent column; asked by name: a QUERY without
    names answers the schema's attributes, where it is ``blockedLinkCount``)."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        reply = SyncRequestResponse(conn, "$management").call(Message(
            properties={"operation": "QUERY", "type": "org.amqp.management",
                        "entityType": "org.apache.qpid.dispatch.router"},
            body={"attributeNames": ["linksBlocked"]}))
        [[count]] = reply.body["results"]
        return count
    finally:
        conn.close()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.2)


def test_receivers_without_credit_are_blocked_until_credit(hooked):
    proc, url = hooked
    # 1.19 counts zero credit from a link's attach in whole seconds of uptime, where 0 means
    # "not at zero": a link attached in the router's first second is not looked at until its
    # credit went up and down again (ours does not copy that); attach after it
    time.sleep(1.1)
    conn = BlockingConnection(url, timeout=TIMEOUT, container_id="blockcli")
    try:
        waiting = conn.create_receiver("blk.q", credit=0)
        idle = conn.create_receiver("blk.idle", credit=0)
        sender = conn.create_sender("blk.q")
        sent = sender.link.send(Message(body="waits"))
        assert links_blocked(url) == 0
        wait_for(lambda: links_blocked(url) == 2, BLOCKED_WITHIN, "two blocked links")

        links = {(lk["owningAddr"], lk["linkDir"]): lk for lk in query(url, "router.link")
                 if (lk.get("owningAddr") or "").startswith("M0blk.")}
        assert sorted(links) == [("M0blk.idle", "out"), ("M0blk.q", "in"), ("M0blk.q", "out")]
        assert links[("M0blk.q", "in")]["zeroCreditSeconds"] == 0  # the sender has credit
        for key in (("M0blk.q", "out"), ("M0blk.idle", "out")):
            assert links[key]["zeroCreditSeconds"] > 3 and links[key]["creditAvailable"] == 0
            conn_id, link_id = links[key]["connectionId"], links[key]["identity"]
            found = re.findall(rf"\[C{conn_id}\]\[L{link_id}\] Link blocked with zero credit "
                               r"for \d+ seconds", proc.output())
            assert len(found) == 1, proc.output()

        general = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b", url[len("amqp://"):],
                                  "-t", "5", "-g"], capture_output=True, text=True, timeout=30)
        assert general.returncode == 0, general.stderr
        assert re.search(r"^\s*Links Blocked\s+2\s*$", general.stdout, re.M), general.stdout

        waiting.flow(1)  # credit: no longer blocked, and the message goes
        assert waiting.receive(timeout=TIMEOUT).body == "waits"
        waiting.accept()
        conn.wait(lambda: sent.settled, timeout=TIMEOUT)
        idle_link = links[("M0blk.idle", "out")]
        idle.close()
        tag = f"[C{idle_link['connectionId']}][L{idle_link['identity']}] "
        # 1.19 writes the same counts as "Link cleanup deferred after IO processing" when its
        # core frees the link while the I/O thread still has it (timing: seen 3 of 3 when this
        # case runs alone); ours writes "Link detached"
        texts = (tag + "Link detached", tag + "Link cleanup deferred after IO processing")

        def detach_lines() -> list:
            return [ln for ln in proc.output().splitlines() if any(t in ln for t in texts)]

        wait_for(lambda: detach_lines(), TIMEOUT, "the detach line")
        [line] = detach_lines()
        assert line.endswith(": del=0 presett=0 psdrop=0 acc=0 rej=0 rel=0 mod=0 delay1=0 "
                             "delay10=0 blocked=yes")
        # the receiver that got credit may be blocked again by a later sweep (its credit is
        # spent), but not within the 3 s that takes: the count went down
        assert links_blocked(url) in (0, 1)
    finally:
        conn.close()
