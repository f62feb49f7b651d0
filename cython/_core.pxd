# cython: language_level=3
# Augmenting declarations for the compiled router core (pure-Python mode).
#
# setup.py concatenates the core's parts (src/router_core/records.py ... core.py, see
# CORE_PARTS) into build/cython_src/router_core/_core.py and copies this file next to it as
# _core.pxd, then compiles the pair as ``router_core._core``: one extension, so a delivery's whole
# path (ingress -> forwarder -> transfer -> settlement) is C calls. The .py parts stay the
# readable pure-Python reference; this file only adds C types: the records become final cdef
# classes with typed fields, the forwarders cdef classes with a cdef ``forward`` (a C virtual
# call; Cython 3.3 rejects @cython.final on the subclasses: "Overriding final methods is not
# allowed"), the functions of the parts cdef functions with a typed ``RouterCore core`` and
# typed locals, the codes C ints.
#
# Rules for keeping it in step with the parts:
# * every attribute of a record or of RouterCore must be declared here (cdef classes have no
#   __dict__); what corestate.management_snapshot or callers read is ``public``/``readonly``;
# * every function of a part that takes ``core`` is declared here (untyped, it could not reach
#   RouterCore's cdef methods and fields); the command handlers RouterCore._dispatch holds are
#   ``cpdef`` (a dict holds Python objects), the rest ``cdef``;
# * ids (link, connection, delivery) and peers stay Python objects: they are dict keys and effect
#   fields, so boxing them once on the way in is cheaper than on every use;
# * commands arrive as NamedTuples, which Cython's ``tuple`` type rejects (exact check): keep them
#   ``object``.
# After editing only this file: ROUTER_FORCE_REBUILD=1 (see setup.py).
cimport cython


cdef extern from "named_tuple.h":  # cython/named_tuple.h, shared with the other .pxd
    object _named_tuple "qdrouter_named_tuple"(type cls, tuple fields)

cdef extern from *:
    # A tuple subclass (NamedTuple) as ``tuple``, unchecked: the caller knows what it holds.
    tuple _as_tuple "__Pyx_NewRef"(object cmd)

cdef class Forwarder
cdef class Address
cdef class Link
cdef class InDelivery
cdef class OutDelivery
cdef class RouterCore

# --- records.py --------------------------------------------------------------------------------
cdef bint _COMPILED
# Codes compared on the per-message path: C ints, not module-global lookups and boxing.
cdef int DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED
cdef int STATE_RECEIVED
cdef int DIST_CLOSEST, DIST_BALANCED, DIST_MULTICAST, DIST_UNAVAILABLE
cdef int ROLE_NORMAL, ROLE_INTER_ROUTER, ROLE_ROUTE_CONTAINER, ROLE_EDGE, ROLE_INTERNAL
cdef int LINK_ENDPOINT, LINK_CONTROL, LINK_DATA, LINK_EDGE_DOWNLINK
cdef int STALL_NONE, STALL_ON, STALL_RESTORING
cdef int MODE_STANDALONE, MODE_INTERIOR, MODE_EDGE
cdef int KEY_MOBILE, KEY_LOCAL, KEY_TOPOLOGICAL, KEY_ROUTER, KEY_AREA, KEY_OTHER, KEY_EDGE
cdef int CONTROL_PRIORITY, PRIORITIES
cdef dict MCAST_RANK
cdef list FORWARDERS
cdef int EXCHANGE_FORWARDER

cdef object _effect(type cls, tuple fields)
cdef tuple _fields(cmd)
cdef object _own(payload)
cdef set_treatment(Address addr, int dist, int priority)
@cython.locals(dlv=InDelivery)
cdef InDelivery _in_delivery(dlv_id, Link link, bint settled, payload, Address addr,
                             bint multicast, double at)
@cython.locals(out=OutDelivery)
cdef OutDelivery _out_delivery(out_id, Link link, InDelivery in_dlv)


@cython.final
cdef class Connection:
    cdef public object peer, conn_id, direction, host, container, listener, user, sasl
    cdef public object encrypted, link_capacity, cost
    cdef public int role
    cdef public dict links
    cdef public long long data_in, data_out
    cdef public double opened_at, last_delivery_at
    cdef public object control_in, control_out
    cdef public list data_links
    cdef public bint router_up, streaming_links
    cdef public list stream_links


