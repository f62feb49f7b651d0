"""Append "router-metrics/1" records as JSON lines to a bounded, rotated set of files.

Owns file I/O for metrics and nothing else (records come from ``agent.metrics``).

Layout in ``directory`` for router ``R``:
    router-metrics-R.jsonl        the file being appended to
    router-metrics-R.jsonl.<n>    closed files, n = 1, 2, 3, ... in the order they were closed

Unlike logrotate, closed files are never renamed again: n only grows, and the oldest are deleted
so that at most ``keep_files`` closed files remain. Why: Spark's streaming file source reads each
path once, so a file renamed from ``.1`` to ``.2`` would look new and be counted twice, and a file
still being appended to would be read half-written. The streaming job therefore reads only the
closed ``.<n>`` files; the batch job reads them all. On restart numbering continues after the
highest n on disk.

Bounds: the active file is rotated before a write would take it past ``max_bytes`` (a single
write larger than ``max_bytes`` gets a file of its own), so the directory holds at most about
``(keep_files + 1) * max_bytes`` bytes. ``keep_files=0`` keeps no history.

Must not import zmq, proton or router_core internals.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Union

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_KEEP_FILES = 5


def metrics_filename(router_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", router_id)
    return f"router-metrics-{safe}.jsonl"


class MetricsSink:
    def __init__(self, directory: Union[str, os.PathLike], router_id: str, *,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 keep_files: int = DEFAULT_KEEP_FILES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if keep_files < 0:
            raise ValueError("keep_files must be zero or more")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / metrics_filename(router_id)
        self.max_bytes = max_bytes
        self.keep_files = keep_files
        self._rotated = re.compile(re.escape(self.path.name) + r"\.(\d+)$")
        self._next = max(self.rotated_numbers(), default=0) + 1

    def rotated_numbers(self) -> list[int]:
        """The n of every closed ``.<n>`` file on disk, ascending."""
        found = []
        for entry in os.scandir(self.directory):
            m = self._rotated.match(entry.name)
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    def files(self) -> list[Path]:
        """Every file of this sink, oldest first (closed files, then the active one)."""
        out = [self.path.with_name(f"{self.path.name}.{n}") for n in self.rotated_numbers()]
        if self.path.exists():
            out.append(self.path)
        return out

    def write(self, records: Iterable[dict]) -> int:
        """Append the records (one JSON line each) in one write; return the bytes written."""
        data = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n"
                       for r in records).encode()
        if not data:
            return 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(data) > self.max_bytes:
            self.rotate()
        with open(self.path, "ab") as f:
            f.write(data)
        return len(data)

    def rotate(self) -> None:
        """Close the active file now (e.g. on a timer, so the streaming job sees recent data)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        if self.keep_files == 0:
            self.path.unlink()
            return
        os.replace(self.path, self.path.with_name(f"{self.path.name}.{self._next}"))
        self._next += 1
        numbers = self.rotated_numbers()
        for n in numbers[:max(0, len(numbers) - self.keep_files)]:
            try:
                os.unlink(self.path.with_name(f"{self.path.name}.{n}"))
            except FileNotFoundError:
                pass
