"""The idle router's footprint, by what each process imports and shares (counted, never sized).

* Each process's entry point, started on its own, does not load what that process never uses
  (the core no proton, h11 or wsproto; the compiled worker not the pure engine; the supervisor
  not importlib.metadata and its e-mail parser; nobody Spark, matplotlib or the metrics library
  before a scrape).
* The children are forked from the supervisor after it imported them (``supervisor/spawn.py``):
  each child's anonymous memory (Python objects) starts as pages it shares with the supervisor,
  at the supervisor's addresses; it still shows its own command line (``ps``), and holds none
  of the supervisor's descriptors (the core and the agent no listening socket).
* ``QDROUTERD_SPAWN=exec``, or an install without setproctitle (a warning says so), starts them
  as separate interpreters, which share no such pages; a child module that cannot be imported
  stops the start with its error.

benchmarks/bench_memory.py ``--only footprint`` gives the sizes (docs/scaling.md).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import psutil_free as procs  # local helper module in tests/
from conftest import RouterProcess, free_port

SRC = Path(__file__).resolve().parents[2] / "src"
COMPILED = os.environ.get("ROUTER_NO_EXTENSIONS") != "1"
NEVER_AT_START = {"pyspark", "matplotlib", "prometheus_client", "cryptography", "numpy"}


def modules_after(code: str) -> set:
    """sys.modules of a fresh interpreter after ``code`` (the router's src/ on its path)."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def tops(modules: set) -> set:
    return {m.split(".")[0] for m in modules} | modules


def test_the_core_loads_no_amqp_engine_no_http_and_no_tls():
    mods = tops(modules_after("import router_core.coreproc, router_core.core_select as s\n"
                              "s.get_core_class()"))
    assert "router_core.coreproc" in mods  # the entry point did load
    assert not mods & ({"proton", "cproton", "h11", "wsproto", "ssl", "importlib.metadata",
                        "email"} | NEVER_AT_START)


@pytest.mark.skipif(not COMPILED, reason="the pure build runs the pure engine")
def test_the_compiled_worker_does_not_load_the_pure_engine_beside_it():
    mods = modules_after("import router_io.worker, router_io.engine_select as s\n"
                         "s.get_engine_class()")
    assert "router_io._engine" in mods
    assert not mods & {"router_io.engine", "router_io.engine_proton", "cython", "Cython"}
    assert not tops(mods) & (NEVER_AT_START | {"importlib.metadata", "email"})


def test_the_supervisor_loads_no_child_code_and_no_metadata_parser_to_log_its_version():
    mods = tops(modules_after("import supervisor.main\nfrom common.buildinfo import "
                              "startup_line\nassert 'qdrouter-py' in startup_line()"))
    assert not mods & ({"importlib.metadata", "email", "proton", "h11", "wsproto",
                        "router_io.worker", "router_core.coreproc", "agent"} | NEVER_AT_START)


def test_the_agent_loads_no_metrics_library_or_analytics_before_a_scrape():
    mods = tops(modules_after("import agent.controlplane"))
    assert "agent.controlplane" in mods
    assert not mods & (NEVER_AT_START | {"importlib.metadata", "email"})


def test_what_the_supervisor_preloads_for_its_children_is_only_theirs():
    mods = tops(modules_after("from supervisor import spawn\nspawn.preload()"))
    assert {"router_core.coreproc", "agent.controlplane", "router_io.worker"} <= mods
    assert not mods & (NEVER_AT_START | {"importlib.metadata", "email"})


# --- the children, forked ---------------------------------------------------------------------
def _anon_mappings(pid: int) -> dict:
    """{address range: Shared_Dirty kB} of the process's anonymous mappings (no path)."""
    out, current = {}, None
    with open(f"/proc/{pid}/smaps", encoding="ascii", errors="replace") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            if "-" in head and not head.endswith(":"):
                current = head if len(rest.split()) < 5 else None
                if current:
                    out[current] = 0
            elif head == "Shared_Dirty:" and current:
                out[current] += int(rest.split()[0])
    return out


def _socket_inodes(pid: int) -> set:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _listening_inode(port: int) -> str:
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path, encoding="ascii") as f:
            next(f)
            for line in f:
                p = line.split()
                if int(p[1].rsplit(":", 1)[1], 16) == port and p[3] == "0A":
                    return p[9]
    raise AssertionError(f"nothing listens on {port}")


def _status(pid: int) -> dict:
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _children(router) -> dict:
    out = {}
    for pid in procs.children_of(router.proc.proc.pid):
        words = procs.cmdline(pid).split()
        if "-m" in words:
            out[words[words.index("-m") + 1]] = pid
    return out


