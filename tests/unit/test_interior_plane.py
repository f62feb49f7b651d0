"""The interior-mode adapter (agent/interior.py): IPC in, IPC out, no processes, no sockets.

Two adapters are wired back to back through a tiny fake core that behaves like the real one as
the IPC contract describes it:

    A (conn 11) ======= (conn 22) B

* ControlSend(conn_id >= 0) -> ControlIn(peer's conn_id, payload) at the other end (HELLO);
* LinkState / RouterGone / TopologyReset -> the router's RouteTable (as coreproc does: the
  routes are computed before the next other message and at the end of the outputs; a RouteUpdate
  when they changed, Reachable back to the adapter);
* ControlSend(-1, "_topo/0/all/...") -> every neighbour in the sender's core routes;
* ControlSend(-1, "_topo/0/<id>/...") -> only if <id> has a next hop in the sender's core
  routes (over the conn_id its ``neighbours`` names).
"""
from __future__ import annotations

from proton import Message, int32, symbol

from agent.interior import InteriorRouting, decode_control, encode_control
from agent.routing import Log
from common import ipc
from router_core.routetable import TOPOLOGY_TYPES, RouteTable


class FakeCore:
    def __init__(self, a: InteriorRouting, b: InteriorRouting) -> None:
        self.routers = {a.router_id: a, b.router_id: b}
        # router id -> its conn_id -> (peer router id, the peer's conn_id)
        self.conns = {a.router_id: {11: (b.router_id, 22)}, b.router_id: {22: (a.router_id, 11)}}
        self.tables = {rid: RouteTable(rid) for rid in self.routers}   # each core's topology
        self.routes = {rid: None for rid in self.routers}      # last RouteUpdate per router
        self.updates = {rid: [] for rid in self.routers}       # every RouteUpdate, in order
        self.remote = {rid: {} for rid in self.routers}        # (key, router) -> hint
        self.inbox = {rid: [] for rid in self.routers}         # IPC messages due at each router
        self.sent = {rid: [] for rid in self.routers}          # every output, in order
        self.logs = {rid: [] for rid in self.routers}
        self.now = 0.0

    def link_up(self) -> None:
        for rid, conns in self.conns.items():
            for conn_id, (peer, _) in conns.items():
                self.inbox[rid].append(ipc.RouterLinkUp(conn_id, 1, peer))

    def _route(self, rid: str, msg: ipc.ControlSend) -> None:
        if msg.conn_id >= 0:
            peer, peer_conn = self.conns[rid][msg.conn_id]
            self.inbox[peer].append(ipc.ControlIn(peer_conn, bytes(msg.payload)))
            return
        table = self.routes[rid]
        if table is None:
            return                                   # no routes yet: the core drops it
        parts = msg.to.split("/")                    # amqp:, _topo, 0, <id|all>, qdrouter...
        assert parts[1] == "_topo", msg.to
        targets = list(table.neighbours) if parts[3] == "all" else [parts[3]]
        for target in targets:
            hop = table.next_hop.get(target)
            if hop is None:
                continue
            conn_id = table.neighbours[hop]
            peer, peer_conn = self.conns[rid][conn_id]
            self.inbox[peer].append(ipc.ControlIn(peer_conn, bytes(msg.payload)))

    def _compute(self, rid: str) -> None:
        update, reachable = self.tables[rid].compute(1_700_000_000 + self.now)
        if update is not None:
            self.routes[rid] = update
            self.updates[rid].append(update)
        if reachable is not None:
            self.inbox[rid].append(reachable)

    def _take(self, rid: str, outputs: list) -> None:
        pending = False
        for item in outputs:
            if isinstance(item, Log):
                self.logs[rid].append(item)
                continue
            self.sent[rid].append(item)
            if type(item) in TOPOLOGY_TYPES:
                self.tables[rid].apply(item)
                pending = True
                continue
            if pending:
                self._compute(rid)
                pending = False
            if isinstance(item, ipc.ControlSend):
                self._route(rid, item)
            elif isinstance(item, ipc.RemoteAddress):
                if item.present:
                    self.remote[rid][(item.key, item.router)] = item.hint
                else:
                    self.remote[rid].pop((item.key, item.router), None)
        if pending:
            self._compute(rid)

    def run(self, until: float, step: float = 0.05) -> None:
        """Deliver every queued message (one batch per router per step) and poll each adapter."""
        while self.now <= until:
            for rid, router in self.routers.items():
                batch, self.inbox[rid] = self.inbox[rid], []
                for msg in batch:
                    self._take(rid, router.handle(msg, self.now))
                self._take(rid, router.poll(self.now))
            self.now = round(self.now + step, 6)


