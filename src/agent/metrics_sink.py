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

Crash safety: each write() is ONE append (``O_APPEND``, whole lines), so a reader or a crash
sees whole records or none of a batch; a torn tail (power loss in the middle of a write) is cut
back to the last complete line when a sink opens the file again. A file is fsync'd before it is
renamed on rotation (and the directory after), so a closed file is complete on disk. When
the router stops, the agent takes a last sample and calls ``close()``: the active file is
closed like a full one (a stopped router leaves no file being appended to).

Final records (``final: true``, see ``agent.metrics``) are written once: the sink remembers the
newest one it wrote (``seq``, ``gone_mono``, ``gone_ts``; read back from its files when it
starts, e.g. after an agent restart) and drops a final record it has already written, i.e.
one with seq <= that seq from the same core process (gone_mono not later, and gone_ts not
more than a second later: a restarted core numbers from 1 again at a later time).

Must not import zmq, proton or router_core internals.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Optional, Union

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
        self._repair_tail()
        self.last_final = self._newest_final()  # (seq, gone_mono, gone_ts) or None

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

    def _repair_tail(self) -> None:
        """Cut a torn last line (no newline: a write cut short by a crash) off the active file."""
        try:
            with open(self.path, "rb+") as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return
                pos = size
                while pos > 0:
                    step = min(65536, pos)
                    f.seek(pos - step)
                    chunk = f.read(step)
                    nl = chunk.rfind(b"\n")
                    if nl >= 0:
                        pos = pos - step + nl + 1
                        break
                    pos -= step
                f.truncate(pos)
                f.flush()
                os.fsync(f.fileno())
        except FileNotFoundError:
            pass

    def _newest_final(self) -> Optional[tuple]:
        """(seq, gone_mono, gone_ts) of the newest final record in this sink's files."""
        for path in reversed(self.files()):
            try:
                lines = path.read_bytes().splitlines()
            except OSError:
                continue
            for line in reversed(lines):
                if b'"final":true' not in line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("final") is True and rec.get("seq") is not None:
                    return (rec["seq"], rec.get("gone_mono"), rec.get("gone_ts"))
        return None

    def _already_written(self, rec: dict) -> bool:
        last = self.last_final
        if last is None or rec.get("seq") is None:
            return False
        seq, mono, wall = last
        if rec["seq"] > seq:
            return False
        if mono is not None and rec.get("gone_mono") is not None and rec["gone_mono"] > mono:
            return False        # a later core process (its numbering restarted)
        if wall is not None and rec.get("gone_ts") is not None and rec["gone_ts"] > wall + 1.0:
            return False        # ... after a reboot (monotonic clock restarted too)
        return True

    def write(self, records: Iterable[dict]) -> int:
        """Append the records (one JSON line each) in one write; return the bytes written.
        Final records this sink has written before are left out (see the module docstring)."""
        keep = []
        newest = None
        for r in records:
            if r.get("final") is True:
                if self._already_written(r):
                    continue
                if r.get("seq") is not None and (newest is None or r["seq"] >= newest["seq"]):
                    newest = r
            keep.append(r)
        data = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n"
                       for r in keep).encode()
        if not data:
            return 0
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(data) > self.max_bytes:
            self.rotate()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write() in practice; a short write is finished, never dropped
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if newest is not None:
            self.last_final = (newest["seq"], newest.get("gone_mono"), newest.get("gone_ts"))
        return len(data)

    def sync(self) -> None:
        """fsync the active file (the router is stopping: what was written is on disk)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """The router is stopping: close the active file (``rotate``), so that every record of
        a stopped router is in a closed file the streaming job reads; with ``keep_files=0``
        (no history) the active file stays, fsync'd."""
        if self.keep_files == 0:
            self.sync()
        else:
            self.rotate()

    def rotate(self) -> None:
        """Close the active file now (e.g. on a timer, so the streaming job sees recent data).
        The file is fsync'd before it is renamed, and the directory after."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        if self.keep_files == 0:
            self.path.unlink()
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.path, self.path.with_name(f"{self.path.name}.{self._next}"))
        self._fsync_directory()
        self._next += 1
        numbers = self.rotated_numbers()
        for n in numbers[:max(0, len(numbers) - self.keep_files)]:
            try:
                os.unlink(self.path.with_name(f"{self.path.name}.{n}"))
            except FileNotFoundError:
                pass

    def _fsync_directory(self) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
