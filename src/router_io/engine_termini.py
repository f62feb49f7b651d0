"""Termini, capabilities and opaque AMQP data between proton and the IPC messages.

Reads a peer's terminus into an IPC terminus dict and writes one back, reads capabilities and
connection properties as plain values, and carries encoded pn_data_t (dispositions' fields,
conditions) through the core unread. Rare paths only (attach, disposition info): cffi.

Part of the compiled engine (setup.py ENGINE_PARTS). Imports only engine_proton of the parts.
"""

from typing import Any, Optional

import cproton
import proton
from cproton_ffi import ffi, lib
# --- engine parts (the compiled build is one module: setup.py drops these imports) ---
from router_io.engine_proton import _utf8
# --- end engine parts ---


def _encoded_data(data: Any) -> bytes:
    """The AMQP encoding of a pn_data_t (b"" when it is empty), e.g. MODIFIED's
    message-annotations, carried opaquely through the core in a Disposition's ``info``."""
    if data == ffi.NULL:
        return b""
    lib.pn_data_rewind(data)
    size = lib.pn_data_encoded_size(data)
    if size <= 0:
        return b""
    buf = ffi.new("char[]", size)
    written = lib.pn_data_encode(data, buf, size)
    lib.pn_data_rewind(data)
    return bytes(ffi.buffer(buf, written)) if written > 0 else b""


def _put_condition(cond: Any, name: str, description: str) -> None:
    cproton.pn_condition_set_name(cond, name)
    if description:
        cproton.pn_condition_set_description(cond, description)


def _decode_data(data: Any, encoded: bytes) -> None:
    """Fill a pn_data_t from what :func:`_encoded_data` gave (bad bytes leave it empty)."""
    lib.pn_data_clear(data)
    if lib.pn_data_decode(data, encoded, len(encoded)) < 0:
        lib.pn_data_clear(data)

def _read_terminus(t_ptr: Any) -> Optional[dict]:
    """A proton terminus as an IPC terminus dict (ipc.TERMINUS_FIELDS); None when it is null
    (type unspecified). The address is peer-controlled text: bad UTF-8 raises ValueError."""
    kind = lib.pn_terminus_get_type(t_ptr)
    if kind == lib.PN_UNSPECIFIED:
        return None
    terminus = {"type": int(kind), "address": _utf8(lib.pn_terminus_get_address(t_ptr)),
            "dynamic": bool(lib.pn_terminus_is_dynamic(t_ptr)),
            "durable": int(lib.pn_terminus_get_durability(t_ptr)),
            "expiry": int(lib.pn_terminus_get_expiry_policy(t_ptr)),
            "timeout": int(lib.pn_terminus_get_timeout(t_ptr)),
            "distribution_mode": int(lib.pn_terminus_get_distribution_mode(t_ptr)),
            "capabilities": _encoded_data(lib.pn_terminus_capabilities(t_ptr)) or None,
            "properties": _encoded_data(lib.pn_terminus_properties(t_ptr)) or None,
            "filter": _encoded_data(lib.pn_terminus_filter(t_ptr)) or None,
            "outcomes": _encoded_data(lib.pn_terminus_outcomes(t_ptr)) or None}
    if terminus["dynamic"] and terminus["properties"]:
        dnp = _dnp_address(terminus["properties"])
        if dnp is not None:  # what 1.19 link-routes a dynamic terminus by
            terminus["dnp_address"] = dnp
    return terminus


DNP_ADDRESS = "x-opt-qd.address"


def _dnp_address(encoded: bytes) -> Optional[str]:
    """The ``x-opt-qd.address`` of dynamic-node-properties when it is the map's first key (as
    1.19 reads it), else None."""
    data = proton.Data()
    try:
        data.decode(encoded)
        data.rewind()
        if data.next() != proton.Data.MAP or not data.enter():
            return None
        if data.next() != proton.Data.SYMBOL or data.get_symbol() != DNP_ADDRESS:
            return None
        if data.next() != proton.Data.STRING:
            return None
        return data.get_string() or None
    except (proton.DataException, UnicodeDecodeError):
        return None


def _tenant_dnp(terminus: Optional[dict], address: str) -> None:
    """A multiTenant connection's dynamic terminus link-routed by its dynamic-node-properties
    address: that address becomes ``address`` (the tenant's), and so do the properties the
    far end gets, as 1.19 sends them (a map of ``x-opt-qd.address`` alone)."""
    data = proton.Data()
    data.put_map()
    data.enter()
    data.put_symbol(proton.symbol(DNP_ADDRESS))
    data.put_string(address)
    data.exit()
    terminus["dnp_address"] = address
    terminus["properties"] = data.encode()


def _write_terminus(t_ptr: Any, terminus: Optional[dict]) -> None:
    """Set a local proton terminus from an IPC terminus dict (None: a null terminus)."""
    if terminus is None:
        lib.pn_terminus_set_type(t_ptr, lib.PN_UNSPECIFIED)
        return
    lib.pn_terminus_set_type(t_ptr, terminus.get("type") or lib.PN_UNSPECIFIED)
    address = terminus.get("address")
    lib.pn_terminus_set_address(t_ptr, ffi.NULL if address is None else address.encode())
    lib.pn_terminus_set_dynamic(t_ptr, bool(terminus.get("dynamic")))
    lib.pn_terminus_set_durability(t_ptr, terminus.get("durable") or 0)
    lib.pn_terminus_set_expiry_policy(t_ptr, terminus.get("expiry") or 0)
    lib.pn_terminus_set_timeout(t_ptr, terminus.get("timeout") or 0)
    lib.pn_terminus_set_distribution_mode(t_ptr, terminus.get("distribution_mode") or 0)
    for field, getter in (("capabilities", lib.pn_terminus_capabilities),
                          ("properties", lib.pn_terminus_properties),
                          ("filter", lib.pn_terminus_filter),
                          ("outcomes", lib.pn_terminus_outcomes)):
        _decode_data(getter(t_ptr), terminus.get(field) or b"")


def _settle_modes(l_ptr: Any) -> list:
    """The peer's [snd-settle-mode, rcv-settle-mode] of a link."""
    return [int(lib.pn_link_remote_snd_settle_mode(l_ptr)),
            int(lib.pn_link_remote_rcv_settle_mode(l_ptr))]


def _plain_properties(value: Any, depth: int = 0) -> Any:
    """Connection open properties as msgpack-able plain values: str keys, builtin numbers,
    strings, bytes, lists and maps (proton's described or exotic types as their text)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, dict):
        if depth > 8:
            return str(value)
        return {str(k): _plain_properties(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_properties(v, depth + 1) for v in value] if depth <= 8 else str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return bytes(value)
    return str(value)


def _capabilities(terminus: Any) -> set:
    """The capability symbols of a terminus (one symbol or an array of them), as text."""
    data = terminus.capabilities
    caps: set = set()
    if data is None:
        return caps
    data.rewind()
    while data.next():
        try:
            obj = data.get_object()
        except Exception:  # noqa: BLE001 - an odd capability never blocks an attach
            continue
        if isinstance(obj, proton.Array):
            caps.update(str(e) for e in obj.elements)
        elif isinstance(obj, (list, tuple)):
            caps.update(str(e) for e in obj)
        elif obj is not None:
            caps.add(str(obj))
    return caps
