"""Build the Cython fast paths from cython/ into the packages under src/.

ROUTER_NO_EXTENSIONS=1 skips them (the pure-Python references are used at run time too);
ROUTER_ONLY_EXT=router_core._core builds just that one;
ROUTER_FORCE_REBUILD=1 recompiles even if Cython thinks nothing changed (e.g. after editing a .pxd).
Generated C goes to build/, never into src/.
"""
import os
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
# Each compiled module and the pure-Python reference it must agree with.
EXTENSIONS = {
    "router_core._core": "cython/_core.pyx",          # reference: router_core/core.py
    "router_io._amqpscan": "cython/_amqpscan.pyx",    # reference: router_io/amqpscan_py.py
    "router_io._engine": "cython/_engine.pyx",        # reference: router_io/engine.py
}


def extensions():
    if os.environ.get("ROUTER_NO_EXTENSIONS") == "1":
        return []
    from Cython.Build import cythonize

    only = os.environ.get("ROUTER_ONLY_EXT")  # build one module, e.g. while developing it
    exts = [Extension(name, [src]) for name, src in EXTENSIONS.items()
            if (HERE / src).exists() and (not only or only == name)]
    return cythonize(
        exts,
        build_dir="build/cython",
        force=os.environ.get("ROUTER_FORCE_REBUILD") == "1",
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False},
        include_path=["cython", "src"],
    )


setup(ext_modules=extensions())
