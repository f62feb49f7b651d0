"""Forwarding-path message scanner: every test runs on both builds (pure Python and Cython).

Real messages come from python-qpid-proton; edge encodings (str32/sym addresses, ulong
descriptors, arrays, map8, odd integer widths) are built by hand. Hypothesis checks that the two
builds agree with each other and with proton, and that broken input only ever raises
MessageFormatError. Must not import router_core/agent.
"""
from __future__ import annotations

import os
import struct
from typing import Any, Dict, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import UNDESCRIBED, Array, Data, Message, symbol

from common import amqpscan
from common.amqpscan_types import KEEP, MessageFormatError, ScanResult

try:
    from common import _amqpscan
except ImportError:         # not built: the compiled param skips
    _amqpscan = None

BUILDS = {"python": amqpscan, "cython": _amqpscan}


@pytest.fixture(params=sorted(BUILDS))
def impl(request):
    if BUILDS[request.param] is None:
        pytest.skip("common._amqpscan is not built "
                    "(ROUTER_ONLY_EXT=common._amqpscan python setup.py build_ext --inplace)")
    return BUILDS[request.param]


def both() -> List[Any]:
    """Builds for Hypothesis tests, which compare them directly instead of via the fixture."""
    return [m for m in (amqpscan, _amqpscan) if m is not None]


# ---- hand encoders --------------------------------------------------------------------------

def sec(code: int, value: bytes, wide: bool = False) -> bytes:
    return (b"\x00\x80" + struct.pack(">Q", code) if wide else bytes((0, 0x53, code))) + value


def s8(text: str, code: int = 0xa1) -> bytes:
    data = text.encode()
    return bytes((code, len(data))) + data


def s32(text: str, code: int = 0xb1) -> bytes:
    data = text.encode()
    return bytes((code,)) + struct.pack(">I", len(data)) + data


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes((0xc0, len(body) + 1, len(items))) + body


def map8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes((0xc1, len(body) + 1, len(items))) + body


BODY = sec(0x77, s8("hello"))
NULL = b"\x40"


def decode(buf: bytes) -> Message:
    msg = Message()
    msg.decode(buf)
    return msg


# ---- examples -------------------------------------------------------------------------------

def test_plain_message(impl):
    buf = Message(address="a/b", body="x").encode()
    r = impl.scan(buf)
    assert type(r) is ScanResult
    assert r == ScanResult("a/b", 4, None, None, None, None, 4, 4, buf.index(b"\x00\x53\x77"))


def test_header_priority_and_router_annotations(impl):
    ann = {"user": 1, "x-opt-qd.to": "t/1", "x-opt-qd.phase": 1, "x-opt-qd.ingress": "0/A",
           "x-opt-qd.trace": ["0/A", "0/B"]}
    buf = Message(address="q", priority=9, durable=True, annotations=ann,
                  properties={"p": "v"}, body=b"\x00" * 100).encode()
    r = impl.scan(buf)
    assert (r.to, r.priority, r.ma_to, r.ma_phase, r.ma_ingress, r.ma_trace) == (
        "q", 9, "t/1", 1, "0/A", ["0/A", "0/B"])
    assert buf[r.ma_start:r.ma_start + 3] == b"\x00\x53\x72"
    assert buf[r.ma_end:r.ma_end + 3] == b"\x00\x53\x73"
    assert buf[r.body_start:r.body_start + 3] == b"\x00\x53\x77"


def test_no_sections_and_empty_buffer(impl):
    assert impl.scan(b"") == ScanResult(None, 4, None, None, None, None, 0, 0, 0)
    assert impl.scan(Message().encode()).body_start == len(Message().encode())


def test_ma_insertion_point_after_delivery_annotations(impl):
    buf = sec(0x70, list8(NULL, b"\x50\x02")) + sec(0x71, map8(s8("k", 0xa3), NULL)) + \
        sec(0x73, list8(NULL, NULL, s8("x"))) + BODY
    r = impl.scan(buf)
    assert r.priority == 2 and r.to == "x"
    assert r.ma_start == r.ma_end == buf.index(b"\x00\x53\x73")


@pytest.mark.parametrize("address", [s8("a"), s32("a"), s8("a", 0xa3), s32("a", 0xb3)])
def test_address_encodings(impl, address):
    assert impl.scan(sec(0x73, list8(NULL, NULL, address), wide=True) + BODY).to == "a"


