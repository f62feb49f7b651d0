"""Tables as qdstat prints them: a title line, column headers, a line of ``=``, then rows.

Columns are left-aligned, two spaces apart, indented by two spaces; the ``=`` line is two
characters longer than the header text (as in the Qpid Dispatch documents). ``--csv`` prints the
title, then every header and non-empty cell in double quotes separated by commas. A table without
rows is its title alone (as 1.19 prints it). Pure formatting.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

PREFIX = "  "


def cell(value: Any) -> str:
    if value is None:
        return ""
    return str(value)  # booleans as True/False, as 1.19's qdstat prints them


def format_table(title: str, heads: Sequence[str], rows: Iterable[Sequence[Any]],
                 csv: bool = False) -> str:
    text_rows = [[cell(v) for v in row] for row in rows]
    lines = [title] if title else []
    if not text_rows:  # as 1.19: an empty table is its title alone
        return "\n".join(lines)
    if csv:  # an empty cell stays empty (unquoted), as 1.19 writes it
        quote = lambda items: ",".join(  # noqa: E731
            '"' + i.replace('"', '""') + '"' if i else "" for i in items)
        lines.append(quote(heads))
        lines.extend(quote(row) for row in text_rows)
        return "\n".join(lines)
    widths = [len(h) for h in heads]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))

    def line(items: Sequence[str]) -> str:
        return (PREFIX + "  ".join(v.ljust(w) for v, w in zip(items, widths))).rstrip()

    lines.append(line(list(heads)))
    lines.append(PREFIX + "=" * (sum(widths) + 2 * (len(widths) - 1) + 2))
    lines.extend(line(row) for row in text_rows)
    return "\n".join(lines)


def time_long(seconds: Any) -> str:
    """Uptime as ``DDD:HH:MM:SS``."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return "%03d:%02d:%02d:%02d" % (days, hours, minutes, secs)


_UNITS = {1024: ("KiB", "MiB", "GiB", "TiB", "PiB"), 1000: ("k", "m", "g", "t", "p")}


def kmg(value: Any, base: int = 1000) -> str:
    """A large number in units (``320 MiB`` with base 1024): below ``base`` as is, else scaled
    down to below ``base`` with 2, 1 or 0 decimals for a value under 10, 100 or above."""
    if value is None:
        return ""
    number = float(value)
    if number < base:
        return "%d" % number
    for unit in _UNITS[base]:
        number /= base
        if number < base:
            break
    precision = 2 if number < 10 else 1 if number < 100 else 0
    return f"{number:.{precision}f} {unit}"


def commas(value: Any) -> str:
    """``12345`` -> ``12,345`` (None: empty)."""
    if value is None:
        return ""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def time_short(seconds: Any) -> str:
    """A duration under a day as ``HH:MM:SS``."""
    seconds = int(seconds)
    return "%02d:%02d:%02d" % ((seconds // 3600) % 24, (seconds // 60) % 60, seconds % 60)