@cython.final
cdef class Link:
    cdef public object link_id, peer, name, address
    cdef public Connection conn
    cdef public int direction, link_type
    cdef public Address addr
    cdef public long long capacity
    cdef public bint presettled, closed, from_container, to_container, credited, router
    cdef public int priority
    cdef public long long granted, received, held, in_unsettled, credit_pending
    cdef public long long credit_owed, credit_batch
    cdef public bint settle_credit
    cdef public long long settle_owed
    cdef public Py_ssize_t credit_slot
    cdef public long long limit, delivered
    cdef public object queue
    cdef public dict unsettled
    cdef public long long delivery_count, presettled_count, dropped_presettled_count
    cdef public long long accepted, rejected, released, modified
    cdef public long long delayed_1sec, delayed_10sec, stuck
    cdef public double rate_at, zero_at
    cdef public bint blocked
    cdef public object source, target, settle, remote_source, remote_target, remote_settle
    cdef public bint attaching, fallback, tenant
    cdef public object owner
    cdef public object peer_link
    cdef public int stall, stall_offs
    cdef public bint streaming, stream_busy
    cdef public object sending
    cdef public object endpoint


@cython.final
cdef class Address:
    cdef public object key
    cdef public int cls, phase, dist, priority
    cdef public Forwarder fwd
    cdef public list consumers, waiting, queues
    cdef public long long held, rr, refs, container_count
    cdef public long long ingress, egress, to_container, from_container, transit
    cdef public dict remotes
    cdef public bint announced
    cdef public Address fallback, fallback_for
    cdef public long long redirected, from_proc
    cdef public object exchange


@cython.final
@cython.freelist(64)
cdef class InDelivery:
    cdef public object dlv_id, payload, info
    cdef public Link link
    cdef public Address addr
    cdef public bint settled, multicast
    cdef public int priority, outcome
    cdef public long long pending, open
    cdef public OutDelivery out
    cdef public list copies, targets
    cdef public object to_override
    cdef public int phase
    cdef public Link queued_on
    cdef public double at
    cdef public bint stuck, credit_back


@cython.final
@cython.freelist(64)
cdef class OutDelivery:
    cdef public object out_id, info
    cdef public Link link
    cdef public InDelivery in_dlv
    cdef public int state
    cdef public bint done, stuck


# --- addrkeys.py --------------------------------------------------------------------------------
cdef key_of(RouterCore core, address)
cdef phase_key(rules, key, int direction)
cdef tuple treatment(RouterCore core, key)
@cython.locals(addr=Address)
cdef bint unavailable(RouterCore core, key)
@cython.locals(addr=Address)
cdef Address address_of(RouterCore core, key)
@cython.locals(addr=Address)
cdef reapply_rules(RouterCore core)
cdef unref(RouterCore core, Address addr)
@cython.locals(alt=Address)
cdef setup_fallback(RouterCore core, Address addr)
@cython.locals(alt=Address)
cdef drop_fallback(RouterCore core, Address addr)
cdef tuple new_temp(RouterCore core, bint target)
cdef trace_ids(trace)

# --- settlement.py ------------------------------------------------------------------------------
cdef count_outcome(RouterCore core, Link link, int state, bint router_wide)
@cython.locals(link=Link)
cdef settle_in(RouterCore core, InDelivery dlv, int state, info)
@cython.locals(link=Link)
cdef count_settled_in(RouterCore core, InDelivery dlv, int state)
@cython.locals(dlv=InDelivery)
cdef forget_out(RouterCore core, OutDelivery out)
@cython.locals(delay=double)
cdef count_delay(RouterCore core, Link link, InDelivery dlv, bint router_wide)
@cython.locals(now=double, dlv=InDelivery, link=Link, out=OutDelivery)
cdef scan_stuck(RouterCore core, double age)
cdef stick(RouterCore core, Link link, double age)
cdef unstick(RouterCore core, Link link)
@cython.locals(now=double, link=Link, credit=cython.longlong)
cdef scan_blocked(RouterCore core, double age)
cdef credit_seen(RouterCore core, Link link)
@cython.locals(out=OutDelivery)
cdef copy_done(RouterCore core, InDelivery dlv, int state, info)
cdef unhold(RouterCore core, InDelivery dlv)
cdef copy_unqueued(RouterCore core, InDelivery dlv)
@cython.locals(link=Link)
cdef stop_holding(RouterCore core, InDelivery dlv)
cdef release_waiting(RouterCore core, InDelivery dlv)
@cython.locals(out=OutDelivery, dlv=InDelivery, terminal=cython.bint, settled=cython.bint,
               state=cython.int)
