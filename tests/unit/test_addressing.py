"""Address normalisation, hash keys, dynamic addresses and configured-address matching."""
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from router_core.addressing import address_key, mobile_text, normalize, temp_address
from common.addrmatch import AddressRules


@pytest.mark.parametrize("address, key", [
    ("orders", "M0orders"),
    ("/orders", "M0orders"),
    ("amqp:/orders", "M0orders"),
    ("amqp://broker.example:5672/orders", "M0orders"),
    ("amqp://host/a/b", "M0a/b"),
    ("_local/qdhello", "Lqdhello"),
    ("amqp:/_local/$management", "L$management"),
    ("$management", "M0$management"),
    ("_topo/0/all/qdrouter", "Tqdrouter"),
    ("amqp:/_topo/0/all/qdrouter.ma", "Tqdrouter.ma"),
    ("_topo/0/R1/qdrouter", "Lqdrouter"),
    ("amqp:/_topo/0/R1/temp.abc", "Ltemp.abc"),
    ("_topo/0/R2/qdrouter", "RR2"),
    ("_topo/0/R2", "RR2"),
    ("_topo/1/R2/x", "A1"),
    ("_$temp.xyz", "M0_$temp.xyz"),
])
def test_address_keys(address, key):
    assert address_key(address, "R1") == key


def test_phase_and_area():
    assert address_key("q", "R1", phase=1) == "M1q"
    assert address_key("_topo/1/R2/x", "R1", area="1") == "RR2"
    assert address_key("_topo/0/R2/x", "R1", area="1") == "A0"


def test_normalize():
    assert normalize("amqp://h:1/x.y") == "x.y"
    assert normalize("amqp://h") == ""
    assert normalize("amqp:x") == "x"
    assert mobile_text("M0orders") == "orders"
    assert mobile_text("Lx") is None


def test_temp_addresses():
    src = temp_address("R1", "abc")
    assert src == "amqp:/_topo/0/R1/temp.abc"
    assert address_key(src, "R1") == "Ltemp.abc"
    assert temp_address("R1", "abc", target=True) == "amqp:/_$temp.abc"


_word = st.text(alphabet="abcxyz019-_$", min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(_word, min_size=1, max_size=4), st.sampled_from([".", "/"]),
       st.sampled_from(["", "/", "amqp:/", "amqp://host:5672/"]))
def test_mobile_keys_round_trip(words, sep, prefix):
    text = sep.join(words)
    if text.startswith(("_local", "_topo")):
        return
    key = address_key(prefix + text, "R1")
    assert key == "M0" + text
    assert mobile_text(key) == text
    assert normalize(normalize(prefix + text)) == normalize(prefix + text)


# ---- configured address rules ----------------------------------------------------------------
def _compiled_rules():
    try:
        from router_core import _addrmatch
    except ImportError:
        return None
    return _addrmatch.AddressRules


_BUILD = {"cls": AddressRules}


@pytest.fixture(params=["python", "cython"], autouse=True)
def matcher_build(request):
    """The matcher tests run against the reference and the compiled build."""
    cls = AddressRules if request.param == "python" else _compiled_rules()
    if cls is None:
        pytest.skip("router_core._addrmatch is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    _BUILD["cls"] = cls
    yield cls
    _BUILD["cls"] = AddressRules


def _rules(*configs):
    return _BUILD["cls"]([dict(c) for c in configs])


_word = st.sampled_from(["a", "b", "c", "ab", "*", "#"])
_literal = st.sampled_from(["a", "b", "c", "ab", "x"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(_word, min_size=1, max_size=4)),
                max_size=6),
       st.lists(st.lists(_literal, max_size=5), min_size=1, max_size=10),
       st.sampled_from([".", "/"]))
