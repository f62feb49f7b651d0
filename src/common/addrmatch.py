"""Matching mobile addresses against the configured ``address`` rules (prefix and pattern).

Owns: the precedence rules of Qpid Dispatch's address parse tree.

* Addresses and rules are split into words at ``.`` and ``/``.
* ``prefix: a.b`` matches whole words: ``a.b``, ``a.b.c``, ``a.b/c`` but not ``a.bc``; it is the
  pattern ``a.b.#``.
* ``pattern``: ``*`` matches exactly one word, ``#`` zero or more words.
* The first rule found by 1.19's parse-tree search wins: pattern words are compared left to
  right, a literal before ``*`` before ``#``, and a ``#`` tries swallowing as few address words as
  possible (none first); a ``#`` ending a pattern is tried last. So ``a.*.d`` beats ``a/*/#/d`` for
  ``a.c.d`` (the literal ``d`` after ``*`` beats ``#`` even though ``#`` could match zero words),
  the longest prefix wins and a literal pattern beats a wildcard one.
* Patterns are normalised as 1.19 does: ``#.#`` becomes ``#`` and ``#.*`` becomes ``*.#``.
* 1.19 refuses a second rule with the same pattern (a prefix ``p`` is the pattern ``p/#``); were
  two to coincide here the pattern beats the prefix, then the rule configured first.

Shared by the core (routing, through ``router_core.matcher``, which selects this reference or
its compiled twin ``router_core._addrmatch``) and the worker's vhost policy
(``common/policy.py``), so it lives in ``common``. Pure and deterministic; must not import
zmq, proton, sockets, clocks or logging handlers.
"""
import re
from typing import Optional

_SPLIT = re.compile(r"[./]")
_LITERAL, _STAR, _HASH = 0, 1, 2


def split_words(text: str) -> list:
    return _SPLIT.split(text) if text else []


_END_HASH = 1 << 30  # a pattern-ending '#' is tried after every way on through it


def normalize_words(pattern: list) -> list:
    """1.19's rewrite of a pattern before it enters the tree: ``#.#`` -> ``#``, ``#.*`` -> ``*.#``
    (repeated until neither applies)."""
    out = list(pattern)
    changed = True
    while changed:
        changed = False
        for n in range(len(out) - 1):
            if out[n] == "#" and out[n + 1] == "#":
                del out[n + 1]
                changed = True
                break
            if out[n] == "#" and out[n + 1] == "*":
                out[n], out[n + 1] = "*", "#"
                changed = True
                break
    return out


def _match(words: list, pattern: list, i: int, j: int) -> Optional[tuple]:
    """The position of ``pattern`` (from word j, address from word i) in 1.19's depth-first search
    order, or None when it does not match: smaller is found first. Per pattern word: a literal
    counts 0, ``*`` 1, ``#`` 2 followed by how many words it swallowed (a final ``#`` after every
    such count), so tuples compare as the search order of a tree holding every pattern."""
    if j == len(pattern):
        return () if i == len(words) else None
    token = pattern[j]
    if token == "#":
        if j + 1 == len(pattern):
            return (_HASH, _END_HASH)
        for k in range(i, len(words)):  # '#' swallows words[i:k], fewest first
            rest = _match(words, pattern, k, j + 1)
            if rest is not None:
                return (_HASH, k - i) + rest
        return None
    if i == len(words):
        return None
    if token == "*":
        rest = _match(words, pattern, i + 1, j + 1)
        return None if rest is None else (_STAR,) + rest
    if token == words[i]:
        rest = _match(words, pattern, i + 1, j + 1)
        return None if rest is None else (_LITERAL,) + rest
    return None


def match_order(words: list, pattern: list) -> Optional[tuple]:
    """Where ``pattern`` (normalize_words of split_words) matches the address ``words`` in 1.19's
    search order (smaller is found first), or None when it does not match. The public entry of
    the matcher for code outside the core (common/policy.py's address patterns)."""
    return _match(words, pattern, 0, 0)


class AddressRule:
    """One configured ``address`` entity, reduced to what the core routes on."""

    __slots__ = ("text", "is_pattern", "words", "distribution", "priority", "ingress_phase",
                 "egress_phase", "waypoint", "enable_fallback", "order")

    def __init__(self, config: dict, order: int) -> None:
        pattern = config.get("pattern")
        self.is_pattern = pattern is not None
        text = pattern if self.is_pattern else config.get("prefix", "")
        self.text = text.strip("/")
        words = split_words(self.text)
        self.words = normalize_words(words if self.is_pattern else words + ["#"])
        self.distribution = config.get("distribution", "balanced")
        priority = config.get("priority", -1)
        self.priority = -1 if priority is None else int(priority)
        self.ingress_phase = config.get("ingressPhase")
        self.egress_phase = config.get("egressPhase")
        self.waypoint = bool(config.get("waypoint", False))
        self.enable_fallback = bool(config.get("enableFallback", False))
        self.order = order

    def specificity(self, words: list) -> Optional[tuple]:
        return _match(words, self.words, 0, 0)


class AddressRules:
    """All configured rules; ``lookup(text)`` returns the most specific one matching, or None."""

    __slots__ = ("rules",)

    def __init__(self, configs: Optional[list] = None) -> None:
        self.rules = [AddressRule(c, n) for n, c in enumerate(configs or ())
                      if c.get("prefix") is not None or c.get("pattern") is not None]

    def __len__(self) -> int:
        return len(self.rules)

    def lookup(self, text: str) -> Optional[AddressRule]:
        if not self.rules:
            return None
        words = split_words(text.lstrip("/"))
        best = None
        best_rank = None
        for rule in self.rules:
            spec = rule.specificity(words)
            if spec is None:
                continue
            rank = (spec, 0 if rule.is_pattern else 1, rule.order)
            if best_rank is None or rank < best_rank:
                best, best_rank = rule, rank
        return best
