"""Matching mobile addresses against the configured ``address`` rules (prefix and pattern).

Owns: the precedence rules of Qpid Dispatch's address parse tree.

* Addresses and rules are split into words at ``.`` and ``/``.
* ``prefix: a.b`` matches whole words: ``a.b``, ``a.b.c``, ``a.b/c`` but not ``a.bc``; it is the
  pattern ``a.b.#``.
* ``pattern``: ``*`` matches exactly one word, ``#`` zero or more words.
* The most specific rule wins: compared word by word, a literal beats ``*`` beats ``#`` (so the
  longest prefix wins, and a literal pattern beats a wildcard one). A tie goes to a pattern over a
  prefix, then to the rule configured first.

Pure and deterministic; must not import zmq, proton, sockets, clocks or logging handlers.
"""
import re
from typing import Optional

_SPLIT = re.compile(r"[./]")
_LITERAL, _STAR, _HASH = 0, 1, 2


def split_words(text: str) -> list:
    return _SPLIT.split(text) if text else []


def _kinds(words: list) -> list:
    return [_STAR if w == "*" else _HASH if w == "#" else _LITERAL for w in words]


def _match(words: list, pattern: list, i: int, j: int) -> Optional[tuple]:
    """Return the specificity (tuple of kinds used per address word) of the best match, or None."""
    if j == len(pattern):
        return () if i == len(words) else None
    token = pattern[j]
    if token == "#":
        best = None
        for k in range(i, len(words) + 1):  # '#' swallows words[i:k]
            rest = _match(words, pattern, k, j + 1)
            if rest is not None:
                cand = (_HASH,) * (k - i) + rest
                if best is None or cand < best:
                    best = cand
        return best
    if i == len(words):
        return None
    if token == "*" or token == words[i]:
        rest = _match(words, pattern, i + 1, j + 1)
        if rest is not None:
            return (_STAR if token == "*" else _LITERAL,) + rest
    return None


class AddressRule:
    """One configured ``address`` entity, reduced to what the core routes on."""

    __slots__ = ("text", "is_pattern", "words", "distribution", "priority", "ingress_phase",
                 "egress_phase", "waypoint", "enable_fallback", "order")

    def __init__(self, config: dict, order: int) -> None:
        pattern = config.get("pattern")
        self.is_pattern = pattern is not None
        text = pattern if self.is_pattern else config.get("prefix", "")
        self.text = text.strip("/")
        self.words = split_words(self.text)
        if not self.is_pattern:
            self.words = self.words + ["#"]
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
