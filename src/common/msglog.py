"""``messageLoggingComponents`` of listeners and connectors: the names, their bits, the check.

A listener or connector whose ``messageLoggingComponents`` (deprecated name ``logMessage``)
names message fields makes the worker write a MESSAGE trace line for every message received
and sent on its connections (router_io/msgrepr.py formats it). The value is ``none`` (the
default), ``all``, or a comma-separated list of the names in :data:`COMPONENTS`, without
spaces, as in Qpid Dispatch 1.19.

1.19 silently ignores a name it does not know (so ``message-id, subject`` logs only the
message-id); this router refuses such a value where it is configured (``FILE:LINE:`` at
start, 400 from management) instead of logging less than was asked for.

Must not import proton, zmq, router_io or router_core.
"""
from __future__ import annotations

from typing import Optional

# 1.19's names, in the order of its bits and of the fields in a logged line
COMPONENTS = ("message-id", "user-id", "to", "subject", "reply-to", "correlation-id",
              "content-type", "content-encoding", "absolute-expiry-time", "creation-time",
              "group-id", "group-sequence", "reply-to-group-id", "app-properties")
ALL_BITS = 0x7fffffff  # 1.19's "all": every bit set
ATTRIBUTE = "messageLoggingComponents"


def component_bits(spec: Optional[str]) -> int:
    """The bits of a value as 1.19 reads it: 0 for none/unset, every bit for ``all``, else a
    bit per known name in the comma list (unknown names add nothing: check them first with
    :func:`components_problem`)."""
    if not spec or spec == "none":
        return 0
    if spec == "all":
        return ALL_BITS
    bits = 0
    for token in spec.split(","):
        if token in COMPONENTS:
            bits |= 1 << COMPONENTS.index(token)
    return bits


def components_problem(spec: object) -> Optional[str]:
    """Why a ``messageLoggingComponents`` value would not log what it names, or None."""
    if spec is None or spec == "" or spec in ("none", "all"):
        return None
    if not isinstance(spec, str):
        return f"{ATTRIBUTE} must be a string, got {type(spec).__name__}"
    for token in spec.split(","):
        if token not in COMPONENTS:
            if token in ("none", "all"):
                why = f"'{token}' cannot be combined with other components"
            elif token.strip() in COMPONENTS:
                why = f"unknown component '{token}' (no spaces are allowed)"
            else:
                why = f"unknown component '{token}'"
            return (f"{ATTRIBUTE} '{spec}': {why}; use 'none', 'all' or a comma-separated list "
                    f"of {', '.join(COMPONENTS)}")
    return None


def entity_problem(short: str, attrs: dict) -> Optional[str]:
    """:func:`components_problem` of a listener's or connector's attributes, naming it."""
    if short not in ("listener", "connector"):
        return None
    problem = components_problem(attrs.get(ATTRIBUTE))
    if problem:
        return f"{short} {attrs.get('host') or '*'}:{attrs.get('port')}: {problem}"
    return None