cdef on_disposition(RouterCore core, peer, cmd)
@cython.locals(dlv=InDelivery, out=OutDelivery, state=cython.int)
cdef on_settle_in(RouterCore core, peer, cmd)
@cython.locals(consumer=Link, out_link=Link)
cdef withdraw_held(RouterCore core, InDelivery dlv)

# --- streaming.py -------------------------------------------------------------------------------
cdef bint stream_pending(stream)
cdef stream_bytes(stream)
cdef start_copy(RouterCore core, Link link, out_id, bint settled, stream, to_override, int phase)
cpdef on_stream_chunk(RouterCore core, peer, cmd)
cpdef on_stream_sent(RouterCore core, peer, cmd)
cdef update_ack(RouterCore core, stream)
cdef abort_stream(RouterCore core, stream)
cdef drop_stream_link(RouterCore core, Link link)

# --- transfer.py --------------------------------------------------------------------------------
@cython.locals(out_id=cython.longlong, addr=Address)
cdef OutDelivery send(RouterCore core, Link link, InDelivery dlv, bint settled, payload,
                      Link origin)
@cython.locals(out_id=cython.longlong)
cdef send_router(RouterCore core, Link link, dlv, bint settled, payload, to_override, int phase)
@cython.locals(out=OutDelivery)
cdef OutDelivery track_out(RouterCore core, Link link, InDelivery dlv, bint settled, out_id)
cdef send_copy(RouterCore core, Link link, InDelivery dlv)
@cython.locals(dlv=InDelivery)
cdef send_local(RouterCore core, Link link, Link target, dlv_id, bint settled, payload,
                Address addr)
@cython.locals(dlv=InDelivery)
cdef send_or_queue(RouterCore core, Link link, dlv_id, bint settled, payload, addr, Link out,
                   to_override, int phase)
cdef unroutable(RouterCore core, Link link, dlv_id, bint settled)
cdef reject_unavailable(RouterCore core, Link link, dlv_id, bint settled)
cdef end_unrouted(RouterCore core, Link link, dlv_id, bint settled, int state, info)
cdef stall(RouterCore core, Link link)
cdef unstall(RouterCore core, Link link)
@cython.locals(link=Link, credit=cython.longlong, owed=cython.longlong)
cpdef on_link_unstalled(RouterCore core, peer, cmd)
@cython.locals(dlv=InDelivery)
cdef hold(RouterCore core, Link link, dlv_id, bint settled, int priority, payload, Address addr)
@cython.locals(consumer=Link, bound=cython.longlong)
cdef long long held_bound(Address addr)
@cython.locals(charged=Link, dlv=InDelivery, p=cython.int, kept_next=cython.bint)
cdef drop_held_presettled(RouterCore core, Address addr)
@cython.locals(dlv=InDelivery)
cdef drop_queued_presettled(RouterCore core, Link link)
@cython.locals(link=Link, settled=cython.bint, out=OutDelivery)
cdef forward_multicast(RouterCore core, list targets, InDelivery dlv)
@cython.locals(dlv=InDelivery)
cdef drain_queue(RouterCore core, Link link)
@cython.locals(link=Link, addr=Address, dlv=InDelivery, p=cython.int, drain=cython.bint)
cdef on_flow(RouterCore core, peer, cmd)
cdef release_held(RouterCore core, Address addr)
cdef release_queue(RouterCore core, Link link)
@cython.locals(out=OutDelivery, dlv=InDelivery)
cdef fail_outbound(RouterCore core, Link link)

# --- streamlinks.py ----------------------------------------------------------------------------
@cython.locals(link=Link)
cdef Link stream_link(RouterCore core, Link out, payload)
@cython.locals(link=Link)
cdef Link idle_stream_link(RouterCore core, Connection conn, taken)
@cython.locals(link=Link, i=cython.Py_ssize_t)
cdef list stream_targets(RouterCore core, list consumers, payload, Address addr)
cdef Link open_stream_link(RouterCore core, Connection conn)
cdef forget_stream_link(Link link)
cdef list idle_surplus(RouterCore core)