def test_compiled_matcher_agrees_with_reference(rules, addresses, sep):
    compiled = _compiled_rules()
    if compiled is None:
        pytest.skip("router_core._addrmatch is not built")
    configs = []
    for n, (is_pattern, words) in enumerate(rules):
        text = ".".join(words) if is_pattern else ".".join(w for w in words if w not in "*#")
        if not text:
            continue
        configs.append({"pattern" if is_pattern else "prefix": text, "distribution": "closest",
                        "priority": n % 10})
    ref, cy = AddressRules(configs), compiled(configs)
    for words in addresses:
        text = sep.join(words)
        a, b = ref.lookup(text), cy.lookup(text)
        assert (a is None) == (b is None)
        if a is not None:
            assert (a.text, a.is_pattern, a.order, a.priority) == (b.text, b.is_pattern,
                                                                    b.order, b.priority)


def test_prefix_matches_whole_words_only():
    rules = _rules({"prefix": "a", "distribution": "multicast"})
    for text in ("a", "a.x", "a/x", "a.x.y"):
        assert rules.lookup(text).distribution == "multicast", text
    for text in ("ax", "b", "b.a", ""):
        assert rules.lookup(text) is None, text


def test_longest_prefix_wins():
    rules = _rules({"prefix": "a", "distribution": "multicast"},
                   {"prefix": "a.b", "distribution": "closest"},
                   {"prefix": "/a.b.c/", "distribution": "balanced"})
    assert rules.lookup("a.x").distribution == "multicast"
    assert rules.lookup("a.b").distribution == "closest"
    assert rules.lookup("a/b/x").distribution == "closest"
    assert rules.lookup("a.b.c.d").distribution == "balanced"


@pytest.mark.parametrize("pattern, text, matches", [
    ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.b.c", False),
    ("a.#", "a", True), ("a.#", "a.b.c", True), ("#", "", True), ("#.z", "a.b.z", True),
    ("*.b.#", "x/b", True), ("*.b.#", "b", False), ("a.#.c", "a.c", True),
    ("a.#.c", "a.x.y.c", True), ("a.#.c", "a.x.y", False),
])
def test_pattern_matching(pattern, text, matches):
    rule = _rules({"pattern": pattern, "distribution": "closest"}).lookup(text)
    assert (rule is not None) == matches


def test_most_specific_pattern_wins():
    rules = _rules({"pattern": "#", "distribution": "multicast"},
                   {"pattern": "a.*", "distribution": "closest"},
                   {"pattern": "a.b", "distribution": "balanced"},
                   {"pattern": "a.#", "distribution": "unavailable"})
    assert rules.lookup("a.b").distribution == "balanced"
    assert rules.lookup("a.c").distribution == "closest"
    assert rules.lookup("a.c.d").distribution == "unavailable"
    assert rules.lookup("z").distribution == "multicast"


def test_rule_fields():
    rule = _rules({"prefix": "p", "distribution": "closest", "priority": 7,
                   "waypoint": False}).lookup("p.q")
    assert rule.priority == 7 and rule.distribution == "closest"
    assert _rules({"prefix": "p"}).lookup("p").priority == -1
    assert len(_rules({"distribution": "closest"})) == 0  # neither prefix nor pattern


# ---- precedence as 1.19's parse tree decides it --------------------------------------------------
_DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "addrmatch_1_19.json")


def test_precedence_agrees_with_1_19_observations():
    """Every pick recorded from a real 1.19 router (tests/data/addrmatch_1_19.json)."""
    with open(_DATA) as fh:
        cases = json.load(fh)["cases"]
    assert len(cases) >= 50
    wrong = []
    for case in cases:
        rules = _rules(*[dict(r, priority=n) for n, r in enumerate(case["rules"])])
        for address, pick in case["picks"].items():
            rule = rules.lookup(address)
            got = -1 if rule is None else rule.priority
            if got != pick:
                wrong.append((case["rules"], address, pick, got))
    assert wrong == []


