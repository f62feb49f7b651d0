"""System tests of management requests that must be refused with a 4xx and change nothing,
against a launched router (2 workers), and of configuration errors reported by qdrouterd as
FILE:LINE before anything starts. Every wait is bounded; every process is stopped."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest
from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

from conftest import free_port

TIMEOUT = 10
T = "org.apache.qpid.dispatch."


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


@pytest.fixture
def mgmt(router_factory):
    router = router_factory(workers=2)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    rr = SyncRequestResponse(conn, "$management")

    def call(props: dict, body=None) -> tuple:
        reply = rr.call(Message(properties=props, body=body))
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    call.router = router
    yield call
    conn.close()


def listener_names(call) -> list:
    status, _, body = call({"operation": "QUERY", "entityType": "listener"},
                           {"attributeNames": ["name", "host", "port"]})
    assert status == 200
    return sorted(row[0] for row in body["results"])


def test_null_body_create_listener_is_400_and_nothing_listens(mgmt):
    amqp_port_was_open = listening(5672) or listening(5672, "0.0.0.0")
    before = listener_names(mgmt)
    status, description, _ = mgmt({"operation": "CREATE", "type": "listener", "name": "oops"})
    assert status == 400 and "body" in description
    assert listener_names(mgmt) == before
    if not amqp_port_was_open:
        assert not listening(5672)


def test_bad_creates_are_4xx_and_bind_nothing(mgmt):
    port = free_port()
    before = listener_names(mgmt)
    for body in ({}, {"port": "70000"}, {"port": str(port), "linkCapacity": -5},
                 {"port": str(port), "sslProfile": "missing"},
                 {"host": "127.0.0.1", "port": str(mgmt.router.port)}):
        status, description, _ = mgmt({"operation": "CREATE", "type": "listener",
                                       "name": "bad"}, body)
        assert 400 <= status < 500 and description, (body, status, description)
    assert listener_names(mgmt) == before
    assert not listening(port)


def test_huge_query_is_400_not_500(mgmt):
    names = [f"attribute{i}" for i in range(50000)]
    status, description, _ = mgmt({"operation": "QUERY", "entityType": "listener"},
                                  {"attributeNames": names})
    assert status == 400 and "attributeNames" in description
    status, _, body = mgmt({"operation": "QUERY", "entityType": "listener"},
                           {"attributeNames": names[:1000]})
    assert status == 200 and len(body["results"][0]) == 1000


def test_request_larger_than_the_stream_window_is_answered(mgmt):
    """A request of about 2 MB is streamed by the router (past 128 KB, with a 1 MB window per
    delivery): the agent gathers it, acknowledging as it goes, and answers."""
    names = [f"attribute-with-a-longer-name-{i}" for i in range(50000)]  # about 1.8 MB
    status, description, _ = mgmt({"operation": "QUERY", "entityType": "listener"},
                                  {"attributeNames": names})
    assert status == 400 and "attributeNames" in description


def test_a_good_create_still_works(mgmt):
    port = free_port()
    status, _, body = mgmt({"operation": "CREATE", "type": "listener", "name": "extra"},
                           {"host": "127.0.0.1", "port": str(port)})
    assert status == 201 and body["port"] == str(port)
    assert listening(port)
    status, _, _ = mgmt({"operation": "DELETE", "type": "listener", "name": "extra"})
    assert status == 204


@pytest.mark.parametrize("text, line, words", [
    ("router {\n    workerThreads: 0\n}\n", 2, "workerThreads"),
    ("listener {\n    port: 20000\n    linkCapacity: -5\n}\n", 3, "linkCapacity"),
    ("listener {\n    port: 20000\n    sslProfile: nope\n}\n", 1, "sslProfile"),
    ("listener {\n    port: amqp\n}\nlistener {\n    host: 0.0.0.0\n    port: 5672\n}\n", 4,
     "line 1"),
])
def test_config_errors_exit_1_with_file_and_line(tmp_path, text, line, words):
    conf = tmp_path / "bad.conf"
    conf.write_text(textwrap.dedent(text))
    result = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert f"qdrouterd: configuration error: {conf}:{line}: " in result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr


def test_non_utf8_config_exits_1_with_file_and_line(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_bytes(b"router {\n    mode: standalone\n}\nlistener {\n    port: 5\xff672\n}\n")
    result = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"qdrouterd: configuration error: {conf}:5: " in result.stderr


def test_log_section_without_enable_starts(router_factory):
    router = router_factory(extra="""
        log {
            module: ROUTER_CORE
            includeSource: no
        }
    """)
    assert router.proc.proc.poll() is None
