"""Logging as a Qpid Dispatch 1.19 operator sees it, against launched routers.

* trace levels (config file and management UPDATE) write the PROTOCOL frame trace
  (``[C1]:FRAME: 0 <- @attach(18) [...]``) and the ROUTER_CORE lines (``Core action 'NAME'``
  at trace; connection opened/closed and link attached/detached at info) 1.19 writes;
* ``logStats`` has one entity per 1.19 log module with per-level counts of the lines all the
  router's processes logged; GET-LOG entries are ``[module, level, text, file, line, time]``
  and come from every process (supervisor, workers, core, agent); ``qdstat --log`` prints them.

With ``QDROUTERD_1X`` naming a 1.x install the same scenario runs against the 1.19 router and
the line shapes (ids and numbers normalised) and answers are compared; skipped otherwise.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection, SyncRequestResponse

from conftest import RouterProcess, free_port

TIMEOUT = 10
T = "org.apache.qpid.dispatch."
ONE_X = os.environ.get("QDROUTERD_1X", "")
STATS_MODULES = ["DEFAULT", "ERROR", "PYTHON", "MESSAGE", "MAIN", "AGENT", "POLICY", "PROTOCOL",
                 "SERVER", "ROUTER_LS", "AUTHSERVICE", "CONN_MGR", "HTTP", "ROUTER",
                 "ROUTER_HELLO", "ROUTER_CORE", "CONTAINER", "ROUTER_MA", "DISPLAYNAME"]
LEVELS = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
LINE = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} [+-]\d{4} )?([A-Z_]+) \((\w+)\) (.*?)"
                  r"(?: \(/[^()]*:\d+\))?$")


# --- the scenario -------------------------------------------------------------------------------
class _SendOne(MessagingHandler):
    """Receiver on q1 and sender to q1 on one connection; one unsettled message, accepted;
    both links detached, the connection closed."""

    def __init__(self, url: str) -> None:
        super().__init__(auto_accept=False)
        self.url, self.sent, self.done = url, False, False

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.url)
        self.rx = event.container.create_receiver(self.conn, "q1", name="rx1")
        self.tx = event.container.create_sender(self.conn, "q1", name="tx1")

    def on_sendable(self, event) -> None:
        if not self.sent:
            self.tx.send(Message(body="hello"))
            self.sent = True

    def on_message(self, event) -> None:
        event.delivery.update(event.delivery.ACCEPTED)
        event.delivery.settle()

    def on_settled(self, event) -> None:
        self.done = True
        self.tx.close()
        self.rx.close()
        self.conn.close()


def send_one(url: str) -> None:
    handler = _SendOne(url)
    container = Container(handler, container_id="logcli")
    container.timeout = TIMEOUT
    deadline = time.monotonic() + TIMEOUT
    container.start()
    while container.process() and time.monotonic() < deadline:
        pass
    container.stop()
    assert handler.done, "the message was not settled in time"


def send_garbage(url: str) -> None:
    """A connection that is not AMQP: the router closes it with a framing error."""
    import socket
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(b"GARBAGE!")
        try:
            sock.recv(64)  # the router's protocol header, then it closes
        except OSError:
            pass


def server_info(lines: list) -> set:
    """SERVER info lines about accepted connections, ports and ids normalised."""
    return {re.sub(r"127\.0\.0\.1:\d+", "HOST", normalised(t)) for m, lvl, t in parsed(lines)
            if m == "SERVER" and lvl == "info" and re.match(r"\[C\d+\] (Accepted|Connection)", t)}


def mgmt_call(url: str, props: dict, body=None) -> tuple:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        reply = SyncRequestResponse(conn, "$management").call(Message(properties=props,
                                                                     body=body))
        return reply.properties["statusCode"], reply.body
    finally:
        conn.close()


def parsed(lines: list) -> list:
    """(module, level, text) of every log line."""
    out = []
    for line in lines:
        match = LINE.match(line)
        if match:
            out.append(match.groups())
    return out


def wait_for(predicate, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def normalised(text: str) -> str:
    """A line with the ids and numbers that differ between two runs made equal."""
    text = re.sub(r"\[C\d+\]", "[C]", text)
    text = re.sub(r"\[L\d+\]", "[L]", text)
    text = re.sub(r"host=127\.0\.0\.1:\d+", "host=H", text)
    return text


def frames(lines: list) -> set:
    """(direction, performative) of every PROTOCOL frame line."""
    out = set()
    for module, level, text in parsed(lines):
        match = re.match(r"\[C\d+\]:FRAME: \d+ (<-|->) @([a-z-]+)\(\d+\)", text)
        if module == "PROTOCOL" and level == "trace" and match:
            out.add(match.groups())
    return out


def core_info(lines: list) -> set:
    """The ROUTER_CORE info lines of the connection 'logcli', normalised."""
    out = set()
    for module, level, text in parsed(lines):
        if module == "ROUTER_CORE" and level == "info" and re.match(r"\[C\d+\]", text):
            out.add(normalised(text))
    return out


TRACE = """
    log {
        module: DEFAULT
        enable: trace+
    }