# --- relay.py -----------------------------------------------------------------------------------
@cython.locals(link=Link)
cdef Link data_link(conn, int prio)
cdef list next_hop_links(RouterCore core, router_ids, exclude, int prio, payload)
@cython.locals(out=Link)
cdef pick_remote(RouterCore core, Address addr, bint closest, origin, exclude, int prio)
cdef send_anycast_remote(RouterCore core, Link link, dlv_id, bint settled, payload, addr,
                         Link out, to_override, int phase)
@cython.locals(out=Link)
cdef route_topo(RouterCore core, Link link, dlv_id, bint settled, int priority, payload, key,
                exclude)
cdef control_in(RouterCore core, Link link, dlv_id, bint settled, key, exclude, payload)
cdef control_toward(RouterCore core, router_id, payload, exclude)
cdef count_control(RouterCore core, key, int which)
cpdef on_control_send(RouterCore core, peer, cmd)
cdef flood_control(RouterCore core, payload, exclude)
cdef send_control(RouterCore core, Link link, payload)
cpdef on_route_update(RouterCore core, peer, cmd)
@cython.locals(addr=Address)
cpdef on_remote_address(RouterCore core, peer, cmd)
cdef bint reachable(RouterCore core, Address addr)
@cython.locals(sender=Link)
cdef credit_waiting(RouterCore core, Address addr)
cdef give_window(RouterCore core, Link sender)
cdef announce(RouterCore core, Address addr, bint present)

# --- forwarders.py ------------------------------------------------------------------------------
cdef route(RouterCore core, Link link, dlv_id, bint settled, int priority, payload, Address addr,
           key, origin, exclude)


cdef class Forwarder:
    cdef forward(self, RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)
    cdef Link pick(self, Address addr)


cdef class ClosestForwarder(Forwarder):
    @cython.locals(target=Link)
    cdef forward(self, RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)
    @cython.locals(consumers=list, n=cython.Py_ssize_t, start=cython.Py_ssize_t,
                   k=cython.Py_ssize_t, i=cython.Py_ssize_t, link=Link)
    cdef Link pick(self, Address addr)


cdef class BalancedForwarder(Forwarder):
    @cython.locals(target=Link)
    cdef forward(self, RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)
    @cython.locals(consumers=list, n=cython.Py_ssize_t, start=cython.Py_ssize_t,
                   k=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   link=Link, best=Link, best_i=cython.Py_ssize_t, best_out=cython.Py_ssize_t,
                   best_cap=cython.longlong, out=cython.Py_ssize_t, cap=cython.longlong)
    cdef Link pick(self, Address addr)


cdef class MulticastForwarder(Forwarder):
    @cython.locals(dlv=InDelivery, phase=cython.int)
    cdef forward(self, RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)


cdef class UnavailableForwarder(Forwarder):
    pass


cdef int _remote_priority(Address addr, int priority)
cdef tuple _remote_fields(Link link, Address addr)
@cython.locals(local=Link, phase=cython.int)
cdef _forward_anycast(RouterCore core, Forwarder fwd, bint closest, Link link, dlv_id,
                      bint settled, int priority, payload, Address addr, origin, exclude)

# --- ingress.py ---------------------------------------------------------------------------------
@cython.locals(link=Link, addr=Address, settled=cython.bint, priority=cython.int)
cdef on_transfer(RouterCore core, peer, cmd)
@cython.locals(link=Link, settled=cython.bint, priority=cython.int, phase=cython.int,
               addr=Address)
cdef on_router_transfer(RouterCore core, peer, cmd)
@cython.locals(consumer=Link, consumers=list)
cdef forward_no_echo(RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                     Address addr)
@cython.locals(consumer=Link, consumers=list)
cdef forward_with_uplink(RouterCore core, Link link, dlv_id, bint settled, int priority,
                         payload, Address addr, Link up)
cdef bint has_destination(RouterCore core, Address addr)
@cython.locals(alt=Address)
cdef to_fallback(RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)
@cython.locals(link=Link)
cpdef on_stream_transfer(RouterCore core, peer, cmd)

# --- linkroute.py -------------------------------------------------------------------------------
# (per attach and per credit change only; the records of the table are plain Python classes)
cdef refuse_no_route(RouterCore core, Connection conn, link_id)
cdef announce_route(RouterCore core, addr, bint present)
@cython.locals(link=Link, out=Link)
cdef bint route_attach(RouterCore core, Connection conn, link_id, int direction, name, address,
                       dynamic, presettled, capacity, source, target, settle)
