"""The reload channel between the supervisor and the agent: where it is, and its messages.

On SIGHUP the supervisor works out what changed in the configuration file
(supervisor/reload.py) and sends the changes as ONE ``reload`` message over a ZeroMQ PAIR socket
(:func:`reload_endpoint`: bound by the supervisor, connected by the agent); the agent applies
them through management (agent/reload.py) and answers with one ``result`` message. Both ends
use this module only, so neither the supervisor nor the agent imports the other.

Messages are JSON objects with a ``kind``:
    ``{"kind": "reload", "id": N, "changes": [change...]}`` supervisor -> agent, where a change
        is ``{"op": "create"|"update"|"delete", "type": <short type>, "name": ...,
        "attributes": {...}}``;
    ``{"kind": "result", "id": N, "ok": bool, "applied": [index...], "detail": text}``
        agent -> supervisor.

Must not import zmq (the callers own the sockets), agent or supervisor.
"""
from __future__ import annotations

import json
import os
from typing import Any

KINDS = ("reload", "result")


def reload_endpoint(runtime_dir: str) -> str:
    """The supervisor binds a PAIR socket here; the agent connects one."""
    return f"ipc://{os.path.join(runtime_dir, 'reload')}"


def encode_message(kind: str, **fields: Any) -> bytes:
    return json.dumps({"kind": kind, **fields}, default=str).encode()


def decode_message(data: bytes) -> dict:
    """One reload-channel message; ValueError if it is not one."""
    msg = json.loads(bytes(data))
    if not isinstance(msg, dict) or msg.get("kind") not in KINDS:
        raise ValueError("not a reload-channel message")
    return msg