"""

EXPECTED_FRAMES = {(d, p) for d in ("<-", "->") for p in
                   ("open", "begin", "attach", "flow", "transfer", "disposition", "detach",
                    "close")} | {("<-", "sasl-init"), ("->", "sasl-mechanisms"),
                                 ("->", "sasl-outcome")}


def test_a_peer_without_sasl_is_the_anonymous_user_not_authenticated(router_factory):
    """As 1.19 (the transport's user): a client that does no SASL at all is user 'anonymous'
    with auth=no in its Connection Opened line, and qdstat -c shows it no-auth; one that does
    SASL ANONYMOUS is authenticated as ANONYMOUS. (Our qdstat, like 1.19's, does no SASL
    unless an option asks for it.)"""
    router = router_factory()
    plain = BlockingConnection(router.url, timeout=TIMEOUT, sasl_enabled=False,
                               container_id="nosasl")
    anon = BlockingConnection(router.url, timeout=TIMEOUT, container_id="anonsasl")
    try:
        opened = {c: router.proc.wait_for_line(f"container_id={c}", timeout=TIMEOUT)
                  for c in ("nosasl", "anonsasl")}
        assert "encrypted=no auth=no user=anonymous container_id=nosasl" in opened["nosasl"]
        assert ("encrypted=no auth=ANONYMOUS user=anonymous container_id=anonsasl"
                in opened["anonsasl"])
        out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                              router.url[len("amqp://"):], "-c"],
                             capture_output=True, text=True, timeout=60).stdout
        rows = {line.split()[2]: line.split()[7] for line in out.splitlines()
                if len(line.split()) > 7 and line.split()[0].isdigit()}
        assert rows["nosasl"] == "no-auth" and rows["anonsasl"] == "anonymous-user", out
        assert sum(auth == "no-auth" for auth in rows.values()) == 2, out  # and qdstat's own
    finally:
        plain.close()
        anon.close()


# --- trace ----------------------------------------------------------------------------------------
def test_trace_writes_the_frame_trace_and_the_core_lines_of_1_19(router_factory):
    router = router_factory(TRACE)
    send_one(router.url)
    wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines),
             "the core's Connection Closed line")
    # the core's line may come before the worker's last frames (each process writes its own)
    wait_for(lambda: EXPECTED_FRAMES <= frames(router.proc.lines), "every kind of frame")
    lines = list(router.proc.lines)
    attach = [t for m, _, t in parsed(lines) if m == "PROTOCOL" and '@attach(18) [name="tx1"' in t]
    assert attach and re.match(r'\[C\d+\]:FRAME: 0 <- @attach\(18\) \[name="tx1", handle=0x1, '
                               r'role=false, snd-settle-mode=0x2, rcv-settle-mode=0x0, '
                               r'source=@source\(40\) \[', attach[0])
    info = core_info(lines)
    assert {"[C] Connection Opened: dir=in host=H vhost= encrypted=no auth=ANONYMOUS "
            "user=anonymous container_id=logcli props=",
            "[C][L] Link attached: dir=out source={q1 expire:sess} target={<none> expire:sess}",
            "[C][L] Link attached: dir=in source={<none> expire:sess} target={q1 expire:sess}",
            "[C] Connection Closed"} <= info
    closed = [normalised(t) for m, lvl, t in parsed(lines) if m == "ROUTER_CORE" and re.match(
        r"\[C\d+\]\[L\d+\] Link (detached|closed due to connection loss): ", t)]
    assert len(closed) == 2 and all(
        t.endswith(": del=1 presett=0 psdrop=0 acc=1 rej=0 rel=0 mod=0 delay1=0 delay10=0 "
                   "blocked=no") for t in closed), closed
    server = [normalised(t) for m, lvl, t in parsed(lines) if m == "SERVER" and lvl == "trace"]
    assert re.sub(r":\d+'$", ":P'", server[1]) == \
        "[C]: Accepting incoming connection to '127.0.0.1:P'", server
    actions = {t for m, lvl, t in parsed(lines) if m == "ROUTER_CORE" and lvl == "trace"}
    assert {"Core action 'connection_opened'", "Core action 'link_first_attach'",
            "Core action 'link_flow'", "Core action 'link_deliver'",
            "Core action 'update_delivery'", "Core action 'link_detach'",
            "Core action 'connection_closed'"} <= actions


def test_management_turns_the_trace_on_and_off_in_every_process(router_factory):
    router = router_factory(workers=2)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)  # opened before the trace is on
    try:
        assert not frames(router.proc.lines)
        for module in ("PROTOCOL", "ROUTER_CORE"):
            status, _ = mgmt_call(router.url, {"operation": "UPDATE", "type": T + "log",
                                               "name": f"log/{module}"}, {"enable": "trace+"})
            assert status == 200
        sender = conn.create_sender("q.trace", name="traced")  # on the connection opened before
        wait_for(lambda: any('@attach(18) [name="traced"' in t for t in
                             (x[2] for x in parsed(router.proc.lines))),
                 "the attach frame of a connection opened before the update")
        send_one(router.url)  # a new connection: in whichever worker, traced too
        wait_for(lambda: any("Core action 'link_deliver'" in line
                             for line in router.proc.lines), "the core's trace")
        # each process writes its own lines: the worker's last frames (the router's detach and
        # close) may reach the log after the core's line
        wait_for(lambda: EXPECTED_FRAMES <= frames(router.proc.lines),
                 "every kind of frame in the trace")
        for module in ("PROTOCOL", "ROUTER_CORE"):
            status, _ = mgmt_call(router.url, {"operation": "UPDATE", "type": T + "log",
                                               "name": f"log/{module}"}, {"enable": "info+"})
            assert status == 200
        mark = len(router.proc.lines)
        sender.close()
        send_one(router.url)
        wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines[mark:]),
                 "the last connection's Connection Closed line")
        later = parsed(router.proc.lines[mark:])
        assert not [t for m, lvl, t in later if lvl == "trace"], later
    finally:
        conn.close()


def test_a_failed_connection_is_logged_as_1_19_an_orderly_one_is_not(router_factory):
    router = router_factory()
    send_garbage(router.url)
    send_one(router.url)
    wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines),
             "the core's Connection Closed line")
    wait_for(lambda: any("failed:" in line for line in router.proc.lines), "the failed line")
    assert server_info(router.proc.lines) == {
        "[C] Accepted connection to HOST from HOST",
        "[C] Connection from HOST (to HOST) failed: amqp:connection:framing-error Unknown "
        "protocol detected: 'GARBAGE!'"}


# --- logStats, GET-LOG, qdstat --log ----------------------------------------------------------
def _counts(lines: list) -> dict:
    counts: dict = {}
    for module, level, _ in parsed(lines):
        counts[(module, level)] = counts.get((module, level), 0) + 1
    return counts


def test_log_stats_count_the_lines_of_every_process(router_factory):
    router = router_factory(workers=2)
    send_one(router.url)
    wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines),
             "the core's Connection Closed line")
    before = _counts(router.proc.lines)
    status, body = mgmt_call(router.url, {"operation": "QUERY", "entityType": T + "logStats"},
                             {"attributeNames": []})
    assert status == 200
    names = body["attributeNames"]
    rows = [dict(zip(names, row)) for row in body["results"]]
    assert [r["name"] for r in rows] == STATS_MODULES
    assert all(r["identity"] == f"logStats/{r['name']}" for r in rows)
    router.proc.stop()
    after = _counts(router.proc.lines)
    for row in rows:
        for level in LEVELS:
            key = (row["name"], level)
            assert before.get(key, 0) <= row[f"{level}Count"] <= after.get(key, 0), (key, row)
    stats = {r["name"]: r for r in rows}
    assert stats["SERVER"]["noticeCount"] >= 1  # Operational: the supervisor's line
    assert stats["SERVER"]["infoCount"] >= 1    # Accepted connection: a worker's
    assert stats["ROUTER_CORE"]["infoCount"] >= 5  # the core's connection and link lines
    assert stats["AGENT"]["infoCount"] >= 1     # the agent's


def test_get_log_has_1_19_entries_from_every_process(router_factory):
    router = router_factory(workers=2)
    send_one(router.url)
    wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines),
             "the core's Connection Closed line")
    status, body = mgmt_call(router.url, {"operation": "GET-LOG", "type": "org.amqp.management",
                                          "name": "self"})
    assert status == 200
    for entry in body:
        assert len(entry) == 6
        module, level, text, path, line, stamp = entry
        assert module in STATS_MODULES and level in LEVELS and isinstance(text, str)
        assert isinstance(path, str) and path.endswith(".py") and os.path.isabs(path)
        assert isinstance(line, int) and line > 0 and isinstance(stamp, int)
    stamps = [e[5] for e in body]
    assert stamps == sorted(stamps)
    texts = {(e[0], e[1], normalised(e[2])) for e in body}
    assert ("ROUTER_CORE", "info", "[C] Connection Closed") in texts                 # core
    assert any(m == "SERVER" and t.startswith("Operational") for m, _, t in texts)    # supervisor
    assert any(m == "SERVER" and "Accepted connection" in t for m, _, t in texts)     # worker
    assert any(m == "AGENT" for m, _, _ in texts)                                      # agent
    status, last = mgmt_call(router.url, {"operation": "GET-LOG", "type": "org.amqp.management",
                                          "name": "self", "limit": 2})
    assert status == 200 and len(last) == 2


def _qdstat(tool: list, router, *args: str, env=None) -> str:
    out = subprocess.run([*tool, "-b", f"127.0.0.1:{router.port}", *args], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_qdstat_log_prints_every_process_s_lines(router_factory):
    router = router_factory()
    send_one(router.url)
    wait_for(lambda: any("Connection Closed" in line for line in router.proc.lines),
             "the core's Connection Closed line")
    tools = [([sys.executable, "-m", "tools.qdstat"], None)]
    if ONE_X:
        from test_mixed_1x import one_x_env
        tools.append(([sys.executable, os.path.join(ONE_X, "bin", "qdstat")], one_x_env()))
    for tool, env in tools:
        out = _qdstat(tool, router, "--log", env=env)
        assert re.search(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} ROUTER_CORE \(info\) \[C\d+\] "
                         r"Connection Opened: dir=in", out, re.M), out
        assert re.search(r"SERVER \(notice\) Operational", out), out


# --- the same scenario against Qpid Dispatch 1.19 ----------------------------------------------
def _one_x_router(tmp_path, extra: str):
    from test_mixed_1x import OneXProcess
    port = free_port()
    conf = tmp_path / "qd119.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.OneX
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """) + textwrap.dedent(extra))
    proc = OneXProcess(conf)
    proc.wait_for_line("Operational")
    return proc, f"amqp://127.0.0.1:{port}"