def make_pair(**timers):
    a = InteriorRouting("A", 1000, timers)
    b = InteriorRouting("B", 2000, timers)
    return a, b, FakeCore(a, b)


def test_two_routers_become_neighbours_and_route_to_each_other():
    a, b, core = make_pair()
    core.link_up()
    core.run(until=3.0)
    assert a.neighbours() == {"B": 11}
    assert b.neighbours() == {"A": 22}
    ra, rb = core.routes["A"], core.routes["B"]
    assert ra is not None and rb is not None
    assert ra.next_hop == {"B": "B"} and ra.neighbours == {"B": 11} and ra.cost == {"B": 1}
    assert rb.next_hop == {"A": "A"} and rb.neighbours == {"A": 22} and rb.cost == {"A": 1}
    assert isinstance(ra.valid_origins, dict)
    assert ipc.decode_batch(ipc.encode_batch(0, [ra]))[1] == [ra]      # msgpack-able as is
    # RA and LSU crossed (routed through the fake core), and each holds the other's link state
    opcodes = {rid: [decode_control(m.payload)[0] for m in core.sent[rid]
                     if isinstance(m, ipc.ControlSend)] for rid in core.sent}
    for rid in ("A", "B"):
        assert {"HELLO", "RA", "LSR", "LSU"} <= set(opcodes[rid]), opcodes[rid]
    assert a.engine.linkstate.collection() == {"A": {"B": 1}, "B": {"A": 1}}
    assert b.engine.linkstate.collection() == {"B": {"A": 1}, "A": {"B": 1}}
    view = core.tables["A"].view()               # management's router.node: from A's core
    assert [row["id"] for row in view] == ["A", "B"]
    assert view[1]["routerLink"] == "11" and view[1]["cost"] == 1 and view[1]["instance"] == 2000
    assert [row["id"] for row in core.tables["B"].view()] == ["B", "A"]
    # the core told each agent what it reaches
    assert a.engine.nodes.reachable_routers == {"B"} and b.engine.nodes.reachable_routers == {"A"}


def test_hello_goes_on_its_connection_and_others_are_routed():
    a, b, core = make_pair()
    core.link_up()
    core.run(until=2.0)
    for msg in core.sent["A"]:
        if not isinstance(msg, ipc.ControlSend):
            continue
        opcode, _, to = decode_control(msg.payload)
        assert to == msg.to
        if opcode == "HELLO":
            assert msg.conn_id == 11 and to == "amqp:/_local/qdhello"
        else:
            assert msg.conn_id == -1 and to.startswith("amqp:/_topo/0/")


def test_local_address_reaches_the_other_router():
    a, b, core = make_pair()
    core.link_up()
    core.run(until=3.0)
    core.inbox["A"].append(ipc.LocalAddress("M0orders", True, 2))
    core.run(until=5.0)
    assert core.remote["B"] == {("M0orders", "A"): 2}
    assert b.remote_addresses() == {"A": {"M0orders": 2}}
    core.inbox["A"].append(ipc.LocalAddress("M0orders", False, 2))
    core.run(until=7.0)
    assert core.remote["B"] == {}
    removed = [m for m in core.sent["B"] if isinstance(m, ipc.RemoteAddress) and not m.present]
    assert removed == [ipc.RemoteAddress("M0orders", "A", False, -1)]


