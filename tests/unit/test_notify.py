"""sd_notify datagrams reach a socket we own; no NOTIFY_SOCKET means no-op."""
from __future__ import annotations

import os
import socket

import pytest

from supervisor import notify


def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2.0)
    return sock


def _fields(data: bytes) -> dict:
    return dict(line.split("=", 1) for line in data.decode().splitlines())


def test_no_socket_is_a_noop():
    assert notify.notify("READY=1", env={}) is False
    assert notify.ready("x", env={"NOTIFY_SOCKET": ""}) is False
    assert notify.stopping(env={"NOTIFY_SOCKET": "vsock:2:5"}) is False


def test_ready_status_to_a_path_socket(tmp_path):
    path = str(tmp_path / "notify.sock")
    with _receiver(path) as sock:
        assert notify.ready("Operational", env={"NOTIFY_SOCKET": path})
        assert _fields(sock.recv(4096)) == {"READY": "1", "STATUS": "Operational"}


def test_reloading_and_stopping(tmp_path):
    path = str(tmp_path / "n.sock")
    env = {"NOTIFY_SOCKET": path}
    with _receiver(path) as sock:
        assert notify.reloading(env=env)
        fields = _fields(sock.recv(4096))
        assert fields["RELOADING"] == "1" and int(fields["MONOTONIC_USEC"]) > 0
        assert notify.stopping(env=env)
        assert _fields(sock.recv(4096))["STOPPING"] == "1"


def test_abstract_socket():
    name = f"qdrouterd-test-{os.getpid()}"
    with _receiver("\0" + name) as sock:
        assert notify.notify("READY=1", env={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


def test_newlines_in_values_cannot_inject_assignments(tmp_path):
    path = str(tmp_path / "n.sock")
    with _receiver(path) as sock:
        notify.status("a\nREADY=1", env={"NOTIFY_SOCKET": path})
        assert sock.recv(4096) == b"STATUS=a READY=1"


def test_missing_socket_does_not_raise(tmp_path):
    assert notify.ready(env={"NOTIFY_SOCKET": str(tmp_path / "absent")}) is False


@pytest.mark.parametrize("value,expected", [("@x", "\0x"), ("/run/s", "/run/s"), ("rel", None),
                                            (None, None)])
def test_socket_address(value, expected):
    assert notify.socket_address(value) == expected