@pytest.mark.skipif(not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"),
                                               os.X_OK),
                    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install to compare the log "
                           "lines with 1.19's")
def test_same_lines_and_answers_as_1_19(router_factory, tmp_path):
    ours = router_factory(TRACE)
    theirs, their_url = _one_x_router(tmp_path, TRACE)
    try:
        answers = {}
        for name, url, proc in (("ours", ours.url, ours.proc), ("1.19", their_url, theirs)):
            send_garbage(url)
            send_one(url)
            wait_for(lambda: any("Connection Closed" in line for line in proc.lines),
                     f"{name}: Connection Closed")
            time.sleep(0.2)
            lines = list(proc.lines)
            _, stats = mgmt_call(url, {"operation": "QUERY", "entityType": T + "logStats"},
                                 {"attributeNames": ["name", "identity"]})
            _, log = mgmt_call(url, {"operation": "GET-LOG", "type": "org.amqp.management",
                                     "name": "self", "limit": 50})
            answers[name] = {
                "frames": frames(lines),
                "core": core_info(lines),
                "actions": {t for m, lvl, t in parsed(lines) if m == "ROUTER_CORE"
                            and lvl == "trace" and t.startswith("Core action 'link_")},
                "accepting": {re.sub(r"127\.0\.0\.1:\d+", "HOST", normalised(t))
                              for m, lvl, t in parsed(lines)
                              if m == "SERVER" and lvl == "trace" and "Accepting" in t},
                "server": server_info(lines),
                "stats": stats["results"],
                "entry types": {tuple(type(v).__name__ for v in e) for e in log},
            }
        ours_a, theirs_a = answers["ours"], answers["1.19"]
        # a client that detaches and closes at once: 1.19's close overtakes its detach answers
        # (its core answers later); ours answers the detaches first. Every other frame kind
        # is traced by both.
        assert ours_a["frames"] - {("->", "detach")} == theirs_a["frames"] - {("->", "detach")}
        # 1.19 logs both links as closed with the connection when the client's detaches and
        # close come together; ours as detached: the same line otherwise
        def same(lines: set) -> set:
            return {re.sub(r"Link (detached|closed due to connection loss)", "Link closed", t)
                    for t in lines}
        assert same(ours_a["core"]) == same(theirs_a["core"])
        assert ours_a["actions"] <= theirs_a["actions"] | {"Core action 'link_second_attach'"}
        assert ours_a["accepting"] == theirs_a["accepting"]
        assert ours_a["server"] == theirs_a["server"]
        assert sorted(ours_a["stats"]) == sorted(theirs_a["stats"])  # 1.19: creation order
        assert ours_a["entry types"] == theirs_a["entry types"] == {
            ("str", "str", "str", "str", "int32", "int32")}
    finally:
        theirs.stop()


