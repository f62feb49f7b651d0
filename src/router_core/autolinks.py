"""Auto-links (``router.config.autoLink``): links the router keeps attached to a node on a route
container (a broker queue), as Qpid Dispatch's route_control.c does.

Owns: the auto-link table (``core.auto_links``, identity -> :class:`AutoLink`, in creation
order), which route-container connection each one is attached on, its address key with phase,
its ``operStatus`` (the transition table below), retries with back-off, and detaching when one
is deleted.

An auto-link names its container by ``connection`` (the name of the listener or connector the
connection came through, ``ConnOpened.listener``) or by ``containerId`` (the peer's container id);
only ``route-container`` connections qualify. As in 1.19, every qualifying connection is offered
the auto-link's link (all the connections of a listener, say): the first one's link is the
auto-link's own (``link``, the one the table below drives and ``linkRef`` shows), each further
connection's is an extra link (``extra``, connection id -> link) that becomes a destination or
source of the key once its peer answers with an address, and is forgotten when it goes (it is
not retried: the next connection of the container gets one again). When the own link's
connection closes, an extra link of another connection takes its place instead of a new
attach. Its address key is ``M<phase><address>``
(``MF<address>`` for an out auto-link with ``fallback``: the fallback destination of the address,
see addrkeys.setup_fallback); the router holds that address while the auto-link exists. The
terminus the container is offered carries ``externalAddress`` if set, else the address. An out
auto-link is, once attached, a consumer of its key; an in auto-link a producer (credited when the
key has a destination). The link itself is an ordinary router-attached link
(linkends.open_link); linkends calls back through :meth:`AutoLink.attached` and
:meth:`AutoLink.detached`.

States and events (``AL_TRANSITIONS``; a pair without an entry changes nothing)::

  state      event                                  action              next
  ---------  -------------------------------------  ------------------  ---------
  inactive   its container connects / created       attach (AttachOut)  attaching
             while connected
  failed     its container connects                 attach              attaching
  failed     retry due, container connected         attach              attaching
  failed     retry due, no container                -                   inactive
  attaching  the peer's attach names an address     bind to the key     active
  attaching  the peer's attach has no address       wait for its detach attaching
  attaching  detached by the peer (refused)         retry in 2 s, then  failed
  active                                            every 5 s
  attaching  its connection closed                  attach on another   attaching
  active                                            connection of the   / inactive
  failed                                            container, if any
  any        deleted                                detach, forget      (gone)

``lastError`` is the description of the last detach's error (none after a lost connection, as
in 1.19). Each transition is logged as 1.19 logs it (``core.al_logs``, written by coreproc):
``Auto Link Activated``, ``Auto Link Activation Failed. <error>``, ``Auto Link Deactivated``,
then `` 'NAME' on connection CONNECTOR`` (or ``on container ID``). Time comes from the core's clock
(``core.now``, given with each command batch and each ``tick``): ``tick`` runs the retries that
are due, so a retry happens within one core loop (at most 1 s) of its time.

Part of the core (functions of the RouterCore ``core``; compiled with the other parts, see
core.py). Must not import zmq, proton, sockets, clocks, logging handlers, router_io or agent.
"""
from typing import Any

from router_core.addressing import CLASS_MOBILE
from common.ipc import DIR_IN, DIR_OUT, TERMINUS_SOURCE, TERMINUS_TARGET, terminus
# --- core parts (the compiled build is one module: setup.py drops these imports) ---
from router_core.addrkeys import FALLBACK_PHASE, address_of, key_of, unref
from router_core.linkends import bind_endpoint, detach_own, open_link
from router_core.records import ROLE_ROUTE_CONTAINER
# --- end core parts ---

# operStatus (1.19's names)
AL_INACTIVE = 0
AL_ATTACHING = 1
AL_FAILED = 2
AL_ACTIVE = 3
AL_QUIESCING = 4  # 1.19 names it; nothing enters it (nor in 1.19)
AL_IDLE = 5       # idem
AL_STATE_NAMES = {AL_INACTIVE: "inactive", AL_ATTACHING: "attaching", AL_FAILED: "failed",
                  AL_ACTIVE: "active", AL_QUIESCING: "quiescing", AL_IDLE: "idle"}