@cython.locals(addr=Address)
cdef pair(Link client, Link out, key)
@cython.locals(client=Link)
cdef routed_attached(RouterCore core, Link out)
@cython.locals(sender=Link)
cdef mirror_credit(RouterCore core, Link receiver, bint drain)
@cython.locals(sender=Link, receiver=Link)
cpdef on_in_drained(RouterCore core, peer, cmd)
@cython.locals(dlv=InDelivery, out=OutDelivery)
cpdef on_sender_state(RouterCore core, peer, cmd)
cdef routed_sent(RouterCore core, InDelivery dlv)
cdef copy_sent(RouterCore core, InDelivery dlv, out)
cdef await_answer(RouterCore core, Link link, Link partner)
cdef bint answer_detach(RouterCore core, link_id, bint closed, error, bint lost)
cdef answers_lost(RouterCore core, conn)
cpdef on_delivery_tag(RouterCore core, peer, cmd)
cdef tag_next(RouterCore core, Link link, Link target, dlv_id)
cdef tag_held(RouterCore core, Link link, dlv_id)
cdef held_tag_out(RouterCore core, Link target, InDelivery dlv)

# --- linkends.py --------------------------------------------------------------------------------
cdef protocol_error(RouterCore core, text)
@cython.locals(link=Link)
cdef attach_endpoint(RouterCore core, Connection conn, link_id, int direction, name, address,
                     dynamic, presettled, capacity, bint coordinator=*, bint fallback=*)
@cython.locals(addr=Address)
cdef bind_endpoint(RouterCore core, Link link, key)
@cython.locals(link=Link)
cdef attach_router_link(RouterCore core, Connection conn, link_id, int direction, name,
                        presettled, capacity, int link_type)
@cython.locals(link=Link)
cdef Link open_link(RouterCore core, Connection conn, int direction, name, address, source,
                    target, settle, owner)
cdef attached_out(RouterCore core, Link link)
cdef detached_out(RouterCore core, Link link, error)
cdef detach_own(RouterCore core, Link link)
cdef detach_offending(RouterCore core, Link link, text)
@cython.locals(other=Link)
cdef detach_partner(RouterCore core, Link link, condition, description, bint closed=*)
@cython.locals(addr=Address)
cdef drop_link(RouterCore core, Link link)
@cython.locals(conn=Connection)
cdef _drop_router_link(RouterCore core, Link link)
cdef check_router_up(RouterCore core, Connection conn)
cdef router_down(RouterCore core, Connection conn)

# --- lifecycle.py -------------------------------------------------------------------------------
cpdef on_conn_opened(RouterCore core, peer, cmd)
@cython.locals(conn=Connection)
cpdef on_conn_closed(RouterCore core, peer, cmd)
@cython.locals(link=Link)
cdef _close(RouterCore core, Connection conn, bint lost=*)
@cython.locals(conn=Connection)
cdef _close_offending(RouterCore core, peer, conn_id, text)
@cython.locals(link=Link)
cdef close_connection_of(RouterCore core, peer, cmd, text)
@cython.locals(conn=Connection)
cpdef on_attach(RouterCore core, peer, cmd)
cdef _refuse_offending(RouterCore core, peer, link_id, text)
cdef int link_state(link)
cpdef on_detach(RouterCore core, peer, cmd)
cpdef on_link_lost(RouterCore core, peer, cmd)
@cython.locals(link=Link)
cpdef _link_gone(RouterCore core, peer, link_id, bint closed, error, bint lost)
@cython.locals(link=Link)
cpdef on_attached(RouterCore core, peer, cmd)

# --- peers.py -----------------------------------------------------------------------------------
@cython.locals(conn=Connection, addr=Address)
cpdef on_hello(RouterCore core, peer, cmd)
cpdef on_policy_event(RouterCore core, peer, cmd)
cpdef on_policy_close(RouterCore core, peer, cmd)
cpdef on_connector_status(RouterCore core, peer, cmd)

# --- edge.py ------------------------------------------------------------------------------------
# (EdgeUplink and EdgeServer stay Python classes, off the per-message path; these reach the
# core's cdef members for them)
cdef _link_name(RouterCore core)
cdef _edge_emit(RouterCore core, peer, effect)
cdef _edge_credit(RouterCore core, Link link, long long credit)

