"""Exchanges and bindings: forwarding by message subject (Qpid Dispatch 1.19's exchange_bindings).

Owns: the exchanges (``router.config.exchange``) and their bindings (``router.config.binding``)
as the core routes with them, the binding tree that matches a subject against every binding
key of an exchange, and :class:`ExchangeForwarder`, the treatment of an exchange's address.

* An exchange owns its address (its key in its phase, ``M0<address>``); while it exists that
  address's forwarder is the exchange (``records.set_treatment`` keeps it through rule changes
  and advertisements), so the per-message path of every other address is unchanged. In a
  network the address is announced like a local consumer's, so senders anywhere reach it.
* A delivery to it: its ``subject`` (read from the message's properties section by the scanner,
  never the body) is matched against the bindings; every matching binding counts a match, and
  each distinct next hop (address, phase) gets one pre-settled copy through its own address's
  forwarder (closest, balanced, multicast; toward another router with ``x-opt-qd.to`` and
  ``x-opt-qd.phase`` of the next hop). A next hop without a destination takes none. Local
  receivers of the exchange's own address get a copy too, by its distribution (1.19 keeps the
  address's old forwarder for them). Nothing forwarded: the alternate address (counted as
  diverted), if it has a destination.
* Outcome, as 1.19 gives it: forwarded anywhere, the sender's unsettled delivery is ACCEPTED and
  settled at once; nowhere, it is RELEASED (pre-settled: dropped and counted) and the exchange
  counts it dropped. An exchange with no binding and no alternate is an address without a
  destination (its targeted senders wait for credit, and are stalled as 1.19 drains them).
* A message that came from another router has its router annotations dropped before it is
  copied (1.19 resets trace and ingress): the copy starts a new journey from this router, and
  may go back toward the router it came from.
* Binding keys as 1.19's parse tree matches them (``common/exchanges.py`` reads the words):
  the tree is searched in 1.19's order, and a binding whose pattern the search reaches twice for
  one subject counts two matches, as 1.19 counts them; the message still goes once per next hop.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py; the matching and the records stay Python classes, off every other address's path).
Reads the subject with the shared scanner (common/amqpscan: pure bytes parsing, no I/O). Must not
import zmq, proton, sockets, clocks, logging handlers, router_io, agent or supervisor.
"""
from typing import Any, Optional

from common.exchanges import (
    ANY_WORDS, METHOD_CODES, METHOD_NAMES, ONE_WORD, normal_words, words_of)
from common.ipc import DIR_IN, STATE_ACCEPTED, STATE_RELEASED, UpdateIn
from router_core.addressing import CLASS_MOBILE
from router_core.corestate import DIST_MULTICAST, DIST_UNAVAILABLE
from common.amqpscan_select import MessageFormatError
from common.amqpscan_select import rewrite_annotations as _rewrite_annotations
from common.amqpscan_select import scan as _scan
from common.amqpscan_select import subject as _subject
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import address_of, key_of, phased, unref
from router_core.forwarders import Forwarder
from router_core.records import (
    EXCHANGE_FORWARDER, FORWARDERS, KEY_MOBILE, MODE_INTERIOR, ROLE_NORMAL, Address, Connection,
    Link, _effect, _in_delivery)
from router_core.relay import announce, credit_waiting, reachable
from router_core.settlement import count_outcome
from router_core.streaming import Stream
from router_core.transfer import forward_multicast, hold, send_local, unroutable
# --- end core parts ---

_TOKEN, _ONE, _GLOB = 0, 1, 2


# ----------------------------------------------------------------------------------------------
# The binding tree
# ----------------------------------------------------------------------------------------------
class MatchNode:
    """One word position of the binding keys: literal children by word, one ``*``/``+``
    child, one ``#`` child; ``bindings``: those whose key ends here (None: none)."""

    __slots__ = ("parent", "word", "kind", "children", "one", "glob", "bindings")

    def __init__(self, parent: Any, word: Any, kind: int) -> None:
        self.parent = parent
        self.word = word
        self.kind = kind
        self.children = {}
        self.one = None
        self.glob = None
        self.bindings = None

    def empty(self) -> bool:
        return (not self.bindings and not self.children and self.one is None
                and self.glob is None)


