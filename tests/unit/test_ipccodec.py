"""The IPC batch codec: the compiled build (common._ipccodec) is the reference (common.ipccodec).

Same frames from the same messages, the same messages (types, fields, payload bytes) from the
same frames, and IpcError from the same malformed frames, in both builds; and the builds read each
other's frames. ``common.ipc`` uses whichever ``common.builds`` chooses (test_ipc.py covers it).
"""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import ipc, ipccodec
from common.builds import extensions_required

try:
    from common import _ipccodec
except ImportError:         # not built: the comparisons skip (a failure under REQUIRE_EXTENSIONS)
    _ipccodec = None

PURE = ipccodec.Codec(ipc.IPC_VERSION, ipc._ENCODE, ipc._DECODE, ipc.IpcError)
COMPILED = (_ipccodec.Codec(ipc.IPC_VERSION, ipc._ENCODE, ipc._DECODE, ipc.IpcError)
            if _ipccodec is not None else None)


@pytest.fixture(autouse=True)
def _compiled_built():
    if COMPILED is None:
        if extensions_required():
            pytest.fail("common._ipccodec is not built")
        pytest.skip("common._ipccodec is not built "
                    "(ROUTER_ONLY_EXT=common._ipccodec python setup.py build_ext --inplace)")


# Field values as they cross processes: msgpack-able scalars, lists and string-keyed dicts.
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.text(max_size=20), st.binary(max_size=20),
                    st.floats(allow_nan=False))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)


@st.composite
def messages(draw):
    cls = draw(st.sampled_from(ipc.MESSAGE_TYPES))
    fields = [draw(values) for _ in cls._fields]
    if cls in ipc._HAS_PAYLOAD:
        fields[-1] = draw(st.one_of(st.binary(max_size=300),
                                    st.binary(max_size=300).map(memoryview)))
    return cls(*fields)


def plain(batch: tuple, decoded: bool = True) -> tuple:
    """A batch with its payloads as bytes; a ``decoded`` one must carry them as memoryview
    slices of the frame, in both builds."""
    peer, out = batch
    rows = []
    for msg in out:
        assert type(msg) in ipc.CODE_OF
        if type(msg) in ipc._HAS_PAYLOAD:
            assert type(msg[-1]) is memoryview or not decoded
            rows.append((type(msg), tuple(msg[:-1]), bytes(msg[-1])))
        else:
            rows.append((type(msg), tuple(msg)))
    return peer, rows


def outcome(codec, frame):
    try:
        return plain(codec.decode(frame))
    except ipc.IpcError:
        return "IpcError"


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(-1, 1000), st.lists(messages(), max_size=12))
def test_same_frame_and_same_messages(peer, batch):
    frame = PURE.encode(peer, batch)
    assert COMPILED.encode(peer, batch) == frame
    assert plain(COMPILED.decode(frame)) == plain(PURE.decode(frame))
    assert plain(PURE.decode(frame))[1] == plain((peer, batch), decoded=False)[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), st.data())
def test_same_errors_on_damaged_frames(batch, data):
    frame = bytearray(PURE.encode(7, batch))
    cuts = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                              max_size=4))
    for pos, byte in cuts:
        frame[pos] = byte
    if data.draw(st.booleans()):
        frame = frame[:data.draw(st.integers(0, len(frame)))]
    frame = bytes(frame)
    assert repr(outcome(COMPILED, frame)) == repr(outcome(PURE, frame))  # a damaged float: NaN


def _frame(header) -> bytes:
    packed = msgpack.packb(header)
    return len(packed).to_bytes(4, "little") + packed


@pytest.mark.parametrize("frame", [
    b"", b"\x00", b"\xff\xff\xff\xff",
    _frame([ipc.IPC_VERSION, 0, 5]),                                   # items not a list
    _frame([ipc.IPC_VERSION, 0, ["abc"]]),                             # an item not a list
    _frame([ipc.IPC_VERSION, 0, [[]]]),                                # an empty item
    _frame([ipc.IPC_VERSION, 0, [[[1], 2]]]),                          # unhashable code
    _frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, 2**64 - 1]]]),
    _frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, 1.5]]]),
    _frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, "x"]]]),
    _frame([ipc.IPC_VERSION, 0, [[ipc.CODE_OF[ipc.Deliver], 1, 2, False, -1]]]),
    _frame([ipc.IPC_VERSION, 0]),                                      # two header fields
    _frame({"a": 1}),
])
def test_malformed_frames_raise_ipc_error_in_both(frame):
    for codec in (PURE, COMPILED):
        with pytest.raises(ipc.IpcError):
            codec.decode(frame)


def test_unknown_message_type_is_a_key_error_in_both():
    class Other(tuple):
        pass
    for codec in (PURE, COMPILED):
        with pytest.raises(KeyError):
            codec.encode(0, [Other((1,))])


def test_zmq_frame_buffers_are_read_in_place():
    import zmq
    frame = zmq.Frame(PURE.encode(2, [ipc.Deliver(1, 2, False, b"abc")]))
    for codec in (PURE, COMPILED):
        peer, out = codec.decode(frame)
        assert peer == 2 and bytes(out[0].payload) == b"abc"