def test_address_present_before_the_link_comes_up_is_learned_by_mar():
    a, b, core = make_pair()
    core.inbox["B"].append(ipc.LocalAddress("M0queue", True, 3))
    core.run(until=2.0)           # B's MAU goes nowhere: no routes yet
    core.link_up()
    core.run(until=6.0)
    assert core.remote["A"] == {("M0queue", "B"): 3}


def test_link_down_removes_the_neighbour_and_its_routes():
    a, b, core = make_pair()
    core.link_up()
    core.run(until=3.0)
    core.inbox["A"].append(ipc.RouterLinkDown(11))
    core.run(until=3.5)
    assert a.neighbours() == {}
    assert core.routes["A"].next_hop == {}
    assert core.routes["A"].neighbours == {}


def test_hello_at_protocol_version_2_is_ignored_and_logged_once():
    a = InteriorRouting("A", 1000)
    a.handle(ipc.RouterLinkUp(5, 1, "X"), 0.0)
    a.poll(0.0)
    body = {"id": "X", "pv": int32(2), "area": "0", "instance": int32(7), "seen": ["A"]}
    payload = encode_control("amqp:/_local/qdhello", {"opcode": "HELLO"}, body)
    first = a.handle(ipc.ControlIn(5, payload), 0.1) + a.poll(0.1)
    second = a.handle(ipc.ControlIn(5, payload), 0.2) + a.poll(0.2)
    warnings = [o for o in first + second if isinstance(o, Log) and o.level == "warning"]
    assert len(warnings) == 1 and "protocol version 2" in warnings[0].text
    assert a.neighbours() == {}
    assert not any(isinstance(o, ipc.LinkState) and o.peers for o in first + second)
    # the same HELLO at pv 1 makes X a neighbour
    body["pv"] = int32(1)
    payload = encode_control("amqp:/_local/qdhello", {"opcode": "HELLO"}, body)
    out = a.handle(ipc.ControlIn(5, payload), 0.3) + a.poll(0.3)
    assert a.neighbours() == {"X": 5}
    assert ipc.LinkState("A", 1000, 1, 0, 1, {"X": 1}, {"X": 5}) in out


def test_opcode_key_as_symbol_or_string_and_garbage_payload():
    a = InteriorRouting("A", 1000)
    a.handle(ipc.RouterLinkUp(5, 3, "X"), 0.0)
    a.poll(0.0)
    body = {symbol("id"): "X", symbol("pv"): 1, symbol("area"): "0", symbol("instance"): 7,
            symbol("seen"): ["A"]}
    payload = encode_control("amqp:/_local/qdhello", {symbol("opcode"): symbol("HELLO")}, body)
    a.handle(ipc.ControlIn(5, memoryview(payload)), 0.1)
    a.poll(0.1)
    assert a.neighbours() == {"X": 5}
    assert a.engine.linkstate.collection()["A"] == {"X": 3}
    out = a.handle(ipc.ControlIn(5, b"\x00garbage"), 0.2)
    assert [o.level for o in out] == ["error"]


def test_payload_is_the_1x_message_shape():
    a = InteriorRouting("A", 1000)
    a.handle(ipc.RouterLinkUp(5, 1, "X"), 0.0)
    a.handle(ipc.LocalAddress("M0x", True, 2), 0.0)
    out = a.poll(0.0) + a.poll(1.5)
    sends = {decode_control(m.payload)[0]: m for m in out if isinstance(m, ipc.ControlSend)}
    hello = Message()
    hello.decode(sends["HELLO"].payload)
    assert hello.address == "amqp:/_local/qdhello"
    assert hello.annotations is None and hello.instructions is None
    assert [type(k) for k in hello.properties] == [str]
    assert type(hello.body["instance"]) is int32 and hello.body["seen"] == []
    mau = Message()
    mau.decode(sends["MAU"].payload)
    assert mau.address == "amqp:/_topo/0/all/qdrouter.ma"
    assert [type(k) for k in mau.properties] == [symbol]
    assert all(type(k) is symbol for k in mau.body)
    assert mau.body[symbol("add")] == ["M0x"] and mau.body[symbol("hints")] == [2]