class BindingTree:
    """Every binding key of one exchange; :meth:`search` visits the bindings whose key
    matches a subject's words, in 1.19's order (literal, then one word, then any words)."""

    __slots__ = ("method", "root", "one_word")

    def __init__(self, method: int) -> None:
        self.method = method
        self.root = MatchNode(None, None, _TOKEN)
        self.one_word = ONE_WORD[method]

    def add(self, words: list, binding: Any) -> None:
        node = self.root
        for word in words:
            if word == self.one_word:
                if node.one is None:
                    node.one = MatchNode(node, word, _ONE)
                node = node.one
            elif word == ANY_WORDS:
                if node.glob is None:
                    node.glob = MatchNode(node, word, _GLOB)
                node = node.glob
            else:
                child = node.children.get(word)
                if child is None:
                    child = node.children[word] = MatchNode(node, word, _TOKEN)
                node = child
        if node.bindings is None:
            node.bindings = []
        node.bindings.append(binding)

    def remove(self, words: list, binding: Any) -> None:
        node = self.root
        for word in words:
            if word == self.one_word:
                node = node.one
            elif word == ANY_WORDS:
                node = node.glob
            else:
                node = node.children.get(word)
            if node is None:
                return
        if node.bindings and binding in node.bindings:
            node.bindings.remove(binding)
            if not node.bindings:
                node.bindings = None
        while node.parent is not None and node.empty():  # prune what no key uses any more
            parent = node.parent
            if node.kind == _ONE:
                parent.one = None
            elif node.kind == _GLOB:
                parent.glob = None
            else:
                del parent.children[node.word]
            node = parent

    def search(self, words: list, visit: Any) -> None:
        """``visit.visit(bindings)`` for every key the subject ``words`` match."""
        _children(self.root, words, 0, len(words), visit)


def _children(node: MatchNode, words: list, i: int, n: int, visit: Any) -> None:
    if i < n:
        if node.children:
            child = node.children.get(words[i])
            if child is not None:
                if i + 1 == n and child.bindings:
                    visit.visit(child.bindings)
                _children(child, words, i + 1, n, visit)
        one = node.one
        if one is not None:
            if i + 1 == n and one.bindings:
                visit.visit(one.bindings)
            _children(one, words, i + 1, n, visit)
    glob = node.glob
    if glob is not None:  # '#' matches here too, even with no word left
        j = i
        while j < n:
            _children(glob, words, j, n, visit)
            j += 1
        if glob.bindings:
            visit.visit(glob.bindings)


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------
class NextHop:
    """Where an exchange sends: one per (address, phase), shared by its bindings."""

    __slots__ = ("address", "phase", "addr", "refs", "mark")

    def __init__(self, address: str, phase: int, addr: Address) -> None:
        self.address = address
        self.phase = phase
        self.addr = addr
        self.refs = 0
        self.mark = 0  # the exchange's ``epoch`` of the last message it was chosen for


class Binding:
    __slots__ = ("identity", "name", "exchange", "key", "words", "next_hop", "matched")

    def __init__(self, identity: str, name: Any, exchange: Any, key: str, words: list,
                 next_hop: NextHop) -> None:
        self.identity = identity
        self.name = name
        self.exchange = exchange
        self.key = key
        self.words = words
        self.next_hop = next_hop
        self.matched = 0


