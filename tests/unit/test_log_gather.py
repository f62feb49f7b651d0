"""Logging for management without processes: each process's counts and recent lines
(common/log.py), the agent's merge and its LogQuery/LogReport flow (loggather.py), and the
core's connection/link records turned into 1.19's ROUTER_CORE lines (corelog.py), both core
builds."""
from __future__ import annotations

from common import ipc
from common.ipc import DIR_IN, DIR_OUT, ConnClosed, LinkDetach, LinkFlow
from common.log import RouterLog
from agent.management import loggather
from router_core import corelog
from test_core import Harness, core_cls  # noqa: F401 - the fixture of both builds
from test_management_ops import SNAPSHOT, SPEC, request  # noqa: F401


def test_a_process_counts_its_lines_and_names_their_source():
    log = RouterLog([{"module": "DEFAULT", "enable": "info+"}, {"module": "PROTOCOL",
                                                                 "enable": "trace+"}])
    log.log("SERVER", "info", "one")
    log.log("SERVER", "debug", "not logged")
    log.log("PROTOCOL", "trace", "[C1]:FRAME: 0 <- @open(16) []")
    report = log.report()
    assert report["counts"] == {"SERVER": [0, 0, 1, 0, 0, 0, 0], "PROTOCOL": [1, 0, 0, 0, 0, 0, 0]}
    module, level, text, path, line, stamp = report["entries"][0]
    assert (module, level, text) == ("SERVER", "info", "one")
    assert path == __file__ and line > 0 and stamp > 0


def test_listeners_hear_every_level_change():
    log = RouterLog()
    seen = []
    log.listeners.append(lambda: seen.append(log.enabled("PROTOCOL", "trace")))
    log.configure({"module": "PROTOCOL", "enable": "trace+"})
    log.configure({"module": "PROTOCOL", "enable": "default"})
    assert seen == [True, False]


def test_merge_sums_counts_and_keeps_the_newest_lines_in_time_order():
    a = {"counts": {"SERVER": [0, 0, 2, 0, 0, 0, 0]},
         "entries": [["SERVER", "info", "a1", "/a.py", 1, 1.0], ["SERVER", "info", "a2", "/a.py",
                                                                  2, 3.0]]}
    b = {"counts": {"SERVER": [0, 0, 1, 1, 0, 0, 0], "AGENT": [0, 1, 0, 0, 0, 0, 0]},
         "entries": [["AGENT", "debug", "b1", "/b.py", 5, 2.0], "garbage"]}
    merged = loggather.merge([a, b, {}, {"counts": {"X": "bad"}}], keep=2)
    assert merged["counts"] == {"SERVER": [0, 0, 3, 1, 0, 0, 0], "AGENT": [0, 1, 0, 0, 0, 0, 0]}
    assert [e[2] for e in merged["entries"]] == ["b1", "a2"]
    assert loggather.get_log_entries(merged)[0] == ["AGENT", "debug", "b1", "/b.py", 5, 2]
    stats = {s["name"]: s for s in loggather.log_stats(merged["counts"])}
    assert list(stats)[:2] == ["DEFAULT", "ERROR"] and len(stats) == 19
    assert stats["SERVER"]["infoCount"] == 3 and stats["SERVER"]["identity"] == "logStats/SERVER"


def test_requests_that_show_log_lines_gather_them_first():
    assert loggather.needs_logs("GET-LOG", None, None)
    assert loggather.needs_logs("QUERY", "org.apache.qpid.dispatch.logStats", None)
    assert loggather.needs_logs("QUERY", None, None)
    assert not loggather.needs_logs("QUERY", "org.apache.qpid.dispatch.connection", None)
    assert loggather.needs_logs("READ", None, None)
    assert not loggather.needs_logs("READ", None, "org.apache.qpid.dispatch.router")
    assert not loggather.needs_logs("UPDATE", None, "org.apache.qpid.dispatch.log")


class _Plane:
    def __init__(self) -> None:
        from agent.management.agent import ManagementAgent
        self.control: list = []
        ids = iter(range(100, 10 ** 6))
        self.agent = ManagementAgent(SPEC, RouterLog(SPEC["logs"]), lambda: next(ids),
                                     lambda *fx: None, self.control.append, 2, "1.19.0")
        self.answers: list = []

    def submit(self, props) -> None:
        self.agent.submit(request(props), 0.0,
                          lambda status, description, body: self.answers.append((status, body)))