def test_from_spec_only_in_interior_mode_and_reads_timers():
    spec = {"router_id": "R1", "router": {"mode": "standalone", "id": "R1"}}
    assert InteriorRouting.from_spec(spec, 1) is None
    spec["router"] = {"mode": "interior", "id": "R1", "helloIntervalSeconds": 2,
                      "helloMaxAgeSeconds": 7}
    plane = InteriorRouting.from_spec(spec, 123)
    assert plane.router_id == "R1" and plane.engine.instance == 123
    assert plane.engine.hello.hello_interval == 2.0 and plane.engine.hello.hello_max_age == 7.0


def test_next_deadline_drives_hellos():
    a = InteriorRouting("A", 1000, {"helloIntervalSeconds": 1})
    a.handle(ipc.RouterLinkUp(5, 1, "X"), 0.0)
    assert a.next_deadline() == float("-inf")
    first = [m for m in a.poll(0.0) if isinstance(m, ipc.ControlSend) and m.conn_id == 5]
    assert len(first) == 1
    assert a.next_deadline() <= 1.0
    assert a.poll(0.5) == []
    again = [m for m in a.poll(1.0) if isinstance(m, ipc.ControlSend) and m.conn_id == 5]
    assert len(again) == 1


# ---- resume after an agent restart ----------------------------------------------------------
def test_state_to_save_is_due_at_once_after_a_change_else_once_a_second():
    import json
    from agent.interior import SAVE_INTERVAL, is_journal, replay
    a, b, core = make_pair()
    first = a.state_to_save(0.0)
    assert first is not None and first["router"] == "A"        # never saved yet: the whole
    assert not is_journal(first)
    assert a.state_to_save(0.1) is None
    core.link_up()
    core.run(until=3.0)                  # routes and link state changed meanwhile
    saved = a.state_to_save(core.now)
    assert saved is not None and is_journal(saved)              # appended to the first
    assert replay([first, saved])["linkstate"]["peers"] == {"B": 1}
    assert json.loads(json.dumps(saved)) == saved               # plain JSON data
    assert a.state_to_save(core.now + SAVE_INTERVAL + 0.1) is None   # nothing new: not again
    t = core.now + SAVE_INTERVAL + 0.2
    assert a.state_to_save(t) is None                           # saved (unchanged) at t
    a.handle(ipc.LocalAddress("M0x", True, 3), t + 0.1)
    outputs = a.poll(t + 0.1)                                   # the MAU: my mobile_seq + 1
    assert any(isinstance(o, ipc.ControlSend) for o in outputs)
    urgent = a.state_to_save(t + 0.2)                           # at once, not a second later
    assert urgent is not None
    assert replay([first, saved, urgent])["mobile"]["announced"] == {"M0x": 3}
    assert a.state_to_save(t + 0.3) is None