@pytest.mark.parametrize("header,priority", [
    (b"\x45", 4), (list8(NULL), 4), (list8(NULL, NULL), 4), (list8(b"\x41", b"\x50\x00"), 0),
    (b"\xd0" + struct.pack(">II", 7, 2) + b"\x42\x50\xff", 255)])
def test_priority_encodings(impl, header, priority):
    assert impl.scan(sec(0x70, header) + BODY).priority == priority


@pytest.mark.parametrize("encoded,value", [
    (b"\x43", 0), (b"\x44", 0), (b"\x50\x07", 7), (b"\x52\x07", 7), (b"\x53\x07", 7),
    (b"\x51\xff", -1), (b"\x54\xfe", -2), (b"\x55\x05", 5), (b"\x60\x01\x00", 256),
    (b"\x61\xff\xff", -1), (b"\x70\xff\xff\xff\xff", 2**32 - 1), (b"\x71\xff\xff\xff\xfe", -2),
    (b"\x80" + b"\xff" * 8, 2**64 - 1), (b"\x81" + b"\xff" * 8, -1),
    (b"\x41", None), (s8("1"), None), (NULL, None)])
def test_phase_encodings(impl, encoded, value):
    buf = sec(0x72, map8(s8("x-opt-qd.phase", 0xa3), encoded)) + BODY
    assert impl.scan(buf).ma_phase == value


@pytest.mark.parametrize("encoded,value", [
    (b"\x45", []), (list8(s8("0/A"), s32("0/B", 0xb3)), ["0/A", "0/B"]),
    (b"\xe0\x06\x02\xa3" + b"\x01A\x01B", ["A", "B"]),
    (b"\xf0" + struct.pack(">II", 10, 1) + b"\xb1" + struct.pack(">I", 1) + b"A", ["A"]),
    (b"\xe0\x02\x00\xa1", []), (b"\xe0\x04\x02\x54\x01\x02", None),
    (list8(s8("0/A"), b"\x54\x01"), None), (s8("0/A"), None), (NULL, None)])
def test_trace_encodings(impl, encoded, value):
    buf = sec(0x72, map8(s8("x-opt-qd.trace", 0xa3), encoded)) + BODY
    assert impl.scan(buf).ma_trace == value


def test_router_keys_last_wins_and_wrong_types_read_none(impl):
    buf = sec(0x72, map8(s8("x-opt-qd.to", 0xa3), s8("first"), s8("x-opt-qd.to"), s8("second"),
                         b"\x53\x01", s8("x-opt-qd.ingress"),          # ulong key: a user key
                         s8("x-opt-qd.ingress", 0xa3), b"\x54\x01")) + BODY
    r = impl.scan(buf)
    assert (r.ma_to, r.ma_ingress) == ("second", None)


def test_big_body_is_not_walked(impl):
    buf = Message(address="big", body=b"\x01" * 5_000_000).encode()
    r = impl.scan(buf)
    assert r.to == "big" and r.body_start < 20
    # Past the body's descriptor nothing is looked at, even garbage.
    assert impl.scan(buf[:r.body_start + 3] + b"\xff\xff").body_start == r.body_start


@pytest.mark.parametrize("buf", [
    b"\x00\x53\x70",
    sec(0x73, b"\x45") + sec(0x70, b"\x45"),                     # out of order
    sec(0x70, b"\x45") + sec(0x70, b"\x45"),                     # repeated
    sec(0x70, NULL), sec(0x70, list8(NULL, b"\x54\x01")),        # header not a list; bad priority
    sec(0x73, list8(NULL, NULL, b"\x54\x01")),                   # to is not a string
    sec(0x73, list8(NULL, NULL, b"\xa1\x02\xff\xfe")),            # to is not UTF-8
    sec(0x73, list8(NULL, NULL, b"\xa1\x09ab")),                 # string overruns
    sec(0x72, map8(s8("k", 0xa3))),                              # odd map count
    sec(0x72, map8(s8("k", 0xa3), b"\x0f")),                     # invalid constructor
    sec(0x72, b"\xc1\x06\x02" + s8("k", 0xa3) + NULL + NULL),           # map size mismatch
    sec(0x72, b"\xd1\x00\x00\x00\x02\x00\x00\x00\x00"),          # map32 size < 4
    sec(0x72, map8(s8("x-opt-qd.trace", 0xa3), b"\xc0\x04\x01" + s8("a") + b"\x40")),
    sec(0x71, b"\x45"), sec(0x74, b"\xc1\xff\x00")])
