"""systemd's sd_notify protocol without libsystemd: one datagram per state change.

When systemd starts the router as ``Type=notify`` it puts the path of an AF_UNIX datagram socket
in ``$NOTIFY_SOCKET`` (a file path, or an abstract socket written ``@name``). The service sends
newline-separated ``KEY=value`` assignments to it:

* ``READY=1`` (with ``STATUS=...``) once the router accepts connections: the same moment as the
  ``SERVER (notice) Operational`` log line;
* ``RELOADING=1`` (with ``MONOTONIC_USEC=``, which ``Type=notify-reload`` requires) when a SIGHUP
  reload starts, then ``READY=1`` when it is over (applied or refused);
* ``STOPPING=1`` when an orderly shutdown starts.

Without ``$NOTIFY_SOCKET`` every call is a no-op that returns False. Sending never raises and
never blocks: a missing or full socket only costs the notification. Used by the supervisor only
(children run with ``NOTIFY_SOCKET`` removed from their environment).
"""
from __future__ import annotations

import os
import socket
import time
from typing import Mapping, Optional


def socket_address(value: Optional[str]) -> Optional[str]:
    """The address to send to for a ``$NOTIFY_SOCKET`` value; None when unusable."""
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]  # abstract namespace
    if value.startswith("/"):
        return value
    return None  # systemd also knows vsock:..., which the router does not need


def notify(*assignments: str, env: Optional[Mapping[str, str]] = None) -> bool:
    """Send ``KEY=value`` lines to ``$NOTIFY_SOCKET``; True if the datagram went out."""
    environ = os.environ if env is None else env
    address = socket_address(environ.get("NOTIFY_SOCKET"))
    if address is None or not assignments:
        return False
    data = "\n".join(a.replace("\n", " ") for a in assignments).encode("utf-8", "replace")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(data, address)
        return True
    except OSError:
        return False


def ready(status: str = "", env: Optional[Mapping[str, str]] = None) -> bool:
    return notify("READY=1", *((f"STATUS={status}",) if status else ()), env=env)


def reloading(status: str = "Reloading configuration",
              env: Optional[Mapping[str, str]] = None) -> bool:
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={usec}", f"STATUS={status}", env=env)


def stopping(status: str = "Shutting down", env: Optional[Mapping[str, str]] = None) -> bool:
    return notify("STOPPING=1", f"STATUS={status}", env=env)


def status(text: str, env: Optional[Mapping[str, str]] = None) -> bool:
    return notify(f"STATUS={text}", env=env)
