"""The router-wide count of accepted connections, shared by the worker processes.

1.19 checks its global ``maxConnections`` (the ``policy`` entity) when a socket is accepted,
before SASL and open, and closes an excess socket at once. Here the sockets are accepted by
several worker processes, so the count they check must be the router's, not one worker's.

Each worker owns one 8-byte slot of a small file mapped by all of them (``conncount`` in the
router's runtime directory) and writes only that slot; the router's count is the sum of the
slots. No lock: two workers accepting at the same instant can both see room for one more, so
the limit can be passed by at most the number of workers minus one; the core's own count at
``ConnOpened`` (router_core/policycount.py) still refuses those, with 1.19's close. A restarted
worker starts its slot at zero (its connections went with its predecessor).

Must not import zmq or proton.
"""

import mmap
import os
import struct

FILE_NAME = "conncount"
SLOTS = 512  # peers a runtime directory can hold (workers are far fewer)
_SLOT = struct.Struct("=q")


class SharedConnectionCount:
    """This worker's view of the router-wide count of accepted connections."""

    def __init__(self, runtime_dir: str, index: int, peers: int = SLOTS) -> None:
        """``peers``: the slots in use (the core's peers: every worker's index is below it);
        :meth:`total` reads those only."""
        if not 0 <= index < SLOTS:
            raise ValueError(f"worker index {index} outside 0..{SLOTS - 1}")
        path = os.path.join(runtime_dir, FILE_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOTS * _SLOT.size:
                os.ftruncate(fd, SLOTS * _SLOT.size)  # zero-filled; the same size for everyone
            self._map = mmap.mmap(fd, SLOTS * _SLOT.size)
        finally:
            os.close(fd)
        self._offset = index * _SLOT.size
        self._used = struct.Struct(f"={min(max(peers, index + 1), SLOTS)}q")
        self.mine = 0
        _SLOT.pack_into(self._map, self._offset, 0)

    def total(self) -> int:
        """Accepted connections of every worker now."""
        return sum(self._used.unpack_from(self._map))

    def admit(self, limit: int) -> int:
        """Count one more connection if the router holds fewer than ``limit``: returns -1 when
        it was counted, else the router's count (the connection is to be refused)."""
        current = self.total()
        if current >= limit:
            return current
        self.mine += 1
        _SLOT.pack_into(self._map, self._offset, self.mine)
        return -1

    def release(self) -> None:
        """A counted connection of this worker closed."""
        if self.mine > 0:
            self.mine -= 1
            _SLOT.pack_into(self._map, self._offset, self.mine)

    def close(self) -> None:
        self.mine = 0
        try:
            _SLOT.pack_into(self._map, self._offset, 0)
            self._map.close()
        except (ValueError, OSError):
            pass
