"""Build the Cython fast paths from cython/ into the packages under src/.

ROUTER_NO_EXTENSIONS=1 skips them (the pure-Python references are used at run time too);
ROUTER_ONLY_EXT=router_core._core builds just that one;
ROUTER_FORCE_REBUILD=1 recompiles even if Cython thinks nothing changed (e.g. after editing a .pxd).
Generated C goes to build/, never into src/.

router_core._core, router_io._engine and router_io._frameguard are compiled from their pure-Python
references themselves (Cython's pure-Python mode; the guard is src/router_io/frameguard.py alone). The core's parts (CORE_PARTS, src/router_core/{records,...,core}.py)
are concatenated, in that order and without the imports between them (the block each part marks
``core parts``), into build/cython_src/router_core/_core.py; the worker engine's parts
(ENGINE_PARTS, src/router_io/{engine_proton,...,engine}.py) the same way, without their
``engine parts`` import blocks, into build/cython_src/router_io/_engine.py. Each gets its
augmenting .pxd from cython/ beside it (Cython only finds an augmenting .pxd next to the .py of
the same module name), and each pair is cythonized: one extension each, so every call on a
delivery's path is a C call. Generated files
are rewritten only when their content changed, so an unchanged source is not recompiled.
"""
import os
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
GENERATED = "build/cython_src"
# Each compiled module and the pure-Python reference it must agree with.
EXTENSIONS = {
    "router_core._core": f"{GENERATED}/router_core/_core.py",  # = router_core/core.py + .pxd
    "common._amqpscan": "cython/_amqpscan.pyx",    # reference: common/amqpscan.py
    "router_io._engine": f"{GENERATED}/router_io/_engine.py",  # = ENGINE_PARTS + .pxd
    "router_core._addrmatch": "cython/_addrmatch.pyx",  # reference: common/addrmatch.py
    "router_core._pathcomp": "cython/_pathcomp.pyx",  # reference: router_core/pathcomp.py
    "common._ipccodec": "cython/_ipccodec.pyx",  # reference: common/ipccodec.py
    "common._zmqopt": "cython/_zmqopt.pyx",  # reference: common/zmqopt.py
    "router_io._frameguard": f"{GENERATED}/router_io/_frameguard.py",  # = frameguard.py + .pxd
}
# The parts of the router core, in dependency order (see src/router_core/core.py).
CORE_PARTS = ["records", "addrkeys", "settlement", "streaming", "transfer", "streamlinks", "relay",
              "forwarders", "ingress", "linkroute", "linkends", "lifecycle", "peers", "edge", "edgeserver",
              "autolinks", "exchanges", "core"]
PARTS_BEGIN = ("# --- core parts (the compiled build is one module: setup.py drops these imports)"
               " ---")
PARTS_END = "# --- end core parts ---"
# The parts of the worker's engine, in the same way (see src/router_io/engine.py); a part may
# have two ``engine parts`` blocks: the records it uses at the top, the functions of the other
# parts it calls at the end (so that the pure build can import parts that call each other).
ENGINE_PARTS = ["engine_lifecycle", "engine_proton", "engine_termini", "engine_records",
                "engine_conn", "engine_security", "engine_policy", "engine_connections",
                "engine_links", "engine_deliveries", "engine_dispositions", "engine_stream_in",
                "engine_stream_out", "engine"]
ENGINE_BEGIN = ("# --- engine parts (the compiled build is one module: setup.py drops these "
                "imports) ---")
ENGINE_END = "# --- end engine parts ---"
# Compiled from copies of the reference: generated file -> its source(s).
PURE_MODE_SOURCES = {
    f"{GENERATED}/router_core/_core.py": [f"src/router_core/{part}.py" for part in CORE_PARTS],
    f"{GENERATED}/router_core/_core.pxd": "cython/_core.pxd",
    f"{GENERATED}/router_core/__init__.py": None,  # makes the module name router_core._core
    f"{GENERATED}/router_io/_engine.py": [f"src/router_io/{part}.py" for part in ENGINE_PARTS],
    f"{GENERATED}/router_io/_engine.pxd": "cython/_engine.pxd",
    f"{GENERATED}/router_io/_frameguard.py": "src/router_io/frameguard.py",
    f"{GENERATED}/router_io/_frameguard.pxd": "cython/_frameguard.pxd",
    f"{GENERATED}/router_io/__init__.py": None,
}


