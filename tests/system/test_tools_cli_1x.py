"""Our ``qdstat``/``qdmanage`` command lines as 1.19's answer them, against launched routers.

Each case runs our tool and, when ``QDROUTERD_1X`` names a 1.x install, 1.19's own tool (its
``bin/qdmanage``/``bin/qdstat`` under this interpreter with the install's Python packages), on
our router and on a 1.19 router alike, and checks the same observable result:

* ``--version`` prints the version and exits 0 (no router needed);
* an operation qdmanage has no method for goes to the router as typed (the agent's error log
  names ``foo``, not ``FOO``) and its error status exits 1;
* a string result (GET-JSON-SCHEMA's body) is printed as it is, not JSON-encoded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_mixed_1x import ONE_X, one_x_env

TIMEOUT = 60
TOOLS = ["ours", pytest.param("1.x", marks=pytest.mark.skipif(
    not ONE_X or not os.path.exists(os.path.join(ONE_X, "bin", "qdmanage")),
    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))]


def run(tool: str, program: str, *args: str) -> subprocess.CompletedProcess:
    if tool == "ours":
        argv, env = [sys.executable, "-m", f"tools.{program}", *args], None
    else:
        argv, env = [sys.executable, os.path.join(ONE_X, "bin", program), *args], one_x_env()
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("program", ["qdstat", "qdmanage"])
def test_version_option(tool, program):
    out = run(tool, program, "--version")
    assert (out.returncode, out.stdout.strip()) == (0, "1.19.0"), out.stderr


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_custom_operation_goes_as_typed(router_of_kind, tool, kind):
    router = router_of_kind(kind)
    out = run(tool, "qdmanage", "-b", f"127.0.0.1:{router.port}", "foo")
    assert out.returncode == 1
    # 1.19's tools print the error on stdout, ours on stderr: the text is the same
    assert (out.stdout + out.stderr).startswith(
        "NotImplementedStatus: Operation 'FOO' not implemented for "
        "'org.apache.qpid.dispatch.management'"), out
    router.proc.wait_for_line("Error performing foo: Operation 'FOO' not implemented", 10)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_string_result_is_printed_raw(router_of_kind, tool, kind):
    router = router_of_kind(kind)
    out = run(tool, "qdmanage", "-b", f"127.0.0.1:{router.port}", "get-json-schema")
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)  # the schema's own JSON text, not a JSON string of it
    assert isinstance(schema, dict) and schema["prefix"] == "org.apache.qpid.dispatch"
