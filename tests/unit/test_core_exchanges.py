"""Exchanges and bindings without processes: the binding tree agrees with a plain reference
matcher (Hypothesis, both match methods), 1.19's key rules and checks (common/exchanges.py), the
compiled core and the pure one agree on random traffic through exchanges, and a reload plans
exchange and binding changes in a safe order."""
from __future__ import annotations

from typing import Optional

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from proton import Message

from common import exchanges as cx
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, STATE_RELEASED, ConnOpened, Disposition, LinkAttach,
    LinkDetach, LinkFlow, SettleIn, Transfer, UpdateIn)
from router_core import core as pure_core
from router_core.exchanges import BindingTree
from supervisor.reload import plan_reload
from test_core import NOT_BUILT, compiled_core


# --- the matcher ------------------------------------------------------------------------------
def reference_match(pattern: list, words: list, one: str) -> bool:
    """Does ``pattern`` match ``words``: ``one`` is exactly one word, '#' zero or more."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, words[k:], one) for k in range(len(words) + 1))
    if not words:
        return False
    if head == one or head == words[0]:
        return reference_match(rest, words[1:], one)
    return False


class Collect:
    def __init__(self) -> None:
        self.found: list = []

    def visit(self, bindings: list) -> None:
        self.found.extend(bindings)


WORDS = ["a", "b", "c", ""]


def keys(method: int):
    sep = cx.SEPARATOR[method]
    tokens = st.sampled_from(WORDS + [cx.ONE_WORD[method], "#"])
    return st.lists(tokens, min_size=1, max_size=5).map(lambda ws: sep.join(ws))


def subjects(method: int):
    sep = cx.SEPARATOR[method]
    return st.lists(st.sampled_from(WORDS), max_size=6).map(lambda ws: sep.join(ws))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([cx.METHOD_AMQP, cx.METHOD_MQTT]), st.data())
def test_tree_finds_exactly_what_the_reference_matches(method, data):
    patterns = data.draw(st.lists(keys(method), max_size=8))
    patterns = [p for p in patterns if cx.key_valid(p, method)]
    tree = BindingTree(method)
    for n, key in enumerate(patterns):
        tree.add(cx.normal_words(key, method), (n, key))
    for subject in data.draw(st.lists(subjects(method), min_size=1, max_size=4)):
        words = cx.words_of(subject, method)
        seen = Collect()
        tree.search(words, seen)
        expected = {(n, k) for n, k in enumerate(patterns)
                    if reference_match(cx.words_of(k, method), words, cx.ONE_WORD[method])}
        assert set(seen.found) == expected, (patterns, subject)
    # removing every key leaves an empty tree (nothing left behind)
    for n, key in enumerate(patterns):
        tree.remove(cx.normal_words(key, method), (n, key))
    assert tree.root.empty()


def test_words_as_1x_reads_them():
    amqp = cx.METHOD_AMQP
    assert cx.words_of("a.b", amqp) == ["a", "b"]
    assert cx.words_of("..a.", amqp) == ["a"]
    assert cx.words_of("a..b", amqp) == ["a", "", "b"]
    assert cx.words_of("a/b", amqp) == ["a/b"]          # amqp: '.' only
    assert cx.words_of("a/b", cx.METHOD_MQTT) == ["a", "b"]
    assert cx.normal_words("#.#.*.a", amqp) == ["*", "#", "a"]
    assert not cx.key_valid("...", amqp) and not cx.key_valid("", amqp)
    assert not cx.key_valid("a/#/b", cx.METHOD_MQTT) and cx.key_valid("a.#.b", amqp)


def test_search_counts_a_key_reached_twice_as_1x():
    """1.19's tree search reaches '#.a.#' three times for 'a.a.a': three matches counted."""
    tree = BindingTree(cx.METHOD_AMQP)
    tree.add(cx.normal_words("#.a.#", cx.METHOD_AMQP), "k")
    seen = Collect()
    tree.search(["a", "a", "a"], seen)
    assert seen.found.count("k") >= 2


def test_checks_and_texts():
    ex = {"name": "E", "address": "A"}
    assert cx.exchange_problem({"name": "F"}, [ex]) == "exchange address is mandatory"
    assert cx.exchange_problem({"name": "F", "address": "A"}, [ex]) == \
        "duplicate exchange address"
    assert cx.exchange_problem({"name": "E", "address": "B"}, [ex]) == "duplicate exchange name"
    assert cx.exchange_problem({"name": "F", "address": "B", "phase": 10}, [ex]) == \
        "phase must be in the range 0-9"
    b = {"name": "b", "exchangeName": "E", "nextHopAddress": "x"}
    assert cx.binding_problem({**b, "exchangeName": "Z"}, [ex], []) == \
        "Named exchange does not exist"
    assert cx.binding_problem({"exchangeName": "E"}, [ex], []) == "No next hop specified"
    assert cx.binding_problem({**b, "bindingKey": "."}, [ex], []) == \
        "The binding key pattern is invalid"
    assert cx.binding_problem({**b, "nextHopAddress": "y"}, [ex], [b]) == \
        "Duplicate next hop name"
    assert cx.binding_problem({**b, "name": "c", "bindingKey": "#"}, [ex], [b]) == \
        "Next hop for key already exists"
    assert cx.binding_problem(b, [ex], []) is None


