"""Qpid Dispatch 1.19's own ``qdstat`` against our router: every option prints its table and
exits 0. Needs a 1.x install named by ``QDROUTERD_1X`` (its ``bin/qdstat`` and Python
packages); skipped with the reason otherwise. The management answers these rely on are tested
without the 1.x install in tests/unit/test_management_1x.py."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import default_vhost_policy

ROOT = os.environ.get("QDROUTERD_1X", "")
QDSTAT = Path(ROOT) / "bin" / "qdstat" if ROOT else None
pytestmark = pytest.mark.skipif(
    not ROOT or not QDSTAT.exists(),
    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install (with bin/qdstat) to run 1.x's "
           "qdstat against this router")

VHOST = default_vhost_policy({"maxSessions": 10, "allowDynamicSource": True,
                              "allowAnonymousSender": True})


def _python_with_proton() -> str:
    """The system python3 when it has proton (Debian's python3-qpid-proton, as a 1.x install
    expects), else this interpreter (its proton is the one the tests use)."""
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import proton"], check=True, timeout=30,
                       capture_output=True)
        return "/usr/bin/python3"
    except (OSError, subprocess.SubprocessError):
        return sys.executable


def qdstat_1x(router, *args: str) -> subprocess.CompletedProcess:
    """Run 1.x's qdstat with its own Python packages."""
    from test_mixed_1x import one_x_pythonpath  # noqa: PLC0415 - the shared 1.x paths
    paths = one_x_pythonpath(ROOT).split(os.pathsep)
    python = _python_with_proton()
    if python == "/usr/bin/python3":
        paths.append("/usr/lib/python3/dist-packages")
    env = {**os.environ, "PYTHONPATH": ":".join(paths)}
    return subprocess.run([python, str(QDSTAT), "-b", f"127.0.0.1:{router.port}",
                           "-t", "10", *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.fixture(scope="module")
def vhost_router(tmp_path_factory):
    from conftest import RouterProcess, Router, free_port  # the shared launcher
    port = free_port()
    conf = tmp_path_factory.mktemp("qdstat1x") / "qdrouterd.conf"
    conf.write_text(textwrap.dedent(f"""\
        router {{
            mode: standalone
            id: Router.Q1X
        }}
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """) + VHOST)
    proc = RouterProcess(conf)
    try:
        proc.wait_for_line("Operational")
        yield Router(proc, port, "Router.Q1X")
    finally:
        proc.stop()


TITLES = {"-g": "Router Statistics", "-c": "Connections", "-l": "Router Links",
          "-a": "Router Addresses", "-m": "Memory Pools", "-p": "Policy Status",
          "--vhosts": "Vhosts", "--vhostgroups": "Vhost Groups", "--vhoststats": "Vhost Stats",
          "-n": "Router is Standalone - No Router List", "--autolinks": "No AutoLinks found",
          "--linkroutes": "No Link Routes found", "--log": "Management agent started"}


@pytest.mark.parametrize("option", list(TITLES))
def test_every_option_of_1x_qdstat(vhost_router, option):
    for args in ((option,), (option, "-v")):
        done = qdstat_1x(vhost_router, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert TITLES[option] in done.stdout, (args, done.stdout)
        assert "Traceback" not in done.stderr


def test_1x_qdstat_connections_show_the_protocol(vhost_router):
    done = qdstat_1x(vhost_router, "-c")
    lines = done.stdout.splitlines()
    heads = lines[lines.index("Connections") + 1].split()
    assert "proto" in heads
    row = lines[lines.index("Connections") + 3].split()
    assert row[heads.index("proto")] == "amqp"


def test_1x_qdstat_memory_shows_pools_and_vm_size(vhost_router):
    out = qdstat_1x(vhost_router, "-m").stdout
    assert "qdr_address_t" in out and "qdr_connection_t" in out and "Memory Summary" in out
    summary = out.split("Memory Summary")[1].splitlines()[-1].split()
    assert summary[0] != "-"  # VmSize known


def test_1x_qdstat_vhost_groups_show_the_group(vhost_router):
    out = qdstat_1x(vhost_router, "--vhostgroups").stdout
    assert "Vhost '$default' UserGroup '$default'" in out


def test_1x_qdstat_all_entities(vhost_router):
    done = qdstat_1x(vhost_router, "--all-entities")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