class Exchange:
    __slots__ = ("identity", "name", "address", "phase", "method", "addr", "tree", "bindings",
                 "next_hops", "alternate", "link", "epoch", "hops", "busy", "received",
                 "dropped", "forwarded", "diverted")

    def __init__(self, identity: str, name: Any, address: str, phase: int, method: int,
                 addr: Address) -> None:
        self.identity = identity
        self.name = name
        self.address = address
        self.phase = phase
        self.method = method
        self.addr = addr
        self.tree = BindingTree(method)
        self.bindings = {}    # identity -> Binding, in creation order
        self.next_hops = {}   # (address, phase) -> NextHop
        self.alternate = None
        # the sender of the copies: never credited, so the forwarders give no credit back
        # through it (the sender's own link settles at once); it carries the exchange's
        # address so that copies toward another router say their next hop's address
        conn = Connection(-1, 0, ROLE_NORMAL, "in", "", "", "", "", "", False, 0)
        self.link = Link(0, conn, DIR_IN, "exchange", address, True, 0)
        self.link.addr = addr
        self.epoch = 0
        self.hops = []        # the next hops chosen for the message being forwarded
        self.busy = False     # forwarding now (a binding that loops back to it takes nothing)
        self.received = 0
        self.dropped = 0
        self.forwarded = 0
        self.diverted = 0

    def visit(self, bindings: list) -> None:
        """The tree search found ``bindings``: each counts a match, each next hop once."""
        epoch = self.epoch
        for binding in bindings:
            binding.matched += 1
            hop = binding.next_hop
            if hop.mark != epoch:
                hop.mark = epoch
                self.hops.append(hop)

    def has_paths(self) -> bool:
        return bool(self.bindings) or self.alternate is not None


# ----------------------------------------------------------------------------------------------
# Forwarding
# ----------------------------------------------------------------------------------------------
class ExchangeForwarder(Forwarder):
    """The treatment of an exchange's address (see the module docstring)."""

    __slots__ = ()

    def forward(self, core: Any, link: Link, dlv_id: Any, settled: bool, priority: int,
                payload: Any, addr: Address, origin: Any, exclude: Any) -> None:
        ex = addr.exchange
        if exchange_forward(core, ex, link, payload, priority):
            end_delivery(core, link, dlv_id, settled, STATE_ACCEPTED)
        elif ex.has_paths():
            end_delivery(core, link, dlv_id, settled, STATE_RELEASED)
        else:  # no path at all: an address without a destination (stalls its sender)
            unroutable(core, link, dlv_id, settled)


def exchange_forward(core: Any, ex: Exchange, link: Link, payload: Any, priority: int) -> int:
    """Send ``payload`` (from ``link``) to the next hops its subject selects, else to the
    alternate; counts it; how many next hops took a copy."""
    ex.received += 1
    hops = ex.hops
    if ex.bindings:
        text = subject_of(payload)
        if text is not None:
            ex.epoch += 1
            ex.tree.search(words_of(text, ex.method), ex)
    forwarded = 0
    if ex.addr.consumers:  # receivers of the exchange's own address (1.19: its old forwarder)
        forwarded = to_own_consumers(core, ex, payload, priority)
    if hops or ex.alternate is not None:
        if link.router and type(payload) is not Stream:
            payload = fresh_payload(payload)
        ex.busy = True
        try:
            for hop in hops:
                forwarded += send_to_hop(core, ex, hop, payload, priority)
            if not forwarded and ex.alternate is not None:
                forwarded = send_to_hop(core, ex, ex.alternate, payload, priority)
                if forwarded:
                    ex.diverted += 1
        finally:
            ex.busy = False
            del hops[:]
    if forwarded:
        ex.forwarded += 1
    else:
        ex.dropped += 1
    return forwarded


