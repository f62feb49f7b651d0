"""Exchanges and bindings (``router.config.exchange``, ``router.config.binding``): what a
configuration means and when it is refused, shared by the configuration file, management and
the core.

Owns: splitting a binding key or a message subject into words for a match method (``amqp``:
words separated by ``.``, ``*`` one word, ``#`` zero or more; ``mqtt``: ``/``, ``+`` and
``#``), rewriting an ``amqp`` key as Qpid Dispatch 1.19 stores it (``#.#`` is ``#``, ``#.*``
is ``*.#``: the same subjects match), and 1.19's checks with its texts (the core's answers:
``exchange address is mandatory``, ``duplicate exchange address``, ``duplicate exchange name``,
``Exchange matchMethod must be either 'amqp' or 'mqtt'``, ``phase must be in the range 0-9``,
``Named exchange does not exist``, ``No next hop specified``, ``The binding key pattern is
invalid``, ``Duplicate next hop name``, ``Next hop for key already exists``).

Words are as 1.19's parse tree reads them: separators at the start are skipped, one at the end
ends the text, two in a row enclose an empty word (``a..b`` is ``a``, ``""``, ``b``).

Pure; must not import zmq, proton, router_io, agent or the core's parts.
"""
from typing import Any, Optional

METHOD_AMQP = 0
METHOD_MQTT = 1
METHOD_CODES = {"amqp": METHOD_AMQP, "mqtt": METHOD_MQTT}
METHOD_NAMES = {code: name for name, code in METHOD_CODES.items()}
SEPARATOR = (".", "/")   # by method code
ONE_WORD = ("*", "+")    # by method code
ANY_WORDS = "#"


def words_of(text: str, method: int) -> list:
    """The words of a binding key or subject for ``method``."""
    sep = SEPARATOR[method]
    start = 0
    n = len(text)
    while start < n and text[start] == sep:
        start += 1
    if start == n:
        return []
    words = text[start:].split(sep)
    if not words[-1]:
        words.pop()
    return words


def normal_words(key: str, method: int) -> list:
    """The words of a binding key as the exchange stores it: for ``amqp`` ``#`` ``#`` becomes
    ``#`` and ``#`` ``*`` becomes ``*`` ``#`` (until neither is left); ``mqtt`` keys are kept
    as they are (a ``#`` may only end them)."""
    words = words_of(key, method)
    if method != METHOD_AMQP:
        return words
    changed = True
    while changed:
        changed = False
        for n in range(len(words) - 1):
            if words[n] == ANY_WORDS and words[n + 1] == ANY_WORDS:
                del words[n + 1]
                changed = True
                break
            if words[n] == ANY_WORDS and words[n + 1] == "*":
                words[n], words[n + 1] = "*", ANY_WORDS
                changed = True
                break
    return words


def key_valid(key: str, method: int) -> bool:
    """1.19's check of a binding key: at least one word; for ``mqtt`` a ``#`` only last."""
    words = words_of(key, method)
    if not words:
        return False
    if method == METHOD_MQTT and ANY_WORDS in words[:-1]:
        return False
    return True


def _phase_ok(value: Any) -> bool:
    return value is None or (isinstance(value, int) and 0 <= value <= 9)


def exchange_problem(entity: dict, exchanges: list) -> Optional[str]:
    """Why 1.19 refuses the exchange ``entity`` beside ``exchanges`` (None: it does not)."""
    if entity.get("address") is None:
        return "exchange address is mandatory"
    for other in exchanges:
        if other.get("address") == entity.get("address"):
            return "duplicate exchange address"
        if other.get("name") == entity.get("name"):
            return "duplicate exchange name"
    if entity.get("matchMethod", "amqp") not in METHOD_CODES:
        return "Exchange matchMethod must be either 'amqp' or 'mqtt'"
    if not _phase_ok(entity.get("phase")):
        return "phase must be in the range 0-9"
    if entity.get("alternateAddress") is not None and not _phase_ok(
            entity.get("alternatePhase")):
        return "phase must be in the range 0-9"
    return None


def binding_problem(entity: dict, exchanges: list, bindings: list) -> Optional[str]:
    """Why 1.19 refuses the binding ``entity`` (None: it does not). ``exchanges`` and
    ``bindings``: those that exist (entity dicts)."""
    name = entity.get("exchangeName")
    if name is None:
        return "Binding configuration requires an exchange"
    exchange = next((e for e in exchanges if e.get("name") == name), None)
    if exchange is None:
        return "Named exchange does not exist"
    hop = entity.get("nextHopAddress")
    if hop is None:
        return "No next hop specified"
    method = METHOD_CODES.get(exchange.get("matchMethod", "amqp"), METHOD_AMQP)
    key = entity.get("bindingKey")
    key = "#" if key is None else key
    if not key_valid(key, method):
        return "The binding key pattern is invalid"
    phase = entity.get("nextHopPhase")
    if not _phase_ok(phase):
        return "phase must be in the range 0-9"
    for other in bindings:  # (names are unique router-wide, as management finds them)
        if entity.get("name") is not None and other.get("name") == entity.get("name"):
            return "Duplicate next hop name"
        if other.get("exchangeName") != name:
            continue
        other_key = other.get("bindingKey")
        if ((("#" if other_key is None else other_key) == key)
                and other.get("nextHopAddress") == hop
                and (other.get("nextHopPhase") or 0) == (phase or 0)):
            return "Next hop for key already exists"
    return None