def test_malformed_raise_message_format_error(impl, buf):
    with pytest.raises(MessageFormatError) as info:
        impl.scan(buf + BODY)
    assert info.value.condition == "amqp:decode-error"


@pytest.mark.parametrize("head", [b"", sec(0x70, list8(NULL, b"\x50\x07")),
                                  sec(0x73, list8(NULL, NULL, s8("q")))])
@pytest.mark.parametrize("rest", [
    b"xyz" * 10, b"\x70", bytes(range(256)),                    # not a descriptor
    b"\x00\x53\x69" + NULL, b"\x00\x53\x10\x45",                # a code of no section
    b"\x00\x80" + (0x1_0000_0070).to_bytes(8, "big") + NULL,     # a wide code of none
    b"\x00\xa3\x10amqp:header:list\x45",                         # symbolic descriptor
    b"\x00" + BODY, b"\x00\x53" + BODY])                           # 00 00, 00 53 00
def test_bytes_that_are_no_section_are_opaque(impl, head, rest):
    """Where no section begins the rest is opaque, as a body: 1.19 takes a section that does
    not match its descriptor for an absent one and routes such a message (raw bytes too)."""
    r = impl.scan(head + rest)
    assert r.body_start == len(head) and r.ma_start == r.ma_end <= len(head)
    assert (r.to, r.priority) == ("q" if b"q" in head else None, 7 if b"\x07" in head else 4)
    assert not impl.has_annotations(head + rest)
    out = impl.rewrite_annotations(head + rest, r, ingress="0/X")
    assert out.endswith(rest) and len(out) > len(head + rest)
    again = impl.scan(out)
    assert (again.ma_ingress, again.to, again.body_start) == ("0/X", r.to, len(out) - len(rest))
    assert impl.subject(rest) is None


@pytest.mark.parametrize("buf", [
    b"\x00", b"\x00\x53", b"\x00\x53\x70", b"\x00\x80\x00",
    sec(0x72, map8(s8("x-opt-qd.trace", 0xa3), list8(s8("a"))))[:-1]])
def test_a_section_cut_short_raises(impl, buf):
    with pytest.raises(MessageFormatError):
        impl.scan(buf)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_buffer_types(impl, kind):
    buf = Message(address="a", annotations={"x-opt-qd.to": "b"}, body="c").encode()
    r = impl.scan(kind(buf))
    assert r == impl.scan(buf)
    out = impl.rewrite_annotations(kind(buf), r, ingress="0/X")
    assert type(out) is bytes and decode(out).annotations["x-opt-qd.ingress"] == "0/X"


# ---- rewrite examples -----------------------------------------------------------------------

def test_rewrite_adds_section_where_it_belongs(impl):
    buf = Message(address="a", priority=7, body=b"b" * 100).encode()
    r = impl.scan(buf)
    out = impl.rewrite_annotations(buf, r, ingress="0/R", trace_append="0/R")
    assert out[:r.ma_start] == buf[:r.ma_start] and out.endswith(buf[r.ma_end:])
    m = decode(out)
    assert m.annotations == {"x-opt-qd.ingress": "0/R", "x-opt-qd.trace": ["0/R"]}
    assert (m.address, m.priority, bytes(m.body)) == ("a", 7, b"b" * 100)


def test_rewrite_order_overrides_and_strip(impl):
    ann = {"x-opt-qd.stream": 1, "u1": 1, "x-opt-qd.trace": ["0/A"], "x-opt-qd.to": "t",
           "u2": "v", "x-opt-qd.phase": 2}
    buf = Message(annotations=ann, body="x").encode()
    r = impl.scan(buf)
    out = impl.rewrite_annotations(buf, r, trace_append="0/B", to_override=None, phase=5)
    assert list(decode(out).annotations.items()) == [
        ("u1", 1), ("u2", "v"), ("x-opt-qd.trace", ["0/A", "0/B"]), ("x-opt-qd.phase", 5),
        ("x-opt-qd.stream", 1)]
    assert decode(impl.rewrite_annotations(buf, r, strip=True)).annotations == {"u1": 1, "u2": "v"}
    assert decode(impl.rewrite_annotations(buf, r, strip=True, ingress="0/C")).annotations == {
        "u1": 1, "u2": "v", "x-opt-qd.ingress": "0/C"}


def test_rewrite_omits_empty_section(impl):
    buf = Message(address="a", annotations={"x-opt-qd.to": "t"}, body="x").encode()
    r = impl.scan(buf)
    assert impl.rewrite_annotations(buf, r, strip=True) == buf[:r.ma_start] + buf[r.ma_end:]
    plain = Message(address="a", body="x").encode()
    assert impl.rewrite_annotations(plain, impl.scan(plain)) == plain