def _router_lines(lines: list) -> set:
    """ROUTER_CORE info lines of inter-router connections, normalised (and counted once)."""
    out = set()
    for text in core_info(lines):
        text = re.sub(r'"qd\.conn-id"=\d+', '"qd.conn-id"=N', text)
        out.add(re.sub(r"(Link (lost|closed due to connection loss|detached)): .*", r"\1", text))
    return out


@pytest.mark.skipif(not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"),
                                               os.X_OK),
                    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install to compare the log "
                           "lines with 1.19's")
def test_inter_router_lines_as_1_19_on_either_side(router_factory, tmp_path):
    """Ours connecting to 1.19 writes what 1.19 connecting to ours writes, and accepting the
    same: Connection Opened (dir, user, the peer's properties) and the router links."""
    from test_mixed_1x import MixedNet
    seen = {}
    for accepting in ("1.19", "ours"):  # Router.A accepts, Router.B connects
        net = MixedNet(router_factory, tmp_path / accepting)
        (tmp_path / accepting).mkdir()
        try:
            if accepting == "1.19":
                theirs = net.add_1x("A").proc
                ours = net.add("B", connect_to=(("A", 1),)).proc
            else:
                ours = net.add("A").proc
                theirs = net.add_1x("B", connect_to=(("A", 1),)).proc
            for proc in (ours, theirs):
                wait_for(lambda: sum("Link attached" in x for x in proc.lines) >= 22,
                         "the router links of the inter-router connection")
            time.sleep(0.3)
            theirs.stop()
            wait_for(lambda: any("Connection Closed" in x for x in ours.lines),
                     "our Connection Closed")
            seen[accepting] = {"ours": _router_lines(ours.lines),
                               "1.19": _router_lines(theirs.lines)}
        finally:
            net.stop_all()
            ours.stop()
    assert any("Link attached" in t for t in seen["1.19"]["ours"])
    # the connecting side: ours (1.19 accepting) and 1.19's (ours accepting) write the same
    assert seen["1.19"]["ours"] - {"[C] Connection Closed", "[C][L] Link lost"} == \
        seen["ours"]["1.19"] - {"[C] Connection Closed", "[C][L] Link lost"}
    # the accepting side: the same Connection Opened line and link directions
    def opened(lines: set) -> set:
        return {t for t in lines if "Connection Opened" in t}
    assert opened(seen["1.19"]["1.19"]) == opened(seen["ours"]["ours"])
