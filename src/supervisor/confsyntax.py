"""The syntax of qdrouterd.conf and of its .json form: text -> raw sections with line numbers.

Owns the reading of the file, before any meaning is given to it: ``section {`` ... ``}`` blocks
of ``attribute: value`` lines, ``#`` comments (except in ``pattern``/``hostname``/``bindingKey``
values, where ``#`` is a wildcard), map values (``openProperties``, vhost ``groups``) written as
JSON or as nested ``key: value`` blocks over several lines, and the ``.json`` form (a list of
``[type, {attrs}]``). Every section and attribute keeps its 1-based line; a syntax error is a
``Problem(message, line)`` that supervisor/config.py turns into ``FILE:LINE: message``. Section and
attribute names are not checked here: validation against the schema is supervisor/config.py's.

Must not import proton, zmq, router_io or router_core (nor common.schema: syntax only).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Values of these attributes may contain '#' (a wildcard), so it does not start a comment there.
_HASH_OK = frozenset({"pattern", "hostname", "sourcePattern", "targetPattern", "bindingKey"})

_BEGIN = re.compile(r"^([\w.-]+)\s*\{\s*(#.*)?$")
_END = re.compile(r"^\}\s*(#.*)?$")
_ATTR = re.compile(r"^([\w.$-]+)\s*:\s*(.*)$")
_NESTED_ATTR = re.compile(r'^"?([^":\s][^":]*?)"?\s*:\s*(.*)$')


class Problem(Exception):
    """An error in the file at a 1-based ``line`` (or None); config.py raises it too."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class RawAttribute:
    """One ``name: value`` as written (the value a string, or a dict/list from JSON)."""

    name: str
    value: Any
    line: int | None


@dataclass
class RawSection:
    """One ``section { ... }`` (or one ``[type, {attrs}]`` pair) as written."""

    name: str
    line: int | None
    attributes: list[RawAttribute] = field(default_factory=list)


def parse_conf(text: str) -> list[RawSection]:
    # Lines end at '\n' only (as editors and error messages count them), not at the other
    # characters str.splitlines() breaks on; a trailing '\r' is stripped with the blanks.
    lines = text.split("\n")
    sections: list[RawSection] = []
    current: RawSection | None = None
    i = 0
    while i < len(lines):
        lineno, line = i + 1, lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        begin, end, attr = _BEGIN.match(line), _END.match(line), _ATTR.match(line)
        if current is None:
            if begin:
                current = RawSection(begin.group(1), lineno)
            elif end:
                raise Problem("unexpected '}' outside of a section", lineno)
            elif attr:
                raise Problem(f"attribute '{attr.group(1)}' outside of a section", lineno)
            else:
                raise Problem(f"syntax error: expected 'section {{', got '{line}'", lineno)
            continue
        if end:
            sections.append(current)
            current = None
        elif begin:
            raise Problem(f"missing closing brace '}}' for section '{current.name}' "
                           f"(section '{begin.group(1)}' starts at line {lineno})", current.line)
        elif attr:
            key, rest = attr.groups()
            if key in _HASH_OK:
                tokens = rest.split()
                value: Any = _json_string(tokens[0], key, lineno) if tokens else ""
            elif rest.lstrip().startswith("{"):
                value, i = _read_map(lines, i - 1, rest, key)
            else:
                value = _json_string(rest.split("#")[0].strip(), key, lineno)
            if value == "":
                raise Problem(f"missing value for attribute '{key}' in section '{current.name}'",
                               lineno)
            current.attributes.append(RawAttribute(key, value, lineno))
        else:
            raise Problem(f"syntax error in section '{current.name}': expected 'attribute: value' "
                           f"or '}}', got '{line}'", lineno)
    if current is not None:
        raise Problem(f"missing closing brace '}}' for section '{current.name}'", current.line)
    return sections


def _json_string(text: str, key: str, lineno: int) -> str:
    """A scalar value as 1.19 reads it: the text between JSON double quotes, so ``\\b`` is a
    backspace and ``\\\\`` one backslash; a bad escape or a bare ``"`` is refused, as 1.19's
    JSON decoder refuses it."""
    if "\\" not in text and '"' not in text:
        return text
    try:
        value = json.loads(f'"{text}"')
    except ValueError as e:
        raise Problem(f"invalid value for attribute '{key}': {getattr(e, 'msg', e)} (the value "
                      "is read as the text of a JSON string)", lineno) from None
    if not isinstance(value, str):  # pragma: no cover - a quoted literal is always a string
        raise Problem(f"invalid value for attribute '{key}'", lineno)
    return value


