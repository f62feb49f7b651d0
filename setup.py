"""Build the Cython fast paths from cython/ into the packages under src/.

ROUTER_NO_EXTENSIONS=1 skips them (the pure-Python references are used at run time too);
ROUTER_ONLY_EXT=router_core._core builds just that one;
ROUTER_FORCE_REBUILD=1 recompiles even if Cython thinks nothing changed (e.g. after editing a .pxd).
Generated C goes to build/, never into src/.

router_core._core and router_io._engine are compiled from their pure-Python references themselves
(Cython's pure-Python mode): e.g. src/router_core/core.py is copied to
build/cython_src/router_core/_core.py with cython/_core.pxd beside it as _core.pxd (Cython only
finds an augmenting .pxd next to the .py of the same module name), and that pair is cythonized.
Copies are rewritten only when their content changed, so an unchanged source is not recompiled.
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
}
# Compiled from a copy of the reference: generated file -> its source.
PURE_MODE_SOURCES = {
    f"{GENERATED}/router_core/_core.py": "src/router_core/core.py",
    f"{GENERATED}/router_core/_core.pxd": "cython/_core.pxd",
    f"{GENERATED}/router_core/__init__.py": None,  # makes the module name router_core._core
    f"{GENERATED}/router_io/_engine.py": "src/router_io/engine.py",
    f"{GENERATED}/router_io/_engine.pxd": "cython/_engine.pxd",
    f"{GENERATED}/router_io/__init__.py": None,
}

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
            [Extension(name, [src])],
            build_dir="build/cython",
            force=os.environ.get("ROUTER_FORCE_REBUILD") == "1",
            compiler_directives=directives,
            include_path=["cython", GENERATED, "src"],
        )
    return built


setup(ext_modules=extensions())