def to_own_consumers(core: Any, ex: Exchange, payload: Any, priority: int) -> int:
    """A pre-settled copy for the local receivers of the exchange's own address, by that
    address's distribution (one of them, or each for multicast); 1 if one was made."""
    addr = ex.addr
    if addr.dist == DIST_UNAVAILABLE:
        return 0
    if addr.dist == DIST_MULTICAST:
        forward_multicast(core, list(addr.consumers),
                          _in_delivery(0, ex.link, True, payload, addr, True, core.now))
        return 1
    fwd = FORWARDERS[addr.dist]
    target = fwd.pick(addr)
    if target is not None:
        send_local(core, ex.link, target, 0, True, payload, addr)
    else:
        hold(core, ex.link, 0, True, priority, payload, addr)
    return 1


def send_to_hop(core: Any, ex: Exchange, hop: NextHop, payload: Any, priority: int) -> int:
    """One pre-settled copy to ``hop``'s address through its forwarder; 0 when it has no
    destination (no local consumer, no reachable router with one, not an exchange)."""
    addr = hop.addr
    inner = addr.exchange
    if inner is not None:  # bound to an exchange; to one forwarding now (a loop): nothing
        if inner.busy:
            return 0
        return 1 if exchange_forward(core, inner, ex.link, payload, priority) else 0
    if addr.consumers or (addr.remotes and core.routers and reachable(core, addr)):
        addr.fwd.forward(core, ex.link, 0, True, priority, payload, addr, None, None)
        return 1
    return 0


def end_delivery(core: Any, link: Link, dlv_id: Any, settled: bool, state: int) -> None:
    """The sender's delivery is done with here: unsettled, settled back with ``state``;
    pre-settled and not forwarded, dropped and counted. Its credit comes back."""
    if settled:
        if state != STATE_ACCEPTED:
            link.dropped_presettled_count += 1
            core.dropped_presettled += 1
    else:
        link.in_unsettled -= 1
        count_outcome(core, link, state, True)
        if not link.closed:
            core._emit(link.peer, _effect(UpdateIn, (dlv_id, state, True, None)))
    core._replenish(link)


def subject_of(payload: Any) -> Optional[str]:
    """The message's subject (a streaming message's first part holds its properties)."""
    buf = payload.chunks[0] if type(payload) is Stream else payload
    try:
        return _subject(buf)
    except MessageFormatError:
        return None


def fresh_payload(payload: Any) -> Any:
    """The message without router annotations (a copy that starts here: 1.19 resets the
    trace and ingress); only the message-annotations section is rewritten."""
    try:
        scanned = _scan(payload)
        if (scanned.ma_to is None and scanned.ma_trace is None and scanned.ma_ingress is None
                and scanned.ma_phase is None):
            return payload
        return _rewrite_annotations(payload, scanned, strip=True)
    except MessageFormatError:
        return payload


# ----------------------------------------------------------------------------------------------
# Configuration (validated by common/exchanges.py before it reaches the core)
# ----------------------------------------------------------------------------------------------
def hop_key(core: Any, address: str, phase: int) -> str:
    key = key_of(core, address)
    if phase and key[:1] == CLASS_MOBILE:
        key = phased(key, phase)
    return key


def add_exchange(core: Any, attrs: dict) -> None:
    """A ``router.config.exchange`` (attributes with ``identity``). ValueError if refused."""
    identity = str(attrs["identity"])
    address = attrs.get("address")
    method = METHOD_CODES.get(attrs.get("matchMethod") or "amqp")
    if address is None or method is None or identity in core.exchanges:
        raise ValueError(f"exchange {identity}: refused")
    for other in core.exchanges.values():
        if other.address == address or (attrs.get("name") is not None
                                         and other.name == attrs.get("name")):
            raise ValueError(f"exchange {identity}: duplicate name or address")
    phase = int(attrs.get("phase") or 0)
    addr = address_of(core, hop_key(core, str(address), phase))
    addr.refs += 1
    ex = Exchange(identity, attrs.get("name"), str(address), phase, method, addr)
    addr.exchange = ex
    addr.fwd = FORWARDERS[EXCHANGE_FORWARDER]
    if attrs.get("alternateAddress") is not None:
        ex.alternate = _hop(core, ex, str(attrs["alternateAddress"]),
                            int(attrs.get("alternatePhase") or 0))
    core.exchanges[identity] = ex
    if core.mode == MODE_INTERIOR and addr.cls == KEY_MOBILE and not addr.announced:
        announce(core, addr, True)
    _paths_changed(core, ex)