def _read_map(lines: list[str], start: int, first: str, key: str) -> tuple[dict[str, Any], int]:
    """Read a map value that may span lines; return it and the index of the next line."""
    chunk: list[str] = []
    depth, i, text = 0, start, first
    while True:
        chunk.append(text)
        depth += _brace_balance(text)
        i += 1
        if depth <= 0:
            break
        if i >= len(lines):
            raise Problem(f"missing closing brace '}}' in the value of '{key}'", start + 1)
        text = lines[i]
    try:
        value = json.loads("\n".join(chunk))
    except ValueError:
        value = _relaxed_map(chunk, start + 1, key)
    if not isinstance(value, dict):
        raise Problem(f"the value of '{key}' must be a map", start + 1)
    return value, i


def _brace_balance(text: str) -> int:
    balance, quoted = 0, False
    # A '#' comment is only cut from unquoted text: in JSON it may be part of a string.
    for ch in text if '"' in text else text.split("#")[0]:
        if ch == '"':
            quoted = not quoted
        elif not quoted:
            balance += (ch == "{") - (ch == "}")
    return balance


def _relaxed_map(chunk: list[str], line: int, key: str) -> dict[str, Any]:
    """Qpid also accepts nested maps in config syntax: ``group: {`` / ``users: a, b`` / ``}``."""
    out: list[str] = []
    for raw in chunk:
        text = raw.strip()
        while text.startswith("{"):
            out.append("{")
            text = text[1:].strip()
        match = _NESTED_ATTR.match(text)
        if match:
            name, value = match.groups()
            if name not in _HASH_OK:
                value = value.split("#")[0]
            value = value.strip()
            closes = 0
            while value.endswith((",", "}")) and (value.endswith(",") or value.count("}") > value.count("{")):
                closes += value.endswith("}")
                value = value[:-1].strip()
            if value == "{":
                out.append(json.dumps(name) + ": {")
            else:
                out.append(json.dumps(name) + ": " + _json_scalar(value) + ",")
            out.extend(["},"] * closes)
        else:
            text = text.split("#")[0].strip()
            closes = text.count("}")
            if text.replace("}", "").replace(",", "").strip():
                raise Problem(f"cannot read the map value of '{key}' near '{raw.strip()}'", line)
            out.extend(["},"] * closes)
    joined = re.sub(r",\s*}", "}", "".join(out)).rstrip(",")
    try:
        return json.loads(joined)
    except ValueError as e:
        raise Problem(f"cannot read the map value of '{key}': {e}", line) from None


def _json_scalar(text: str) -> str:
    try:
        json.loads(text)
        return text
    except ValueError:
        return json.dumps(text)


def parse_json(text: str) -> list[RawSection]:
    # as 1.19, a line whose first non-blank character is '#' is a comment (blanked, so the
    # line numbers stay)
    text = "\n".join("" if line.lstrip().startswith("#") else line for line in text.split("\n"))
    decoder = json.JSONDecoder()
    idx = _skip_ws(text, 0)
    if not text.startswith("[", idx):
        raise Problem("a .json configuration must be a list of [\"type\", {attributes}] pairs",
                       _line_at(text, idx))
    sections: list[RawSection] = []
    idx = _skip_ws(text, idx + 1)
    while not text.startswith("]", idx):
        line = _line_at(text, idx)
        try:
            item, idx = decoder.raw_decode(text, idx)
        except json.JSONDecodeError as e:
            raise Problem(f"invalid JSON: {e.msg}", e.lineno) from None
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], dict)):
            raise Problem("each entry must be a [\"type\", {attributes}] pair", line)
        sections.append(RawSection(item[0], line,
                                    [RawAttribute(k, v, line) for k, v in item[1].items()]))
        idx = _skip_ws(text, idx)
        if text.startswith(",", idx):
            idx = _skip_ws(text, idx + 1)
        elif not text.startswith("]", idx):
            raise Problem("invalid JSON: expected ',' or ']'", _line_at(text, idx))
    if text[idx + 1:].strip():
        raise Problem("invalid JSON: extra data after the list", _line_at(text, idx + 1))
    return sections


def _skip_ws(text: str, idx: int) -> int:
    while idx < len(text) and text[idx] in " \t\r\n":
        idx += 1
    return idx


def _line_at(text: str, idx: int) -> int:
    return text.count("\n", 0, idx) + 1
