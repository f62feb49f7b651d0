"""The compiled worker engine is the engine's parts themselves, compiled: nothing can drift.

Its behaviour is tested on both builds by every engine test (the ``engine_cls`` fixture); here:
the only part the builds do not share, the proton calls of the per-message paths, is one name
list in two spellings (engine_proton.py's ``if not cython.compiled`` block for cffi,
cython/_engine.pxd's inline C functions), and each plain alias names the same proton function in
both; setup.py's ENGINE_PARTS is every engine part; the compiled module holds every name of the
parts.
"""
from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compiled_engine

from router_io import engine as engine_py

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PY = ROOT / "src" / "router_io" / "engine_proton.py"  # the one with the pure-only block
ENGINE_PXD = ROOT / "cython" / "_engine.pxd"


def _engine_parts() -> list:
    """setup.py's ENGINE_PARTS (read from its text: importing setup.py would run setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "ENGINE_PARTS":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no ENGINE_PARTS")


def test_every_engine_part_is_compiled():
    """A module of the engine left out of ENGINE_PARTS would be missing from the compiled
    build (its functions looked up in the pure module, or not found)."""
    parts = _engine_parts()
    on_disk = {p.stem for p in (ROOT / "src" / "router_io").glob("engine*.py")}
    assert set(parts) == on_disk - {"engine_select"}
    assert parts[-1] == "engine"  # WorkerEngine last: it calls every other part
    for part in parts[:-1]:
        text = (ROOT / "src" / "router_io" / f"{part}.py").read_text()
        assert "from router_io.engine import" not in text, f"{part} imports engine.py"


def test_each_engine_part_imports_on_its_own():
    """The pure build's parts call each other (their imports of each other's functions are at
    their end): whichever is imported first, all of them load."""
    code = "; ".join(f"import router_io.{part}" for part in reversed(_engine_parts()))
    for first in _engine_parts():
        result = subprocess.run(
            [sys.executable, "-c", f"import router_io.{first}; {code}"],
            env={**os.environ, "ROUTER_NO_EXTENSIONS": "1"}, capture_output=True, text=True,
            timeout=60)
        assert result.returncode == 0, f"{first} first: {result.stderr[-2000:]}"


def _pure_block() -> ast.If:
    tree = ast.parse(ENGINE_PY.read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test) == "not cython.compiled"]
    assert len(blocks) == 1, "engine_proton.py must have one `if not cython.compiled:` block"
    return blocks[0]


def _pure_names() -> dict:
    """name -> the proton function it aliases (None for a function defined in the block)."""
    names = {}
    for node in _pure_block().body:
        if isinstance(node, ast.Assign):
            target, = node.targets
            value = ast.unparse(node.value)
            names[target.id] = value[len("lib."):] if value.startswith("lib.") else value
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = None
        else:
            pytest.fail(f"unexpected statement in the pure-only block: {ast.unparse(node)}")
    return names


def _pxd_names() -> dict:
    """name -> the ``pn.`` field its body calls (for every inline function and extern alias)."""
    text = ENGINE_PXD.read_text()
    names = {}
    for match in re.finditer(r"^cdef inline [^(]*?\b(\w+)\(.*?\n((?:    .*\n|\n)*)", text,
                             re.MULTILINE):
        name, body = match.groups()
        called = re.findall(r"\bpn\.(\w+)\(", body)
        names[name] = called
    for name in re.findall(r'^\s+\w+ (\w+) "[^"]+"\(', text, re.MULTILINE):
        names[name] = []
    return names


def test_the_pure_only_block_and_the_pxd_define_the_same_names():
    pure = _pure_names()
    native = {n for n in _pxd_names() if not n.startswith("_pn_bind") and n != "_pn_fn"}
    assert set(pure) == native


def test_each_alias_calls_the_same_proton_function_in_both_builds():
    native = _pxd_names()
    aliases = {name: fn for name, fn in _pure_names().items() if fn is not None}
    assert len(aliases) >= 20
    for name, fn in aliases.items():
        assert name == "_" + fn, f"{name} is bound to lib.{fn}"
        assert native[name] == [fn[len("pn_"):]], f"the compiled {name} calls {native[name]}"


def test_the_compiled_module_is_the_engine_parts():
    """Every module-level name of the engine's parts and every WorkerEngine/Connection method
    is in the compiled module, except the pure-only block's (inline C there) and what the .pxd
    turns into C (constants, cdef functions and methods); and nothing else is."""
    if compiled_engine() is None:  # conftest stops the run here under ROUTER_REQUIRE_EXTENSIONS
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    import router_io._engine as engine_c
    assert engine_c.__file__.endswith(".so")
    pxd = ENGINE_PXD.read_text()
    c_globals = set(re.findall(r"^cdef (?:int|uint64_t|frozenset) (.*)$", pxd, re.MULTILINE))
    c_globals = {n.strip() for line in c_globals for n in line.split(",")}
    cdef_methods = set(re.findall(r"^    cdef \w+\(self", pxd, re.MULTILINE))
    cdef_methods = {re.match(r"    cdef (\w+)", m).group(1) for m in cdef_methods}
    # the parts' functions declared cdef: C functions only, no Python name in the module
    cdef_functions = set(re.findall(r"^cdef (?:bint )?(\w+)\((?:WorkerEngine self|Link link|"
                                    r"tuple fields)", pxd, re.MULTILINE))
    assert {"_on_delivery", "_send", "_on_flow"} <= cdef_functions
    pure_only = set(_pure_names()) | {"cython"}  # cython: a compile-time module when compiled
    expected = set()
    for part in _engine_parts():
        module = importlib.import_module(f"router_io.{part}")
        expected |= {n for n in vars(module) if not n.startswith("__")}
    expected -= pure_only | c_globals | cdef_functions
    got = {n for n in vars(engine_c) if not n.startswith("__")}
    assert expected - got == set()
    assert got - expected <= {"_pn_bind"}, got - expected
    for cls in ("WorkerEngine", "Connection", "Link"):
        ref = {n for n in vars(getattr(engine_py, cls)) if not n.startswith("__")}
        comp = {n for n in dir(getattr(engine_c, cls)) if not n.startswith("__")}
        missing = ref - comp - (cdef_methods if cls == "WorkerEngine" else set())
        assert missing == set(), f"{cls}: {missing}"
    assert engine_c.WorkerEngine.__module__ == "router_io._engine"


def test_the_compiled_link_has_exactly_the_reference_slots():
    """cython/_engine.pxd declares Link as a cdef class: its attributes must stay
    engine_records.py's __slots__ (an attribute only one build has would be lost, or refused,
    in the other)."""
    if compiled_engine() is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    import router_io._engine as engine_c
    compiled = {n for n in dir(engine_c.Link) if not n.startswith("__")}
    assert compiled == set(engine_py.Link.__slots__)
    link = engine_c.Link.__new__(engine_c.Link)
    with pytest.raises(AttributeError):
        link.not_a_slot = 1


def test_the_compiled_connection_types_only_fields_the_reference_sets():
    """cython/_engine.pxd declares Connection a cdef class with a few typed fields and a
    __dict__ for the rest: every typed field must be one engine_conn.py's Connection sets (a field
    it never sets would read as 0 or None in the compiled build only), and both builds must
    hold the same values for them on a new connection."""
    if compiled_engine() is None:
        pytest.skip("router_io._engine is not built (ROUTER_NO_EXTENSIONS=1 or no compiler)")
    import memrouter
    import router_io._engine as engine_c
    block = re.search(r"^cdef class Connection:\n((?:    .*\n)+)", ENGINE_PXD.read_text(),
                      re.MULTILINE).group(1)
    fields = {name.strip() for line in re.findall(r"^    cdef public [\w ]*?\b(?:object|"
                                                    r"Py_ssize_t|bint) (.*)$", block, re.MULTILINE)
              for name in line.split(",")}
    assert fields >= {"out_room", "out_budget", "out_queue", "strip_in", "strip_out"}
    conns = {}
    for build, cls in (("py", engine_py.WorkerEngine), ("c", engine_c.WorkerEngine)):
        engine = memrouter.MemRouter(engine_cls=cls).engine
        conns[build] = engine.new_connection(dict(memrouter.LISTENER, stripAnnotations="out"),
                                             "peer:1", "in")
    assert type(conns["c"]) is engine_c.Connection
    assert fields <= set(vars(conns["py"])), fields - set(vars(conns["py"]))
    own = {"engine", "t_ptr", "c_ptr", "t_key", "sasl", "guard"}  # each build's own objects
    for name in fields - own:
        assert getattr(conns["c"], name) == getattr(conns["py"], name), name
    for name in own & fields:
        assert (getattr(conns["c"], name) is None) == (getattr(conns["py"], name) is None)
    conns["c"].anything_else = 1  # the rest lives in its __dict__, as in engine_conn.py
