"""deliveriesDelayed1Sec / deliveriesDelayed10Sec: deliveries settled more than 1 s / 10 s
after they came in (1.19 qdr_delivery_increment_counters_CT), on both links of the path and,
for inbound deliveries only, router-wide; and deliveriesStuck (1.19's stuck delivery detection
sweep); both core builds, with the core times given."""
from common.ipc import (
    STATE_ACCEPTED, ConnClosed, Disposition, LinkDetach, LinkFlow, SettleIn, Transfer)
from router_core import corelog

from test_core import Harness, core_cls  # noqa: F401 - the build fixture


def at(h, now, *cmds):
    h.core.handle_batch(0, list(cmds), now)
    h.flat()


def one_path(core_cls, credit=5, log=False, sent=0, **kwargs):  # noqa: F811
    """A core with receiver 20 (``credit``) and sender 10 on ``q``, and ``sent`` unsettled
    deliveries (ids 1..) sent at core time 0; ``log``: ROUTER_CORE info kept."""
    h = Harness(core_cls, **kwargs)
    h.core.log_info = log
    h.conn(1).receiver(20, 1, "q", credit=credit).sender(10, 1, "q")
    h.flat()
    if sent:
        at(h, 0.0, *[Transfer(i, 10, None, False, 4, b"m") for i in range(1, sent + 1)])
    return h


def delays(h, link_id):
    view = h.link(link_id)
    return view["deliveriesDelayed1Sec"], view["deliveriesDelayed10Sec"]


def router_delays(h):
    router = h.snap()["router"]
    return router["deliveriesDelayed1Sec"], router["deliveriesDelayed10Sec"]


def test_anycast_counted_by_how_long_settlement_took(core_cls):  # noqa: F811
    h = one_path(core_cls, credit=10)
    for dlv_id, settled_at in ((1, 0.9), (2, 1.5), (3, 10.5)):
        at(h, 0.0, Transfer(dlv_id, 10, None, False, 4, b"m"))
        at(h, settled_at, Disposition(dlv_id, STATE_ACCEPTED, True, None))
    assert delays(h, 10) == (1, 1) and delays(h, 20) == (1, 1)
    assert router_delays(h) == (1, 1)  # the inbound deliveries only
    assert h.link(20)["acceptedCount"] == 3


def test_presettled_and_prompt_deliveries_never_count(core_cls):  # noqa: F811
    h = one_path(core_cls, credit=10)
    at(h, 0.0, Transfer(1, 10, None, True, 4, b"p"))
    at(h, 0.0, Transfer(2, 10, None, False, 4, b"u"))
    at(h, 1.0, Disposition(2, STATE_ACCEPTED, True, None))  # 1 s exactly: not more than 1 s
    assert delays(h, 10) == (0, 0) and delays(h, 20) == (0, 0) and router_delays(h) == (0, 0)


def test_time_held_for_credit_counts_from_ingress(core_cls):  # noqa: F811
    h = one_path(core_cls, credit=0)
    at(h, 0.0, Transfer(1, 10, None, False, 4, b"m"))
    at(h, 5.0, LinkFlow(20, 1, False))  # sent after 5 s waiting at the address
    at(h, 5.1, Disposition(1, STATE_ACCEPTED, True, None))
    assert delays(h, 10) == (1, 0) and delays(h, 20) == (1, 0)


def test_sender_settling_first_and_multicast(core_cls):  # noqa: F811
    h = one_path(core_cls)
    at(h, 0.0, Transfer(1, 10, None, False, 4, b"m"))
    at(h, 2.0, SettleIn(1, STATE_ACCEPTED))  # the sender settles: both ends counted
    assert delays(h, 10) == (1, 0) and delays(h, 20) == (1, 0)

    m = Harness(core_cls, default_distribution="multicast")
    m.conn(1).receiver(20, 1, "m", credit=5).receiver(21, 1, "m", credit=5).sender(10, 1, "m")
    m.flat()
    at(m, 0.0, Transfer(1, 10, None, False, 4, b"m"))
    at(m, 0.5, Disposition(1, STATE_ACCEPTED, True, None))
    at(m, 12.0, Disposition(2, STATE_ACCEPTED, True, None))
    assert delays(m, 20) == (0, 0) and delays(m, 21) == (0, 1)
    assert delays(m, 10) == (0, 1) and router_delays(m) == (0, 1)


def test_detach_log_line_shows_the_counts(core_cls):  # noqa: F811
    h = one_path(core_cls, log=True, sent=2)
    at(h, 3.0, Disposition(1, STATE_ACCEPTED, True, None))
    at(h, 20.0, Disposition(2, STATE_ACCEPTED, True, None))
    h.core.info_logs = []
    at(h, 21.0, LinkDetach(10, True, ""))
    at(h, 21.0, ConnClosed(1, ""))
    texts = corelog.lines(h.core.info_logs)
    assert texts[0] == ("[C1][L10] Link detached: del=2 presett=0 psdrop=0 acc=2 rej=0 rel=0 "
                        "mod=0 delay1=1 delay10=1 blocked=no")
    assert texts[1].endswith(" acc=2 rej=0 rel=0 mod=0 delay1=1 delay10=1 blocked=no")