def test_rewrite_large_values_use_32_bit_forms(impl):
    buf = Message(annotations={"big": "v" * 300}, body="x").encode()
    r = impl.scan(buf)
    out = impl.rewrite_annotations(buf, r, ingress="i" * 300, trace_append="0/" + "t" * 300,
                                   phase=-(2**40))
    assert decode(out).annotations == {"big": "v" * 300, "x-opt-qd.ingress": "i" * 300,
                                       "x-opt-qd.trace": ["0/" + "t" * 300],
                                       "x-opt-qd.phase": -(2**40)}
    assert impl.scan(out).ma_phase == -(2**40)


@pytest.mark.parametrize("kwargs,error", [
    ({"ingress": 5}, TypeError), ({"trace_append": b"x"}, TypeError),
    ({"to_override": 1}, TypeError), ({"phase": "1"}, TypeError), ({"phase": 2**64}, ValueError)])
def test_rewrite_argument_errors(impl, kwargs, error):
    buf = Message(body="x").encode()
    with pytest.raises(error):
        impl.rewrite_annotations(buf, impl.scan(buf), **kwargs)


def test_rewrite_rejects_offsets_from_another_message(impl):
    buf = Message(annotations={"k": 1}, body="x").encode()
    r = impl.scan(buf)
    for bad in (r._replace(ma_start=r.ma_start + 1), r._replace(ma_end=len(buf) + 1),
                r._replace(ma_end=r.ma_end - 1), r._replace(ma_start=-1, ma_end=-1)):
        with pytest.raises(MessageFormatError):
            impl.rewrite_annotations(buf, bad)


# ---- Hypothesis: both builds agree with each other and with proton --------------------------

texts = st.text(max_size=8) | st.text(min_size=250, max_size=300)
symbols = st.text(st.characters(max_codepoint=127), max_size=8)   # AMQP symbols are ASCII
user_values = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), texts,
                        st.binary(max_size=20), st.lists(st.integers(0, 9), max_size=3))
trace_values = st.one_of(st.lists(texts, max_size=4), st.lists(symbols.map(symbol), max_size=3),
                         st.lists(st.text(max_size=5), min_size=1, max_size=3).map(
                             lambda hops: Array(UNDESCRIBED, Data.STRING, *hops)))
router_values = {
    "x-opt-qd.to": texts | st.integers(0, 5), "x-opt-qd.ingress": texts | st.none(),
    "x-opt-qd.phase": st.integers(-2**63, 2**63 - 1) | st.booleans() | texts,
    "x-opt-qd.trace": trace_values | st.integers(0, 5), "x-opt-qd.stream": st.integers(0, 5)}
annotations = st.builds(
    lambda user, router: {**user, **router},
    st.dictionaries(symbols.filter(lambda k: not k.startswith("x-opt-qd.")),
                    user_values, max_size=4),
    st.fixed_dictionaries({}, optional=router_values))
bodies = st.one_of(st.none(), texts, st.binary(max_size=300), st.integers(-2**63, 2**63 - 1),
                   st.lists(st.integers(-99, 99), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                        st.integers(-99, 99), max_size=3))


@st.composite
def messages(draw) -> bytes:
    body = draw(bodies)
    msg = Message(body=body, inferred=draw(st.booleans()) and isinstance(body, (bytes, list)))
    if draw(st.booleans()):
        msg.address = draw(texts)
    priority = draw(st.none() | st.integers(0, 9))
    if priority is not None:
        msg.priority = priority
    msg.durable = draw(st.booleans())
    if draw(st.booleans()):
        msg.instructions = {"da": draw(st.integers(0, 9))}
    ann = draw(st.none() | annotations)
    if ann:
        msg.annotations = ann
    if draw(st.booleans()):
        msg.subject = draw(texts)
    if draw(st.booleans()):
        msg.properties = draw(st.dictionaries(st.text(max_size=5), st.integers(-99, 99) | texts,
                                              max_size=3))
    return msg.encode()


