"""The core's address table: hash keys of wire addresses, phases, treatments, dynamic addresses.

Owns: the bounded key cache (wire address -> ``addressing.address_key``), the waypoint phase of a
link's key, the (distribution, priority) a key gets under the configured rules, creating and
dropping :class:`records.Address` entries and minting dynamic (temporary) addresses. Key classes
are decoded once, into ``Address.cls``/``Address.phase`` (records.py); code here that still
looks at a key string does so through ``addressing.CLASS_*``.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core.addressing import (
    CLASS_LOCAL, CLASS_MOBILE, CLASS_TOPOLOGICAL, address_key, mobile_text, temp_address)
from router_core.corestate import (
    DIST_BALANCED, DIST_CLOSEST, DIST_CODES, DIST_MULTICAST, DIST_UNAVAILABLE)
from common.ipc import DIR_IN
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.records import MODE_EDGE, Address, set_treatment
# --- end core parts ---

_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_KEY_CACHE_MAX = 8192
_MOBILE_PHASE0 = CLASS_MOBILE + "0"
FALLBACK_PHASE = "F"  # the phase character of a fallback destination's key (MF<address>)


def key_of(core: Any, address: str) -> str:
    """The hash key of a wire address (phase 0), through the core's bounded cache."""
    cache = core._key_cache
    key = cache.get(address)
    if key is None:
        if len(cache) >= _KEY_CACHE_MAX:
            cache.clear()
        key = address_key(address, core.router_id, 0, core.area, core.mode == MODE_EDGE)
        cache[address] = key
    return key


def phased(key: str, phase: int) -> str:
    """A mobile key in another phase (``M0queue``, 1 -> ``M1queue``). Phase 22 is the fallback
    destination's ``F`` (``MFqueue``), as 1.19 carries it in ``x-opt-qd.phase``."""
    return CLASS_MOBILE + chr(48 + phase) + key[2:]


def phase_key(rules: Any, key: Any, direction: int) -> Any:
    """The phased key of a mobile address for a link in ``direction``.

    Addresses are phase 0 (``M0x``) unless a configured rule says otherwise: a waypoint address
    is entered at its ingress phase (default 0, e.g. towards a broker queue's autoLink) and left
    at its egress phase (default 1, e.g. from the broker back to receivers); explicit
    ``ingressPhase``/``egressPhase`` set them for any address.
    """
    if key is None or not len(rules) or key[:2] != _MOBILE_PHASE0:
        return key
    rule = rules.lookup(key[2:])
    if rule is None:
        return key
    if direction == DIR_IN:
        phase = rule.ingress_phase if rule.ingress_phase is not None else 0
    else:
        phase = rule.egress_phase if rule.egress_phase is not None else (1 if rule.waypoint else 0)
    phase = int(phase)
    return key if phase == 0 else phased(key, phase)


def treatment(core: Any, key: str) -> tuple:
    """(distribution, priority) of the address ``key`` under the configured rules."""
    dist = core.default_distribution
    priority = -1
    text = mobile_text(key)
    if text is not None and key[1:2] == FALLBACK_PHASE:
        dist = DIST_BALANCED  # a fallback destination is balanced, whatever its address's rule
    elif text is not None:
        rule = core.rules.lookup(text)
        if rule is not None:
            dist = DIST_CODES.get(rule.distribution, dist)
            priority = rule.priority
        elif text == "$management":  # the agent: the nearest one answers (as in 1.x)
            dist = DIST_CLOSEST
    elif key[:1] == CLASS_TOPOLOGICAL:
        dist = DIST_MULTICAST
    else:
        dist = DIST_CLOSEST
    return dist, priority


def unavailable(core: Any, key: str) -> bool:
    """``distribution: unavailable`` applies to ``key`` (as 1.19 decides it at an attach and for
    an anonymous delivery): an existing address by its distribution; otherwise a mobile one by
    the rules (else defaultDistribution), a local one (``_local/x``, ``_topo/0/<this>/x``) by
    defaultDistribution; router, area and topological addresses never."""
    addr = core.addrs.get(key)
    if addr is not None:
        return addr.dist == DIST_UNAVAILABLE
    cls = key[:1]
    if cls == CLASS_MOBILE:
        return treatment(core, key)[0] == DIST_UNAVAILABLE
    return cls == CLASS_LOCAL and core.default_distribution == DIST_UNAVAILABLE


def address_of(core: Any, key: str) -> Address:
    """The address of ``key``, created (with its treatment and forwarder) if there is none."""
    addr = core.addrs.get(key)
    if addr is None:
        dist, priority = treatment(core, key)
        addr = Address(key, dist, priority)
        core.addrs[key] = addr
        if len(core.rules) and key[:1] == CLASS_MOBILE:
            setup_fallback(core, addr)
    return addr


def setup_fallback(core: Any, addr: Address) -> None:
    """Link a mobile address whose rule has ``enableFallback`` to its fallback destination,
    the address ``MF<address>`` (created if there is none; held while the primary exists):
    where its deliveries go when it has no destination (ingress.py), served by out auto-links
    with ``fallback`` (autolinks.py) and receivers with the ``qd.fallback`` capability. A rule
    that no longer asks for it unlinks them."""
    key = addr.key
    if key[1:2] == FALLBACK_PHASE:
        return
    rule = core.rules.lookup(key[2:])
    wanted = rule is not None and rule.enable_fallback
    alt = addr.fallback
    if wanted and alt is None:
        alt = address_of(core, CLASS_MOBILE + FALLBACK_PHASE + key[2:])
        alt.refs += 1
        addr.fallback = alt
        alt.fallback_for = addr
    elif not wanted and alt is not None:
        drop_fallback(core, addr)


def drop_fallback(core: Any, addr: Address) -> None:
    alt = addr.fallback
    addr.fallback = None
    alt.fallback_for = None
    unref(core, alt)


def reapply_rules(core: Any) -> None:
    """The address rules changed: every mobile address takes the treatment they give it now
    (and its fallback destination, if its rule asks for one)."""
    for addr in list(core.addrs.values()):
        if mobile_text(addr.key) is not None:
            dist, priority = treatment(core, addr.key)
            set_treatment(addr, dist, priority)
            if core.addrs.get(addr.key) is addr:
                setup_fallback(core, addr)


def unref(core: Any, addr: Address) -> None:
    """A link no longer resolves to ``addr``: drop it once nothing refers to it or waits there."""
    addr.refs -= 1
    if (addr.refs <= 0 and addr.held == 0 and not addr.remotes
            and core.addrs.get(addr.key) is addr):
        del core.addrs[addr.key]
        core._record_gone("address", addr)
        if addr.fallback is not None:
            drop_fallback(core, addr)


def new_temp(core: Any, target: bool) -> tuple:
    """A fresh dynamic address and its key (see addressing.temp_address), created balanced
    as 1.19 creates dynamic addresses (other local addresses are closest)."""
    rng = core._rng
    while True:
        rand = "".join([_TEMP_ALPHABET[rng.getrandbits(6) % 62] for _ in range(16)])
        address = temp_address(core.router_id, rand, target, core.mode == MODE_EDGE)
        key = key_of(core, address)
        if key not in core.addrs:
            set_treatment(address_of(core, key), DIST_BALANCED, -1)
            return address, key


def trace_ids(trace: Any) -> Any:
    """The router ids of an ``x-opt-qd.trace`` list (``0/<id>`` entries)."""
    if not trace:
        return ()
    return frozenset([t[2:] if t[:2] == "0/" else t for t in trace])