# --- autolinks.py -------------------------------------------------------------------------------
# (AutoLink stays a Python class: off the per-message path; linkends calls its methods)
cdef double FIRST_RETRY, RETRY, NEVER
cdef dict AL_TRANSITIONS, AL_STATE_NAMES
cdef auto_link_key(RouterCore core, address, int direction, int phase, bint fallback)
cpdef error_description(error)
cdef create_auto_link(RouterCore core, dict attrs)
cdef bint remove_auto_link(RouterCore core, identity)
cdef auto_links_conn_opened(RouterCore core, Connection conn)
cdef auto_links_tick(RouterCore core)
@cython.locals(conn=Connection)
cdef auto_link_event(RouterCore core, al, int event, link, error)
cdef _log(RouterCore core, text, al, Connection conn)
cdef _attach(RouterCore core, al, Connection conn)
cdef _open(RouterCore core, al, Connection conn)
cdef bint _matches(al, Connection conn)
@cython.locals(conn=Connection)
cdef _container_conn(RouterCore core, al, skip)
cdef _next_retry(RouterCore core)
cdef list auto_links_view(RouterCore core)

# --- exchanges.py -------------------------------------------------------------------------------
# (the records and the binding tree stay Python classes: off every other address's path)
cdef class ExchangeForwarder(Forwarder):
    cdef forward(self, RouterCore core, Link link, dlv_id, bint settled, int priority, payload,
                 Address addr, origin, exclude)

cdef long long exchange_forward(RouterCore core, ex, Link link, payload, int priority)
@cython.locals(addr=Address, fwd=Forwarder, target=Link)
cdef long long to_own_consumers(RouterCore core, ex, payload, int priority)
@cython.locals(addr=Address)
cdef long long send_to_hop(RouterCore core, ex, hop, payload, int priority)
cdef end_delivery(RouterCore core, Link link, dlv_id, bint settled, int state)
cdef hop_key(RouterCore core, address, int phase)
@cython.locals(addr=Address)
cdef add_exchange(RouterCore core, dict attrs)
@cython.locals(addr=Address)
cdef bint remove_exchange(RouterCore core, identity)
cdef add_binding(RouterCore core, dict attrs)
cdef bint remove_binding(RouterCore core, identity)
cdef _drop_binding(RouterCore core, binding)
@cython.locals(addr=Address)
cdef _hop(RouterCore core, ex, address, int phase)
cdef _release_hop(RouterCore core, ex, hop)
cdef _paths_changed(RouterCore core, ex)
cdef dict exchanges_view(RouterCore core)

# --- core.py ------------------------------------------------------------------------------------
@cython.final
cdef class RouterCore:
    cdef readonly object router_id, area
    cdef readonly int mode
    cdef public int default_distribution
    cdef readonly object rules
    cdef readonly dict peers, conns, links, addrs, in_unsettled, out_unsettled, streams, stream_outs
    cdef readonly dict internal_conns
    cdef readonly long long presettled, dropped_presettled, accepted, rejected, released
    cdef readonly long long modified, ingress, egress, transit, ingress_container
    cdef readonly long long egress_container, redirected, delayed_1sec, delayed_10sec, stuck
    cdef readonly long long links_blocked
    cdef public double stuck_interval, stuck_age, stuck_next_scan
    cdef public dict auto_links
    cdef readonly dict exchanges, bindings
    cdef public object edge, heartbeats
    cdef public double al_next_retry, sl_next_scrub, sl_interval
    cdef public long sl_pool_max
    cdef public list al_logs
    cdef public bint log_info
    cdef public list info_logs
    cdef readonly object agent_peer
    cdef readonly dict routers, neighbour_conns, control_counts, test_refusals
    cdef public bint allow_resumable_lr
    cdef readonly object gone
    cdef readonly long long gone_seq
    cdef readonly object policy_counts
    cdef readonly dict connector_status
    cdef readonly object lr
    cdef public object routed_tag
    cdef readonly list errors
    cdef readonly Py_ssize_t batch_pos
    cdef public double now
    cdef long long _next_out
    cdef public object next_link_id
    cdef dict _key_cache, _effects, _dispatch
    cdef list _credited
    cdef object _rng, _heap

    cdef _handle(self, peer, cmd)
    cdef _emit(self, peer, effect)
    cdef _credit(self, Link link, long long credit)
    cdef _replenish_sent(self, Link link, bint settled)
    cdef _replenish(self, Link link)
    cdef _record_gone(self, kind, obj)