def expected_scan(buf: bytes) -> Dict[str, Any]:
    """What proton's full decode says the scanner must find."""
    msg = decode(buf)
    ann = msg.annotations or {}
    to, phase, trace = ann.get("x-opt-qd.to"), ann.get("x-opt-qd.phase"), ann.get("x-opt-qd.trace")
    ingress = ann.get("x-opt-qd.ingress")
    if isinstance(trace, Array):
        trace = list(trace.elements)
    return {"to": msg.address, "priority": msg.priority,
            "ma_to": to if isinstance(to, str) else None,
            "ma_phase": phase if isinstance(phase, int) and not isinstance(phase, bool) else None,
            "ma_ingress": ingress if isinstance(ingress, str) else None,
            "ma_trace": trace if isinstance(trace, list) and all(isinstance(h, str) for h in trace)
            else None}


def scan_all(buf: bytes) -> Any:
    """Every build's scan of ``buf``; they must all agree (same result or all MessageFormatError)."""
    outcomes = []
    for build in both():
        try:
            outcomes.append(build.scan(buf))
        except MessageFormatError:
            outcomes.append(MessageFormatError)
    assert all(o == outcomes[0] for o in outcomes), outcomes
    return outcomes[0]


# AMQPSCAN_EXAMPLES=5000 for a deeper soak; the default keeps the file well under 60 s.
FAST = settings(max_examples=int(os.environ.get("AMQPSCAN_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(messages())
def test_scan_agrees_with_proton(buf):
    r = scan_all(buf)
    assert r is not MessageFormatError
    assert {k: getattr(r, k) for k in expected_scan(buf)} == expected_scan(buf)
    assert r.ma_start <= r.ma_end <= r.body_start <= len(buf)


rewrite_args = st.fixed_dictionaries({}, optional={
    "ingress": st.none() | texts, "trace_append": st.none() | texts,
    "to_override": st.just(KEEP) | st.none() | texts,
    "phase": st.just(KEEP) | st.none() | st.integers(-2**63, 2**64 - 1), "strip": st.booleans()})


@FAST
@given(messages(), rewrite_args)
def test_rewrite_agrees_with_proton(buf, kwargs):
    r = scan_all(buf)
    outputs = [build.rewrite_annotations(buf, build.scan(buf), **kwargs) for build in both()]
    assert all(o == outputs[0] for o in outputs)
    out = outputs[0]
    assert out[:r.ma_start] == buf[:r.ma_start] and out.endswith(buf[r.ma_end:])
    before, after = decode(buf), decode(out)
    for field in ("address", "priority", "durable", "subject", "properties", "instructions"):
        assert getattr(after, field) == getattr(before, field)
    assert after.body == before.body or bytes(after.body) == bytes(before.body)

    ann = dict(before.annotations or {})
    strip = kwargs.get("strip", False)
    want = {k: v for k, v in ann.items() if not k.startswith("x-opt-qd.")}
    values = {"x-opt-qd.to": None if strip else r.ma_to,
              "x-opt-qd.ingress": None if strip else r.ma_ingress,
              "x-opt-qd.trace": None if strip else r.ma_trace,
              "x-opt-qd.phase": None if strip else r.ma_phase}
    if kwargs.get("to_override", KEEP) is not KEEP:
        values["x-opt-qd.to"] = kwargs["to_override"]
    if kwargs.get("phase", KEEP) is not KEEP:
        values["x-opt-qd.phase"] = kwargs["phase"]
    if kwargs.get("ingress") is not None:
        values["x-opt-qd.ingress"] = kwargs["ingress"]
    if kwargs.get("trace_append") is not None:
        values["x-opt-qd.trace"] = (values["x-opt-qd.trace"] or []) + [kwargs["trace_append"]]
    want.update((k, v) for k, v in values.items() if v is not None)
    if not strip:
        want.update((k, v) for k, v in ann.items() if k == "x-opt-qd.stream")
    assert dict(after.annotations or {}) == want
    again = scan_all(out)
    assert (again.ma_to, again.ma_ingress, again.ma_trace, again.ma_phase) == tuple(
        values[k] for k in ("x-opt-qd.to", "x-opt-qd.ingress", "x-opt-qd.trace", "x-opt-qd.phase"))


def section_ends(buf: bytes, stop: int) -> List[int]:
    """Offsets where the sections before ``stop`` end, according to proton's decoder."""
    ends, pos = [0], 0
    while pos < stop:
        pos += Data().decode(buf[pos:])
        ends.append(pos)
    return ends


@FAST
@given(messages(), st.data())
def test_truncated_messages_raise_or_agree(buf, data):
    full = scan_all(buf)
    cut = data.draw(st.integers(0, len(buf)))
    r = scan_all(buf[:cut])
    if cut < full.body_start and cut not in section_ends(buf, full.body_start):
        assert r is MessageFormatError


@FAST
@given(messages(), st.data())
def test_corrupted_messages_never_crash(buf, data):
    mutated = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    mutated = bytes(mutated)
    r = scan_all(mutated)
    if r is not MessageFormatError:
        outputs = [build.rewrite_annotations(mutated, r, ingress="0/X", trace_append="0/X")
                   for build in both()]
        assert all(o == outputs[0] for o in outputs)


@FAST
@given(st.binary(max_size=64) | st.builds(lambda p, t: p + t, st.sampled_from(
    [b"\x00\x53\x70", b"\x00\x53\x72", b"\x00\x53\x73", b"\x00\x80" + b"\x00" * 7 + b"\x72"]),
    st.binary(max_size=64)))
def test_garbage_never_crashes(buf):
    scan_all(buf)


def annotations_check(buf: bytes) -> bool:
    """Every build's has_annotations of ``buf`` (they must agree), and what the worker relies on
    when it skips a message on its way to a stripping connection: False only where a full scan
    finds no router annotation, or refuses the message."""
    answers = {build.has_annotations(buf) for build in both()}
    assert len(answers) == 1, answers
    answer = answers.pop()
    if not answer:
        r = scan_all(buf)
        assert r is MessageFormatError or (r.ma_to, r.ma_phase, r.ma_ingress, r.ma_trace) == (
            None, None, None, None)
    return answer


@FAST
@given(messages(), st.data())
def test_has_annotations_is_safe_to_skip_a_scan_on(buf, data):
    assert annotations_check(buf) == (b"\x00\x53\x72" in buf and decode(buf).annotations
                                      is not None)
    mutated = bytearray(buf)
    for _ in range(data.draw(st.integers(0, 4))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    annotations_check(bytes(mutated[:data.draw(st.integers(0, len(mutated)))]))


@pytest.mark.parametrize("buf,answer", [
    (b"", False),
    (sec(0x77, b"\xa1\x01x"), False),                                  # a body alone
    (sec(0x70, list8(b"\x42")) + sec(0x71, map8()) + sec(0x73, list8()), False),
    (sec(0x70, list8(b"\x42"), wide=True) + sec(0x72, map8()), True),  # wide descriptor
    (sec(0x73, list8()) + sec(0x72, map8()), False),                   # out of order: scan refuses
    (sec(0x71, map8()) + sec(0x70, list8()), True),                    # unsure: scan decides
    (b"\x00\x53", True),                                              # truncated: scan decides
    (sec(0x70, b"\xc1\x01\x00"), True),                               # a header that is a map
])
def test_has_annotations_cases(buf, answer):
    assert annotations_check(buf) is answer


# ---- subject (exchanges: router_core/exchanges.py) -------------------------------------------

def subject_all(buf: bytes) -> Any:
    """Every build's subject of ``buf``; they must agree (same value or all MessageFormatError)."""
    outcomes = []
    for build in both():
        try:
            outcomes.append(build.subject(buf))
        except MessageFormatError:
            outcomes.append(MessageFormatError)
    assert all(o == outcomes[0] for o in outcomes), outcomes
    return outcomes[0]


@FAST
@given(messages())
def test_subject_agrees_with_proton(buf):
    assert subject_all(buf) == decode(buf).subject


@FAST
@given(messages(), st.data())
def test_subject_of_damaged_messages_agrees_and_never_crashes(buf, data):
    cut = data.draw(st.integers(0, len(buf)))
    subject_all(buf[:cut])
    mutated = bytearray(buf)
    if mutated:
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    subject_all(bytes(mutated))


def test_subject_encodings(impl):
    props = lambda subject: sec(0x73, list8(b"\x40", b"\x40", b"\x40", subject))  # noqa: E731
    assert impl.subject(props(s8("a.b"))) == "a.b"
    assert impl.subject(props(s8("sym", 0xa3))) == "sym"
    assert impl.subject(props(s32("long"))) == "long"
    assert impl.subject(props(b"\x40")) is None            # null
    assert impl.subject(props(b"\x54\x05")) is None        # not a string
    assert impl.subject(sec(0x73, list8(b"\x40", b"\x40"))) is None  # absent
    assert impl.subject(sec(0x77, b"\x40")) is None        # a body, no properties
    assert impl.subject(b"") is None
    with pytest.raises(MessageFormatError):
        impl.subject(props(b"\xa1\x02\xff\xfe"))            # bad UTF-8