def test_restarted_agent_restores_its_state_and_the_core_sees_no_change():
    import json
    a, b, core = make_pair()
    core.inbox["B"].append(ipc.LocalAddress("M0b", True, 2))
    core.inbox["A"].append(ipc.LocalAddress("M0a", True, 1))
    core.link_up()
    core.run(until=6.0)
    assert core.remote["A"] == {("M0b", "B"): 2} and core.remote["B"] == {("M0a", "A"): 1}
    routes_a, routes_b = core.routes["A"], core.routes["B"]
    updates_a, updates_b = len(core.updates["A"]), len(core.updates["B"])
    state = json.loads(json.dumps(b.engine.snapshot_state()))
    # B's agent dies; the fake core keeps B's routes and remote addresses; a new agent
    # restores; the core tells it its local address again but (like the real core) not the link
    b2 = InteriorRouting("B", 2000)
    logs = b2.restore_state(state, core.now)
    assert [log.level for log in logs] == ["info"] and "restored" in logs[0].text
    core.routers["B"] = b2
    mark_a, mark_b = len(core.sent["A"]), len(core.sent["B"])
    core.inbox["B"].append(ipc.LocalAddress("M0b", True, 2))
    core.run(until=core.now + 8.0)
    later_b = core.sent["B"][mark_b:]
    assert ipc.TopologyReset() in later_b        # the new agent told the core everything
    assert len(core.updates["B"]) == updates_b and core.routes["B"] == routes_b   # no change
    again = [m for m in later_b if isinstance(m, ipc.RemoteAddress)]
    assert again == [ipc.RemoteAddress("M0a", "A", True, 1)]   # a harmless repeat
    later_a = core.sent["A"][mark_a:]
    assert not [m for m in later_a if isinstance(m, ipc.RemoteAddress)]
    assert len(core.updates["A"]) == updates_a
    assert core.routes["A"] == routes_a and core.remote["A"] == {("M0b", "B"): 2}
    assert not [log for log in core.logs["A"] if "Restart" in log.text]
    assert b2.neighbours() == {"A": 22} and not b2.engine.hello.provisional
    assert a.engine.mobile.seq_of("B") == b2.engine.mobile.mobile_seq
    assert a.engine.linkstate.remote["B"].ls_seq == state["linkstate"]["ls_seq"] + 1


def test_mau_and_mar_counted_with_a_debug_line_each():
    """Each MAU/MAR sent or received is counted (messages, addresses listed, bytes) and told in
    one ROUTER_MA debug line: how a full re-sync (an absolute MAU) shows in the log."""
    a = InteriorRouting("A", 1000, log_enabled=lambda m, lvl: m == "ROUTER_MA")
    b = InteriorRouting("B", 2000)
    core = FakeCore(a, b)
    core.link_up()
    core.run(until=3.0)
    for k in range(3):
        core.inbox["A"].append(ipc.LocalAddress(f"M0q{k}", True, 2))
    core.run(until=6.0)
    assert core.remote["B"] == {(f"M0q{k}", "A"): 2 for k in range(3)}
    sent_maus = [m for m in core.sent["A"] if isinstance(m, ipc.ControlSend)
                 and decode_control(m.payload)[0] == "MAU"]
    assert a.ma_counts[("SENT", "MAU")] == [len(sent_maus), 3,
                                           sum(len(m.payload) for m in sent_maus)]
    assert b.ma_counts[("RCVD", "MAU")][:2] == [len(sent_maus), 3]
    debug = [log.text for log in core.logs["A"] if log.module == "ROUTER_MA"]
    assert any(t.startswith("SENT MAU to amqp:/_topo/0/all/qdrouter.ma: differential")
               and "add=3 del=0" in t for t in debug), debug
    assert not [log for log in core.logs["B"] if log.module == "ROUTER_MA"]   # not enabled


def test_an_urgent_state_save_does_not_compare_the_whole_state():
    """After a MAU the core was told of, the state has changed: it is saved without comparing
    it with the last one saved (a walk over every address held, after every MAU), and what is
    saved of the other routers' addresses is that MAU's change alone (a journal record)."""
    from agent.interior import is_journal, replay
    a, b, core = make_pair()
    core.link_up()
    core.run(until=3.0)
    first = b.state_to_save(core.now)
    compared = []

    class LastSaved(dict):
        def __eq__(self, other):
            compared.append(1)
            return dict.__eq__(self, other)

    b.saved_state = LastSaved(b.saved_state or {})
    core.inbox["A"].append(ipc.LocalAddress("M0x", True, 3))
    core.run(until=core.now + 1.5)
    assert core.remote["B"] == {("M0x", "A"): 3}
    saved = b.state_to_save(core.now)
    assert saved is not None and is_journal(saved) and saved["remote"] == [["A", "M0x", 3]]
    assert replay([first, saved])["mobile"]["remote"] == {"A": {"M0x": 3}}
    assert compared == []