def test_the_agent_asks_every_process_then_the_core():
    plane = _Plane()
    plane.submit({"operation": "GET-LOG"})
    [query] = plane.control
    assert type(query) is ipc.LogQuery
    worker = {"counts": {"SERVER": [0, 0, 1, 0, 0, 0, 0]},
              "entries": [["SERVER", "info", "[C3] Accepted", "/w.py", 7, 5.0]]}
    for peer in (-1, 0):
        plane.agent.on_log_report(ipc.LogReport(query.request_id, peer, worker), 0.1)
    assert len(plane.control) == 1  # worker 1 has not answered: still gathering
    plane.agent.on_log_report(ipc.LogReport(query.request_id, 1, {}), 0.1)
    assert type(plane.control[-1]) is ipc.CoreQuery
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 0.2)
    [(status, body)] = plane.answers
    assert status == 200
    assert [e[2] for e in body].count("[C3] Accepted") == 2


def test_a_process_that_does_not_answer_delays_the_answer_briefly():
    plane = _Plane()
    plane.submit({"operation": "QUERY", "entityType": "logStats"})
    [query] = plane.control
    plane.agent.on_log_report(ipc.LogReport(query.request_id, -1, {
        "counts": {"ROUTER_CORE": [0, 0, 4, 0, 0, 0, 0]}, "entries": []}), 0.1)
    plane.agent.tick(loggather.GATHER_TIMEOUT + 0.5)  # the workers never answer
    assert type(plane.control[-1]) is ipc.CoreQuery
    plane.agent.on_core_state(ipc.CoreState(query.request_id, SNAPSHOT), 2.0)
    [(status, body)] = plane.answers
    rows = [dict(zip(body["attributeNames"], r)) for r in body["results"]]
    assert {r["name"]: r["infoCount"] for r in rows}["ROUTER_CORE"] == 4


def test_core_keeps_connection_and_link_events_only_when_asked(core_cls):  # noqa: F811
    quiet = Harness(core_cls)
    quiet.conn(1).receiver(10, 1, "q1", credit=5)
    assert quiet.core.info_logs == []
    h = Harness(core_cls)
    h.core.log_info = True
    h.conn(1).receiver(10, 1, "q1", credit=5).sender(11, 1, "q1")
    h.send(11)
    h.do(LinkDetach(11, True, ""))
    h.do(ConnClosed(1, ""))
    texts = corelog.lines(h.core.info_logs)
    assert texts[0] == ("[C1] Connection Opened: dir=in host=127.0.0.1:1 vhost= encrypted=no "
                        "auth=no user=u container_id=c1 props=")
    assert texts[1] == ("[C1][L10] Link attached: dir=out source={<none> expire:sess} "
                        "target={<none> expire:sess}")
    # the sender left with its delivery unsettled: MODIFIED, as the core settles it
    assert texts[3] == ("[C1][L11] Link detached: del=1 presett=0 psdrop=0 acc=0 rej=0 rel=0 "
                        "mod=1 delay1=0 delay10=0 blocked=no")
    assert texts[4].startswith("[C1][L10] Link closed due to connection loss: del=1 ")
    assert texts[5] == "[C1] Connection Closed"
    h.conn(2).receiver(20, 2, "q2", credit=1)
    h.core.info_logs = []
    h.do(ConnClosed(2, "amqp:connection:framing-error: connection aborted"))  # lost, not closed
    assert corelog.lines(h.core.info_logs)[0].startswith("[C2][L20] Link lost: del=0 ")


def test_termini_and_properties_read_as_1_19_writes_them():
    assert corelog.terminus_text(ipc.terminus(ipc.TERMINUS_SOURCE, "q1")) == "{q1 expire:sess}"
    dyn = dict(ipc.terminus(ipc.TERMINUS_SOURCE, None, dynamic=True), durable=2, expiry=3,
               distribution_mode=1, timeout=5, capabilities=b"\xa3\x05queue")
    assert corelog.terminus_text(dyn) == "{(dyn)<none> dur:deliveries dist:copy timeout:5 " \
                                         "caps::queue}"
    assert corelog.terminus_text({"type": ipc.TERMINUS_COORDINATOR}) == "{<coordinator>}"
    assert corelog.format_map({"product": "qpid-dispatch-router", "qd.conn-id": 1}) == \
        '{:product="qpid-dispatch-router", :"qd.conn-id"=1}'
    assert corelog.action_name(LinkFlow(1, 2, False)) == "link_flow"
    assert DIR_IN != DIR_OUT
