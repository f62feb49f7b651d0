# cython: language_level=3
# Augmenting declarations for the compiled router core (pure-Python mode).
#
# setup.py copies src/router_core/core.py to build/cython_src/router_core/_core.py and this file
# next to it as _core.pxd, then compiles the pair as ``router_core._core``. The .py stays the
# readable pure-Python reference; this file only adds C types: the records become final cdef
# classes with typed fields, the per-message methods cdef methods with typed locals.
#
# Rules for keeping it in step with core.py:
# * every attribute of a record or of RouterCore must be declared here (cdef classes have no
#   __dict__); what corestate.management_snapshot or callers read is ``public``/``readonly``;
# * ids (link, connection, delivery) and peers stay Python objects: they are dict keys and effect
#   fields, so boxing them once on the way in is cheaper than on every use;
# * commands arrive as NamedTuples, which Cython's ``tuple`` type rejects (exact check): keep them
#   ``object``;
# * a method the dispatch table or a caller reaches by name stays ``def``; anything only called
#   from inside this module may be ``cdef``.
# After editing only this file: ROUTER_FORCE_REBUILD=1 (see setup.py).
cimport cython


cdef extern from *:
    """
    /* A NamedTuple subclass instance holding the items of ``fields``: what tuple.__new__(cls,
       fields) does (tuple_subtype_new), without the method call and the temporary tuples. */
    static PyObject *router_core_named_tuple(PyTypeObject *cls, PyObject *fields) {
        Py_ssize_t i, n = PyTuple_GET_SIZE(fields);
        PyObject *obj = cls->tp_alloc(cls, n);
        if (obj == NULL) return NULL;
        for (i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(fields, i);
            Py_INCREF(item);
            PyTuple_SET_ITEM(obj, i, item);
        }
        return obj;
    }
    """
    object _named_tuple "router_core_named_tuple"(type cls, tuple fields)
    # A tuple subclass (NamedTuple) as ``tuple``, unchecked: the caller knows what it holds.
    tuple _as_tuple "__Pyx_NewRef"(object cmd)

cdef bint _COMPILED
cdef object _effect(type cls, tuple fields)
cdef tuple _fields(cmd)
cdef object _own(payload)
@cython.locals(dlv=InDelivery)
cdef InDelivery _in_delivery(dlv_id, Link link, bint settled, payload, Address addr,
                             bint multicast)
@cython.locals(out=OutDelivery)
cdef OutDelivery _out_delivery(out_id, Link link, InDelivery in_dlv)

# Constants compared on the per-message path: C ints, not module-global lookups and boxing.
cdef int DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_MODIFIED, STATE_REJECTED, STATE_RELEASED
cdef int DIST_CLOSEST, DIST_MULTICAST, DIST_UNAVAILABLE
cdef dict MCAST_RANK


@cython.final
cdef class Connection:
    cdef public object peer, conn_id, role, direction, host, container, listener, user, sasl
    cdef public object encrypted, link_capacity, cost
    cdef public dict links
    cdef public long long data_in, data_out
    cdef public double opened_at, last_delivery_at
    cdef public object control_in, control_out
    cdef public list data_links
    cdef public bint router_up


@cython.final
cdef class Link:
    cdef public object link_id, peer, name, address, link_type
    cdef public Connection conn
    cdef public int direction
    cdef public Address addr
    cdef public long long capacity
    cdef public bint presettled, closed, from_container, to_container, credited, router
    cdef public int priority
    cdef public long long granted, received, held, in_unsettled, credit_pending
    cdef public long long credit_owed, credit_batch
    cdef public Py_ssize_t credit_slot
    cdef public long long limit, delivered
    cdef public object queue
    cdef public dict unsettled
    cdef public long long delivery_count, presettled_count, dropped_presettled_count
    cdef public long long accepted, rejected, released, modified


@cython.final
cdef class Address:
    cdef public object key
    cdef public int dist, priority
    cdef public list consumers, waiting, queues
    cdef public long long held, rr, refs, container_count
    cdef public long long ingress, egress, to_container, from_container, transit
    cdef public dict remotes
    cdef public bint announced


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


@cython.final
@cython.freelist(64)
cdef class OutDelivery:
    cdef public object out_id, info
    cdef public Link link
    cdef public InDelivery in_dlv
    cdef public int state
    cdef public bint done


