"""Dispositions and settlement at the worker, both ways.

A receiver's disposition on a delivery we sent becomes Disposition (with what its state
carries), the core's UpdateIn/SettleOut/DeliverState set states and settle the proton
deliveries they name; a delivery still waiting or still streaming gets its state when it is
handed to proton.

Functions of the engine: ``self`` is the WorkerEngine (as when they were its methods).
Part of the compiled engine (setup.py ENGINE_PARTS; see router_io/engine.py).
"""

from typing import Any, Optional

from cproton_ffi import lib

from common import ipc
from common.ipc import STATE_ACCEPTED, STATE_MODIFIED, STATE_RELEASED, Disposition
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import (
    _cdata, _command, _fields, _pn_delivery_remote_state, _pn_delivery_settle,
    _pn_delivery_settled, _pn_delivery_tag_id, _pn_delivery_update, _text)
from router_io.engine_termini import _decode_data, _encoded_data, _put_condition
# --- end engine parts ---


def _on_outbound_update(self, d_ptr: Any) -> None:
    if self.tag_ids:  # link routes: some deliveries carry their sender's tag
        dlv_id = _routed_out_id(self, d_ptr)
    else:
        dlv_id = _pn_delivery_tag_id(d_ptr)  # the core's id: our deliveries are tagged so
    entry = self.out_dlvs.get(dlv_id)
    if entry is None:
        return
    d_key = d_ptr  # compiled: the address as a Python int
    if entry[0] != d_key:  # (never: ids are unique router-wide; a check, not a lookup)
        return
    state = _pn_delivery_remote_state(d_ptr)
    settled = bool(_pn_delivery_settled(d_ptr))
    info = None
    if state and state != STATE_ACCEPTED and state != STATE_RELEASED:
        # rejected, modified, received or an extension state: what it carries (rare)
        # (declared, transactional-state and extension states: their fields,
        # AMQP-encoded, for the core to pass on unread; a link route needs them all)
        info = _remote_info(_cdata("pn_delivery_t *", d_ptr), state)
    if settled:
        del self.out_dlvs[dlv_id]
        if self.tag_ids:
            self.tag_ids.pop(d_key, None)
        if self.out_streams and dlv_id in self.out_streams:  # still being sent
            _stream_settled(self, dlv_id, 0)  # settled once complete
        else:
            _pn_delivery_settle(d_ptr)
    self.outbox.append(_command(Disposition, (dlv_id, state, settled, info)))


def _routed_out_id(self, d_ptr: Any) -> Any:
    """The core's id of an outbound delivery when some carry a link-routed sender's tag
    (tag_ids, by pointer); an entry whose delivery is gone is dropped here."""
    d_key = d_ptr
    dlv_id = self.tag_ids.get(d_key)
    if dlv_id is not None:
        entry = self.out_dlvs.get(dlv_id)
        if (entry is not None and entry[0] == d_key) or (
                self.out_streams and dlv_id in self.out_streams):
            return dlv_id
        del self.tag_ids[d_key]  # (its delivery was freed and the address reused)
    return _pn_delivery_tag_id(d_ptr)


def _remote_info(d_ptr: Any, state: int) -> dict:
    """What a remote delivery state carries, for a Disposition's ``info``: rejected's
    condition, modified's flags and annotations, received's section, an extension state's
    value (AMQP-encoded, opaque to the core)."""
    disp = lib.pn_delivery_remote(d_ptr)
    if state == ipc.STATE_MODIFIED:
        info = {"failed": bool(lib.pn_disposition_is_failed(disp)),
                "undeliverable": bool(lib.pn_disposition_is_undeliverable(disp))}
        annotations = _encoded_data(lib.pn_disposition_annotations(disp))
        if annotations:
            info["annotations"] = annotations
        return info
    if state == ipc.STATE_RECEIVED:
        return {"section_number": lib.pn_disposition_get_section_number(disp),
                "section_offset": lib.pn_disposition_get_section_offset(disp)}
    if state != ipc.STATE_REJECTED:
        value = _encoded_data(lib.pn_disposition_data(disp))
        return {"data": value} if value else {}
    c = lib.pn_disposition_condition(disp)
    if not lib.pn_condition_is_set(c):
        return {}
    info = {"condition": _text(lib.pn_condition_get_name(c)),
            "description": _text(lib.pn_condition_get_description(c))}
    fields = _encoded_data(lib.pn_condition_info(c))  # the error's info map, as 1.19 keeps it
    if fields:
        info["info"] = fields
    return info