# ---- deliveriesStuck: 1.19's stuck delivery detection ------------------------------------------
def stuck(h, link_id):
    return h.link(link_id)["deliveriesStuck"]


def test_unsettled_delivery_on_a_link_idle_for_10s_is_stuck_until_settled(core_cls):  # noqa: F811
    h = one_path(core_cls, log=True, sent=2)
    h.core.tick(29.0)  # the first sweep is at 30 s
    assert stuck(h, 10) == stuck(h, 20) == 0
    h.core.info_logs = []
    h.core.tick(30.0)
    assert stuck(h, 10) == stuck(h, 20) == 2 and h.snap()["router"]["deliveriesStuck"] == 4
    texts = corelog.lines(h.core.info_logs)  # once per link, on its first stuck delivery
    assert sorted(texts) == [
        f"[C1][L{link}] Stuck delivery: At least one delivery on this link has been "
        "undelivered/unsettled for more than 10 seconds" for link in (10, 20)]
    h.core.tick(60.0)  # counted once
    assert stuck(h, 10) == stuck(h, 20) == 2
    at(h, 61.0, Disposition(1, STATE_ACCEPTED, True, None))
    assert stuck(h, 10) == stuck(h, 20) == 1 and h.snap()["router"]["deliveriesStuck"] == 2
    at(h, 62.0, SettleIn(2, STATE_ACCEPTED))
    assert stuck(h, 10) == stuck(h, 20) == 0 and h.snap()["router"]["deliveriesStuck"] == 0


def test_a_recent_settlement_on_the_link_means_not_stuck(core_cls):  # noqa: F811
    h = one_path(core_cls, sent=2)
    at(h, 25.0, Disposition(1, STATE_ACCEPTED, True, None))
    h.core.tick(30.0)  # 5 s since the links' last settlement: delivery 2 is not stuck yet
    assert stuck(h, 10) == stuck(h, 20) == 0
    h.core.tick(60.0)
    assert stuck(h, 10) == stuck(h, 20) == 1


def test_test_hooks_sweep_every_5s_with_a_3s_age(core_cls):  # noqa: F811
    h = one_path(core_cls, sent=1, test_hooks=True)
    h.core.tick(5.0)
    assert stuck(h, 10) == stuck(h, 20) == 1


# ---- blocked links: 1.19's zero-credit detection in the same sweep --------------------------
def blocked(h):
    return h.snap()["router"]["linksBlocked"]


def blocked_lines(h):
    return [text for text in corelog.lines(h.core.info_logs) if "Link blocked" in text]


def test_zero_credit_for_more_than_the_age_is_blocked_until_credit(core_cls):  # noqa: F811
    h = one_path(core_cls, credit=0, log=True, sent=1, test_hooks=True)
    h.core.info_logs = []
    h.core.tick(5.0)  # the receiver granted nothing since its attach at 0
    assert blocked(h) == 1 and h.snap()["router"]["blockedLinkCount"] == 1
    assert blocked_lines(h) == ["[C1][L20] Link blocked with zero credit for 5 seconds"]
    assert h.link(20)["zeroCreditSeconds"] == 5 and h.link(10)["zeroCreditSeconds"] == 0
    h.core.tick(10.0)  # logged once
    assert blocked(h) == 1 and len(blocked_lines(h)) == 1
    at(h, 11.0, LinkFlow(20, 1, False))  # credit: no longer blocked (and the delivery goes)
    assert blocked(h) == 0 and h.link(20)["zeroCreditSeconds"] == 0
    h.core.tick(15.0)  # the sweep sees its credit spent at 15: blocked from the next one on
    assert blocked(h) == 0
    h.core.tick(20.0)
    assert blocked(h) == 1
    h.core.info_logs = []
    at(h, 21.0, LinkDetach(20, True, ""))
    assert blocked(h) == 0
    assert corelog.lines(h.core.info_logs)[0].endswith(" blocked=yes")


def test_idle_receiver_without_credit_is_blocked_too(core_cls):  # noqa: F811
    h = one_path(core_cls, credit=0)  # nothing sent: 1.19 does not look at waiting deliveries
    h.core.tick(29.0)
    assert blocked(h) == 0
    h.core.tick(30.0)  # production: sweep every 30 s, blocked after 10 s at zero
    assert blocked(h) == 1 and h.link(20)["zeroCreditSeconds"] == 30
    assert h.link(10)["zeroCreditSeconds"] == 0
    at(h, 31.0, ConnClosed(1, ""))
    assert blocked(h) == 0