@cython.final
cdef class RouterCore:
    cdef readonly object router_id, area, mode
    cdef public int default_distribution
    cdef readonly object rules
    cdef readonly dict peers, conns, links, addrs, in_unsettled, out_unsettled
    cdef readonly long long presettled, dropped_presettled, accepted, rejected, released
    cdef readonly long long modified, ingress, egress, transit, ingress_container
    cdef readonly long long egress_container
    cdef readonly object agent_peer
    cdef readonly dict routers, neighbour_conns
    cdef readonly object gone
    cdef readonly long long gone_seq
    cdef readonly object policy_counts
    cdef public double now
    cdef long long _next_out
    cdef dict _key_cache, _effects, _dispatch
    cdef list _credited
    cdef object _rng, _heap

    cdef _handle(self, peer, cmd)
    cdef _emit(self, peer, effect)
    cdef _credit(self, Link link, long long credit)
    cdef _replenish(self, Link link)
    cdef _key(self, address)
    @cython.locals(addr=Address)
    cdef Address _address(self, key)
    cdef tuple _treatment(self, key)
    cdef _unref(self, Address addr)
    cdef _record_gone(self, kind, obj)
    @cython.locals(addr=Address, out=OutDelivery, dlv=InDelivery)
    cdef _drop_link(self, Link link)
    @cython.locals(link=Link, addr=Address, target=Link, dlv=InDelivery, settled=cython.bint,
                   priority=cython.int)
    cdef _on_transfer(self, peer, cmd)
    @cython.locals(consumers=list, n=cython.Py_ssize_t, start=cython.Py_ssize_t,
                   k=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   link=Link, best=Link, best_i=cython.Py_ssize_t, best_out=cython.Py_ssize_t,
                   best_cap=cython.longlong, out=cython.Py_ssize_t, cap=cython.longlong)
    cdef Link _pick(self, Address addr)
    @cython.locals(out_id=cython.longlong, addr=Address)
    cdef OutDelivery _send(self, Link link, InDelivery dlv, bint settled, payload)
    @cython.locals(out=OutDelivery)
    cdef OutDelivery _track_out(self, Link link, InDelivery dlv, bint settled, out_id)
    cdef _copy_unqueued(self, InDelivery dlv)
    @cython.locals(link=Link, addr=Address, dlv=InDelivery, p=cython.int, drain=cython.bint)
    cdef _on_flow(self, peer, cmd)
    cdef _route(self, Link link, dlv_id, bint settled, int priority, payload, Address addr, key,
                origin, exclude)
    cdef _unroutable(self, Link link, dlv_id, bint settled)
    @cython.locals(dlv=InDelivery)
    cdef _send_local(self, Link link, Link target, dlv_id, bint settled, payload, Address addr)
    @cython.locals(dlv=InDelivery)
    cdef _hold(self, Link link, dlv_id, bint settled, int priority, payload, Address addr)
    @cython.locals(link=Link, settled=cython.bint, out=OutDelivery)
    cdef _forward_multicast(self, list targets, InDelivery dlv)
    @cython.locals(dlv=InDelivery)
    cdef _drain_queue(self, Link link)
    cdef _send_copy(self, Link link, InDelivery dlv)
    @cython.locals(out_id=cython.longlong)
    cdef _send_router(self, Link link, dlv, bint settled, payload, to_override, int phase)
    cdef _release_held(self, Address addr)
    cdef _unhold(self, InDelivery dlv)
    cdef _release_waiting(self, InDelivery dlv)
    cdef _count_outcome(self, Link link, int state, bint router_wide)
    @cython.locals(link=Link)
    cdef _settle_in(self, InDelivery dlv, int state, info)
    @cython.locals(dlv=InDelivery)
    cdef _forget_out(self, OutDelivery out)
    @cython.locals(out=OutDelivery)
    cdef _copy_done(self, InDelivery dlv, int state, info)
    @cython.locals(out=OutDelivery, dlv=InDelivery, terminal=cython.bint, settled=cython.bint,
                   state=cython.int)
    cdef _on_disposition(self, peer, cmd)
    @cython.locals(dlv=InDelivery, link=Link, out=OutDelivery, consumer=Link, state=cython.int)
    cdef _on_settle_in(self, peer, cmd)
    @cython.locals(link=Link, addr=Address, settled=cython.bint, priority=cython.int,
                   phase=cython.int)
    cdef _on_router_transfer(self, peer, cmd)
    @cython.locals(dlv=InDelivery)
    cdef _send_anycast_remote(self, Link link, dlv_id, bint settled, payload, addr, Link out,
                              to_override, int phase)