# --- the compiled core and the pure one agree -------------------------------------------------
EXCHANGES = [{"identity": "exchange/0", "name": "E", "address": "ex", "alternateAddress": "alt"},
             {"identity": "exchange/1", "name": "M", "address": "mq", "matchMethod": "mqtt",
              "phase": 0}]
BINDINGS = [{"identity": "binding/0", "name": "b0", "exchangeName": "E", "bindingKey": "a.*",
             "nextHopAddress": "h1"},
            {"identity": "binding/1", "name": "b1", "exchangeName": "E", "bindingKey": "#.b",
             "nextHopAddress": "h2"},
            {"identity": "binding/2", "name": "b2", "exchangeName": "E", "bindingKey": "a.#",
             "nextHopAddress": "h1"},
            {"identity": "binding/3", "name": "b3", "exchangeName": "M", "bindingKey": "x/+",
             "nextHopAddress": "ex"},  # an exchange bound to an exchange
            {"identity": "binding/4", "name": "b4", "exchangeName": "M", "bindingKey": "#",
             "nextHopAddress": "mq"}]  # and to itself: no loop


def _payload(subject: Optional[str]) -> bytes:
    return Message(subject=subject, body="x").encode()


PAYLOADS = st.sampled_from([_payload(s) for s in
                            (None, "a.b", "a", "q.b", "z", "x/y", "a.x.b", "")] + [b"\x00bad"])
LINKS = st.sampled_from([1, 2, 3, 4, 5])


class Step:
    """Not an IPC command: create or delete an exchange/binding on the core."""

    def __init__(self, what: str, arg) -> None:
        self.what, self.arg = what, arg

    def __repr__(self) -> str:
        return f"Step({self.what}, {self.arg!r})"

    def apply(self, core) -> None:
        try:
            getattr(core, self.what)(self.arg)
        except ValueError:
            pass


steps = st.one_of(
    st.builds(Transfer, st.integers(1, 30), st.sampled_from([1, 2]), st.just(None),
              st.booleans(), st.integers(0, 9), PAYLOADS),
    st.builds(LinkFlow, st.sampled_from([3, 4, 5, 6]), st.integers(0, 10), st.booleans()),
    st.builds(Disposition, st.integers(1, 30), st.sampled_from([STATE_ACCEPTED,
                                                                STATE_RELEASED]),
              st.booleans(), st.none()),
    st.builds(SettleIn, st.integers(1, 30), st.just(STATE_ACCEPTED)),
    st.builds(LinkDetach, st.sampled_from([3, 4, 5, 6]), st.booleans(), st.just("")),
    st.builds(Step, st.just("delete_binding"), st.sampled_from([b["identity"] for b in BINDINGS])),
    st.builds(Step, st.just("create_binding"), st.sampled_from(BINDINGS)),
    st.builds(Step, st.just("delete_exchange"), st.sampled_from(["exchange/0", "exchange/1"])),
    st.builds(Step, st.just("create_exchange"), st.sampled_from(EXCHANGES)),
)


def _prologue() -> list:
    return [ConnOpened(1, "normal", "in", "h:1", "c", "l", "", "", False, 250, 1),
            LinkAttach(1, 1, DIR_IN, "s", "ex", False, False, 4),
            LinkAttach(2, 1, DIR_IN, "m", "mq", False, False, 4),
            LinkAttach(3, 1, DIR_OUT, "r1", "h1", False, False, 4),
            LinkAttach(4, 1, DIR_OUT, "r2", "h2", False, False, 4),
            LinkAttach(5, 1, DIR_OUT, "ra", "alt", False, False, 4),
            LinkFlow(3, 3, False), LinkFlow(4, 3, False), LinkFlow(5, 3, False),
            LinkAttach(6, 1, DIR_OUT, "own", "ex", False, False, 4)]  # the exchange's own


@pytest.mark.skipif(compiled_core is None, reason=NOT_BUILT)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, max_size=60))
def test_builds_agree_through_exchanges(sequence):
    kwargs = dict(seed=3, exchanges=EXCHANGES, bindings=BINDINGS)
    cores = [pure_core.RouterCore("R1", **kwargs), compiled_core.RouterCore("R1", **kwargs)]
    for core in cores:
        core.handle_batch(0, _prologue(), 0.0)
    for n, cmd in enumerate(sequence):
        for core in cores:
            if isinstance(cmd, Step):
                cmd.apply(core)
            else:
                core.handle(0, cmd, float(n))
        effects = [core.take_effects() for core in cores]
        assert effects[0] == effects[1], (n, cmd)
    assert cores[0].snapshot() == cores[1].snapshot()