# events
AL_EV_CONN_UP = 0     # a connection of its container opened (or it was created while one is)
AL_EV_ATTACHED = 1    # the peer answered the attach with an address
AL_EV_NO_ADDRESS = 2  # the peer answered with a null terminus or no address (refusal to come)
AL_EV_DETACHED = 3    # the peer detached (or refused) the link
AL_EV_CONN_DOWN = 4   # the connection its link was on closed
AL_EV_RETRY = 5       # its retry time came

# actions
AL_A_ATTACH = 1
AL_A_ACTIVATE = 2
AL_A_WAIT = 3
AL_A_FAIL = 4
AL_A_REATTACH = 5     # its connection closed: attach on another one of the container, or inactive
AL_A_RETRY = 6        # attach if the container is connected, else inactive

AL_TRANSITIONS = {
    (AL_INACTIVE, AL_EV_CONN_UP): AL_A_ATTACH,
    (AL_FAILED, AL_EV_CONN_UP): AL_A_ATTACH,
    (AL_FAILED, AL_EV_RETRY): AL_A_RETRY,
    (AL_ATTACHING, AL_EV_ATTACHED): AL_A_ACTIVATE,
    (AL_ATTACHING, AL_EV_NO_ADDRESS): AL_A_WAIT,
    (AL_ATTACHING, AL_EV_DETACHED): AL_A_FAIL,
    (AL_ACTIVE, AL_EV_DETACHED): AL_A_FAIL,
    (AL_ATTACHING, AL_EV_CONN_DOWN): AL_A_REATTACH,
    (AL_ACTIVE, AL_EV_CONN_DOWN): AL_A_REATTACH,
}

FIRST_RETRY = 2.0  # seconds after the first failure (1.19's intervals)
RETRY = 5.0        # after every later one
NEVER = float("inf")
_NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class AutoLink:
    """One configured auto-link and its state (see the module docstring)."""

    __slots__ = ("identity", "name", "address", "direction", "phase", "connection",
                 "container_id", "external", "fallback", "key", "addr", "state", "link",
                 "last_error", "retry_at", "retries", "extra")

    def __init__(self, identity: str, name: str, address: str, direction: int, phase: int,
                 connection: Any, container_id: Any, external: Any, fallback: bool) -> None:
        self.identity = identity
        self.name = name
        self.address = address
        self.direction = direction
        self.phase = phase
        self.connection = connection
        self.container_id = container_id
        self.external = external
        self.fallback = fallback
        self.key = None
        self.addr = None
        self.state = AL_INACTIVE
        self.link = None
        self.last_error = None
        self.retry_at = NEVER
        self.retries = 0
        self.extra: dict = {}  # connection id -> extra link on another connection

    # linkends.attached_out / detached_out call these for a link this auto-link owns
    def attached(self, core: Any, link: Any) -> bool:
        terminus_ = link.remote_source if link.direction == DIR_IN else link.remote_target
        address = terminus_.get("address") if isinstance(terminus_, dict) else None
        if self.link is link:
            auto_link_event(core, self, AL_EV_ATTACHED if address else AL_EV_NO_ADDRESS, link,
                            None)
        elif address and self.extra.get(link.conn.conn_id) is link:
            bind_endpoint(core, link, self.key)
        return True  # bound (or not) here, never by the default

    def detached(self, core: Any, link: Any, error: Any) -> None:
        if self.extra.get(link.conn.conn_id) is link:
            del self.extra[link.conn.conn_id]
            if core.conns.get(link.conn.conn_id) is not link.conn:
                _log(core, "Auto Link Deactivated", self, link.conn)
            else:
                _log(core, "Auto Link Activation Failed. " + (error_description(error) or ""),
                     self, link.conn)
            return
        if self.link is not link:
            return  # an older link of this auto-link
        if core.conns.get(link.conn.conn_id) is not link.conn:
            auto_link_event(core, self, AL_EV_CONN_DOWN, link, None)
        else:
            auto_link_event(core, self, AL_EV_DETACHED, link, error_description(error))


def error_description(error: Any) -> Any:
    """The description of a detach's error as the worker words it (``"name: description"``,
    or the condition name alone): 1.19's ``lastError`` (None without a description)."""
    if not error:
        return None
    head, sep, tail = str(error).partition(": ")
    if sep and " " not in head:
        return tail or None
    return None if " " not in error else error