# The compiled build writes and reads msgpack itself for the types the router sends and leaves
# everything else to msgpack: the sizes where msgpack changes its encoding, values only msgpack
# handles, and headers it wrote differently (but validly) must give the reference's results.
INT_EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
             2**64 - 1, 2**64, -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1,
             -2**63, -2**63 - 1]
SIZE_EDGES = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]


class IntFlag(int):
    pass


def both_encode(peer, batch):
    """The frame both builds make (or the error both raise)."""
    def run(codec):
        try:
            return codec.encode(peer, batch)
        except Exception as exc:  # noqa: BLE001 - compared
            return type(exc)
    return run(COMPILED), run(PURE)


@pytest.mark.parametrize("value", INT_EDGES + [0.5, -0.0, float("inf"), "é" * 3, "\udc80",
                                               b"", bytearray(b"ab"), memoryview(b"cd"),
                                               (1, (2, 3)), IntFlag(5), {1: 2, "a": [None]},
                                               {"k": {"k": {"k": 1}}}, set()])
def test_field_values_at_msgpack_edges(value):
    compiled, pure = both_encode(3, [ipc.Disposition(1, 36, True, value)])
    assert compiled == pure
    if isinstance(pure, bytes):
        assert plain(COMPILED.decode(pure)) == plain(PURE.decode(pure))


@pytest.mark.parametrize("size", SIZE_EDGES)
def test_sizes_where_msgpack_changes_encoding(size):
    for value in ("s" * size, b"b" * size, [0] * size, {i: None for i in range(size)}):
        batch = [ipc.Disposition(size, 36, False, value), ipc.Deliver(2, 3, False, b"p" * size)]
        compiled, pure = both_encode(1, batch)
        assert compiled == pure
        assert plain(COMPILED.decode(pure)) == plain(PURE.decode(pure))


def test_nesting_past_the_fast_paths():
    deep: list = []
    for _ in range(40):
        deep = [deep]
    compiled, pure = both_encode(0, [ipc.Disposition(1, 36, True, deep)])
    assert compiled == pure
    assert plain(COMPILED.decode(pure)) == plain(PURE.decode(pure))


def _raw_frame(header: bytes, payload: bytes = b"") -> bytes:
    return len(header).to_bytes(4, "little") + header + payload


DELIVER = ipc.CODE_OF[ipc.Deliver]
DISPOSITION = ipc.CODE_OF[ipc.Disposition]


@pytest.mark.parametrize("header,payload", [
    # valid msgpack the codec never writes: wide ints, str16, array16, float32
    (bytes([0x93, ipc.IPC_VERSION, 0xcf, 0, 0, 0, 0, 0, 0, 0, 7, 0x91, 0x95, DELIVER,
            0xd1, 0, 1, 2, 0xc2, 3]), b"abc"),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0xdc, 0, 1, 0x95, DISPOSITION, 1, 36, 0xc3,
            0xda, 0, 2]) + b"hi", b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DISPOSITION, 1, 36, 0xc3, 0xca]) +
     b"\x3f\xc0\x00\x00", b""),
    (bytes([0xdc, 0, 3, ipc.IPC_VERSION, 0, 0x90]), b""),                 # array16 header
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, 0xcc, DISPOSITION, 1, 36, 0xc3, 0xc0]), b""),
    # what only msgpack reads, or refuses: ext types, bad UTF-8, list keys, extra bytes
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DISPOSITION, 1, 36, 0xc3, 0xd4, 5, 9]), b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DISPOSITION, 1, 36, 0xc3, 0xa2, 0xff, 0xfe]),
     b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DISPOSITION, 1, 36, 0xc3, 0x81, 0x90, 1]),
     b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x90, 0xc0]), b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DELIVER, 1, 2, 0xc2, 0xc3]), b"x"),  # True
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DELIVER, 1, 2, 0xc2, 0xcb]) + b"\0" * 8, b""),
    (bytes([0x93, ipc.IPC_VERSION, 0, 0x91, 0x95, DELIVER, 1, 2, 0xc2, 0xcf]) + b"\xff" * 8,
     b""),
])
def test_headers_only_msgpack_writes_read_as_the_reference(header, payload):
    frame = _raw_frame(header, payload)
    assert outcome(COMPILED, frame) == outcome(PURE, frame)


def test_wider_views_and_generators_as_the_reference():
    import array
    frame = PURE.encode(1, [ipc.Deliver(1, 2, False, b"abcd")])
    assert outcome(COMPILED, frame) == outcome(PURE, frame)
    wide = memoryview(array.array("i", frame + b"\0" * (-len(frame) % 4)))
    assert repr(outcome(COMPILED, wide)) == repr(outcome(PURE, wide))
    batch = [ipc.SettleOut(5, 36), ipc.LinkFlow(1, 2, True)]
    assert COMPILED.encode(9, iter(batch)) == PURE.encode(9, iter(batch))


@pytest.mark.parametrize("payloads", [["text"], [b"ok", "text"], [b"ok", 5]])
def test_a_payload_without_a_buffer_fails_as_the_reference(payloads):
    batch = [ipc.Deliver(i, 2, False, p) for i, p in enumerate(payloads)]
    compiled, pure = both_encode(1, batch)
    assert compiled == pure and isinstance(pure, type) and issubclass(pure, Exception)