def remove_exchange(core: Any, identity: str) -> bool:
    """Delete an exchange and its bindings; False if there is none."""
    ex = core.exchanges.pop(str(identity), None)
    if ex is None:
        return False
    for binding in list(ex.bindings.values()):
        _drop_binding(core, binding)
    if ex.alternate is not None:
        _release_hop(core, ex, ex.alternate)
        ex.alternate = None
    addr = ex.addr
    addr.exchange = None
    addr.fwd = FORWARDERS[addr.dist]
    if addr.announced and not addr.consumers:
        announce(core, addr, False)
    unref(core, addr)
    return True


def add_binding(core: Any, attrs: dict) -> None:
    """A ``router.config.binding`` (attributes with ``identity``). ValueError if refused."""
    identity = str(attrs["identity"])
    ex = next((e for e in core.exchanges.values() if e.name == attrs.get("exchangeName")), None)
    hop_address = attrs.get("nextHopAddress")
    if ex is None or hop_address is None or identity in core.bindings:
        raise ValueError(f"binding {identity}: refused")
    key = attrs.get("bindingKey")
    key = ANY_WORDS if key is None else str(key)
    words = normal_words(key, ex.method)
    hop = _hop(core, ex, str(hop_address), int(attrs.get("nextHopPhase") or 0))
    binding = Binding(identity, attrs.get("name"), ex, key, words, hop)
    ex.tree.add(words, binding)
    ex.bindings[identity] = binding
    core.bindings[identity] = binding
    _paths_changed(core, ex)


def remove_binding(core: Any, identity: str) -> bool:
    binding = core.bindings.get(str(identity))
    if binding is None:
        return False
    _drop_binding(core, binding)
    return True


def _drop_binding(core: Any, binding: Binding) -> None:
    ex = binding.exchange
    ex.tree.remove(binding.words, binding)
    ex.bindings.pop(binding.identity, None)
    core.bindings.pop(binding.identity, None)
    _release_hop(core, ex, binding.next_hop)


def _hop(core: Any, ex: Exchange, address: str, phase: int) -> NextHop:
    hop = ex.next_hops.get((address, phase))
    if hop is None:
        addr = address_of(core, hop_key(core, address, phase))
        addr.refs += 1  # kept while a binding sends there
        hop = ex.next_hops[(address, phase)] = NextHop(address, phase, addr)
    hop.refs += 1
    return hop


def _release_hop(core: Any, ex: Exchange, hop: NextHop) -> None:
    hop.refs -= 1
    if hop.refs <= 0:
        ex.next_hops.pop((hop.address, hop.phase), None)
        unref(core, hop.addr)


def _paths_changed(core: Any, ex: Exchange) -> None:
    """The exchange may have its first path now: its waiting senders get their credit."""
    if ex.has_paths() and ex.addr.waiting:
        credit_waiting(core, ex.addr)


def exchanges_view(core: Any) -> dict:
    """What management shows beside the configured attributes: per exchange identity its
    counters, per binding identity its matchedCount."""
    exchanges = {}
    for ex in core.exchanges.values():
        exchanges[ex.identity] = {
            "bindingCount": len(ex.bindings), "receivedCount": ex.received,
            "droppedCount": ex.dropped, "forwardedCount": ex.forwarded,
            "divertedCount": ex.diverted, "matchMethod": METHOD_NAMES[ex.method]}
    bindings = {b.identity: {"matchedCount": b.matched} for b in core.bindings.values()}
    return {"exchanges": exchanges, "bindings": bindings}


FORWARDERS[EXCHANGE_FORWARDER] = ExchangeForwarder()