@pytest.mark.parametrize("middle", ["c", "x", "ab"])
def test_literal_after_star_beats_hash_matching_zero_words(middle):
    rules = _rules({"pattern": "a/*/#/d", "distribution": "multicast"},
                   {"pattern": "a.*.d", "distribution": "closest"})
    assert rules.lookup(f"a.{middle}.d").distribution == "closest"
    assert rules.lookup(f"a.{middle}.y.d").distribution == "multicast"


def test_patterns_are_normalised_as_1_19_does():
    # '#.*' is '*.#' and '#.#' is '#': a.#.* matches a.b but not a
    rules = _rules({"pattern": "a.#.*", "distribution": "closest"})
    assert rules.lookup("a.b").distribution == "closest"
    assert rules.lookup("a") is None
    rules = _rules({"pattern": "#.#", "distribution": "closest"})
    assert rules.lookup("").distribution == "closest"


def _tree_search(patterns, words):
    """A model of 1.19's parse-tree search: a trie of the (normalised) patterns walked depth
    first, at each node the literal child, then '*', then '#' (which swallows as few words as it
    can, and ends a pattern only after every way on); the first pattern reached wins."""
    from common.addrmatch import normalize_words
    root = {}
    for n, pat in enumerate(patterns):
        node = root
        for w in normalize_words(pat):
            node = node.setdefault(w, {})
        node.setdefault(None, n)

    def children(node, i):
        if i < len(words):
            if words[i] not in ("*", "#") and words[i] in node:
                found = token(node[words[i]], i + 1)
                if found is not None:
                    return found
            if "*" in node:
                found = token(node["*"], i + 1)
                if found is not None:
                    return found
        if "#" in node:
            return glob(node["#"], i)
        return None

    def token(node, i):
        if i == len(words) and None in node:
            return node[None]
        return children(node, i)

    def glob(node, i):
        while i < len(words):
            found = children(node, i)
            if found is not None:
                return found
            i += 1
        return node.get(None)

    return children(root, 0)


_pword = st.sampled_from(["a", "b", "c", "*", "#"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_pword, min_size=1, max_size=5), min_size=1, max_size=8, unique_by=tuple),
       st.lists(st.sampled_from(["a", "b", "c"]), max_size=6))
def test_lookup_is_the_first_pattern_1_19s_tree_search_reaches(patterns, words):
    from common.addrmatch import normalize_words
    seen, unique = set(), []
    for pat in patterns:                       # 1.19 refuses a second identical pattern
        key = tuple(normalize_words(pat))
        if key not in seen:
            seen.add(key)
            unique.append(pat)
    rules = _rules(*[{"pattern": ".".join(p), "priority": n} for n, p in enumerate(unique)])
    rule = rules.lookup(".".join(words))
    assert (None if rule is None else rule.priority) == _tree_search(unique, words)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5),
       st.lists(st.lists(_pword, min_size=1, max_size=5), max_size=6), st.data())
def test_a_literal_word_beats_a_wildcard_at_the_first_difference(address, others, data):
    """Two matching patterns that agree up to word k, one literal there and the other '*' or
    '#': the literal one wins; '*' beats '#' likewise."""
    k = data.draw(st.integers(0, len(address) - 1))
    head = address[:k]
    literal = head + address[k:]                          # the address itself
    wild = head + [data.draw(st.sampled_from(["*", "#"]))] + (
        address[k + 1:] if data.draw(st.booleans()) else ["#"])
    configs = [{"pattern": ".".join(wild), "distribution": "multicast"},
               {"pattern": ".".join(literal), "distribution": "closest"}]
    assert _rules(*configs).lookup(".".join(address)).distribution == "closest"
    star, glob = head + ["*"] + address[k + 1:], head + ["#"] + address[k + 1:]
    rules = _rules({"pattern": ".".join(glob), "distribution": "multicast"},
                   {"pattern": ".".join(star), "distribution": "closest"})
    assert rules.lookup(".".join(address)).distribution == "closest"