def test_children_are_forked_from_the_supervisor_sharing_its_imported_pages(router_factory):
    router = router_factory()
    supervisor = router.proc.proc.pid
    children = _children(router)
    # each one named as its command line, as when it was exec'd
    assert set(children) == {"router_core.coreproc", "agent.controlplane", "router_io.worker"}
    assert "--ipc" in procs.cmdline(children["router_io.worker"]).split()
    parent = _anon_mappings(supervisor)
    for name, pid in children.items():
        shared = {r for r, kb in _anon_mappings(pid).items() if kb > 0 and r in parent}
        assert shared, f"{name}: no anonymous page shared with the supervisor"
    # none of the supervisor's signal handling: nothing blocked, SIGHUP not caught (the
    # supervisor's reload handler), as in an exec'd child
    for name, pid in children.items():
        status = _status(pid)
        assert int(status["SigBlk"], 16) == 0, name
        assert not int(status["SigCgt"], 16) & (1 << (signal.SIGHUP - 1)), name
    assert int(_status(supervisor)["SigCgt"], 16) & (1 << (signal.SIGHUP - 1))
    # no descriptor of the supervisor's: the listening socket is lent to the worker only
    listener = _listening_inode(router.port)
    assert listener in _socket_inodes(supervisor)
    assert listener not in _socket_inodes(children["router_core.coreproc"])
    assert listener not in _socket_inodes(children["agent.controlplane"])


def test_exec_children_share_no_python_pages(router_factory, monkeypatch):
    monkeypatch.setenv("QDROUTERD_SPAWN", "exec")
    router = router_factory()
    children = _children(router)
    assert len(children) == 3
    parent = _anon_mappings(router.proc.proc.pid)
    for name, pid in children.items():
        assert not {r for r, kb in _anon_mappings(pid).items() if kb > 0 and r in parent}, name


def _shadowing(tmp_path, name: str, text: str) -> dict:
    """An environment whose interpreters find ``name`` (a module, or sitecustomize) first."""
    (tmp_path / "shadow").mkdir(exist_ok=True)
    (tmp_path / "shadow" / name).write_text(text)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "shadow"),
                                                        os.environ.get("PYTHONPATH")]))}


def test_an_install_without_setproctitle_starts_separate_interpreters(tmp_path):
    conf = tmp_path / "r.conf"
    port = free_port()
    conf.write_text("router {\n    mode: standalone\n    id: R\n    workerThreads: 1\n}\n"
                    "listener {\n"
                    f"    host: 127.0.0.1\n    port: {port}\n    authenticatePeer: no\n}}\n")
    proc = RouterProcess(conf, _shadowing(tmp_path, "sitecustomize.py",
                                          "import sys\nsys.modules['setproctitle'] = None\n"))
    try:
        proc.wait_for_line("setproctitle is not installed: the router's processes start as "
                           "separate interpreters")
        proc.wait_for_line("Operational")
        parent = _anon_mappings(proc.proc.pid)
        kids = procs.children_of(proc.proc.pid)
        assert len(kids) == 3
        for pid in kids:
            assert not {r for r, kb in _anon_mappings(pid).items() if kb > 0 and r in parent}
    finally:
        proc.stop()


def test_a_child_module_that_cannot_be_imported_stops_the_start(tmp_path):
    conf = tmp_path / "r.conf"
    conf.write_text("router {\n    mode: standalone\n    id: R\n}\n")
    done = subprocess.run([sys.executable, "-m", "supervisor.main", "-c", str(conf)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **_shadowing(
                              tmp_path, "setproctitle.py", "raise ImportError('broken here')\n")})
    assert done.returncode == 1
    assert ("SERVER (critical) Router start-up failed: cannot load the router's modules: "
            "ImportError: broken here") in done.stdout + done.stderr


def test_the_worker_has_its_descriptor_table_grown_before_it_takes_connections(router_factory):
    """(procutil.presize_fd_table) FDSize, the kernel's table size, is the descriptor limit
    (at most FD_TABLE_CAP) once the router is ready: no accept4 waits for it to double."""
    import resource

    from common.procutil import FD_TABLE_CAP
    router = router_factory()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    want = min(soft, FD_TABLE_CAP)
    worker = _children(router)["router_io.worker"]
    assert int(_status(worker)["FDSize"]) >= want > 64
    if want >= 1024:  # (the core, which takes no connections, keeps the table it has)
        assert int(_status(_children(router)["router_core.coreproc"])["FDSize"]) < want