def auto_link_key(core: Any, address: str, direction: int, phase: int, fallback: bool) -> str:
    """The address key an auto-link serves: ``M<phase><address>``, ``MF<address>`` for an out
    auto-link of a fallback destination; a non-mobile address keeps its own key."""
    key = key_of(core, address)
    if key[:1] != CLASS_MOBILE:
        return key
    if direction == DIR_OUT and fallback:
        return CLASS_MOBILE + FALLBACK_PHASE + key[2:]
    return CLASS_MOBILE + chr(48 + phase) + key[2:]


def create_auto_link(core: Any, attrs: dict) -> AutoLink:
    """A new auto-link from its configuration (canonical attribute names, as the agent's store
    and the configuration file give them); attached at once if its container is connected.
    ValueError for a configuration 1.19 refuses (the agent checked it first)."""
    identity = str(attrs.get("identity") or attrs.get("name") or "")
    if not identity or identity in core.auto_links:
        raise ValueError(f"autoLink {identity!r} exists already")
    address = attrs.get("address", attrs.get("addr"))
    direction = attrs.get("direction", attrs.get("dir"))
    if not isinstance(address, str) or direction not in ("in", "out"):
        raise ValueError("address and direction fields are mandatory")
    connection = attrs.get("connection")
    container_id = attrs.get("containerId")
    if connection is not None and container_id is not None:
        raise ValueError("Both connection and containerId cannot be specified. Specify only one")
    fallback = bool(attrs.get("fallback", False))
    phase = attrs.get("phase")
    if phase is None:
        phase = 0 if direction == "out" or fallback else 1
    phase = int(phase)
    if phase < 0 or phase > 9:
        raise ValueError("autoLink phase must be between 0 and 9")
    dir_code = DIR_IN if direction == "in" else DIR_OUT
    external = attrs.get("externalAddress", attrs.get("externalAddr"))
    al = AutoLink(identity, str(attrs.get("name") or identity), address, dir_code, phase,
                  connection, container_id, external, fallback)
    al.key = auto_link_key(core, address, dir_code, phase, fallback)
    al.addr = address_of(core, al.key)  # held while the auto-link exists
    al.addr.refs += 1
    core.auto_links[identity] = al
    conn = _container_conn(core, al, None)
    if conn is not None:
        _attach(core, al, conn)
    return al


def remove_auto_link(core: Any, identity: str) -> bool:
    """Forget an auto-link: its link is detached (no error) and dropped. False: no such one."""
    al = core.auto_links.pop(str(identity), None)
    if al is None:
        return False
    links = [al.link] + list(al.extra.values())
    al.link = None
    al.extra = {}
    for link in links:
        if link is not None and link.link_id in core.links:
            _log(core, "Auto Link Deactivated", al, link.conn)
            detach_own(core, link)
    al.state = AL_INACTIVE
    if al.addr is not None:
        unref(core, al.addr)
        al.addr = None
    _next_retry(core)
    return True


def auto_links_conn_opened(core: Any, conn: Any) -> None:
    """A connection opened: auto-links of its container attach on it (their own link if they
    have none, else an extra one)."""
    if conn.role != ROLE_ROUTE_CONTAINER:
        return
    for al in list(core.auto_links.values()):
        if not _matches(al, conn):
            continue
        if al.link is None:
            auto_link_event(core, al, AL_EV_CONN_UP, None, None)
        elif al.link.conn is not conn and conn.conn_id not in al.extra:
            al.extra[conn.conn_id] = _open(core, al, conn)


def auto_links_tick(core: Any) -> None:
    """Retries whose time came (core.now)."""
    now = core.now
    for al in list(core.auto_links.values()):
        if al.retry_at <= now:
            al.retry_at = NEVER
            auto_link_event(core, al, AL_EV_RETRY, None, None)
    _next_retry(core)


