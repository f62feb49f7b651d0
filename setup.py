"""Build the Cython fast paths from cython/ into the packages under src/.

ROUTER_NO_EXTENSIONS=1 skips them (the pure-Python references are used at run time too);
ROUTER_ONLY_EXT=router_core._core builds just that one;
ROUTER_FORCE_REBUILD=1 recompiles even if Cython thinks nothing changed (e.g. after editing a .pxd).
Generated C goes to build/, never into src/.

router_core._core and router_io._engine are compiled from their pure-Python references themselves
(Cython's pure-Python mode). The core's parts (CORE_PARTS, src/router_core/{records,...,core}.py)
are concatenated, in that order and without the imports between them (the block each part marks
``core parts``), into build/cython_src/router_core/_core.py; src/router_io/engine.py is copied to
build/cython_src/router_io/_engine.py. Each gets its augmenting .pxd from cython/ beside it (Cython
only finds an augmenting .pxd next to the .py of the same module name), and each pair is
cythonized: one extension each, so every call on a delivery's path is a C call. Generated files
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
    "router_io._amqpscan": "cython/_amqpscan.pyx",    # reference: router_io/amqpscan.py
    "router_io._engine": f"{GENERATED}/router_io/_engine.py",  # = router_io/engine.py + .pxd
    "router_core._addrmatch": "cython/_addrmatch.pyx",  # reference: router_core/addrmatch.py
    "router_core._pathcomp": "cython/_pathcomp.pyx",  # reference: router_core/pathcomp.py
    "common._ipccodec": "cython/_ipccodec.pyx",  # reference: common/ipccodec.py
    "common._zmqopt": "cython/_zmqopt.pyx",  # reference: common/zmqopt.py
}
# The parts of the router core, in dependency order (see src/router_core/core.py).
CORE_PARTS = ["records", "addrkeys", "settlement", "streaming", "transfer", "streamlinks", "relay",
              "forwarders", "ingress", "linkroute", "lifecycle", "edge", "edgeserver",
              "autolinks", "core"]
PARTS_BEGIN = ("# --- core parts (the compiled build is one module: setup.py drops these imports)"
               " ---")
PARTS_END = "# --- end core parts ---"
# Compiled from copies of the reference: generated file -> its source(s).
PURE_MODE_SOURCES = {
    f"{GENERATED}/router_core/_core.py": [f"src/router_core/{part}.py" for part in CORE_PARTS],
    f"{GENERATED}/router_core/_core.pxd": "cython/_core.pxd",
    f"{GENERATED}/router_core/__init__.py": None,  # makes the module name router_core._core
    f"{GENERATED}/router_io/_engine.py": "src/router_io/engine.py",
    f"{GENERATED}/router_io/_engine.pxd": "cython/_engine.pxd",
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


def core_module_text(paths: list) -> bytes:
    """The parts as one module: each part's text without its imports of the other parts.
    Two parts defining the same name would silently become one in the compiled build: refused."""
    out = []
    owner: dict = {}
    for path in paths:
        text = (HERE / path).read_text(encoding="utf-8")
        for name in _defined_names(path, text):
            if name in owner:
                raise SystemExit(f"{path}: {name} is defined in {owner[name]} too (the compiled "
                                 "core is one module: a name must be defined once)")
            owner[name] = path
        blocks = (text.count(PARTS_BEGIN), text.count(PARTS_END))
        if blocks == (0, 0):  # imports no other part
            out.append(f"# ===== {path} =====\n" + text)
            continue
        if blocks != (1, 1):
            raise SystemExit(f"{path}: at most one '{PARTS_BEGIN}' ... '{PARTS_END}' block")
        head, rest = text.split(PARTS_BEGIN, 1)
        block, tail = rest.split(PARTS_END, 1)
        # keep the line count, so a traceback's line is easy to find in the part
        out.append(f"# ===== {path} =====\n" + head + PARTS_BEGIN
                   + "\n" * block.count("\n") + PARTS_END + tail)
    return "".join(out).encode("utf-8")

EXTRA_DIRECTIVES = {
    # Its annotations document the pure build; the C types come from cython/_core.pxd only.
    "router_core._core": {"annotation_typing": False, "auto_pickle": False},
    # Plain Python semantics for its indexing (x[-1] on a list): it is mostly cffi-based code.
    "router_io._engine": {"annotation_typing": False, "auto_pickle": False,
                          "boundscheck": True, "wraparound": True},
}


def generate_pure_mode_sources() -> None:
    for dest, src in PURE_MODE_SOURCES.items():
        dest_path = HERE / dest
        if isinstance(src, list):
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