def _local_info(disp: Any, state: int, info: Optional[dict]) -> None:
    """Give a local disposition what a Disposition's ``info`` carried (the other way). A
    MODIFIED goes out with delivery-failed set whatever the peer said: 1.19 forces it."""
    if state == ipc.STATE_MODIFIED:
        lib.pn_disposition_set_failed(disp, True)
        if not info:
            return
        lib.pn_disposition_set_undeliverable(disp, bool(info.get("undeliverable")))
        annotations = info.get("annotations")
        if annotations:
            _decode_data(lib.pn_disposition_annotations(disp), annotations)
    elif not info:
        return
    elif state == ipc.STATE_RECEIVED:
        lib.pn_disposition_set_section_number(disp, int(info.get("section_number") or 0))
        lib.pn_disposition_set_section_offset(disp, int(info.get("section_offset") or 0))
    elif info.get("data"):  # an extension state's value
        _decode_data(lib.pn_disposition_data(disp), info["data"])
    elif info.get("condition"):
        cond = lib.pn_disposition_condition(disp)
        _put_condition(cond, info["condition"], info.get("description", ""))
        if info.get("info"):
            _decode_data(lib.pn_condition_info(cond), info["info"])


def _set_condition(cond: Any, name: str, description: str) -> None:
    _put_condition(cond, name, description)


def _fx_deliver_state(self, fx: ipc.DeliverState) -> None:
    """The state a link-routed sender gave a delivery, set on the delivery sent for it; one
    still waiting here gets it when it is handed to proton."""
    entry = self.out_dlvs.get(fx.dlv_id)
    if entry is not None:
        d_ptr, link = entry
        _set_sender_state(_cdata("pn_delivery_t *", d_ptr), fx.state, fx.info)
        self.dirty.add(link.conn)
        return
    queued = self.queued_out.get(fx.dlv_id)
    rec = self.out_streams.get(fx.dlv_id) if self.out_streams else None
    if queued is not None and queued[5] is not None:  # partly handed to proton already
        _set_sender_state(queued[5], fx.state, fx.info)
        self.dirty.add(queued[0].conn)
    elif rec is not None and rec.d is not None:  # a streamed one, under way
        _set_sender_state(rec.d, fx.state, fx.info)
        self.dirty.add(rec.link.conn)
    elif queued is not None or _waits_on_a_link(self, fx.dlv_id):
        self.pending_states[fx.dlv_id] = (fx.state, fx.info)

    # else settled already: nothing to set


def _waits_on_a_link(self, dlv_id: Any) -> bool:
    """Is ``dlv_id`` behind a streamed delivery on its link (Link.waiting)? (rare: only
    for a DeliverState that found no delivery)"""
    rec = self.out_streams.get(dlv_id)
    if rec is not None:
        return True
    return any(type(w) is tuple and w[0] == dlv_id
               for link in self.links.values() if link.waiting for w in link.waiting)


def _pending_state(self, dlv_id: Any, delivery: Any) -> None:
    pending = self.pending_states.pop(dlv_id, None)
    if pending is not None:
        _set_sender_state(delivery, pending[0], pending[1])


def _set_sender_state(delivery: Any, state: int, info: Optional[dict]) -> None:
    """The state a sender gave its delivery, with what it carries, on the one sent for it."""
    if info or state == STATE_MODIFIED:
        _local_info(lib.pn_delivery_local(delivery), state, info)
    lib.pn_delivery_update(delivery, state)


def _untrack_out(self, dlv_id: Any) -> None:
    self.out_dlvs.pop(dlv_id, None)


def _fx_update_in(self, fx: ipc.UpdateIn) -> None:
    dlv_id, state, settled, info = _fields(fx)
    entry = self.in_dlvs.get(dlv_id)
    if entry is None:
        return
    d_ptr, link = entry
    if state:
        if info or state == STATE_MODIFIED:  # conditions, modified: rare, through cffi
            _local_info(lib.pn_delivery_local(_cdata("pn_delivery_t *", d_ptr)), state,
                        info)
        _pn_delivery_update(d_ptr, state)
    if settled:
        if self.in_stream_ids and dlv_id in self.in_stream_ids:  # still arriving
            _stream_in_settled(self, dlv_id)  # settled once complete
        else:
            _drop_in(self, dlv_id)
            _pn_delivery_settle(d_ptr)
    self.dirty.add(link.conn)


def _fx_settle_out(self, fx: ipc.SettleOut) -> None:
    dlv_id, state = _fields(fx)
    if self.out_streams and dlv_id in self.out_streams:  # still being sent: at its end
        _stream_settled(self, dlv_id, state)
        return
    entry = self.out_dlvs.pop(dlv_id, None)
    if entry is None:
        if self.queued_out:
            _settle_queued(self, dlv_id, state)
        return
    d_ptr, link = entry
    if self.tag_ids:
        self.tag_ids.pop(d_ptr, None)
    if state:
        _pn_delivery_update(d_ptr, state)
    _pn_delivery_settle(d_ptr)
    self.dirty.add(link.conn)


def _settle_queued(self, dlv_id: int, state: int) -> None:
    """The sender settled a delivery that still waits in an out_queue: it goes settled."""
    entry = self.queued_out.pop(dlv_id, None)
    if entry is not None:
        entry[2] = True
        entry[6] = state


# cross calls between engine parts (at the end: the pure build imports them after this part's
# own functions exist, so the parts may call each other)
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_deliveries import _drop_in
from router_io.engine_stream_in import _stream_in_settled
from router_io.engine_stream_out import _stream_settled
# --- end engine parts ---