def auto_link_event(core: Any, al: AutoLink, event: int, link: Any, error: Any) -> None:
    """One event of ``al``, by AL_TRANSITIONS."""
    action = AL_TRANSITIONS.get((al.state, event), 0)
    if action == AL_A_ATTACH:
        conn = _container_conn(core, al, None)
        if conn is not None:
            _attach(core, al, conn)
    elif action == AL_A_ACTIVATE:
        al.state = AL_ACTIVE
        bind_endpoint(core, link, al.key)
    elif action == AL_A_WAIT:
        pass
    elif action == AL_A_FAIL:
        al.link = None
        al.state = AL_FAILED
        al.last_error = error if error else None
        _log(core, "Auto Link Activation Failed. " + (error or ""), al, link.conn)
        al.retry_at = core.now + (FIRST_RETRY if al.retries == 0 else RETRY)
        al.retries += 1
        if al.retry_at < core.al_next_retry:
            core.al_next_retry = al.retry_at
    elif action == AL_A_REATTACH:
        al.last_error = None  # (1.19: the lost link's detach had no error)
        if link is not None:
            _log(core, "Auto Link Activation Failed. ", al, link.conn)
            _log(core, "Auto Link Deactivated", al, link.conn)
        al.link = None
        al.state = AL_INACTIVE
        if al.extra:  # another connection's link takes the lost one's place, a bound one first
            heir = None
            for conn_id, extra in al.extra.items():
                if heir is None or extra.addr is not None:
                    heir = conn_id
                    if extra.addr is not None:
                        break
            al.link = al.extra.pop(heir)
            al.state = AL_ACTIVE if al.link.addr is not None else AL_ATTACHING
            return
        conn = _container_conn(core, al, link.conn if link is not None else None)
        if conn is not None:
            _attach(core, al, conn)
    elif action == AL_A_RETRY:
        conn = _container_conn(core, al, None)
        if conn is not None:
            _attach(core, al, conn)
        else:
            al.state = AL_INACTIVE


def _log(core: Any, text: str, al: AutoLink, conn: Any) -> None:
    """1.19's ROUTER_CORE info line about an auto-link (the core process logs it)."""
    if conn.listener:
        where = f"connection {conn.listener}"
    else:
        where = f"container {conn.container}"
    logs = core.al_logs
    if len(logs) < 1000:  # bounded between two core loops
        logs.append(f"{text} '{al.name}' on {where}")


def _attach(core: Any, al: AutoLink, conn: Any) -> None:
    """``al``'s own link, attached on ``conn``."""
    al.state = AL_ATTACHING
    al.retry_at = NEVER
    al.link = _open(core, al, conn)


def _open(core: Any, al: AutoLink, conn: Any) -> Any:
    """A new link of ``al`` on ``conn``, attached (logged as 1.19 logs an activation)."""
    address = al.external if al.external is not None else al.address
    if al.direction == DIR_IN:
        source = terminus(TERMINUS_SOURCE, address)
        target = terminus(TERMINUS_TARGET, None)
    else:
        source = terminus(TERMINUS_SOURCE, None)
        target = terminus(TERMINUS_TARGET, address)
    rng = core._rng
    name = "qdlink." + "".join([_NAME_ALPHABET[rng.getrandbits(6) % 62] for _ in range(16)])
    _log(core, "Auto Link Activated", al, conn)
    link = open_link(core, conn, al.direction, name, al.address, source, target, [2, 0], al)
    link.fallback = al.fallback
    return link


def _matches(al: AutoLink, conn: Any) -> bool:
    if al.connection is not None:
        return conn.listener == al.connection
    if al.container_id is not None:
        return conn.container == al.container_id
    return False


def _container_conn(core: Any, al: AutoLink, skip: Any) -> Any:
    """An open route-container connection of ``al``'s container (not ``skip``), or None."""
    if al.connection is None and al.container_id is None:
        return None
    for conn in core.conns.values():
        if conn is not skip and conn.role == ROLE_ROUTE_CONTAINER and _matches(al, conn):
            return conn
    return None


def _next_retry(core: Any) -> None:
    soonest = NEVER
    for al in core.auto_links.values():
        if al.retry_at < soonest:
            soonest = al.retry_at
    core.al_next_retry = soonest


def auto_links_view(core: Any) -> list:
    """What management shows of each auto-link beyond its configuration."""
    out = []
    for al in core.auto_links.values():
        link = al.link
        out.append({"identity": al.identity, "name": al.name,
                    "operStatus": AL_STATE_NAMES[al.state],
                    "linkRef": str(link.link_id) if link is not None else None,
                    "lastError": al.last_error, "phase": al.phase, "key": al.key})
    return out
