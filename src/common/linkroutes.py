"""What a ``linkRoute`` entity means, shared by the config file, management and the core.

Owns: the checks a link route must pass (in 1.19's order, with its texts), the normalisation of
its prefix or pattern into the pattern the core matches (a prefix ``p`` is the pattern
``p/#``; separators ``.``/``/`` at either end are dropped, as 1.19 drops them) and the address
key 1.19 gives the route's address: ``C``/``D`` (in/out) followed by the prefix for a prefix-like
pattern (no ``*``, one ``#`` at the end), ``E``/``F`` followed by the pattern otherwise.

Pure; must not import zmq, proton, router_io, router_core or agent.
"""
from __future__ import annotations

from typing import Any, Optional

SEPARATORS = "./"
# key class letters by (direction, prefix-like)
KEY_CLASS = {("in", True): "C", ("out", True): "D", ("in", False): "E", ("out", False): "F"}
KEY_DIRECTION = {"C": "in", "D": "out", "E": "in", "F": "out"}
# 1.19's texts for a pattern missing or given twice, in a link route and in an address rule
NO_PATTERN = "Either a 'prefix' or 'pattern' attribute must be provided"
BOTH_PATTERNS = "Cannot specify both a 'prefix' and a 'pattern' attribute"
BOTH_CONNECTION_AND_CONTAINER = ("Both connection and containerId cannot be specified. "
                                 "Specify only one")


def normalize(text: Any, is_prefix: bool) -> tuple:
    """``(pattern, None)`` or ``(None, problem)`` for a configured prefix or pattern."""
    what = "Prefix" if is_prefix else "Pattern"
    if not isinstance(text, str) or not text:
        return None, f"{what} must be a non-empty string type"
    core = text.strip(SEPARATORS)
    if not core:
        return None, f"{what} invalid - no tokens"
    return (core + "/#" if is_prefix else core), None


def is_prefix_like(pattern: str) -> bool:
    return "*" not in pattern and pattern.find("#") == len(pattern) - 1


def route_key(pattern: str, direction: str) -> str:
    """The address key of a link route's address (``Cqueue``, ``Ea.*.b``)."""
    if is_prefix_like(pattern):
        return KEY_CLASS[(direction, True)] + pattern[:-1].rstrip(SEPARATORS)
    return KEY_CLASS[(direction, False)] + pattern


def key_text(key: str) -> str:
    """What management shows as the address of a link-route key: the prefix or pattern."""
    return key[1:]


def create_problem(attributes: dict) -> Optional[str]:
    """The first problem of a linkRoute's attributes (canonical names; ``dir`` already folded
    into ``direction``), in the order 1.19 checks them; None if it is good."""
    if attributes.get("connection") is not None and attributes.get("containerId") is not None:
        return BOTH_CONNECTION_AND_CONTAINER
    prefix, pattern = attributes.get("prefix"), attributes.get("pattern")
    if attributes.get("direction") is None:
        return "No 'direction' attribute provided - it is mandatory"
    if prefix is None and pattern is None:
        return NO_PATTERN
    if prefix is not None and pattern is not None:
        return BOTH_PATTERNS
    _, problem = normalize(prefix if prefix is not None else pattern, prefix is not None)
    if problem:
        return problem
    if attributes["direction"] not in ("in", "out"):
        return "Invalid value for 'direction'"
    distribution = attributes.get("distribution")
    if distribution is not None and distribution != "linkBalanced":
        return "Invalid value for 'distribution'"
    return None


def route_pattern(attributes: dict) -> str:
    """The matching pattern of a valid linkRoute's attributes."""
    prefix = attributes.get("prefix")
    pattern, _ = normalize(prefix if prefix is not None else attributes.get("pattern"),
                           prefix is not None)
    return pattern
