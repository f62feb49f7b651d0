"""The one switch between compiled modules and their pure-Python references.

``ROUTER_NO_EXTENSIONS=1`` forces every reference; a compiled module that is not built (no
compiler, or installed with the switch set) falls back to its reference. Every selector
(core, engine, scanner, matcher, route computation) goes through :func:`choose`.
Must not import anything of the router.
"""
import importlib
import os
from types import ModuleType


def extensions_enabled() -> bool:
    return os.environ.get("ROUTER_NO_EXTENSIONS") != "1"


def choose(compiled: str, reference: str) -> ModuleType:
    """Import ``compiled`` unless disabled or missing, else ``reference``."""
    if extensions_enabled():
        try:
            return importlib.import_module(compiled)
        except ImportError:
            pass
    return importlib.import_module(reference)
