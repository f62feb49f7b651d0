"""Give freed heap memory back to the OS, for long-running router processes (glibc only).

Python frees objects at once and proton frees its buffers when a connection or delivery goes,
but glibc keeps the freed pages of a fragmented heap: without a trim the RSS of a worker (or
the core) stays at its peak after a burst of connections, a stalled receiver or a big message,
and the next burst grows it again. :class:`HeapTrimmer` samples once per interval how much of the
heap is in use (``mallinfo2``, a few µs) and calls ``malloc_trim(0)`` when that fell by more
than a threshold from its highest sample since the last trim (memory was freed, and its pages
were touched since the last trim). Elsewhere than glibc it does nothing.

Must not import zmq, proton or sockets (the core uses it).
"""
import ctypes

TRIM_INTERVAL = 0.5            # seconds between checks
TRIM_THRESHOLD = 8 * 1024 * 1024  # heap bytes freed since the peak that make a trim worth it


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


try:
    _libc = ctypes.CDLL(None)
    _malloc_trim = _libc.malloc_trim
    _malloc_trim.argtypes = [ctypes.c_size_t]
    _mallinfo2 = _libc.mallinfo2
    _mallinfo2.restype = _MallInfo2
except (OSError, AttributeError):  # not glibc (or glibc < 2.33)
    _malloc_trim = None
    _mallinfo2 = None


def free_heap_bytes() -> int:
    """Bytes of freed memory the heap (main arena) holds; 0 where unknown."""
    return _mallinfo2().fordblks if _mallinfo2 is not None else 0


def trim() -> None:
    """Return every whole free page of the heap to the OS now."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class HeapTrimmer:
    """``maybe_trim(now)`` from a process's loop: at most one check per ``interval``."""

    __slots__ = ("interval", "threshold", "_next", "_peak", "trims")

    def __init__(self, interval: float = TRIM_INTERVAL, threshold: int = TRIM_THRESHOLD) -> None:
        self.interval = interval
        self.threshold = threshold
        self._next = 0.0
        self._peak = 0      # highest in-use heap bytes sampled since the last trim
        self.trims = 0

    def maybe_trim(self, now: float) -> bool:
        if now < self._next or _mallinfo2 is None:
            return False
        self._next = now + self.interval
        used = _mallinfo2().uordblks
        if used > self._peak:
            self._peak = used
            return False
        if self._peak - used < self.threshold:
            return False
        _malloc_trim(0)
        self._peak = used
        self.trims += 1
        return True
