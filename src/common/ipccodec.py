"""The batch codec of the IPC schema (common/ipc.py), pure-Python reference.

``cython/_ipccodec.pyx`` is its compiled build (``common._ipccodec``), proven equal by
tests/unit/test_ipccodec.py; ``common.ipc`` chooses between them (``common.builds``) and is the
only user. The wire format is ipc.py's: 4 bytes (little-endian) giving the msgpack header's
length, the header ``[version, peer, [[code, field, ...], ...]]``, then the payloads of the
payload-carrying items back to back (each such item holds its payload's length instead).
Tables come from ipc.py, so this module knows no message type and imports nothing of the router.
"""
from __future__ import annotations

import struct
from typing import Any, Iterable

import msgpack

_HEADER_LEN = struct.Struct("<I")
_new_tuple = tuple.__new__


class Codec:
    """Encodes and decodes batches for one schema version.

    ``encode_table``: message class -> (code, carries a payload); ``decode_table``: code ->
    (message class, number of fields, carries a payload); ``error``: the exception class raised
    for a malformed frame."""

    def __init__(self, version: int, encode_table: dict, decode_table: dict, error: type) -> None:
        self.version = version
        self.encode_table = encode_table
        self.decode_table = decode_table
        self.error = error
        self._pack = msgpack.Packer(use_bin_type=True).pack  # one Packer: none made per batch

    def encode(self, peer: int, messages: Iterable[tuple]) -> bytes:
        """The one frame of a batch: payloads travel untouched, each payload-carrying item
        records its length in place of the payload (KeyError: not a message type)."""
        parts: list = [b"", b""]  # the header's length and the header, once known
        items = []
        append = items.append
        table = self.encode_table
        for msg in messages:
            code, has_payload = table[type(msg)]
            if has_payload:  # tuples, not lists: msgpack packs both as arrays, tuples build faster
                payload = msg[-1]
                append((code,) + msg[:-1] + (len(payload),))
                parts.append(payload)
            else:
                append((code,) + msg)
        header = self._pack([self.version, peer, items])
        parts[0] = _HEADER_LEN.pack(len(header))
        parts[1] = header
        return b"".join(parts)

    def decode(self, frame: Any) -> tuple:
        """``(peer, [message, ...])`` of one batch frame (bytes, or a zmq.Frame); payloads are
        zero-copy memoryview slices of ``frame``. Raises ``error`` if malformed."""
        error = self.error
        view = memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
        size = len(view)
        if size < 4:
            raise error("batch frame shorter than its header length")
        start = 4 + _HEADER_LEN.unpack_from(view)[0]
        if start > size:
            raise error("header length overruns the batch frame")
        try:
            version, peer, items = msgpack.unpackb(view[4:start], raw=False, use_list=True,
                                                   strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise error(f"bad batch header: {exc}") from exc
        if version != self.version:
            raise error(f"IPC version {version} is not {self.version}")
        table = self.decode_table
        offset = start
        out = []
        append = out.append
        try:
            for item in items:
                cls, nfields, has_payload = table[item[0]]
                if len(item) != nfields + 1:
                    raise error(f"{cls.__name__} needs {nfields} fields, got {len(item) - 1}")
                if has_payload:
                    end = offset + item[-1]
                    if end > size or end < offset:
                        raise error("payload lengths overrun the batch frame")
                    item[-1] = view[offset:end]
                    offset = end
                append(_new_tuple(cls, item[1:]))
        except (KeyError, IndexError, TypeError, OverflowError) as exc:
            raise error(f"bad batch item: {exc!r}") from exc
        if offset != size:
            raise error("batch frame longer than its items")
        return peer, out