def test_matched_and_unmatched_outcomes_in_the_core():
    core = pure_core.RouterCore("R1", exchanges=EXCHANGES[:1], bindings=BINDINGS[:1])
    core.handle_batch(0, _prologue()[:5] + [LinkFlow(3, 3, False)], 0.0)
    core.take_effects()
    core.handle(0, Transfer(1, 1, None, False, 4, _payload("a.b")), 0.0)
    core.handle(0, Transfer(2, 1, None, False, 4, _payload("z")), 0.0)  # alt: no consumer
    effects = core.take_effects()[0]
    updates = [e for e in effects if isinstance(e, UpdateIn)]
    assert [(u.dlv_id, u.state, u.settled) for u in updates] == [
        (1, STATE_ACCEPTED, True), (2, STATE_RELEASED, True)]
    ex = core.snapshot()["exchanges"]["exchange/0"]
    assert (ex["receivedCount"], ex["forwardedCount"], ex["droppedCount"]) == (2, 1, 1)


# --- reload ----------------------------------------------------------------------------------
def test_reload_plans_bindings_of_a_changed_exchange():
    old = {"exchanges": [dict(EXCHANGES[0])], "bindings": [dict(BINDINGS[0]), dict(BINDINGS[1])]}
    new = {"exchanges": [{**EXCHANGES[0], "alternateAddress": "alt2"}],
           "bindings": [dict(BINDINGS[0]), dict(BINDINGS[1])]}
    plan = [(c["op"], c["type"].rsplit(".", 1)[-1], c["name"])
            for c in plan_reload(old, new).changes]
    assert plan == [("delete", "binding", "b0"), ("delete", "binding", "b1"),
                    ("delete", "exchange", "E"), ("create", "exchange", "E"),
                    ("create", "binding", "b0"), ("create", "binding", "b1")]


def test_reload_plans_a_removed_exchange_after_its_bindings():
    old = {"exchanges": [dict(EXCHANGES[0])], "bindings": [dict(BINDINGS[0])]}
    plan = [(c["op"], c["type"].rsplit(".", 1)[-1], c["name"])
            for c in plan_reload(old, {"exchanges": [], "bindings": []}).changes]
    assert plan == [("delete", "binding", "b0"), ("delete", "exchange", "E")]


@pytest.mark.parametrize("cls", [pure_core.RouterCore, getattr(compiled_core, "RouterCore", None)],
                         ids=["pure", "compiled"])
def test_only_the_exchange_address_changes_forwarder(cls):
    """Other addresses keep their distribution's forwarder (nothing per message for them);
    the exchange's address keeps the exchange through an address-rule change, and gets its
    distribution's forwarder back when the exchange goes."""
    if cls is None:
        pytest.skip(NOT_BUILT)
    core = cls("R1", exchanges=EXCHANGES[:1], bindings=BINDINGS[:1])
    plain = type(core.addrs["M0h1"].fwd)
    assert type(core.addrs["M0ex"].fwd).__name__ == "ExchangeForwarder"
    assert plain.__name__ == "BalancedForwarder"
    core.set_address_config([{"prefix": "ex", "distribution": "closest"},
                             {"prefix": "h1", "distribution": "closest"}])
    assert type(core.addrs["M0ex"].fwd).__name__ == "ExchangeForwarder"
    assert type(core.addrs["M0h1"].fwd).__name__ == "ClosestForwarder"
    core.handle_batch(0, _prologue()[:4] + [LinkFlow(3, 3, False)], 0.0)
    core.take_effects()
    core.handle(0, Transfer(1, 1, None, True, 4, _payload("a.b")), 0.0)
    assert core.snapshot()["exchanges"]["exchange/0"]["forwardedCount"] == 1
    assert core.delete_exchange("exchange/0")
    assert type(core.addrs["M0ex"].fwd).__name__ == "ClosestForwarder"
    assert core.snapshot()["bindings"] == {} and "M0h1" in core.addrs  # h1 has a receiver


def test_a_binding_back_to_its_own_exchange_takes_nothing():
    """1.19 would recurse for ever; here the loop's next hop takes no copy and counts nothing."""
    core = pure_core.RouterCore("R1", exchanges=EXCHANGES[1:], bindings=BINDINGS[4:])
    core.handle_batch(0, _prologue()[:3], 0.0)
    core.take_effects()
    core.handle(0, Transfer(1, 2, None, False, 4, _payload("x")), 0.0)
    updates = [e for e in core.take_effects()[0] if isinstance(e, UpdateIn)]
    assert [(u.state, u.settled) for u in updates] == [(STATE_RELEASED, True)]
    ex = core.snapshot()["exchanges"]["exchange/1"]
    assert (ex["receivedCount"], ex["droppedCount"], ex["forwardedCount"]) == (1, 1, 0)