def _defined_names(path: str, text: str) -> set:
    """Module-level names ``path`` defines (functions, classes, assignments; not imports)."""
    import ast
    names = set()
    for node in ast.parse(text, path).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def core_module_text(paths: list, begin: str = PARTS_BEGIN, end: str = PARTS_END,
                     max_blocks: int = 1) -> bytes:
    """The parts as one module: each part's text without its imports of the other parts (its
    ``begin`` ... ``end`` blocks, at most ``max_blocks``). Two parts defining the same name would
    silently become one in the compiled build: refused."""
    out = []
    owner: dict = {}
    for path in paths:
        text = (HERE / path).read_text(encoding="utf-8")
        for name in _defined_names(path, text):
            if name in owner:
                raise SystemExit(f"{path}: {name} is defined in {owner[name]} too (the compiled "
                                 "module is one module: a name must be defined once)")
            owner[name] = path
        blocks = text.count(begin)
        if blocks != text.count(end) or blocks > max_blocks:
            raise SystemExit(f"{path}: at most {max_blocks} '{begin}' ... '{end}' block(s)")
        kept = []
        rest = text
        for _ in range(blocks):
            head, rest = rest.split(begin, 1)
            block, rest = rest.split(end, 1)
            if begin in block:
                raise SystemExit(f"{path}: '{begin}' inside a block")
            # keep the line count, so a traceback's line is easy to find in the part
            kept.append(head + begin + "\n" * block.count("\n") + end)
        out.append(f"# ===== {path} =====\n" + "".join(kept) + rest)
    return "".join(out).encode("utf-8")

EXTRA_DIRECTIVES = {
    # Its annotations document the pure build; the C types come from cython/_core.pxd only.
    "router_core._core": {"annotation_typing": False, "auto_pickle": False},
    # Plain Python semantics for its indexing (x[-1] on a list): it is mostly cffi-based code.
    "router_io._engine": {"annotation_typing": False, "auto_pickle": False,
                          "boundscheck": True, "wraparound": True},
    # A peer's first bytes: every index checked, whatever the code's own length checks say.
    "router_io._frameguard": {"annotation_typing": False, "auto_pickle": False,
                              "boundscheck": True, "wraparound": True},
}


def generate_pure_mode_sources() -> None:
    for dest, src in PURE_MODE_SOURCES.items():
        dest_path = HERE / dest
        if isinstance(src, list) and dest.endswith("_engine.py"):
            data = core_module_text(src, ENGINE_BEGIN, ENGINE_END, max_blocks=2)
        elif isinstance(src, list):
            data = core_module_text(src)
        else:
            data = (HERE / src).read_bytes() if src else b""
        if dest_path.exists() and dest_path.read_bytes() == data:
            continue
        dest_path.parent.mkdir(parents=True, exist_ok=True)
        dest_path.write_bytes(data)


def extensions():
    if os.environ.get("ROUTER_NO_EXTENSIONS") == "1":
        return []
    from Cython.Build import cythonize

    only = os.environ.get("ROUTER_ONLY_EXT")  # build one module, e.g. while developing it
    generate_pure_mode_sources()
    built = []
    for name, src in EXTENSIONS.items():
        if not (HERE / src).exists() or (only and only != name):
            continue
        directives = {"language_level": 3, "boundscheck": False, "wraparound": False}
        directives.update(EXTRA_DIRECTIVES.get(name, {}))
        built += cythonize(
            [Extension(name, [src], include_dirs=["cython"])],  # cython/*.h
            build_dir="build/cython",
            force=os.environ.get("ROUTER_FORCE_REBUILD") == "1",
            compiler_directives=directives,
            include_path=["cython", GENERATED, "src"],
        )
    return built


setup(ext_modules=extensions())
