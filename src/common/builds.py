"""The one switch between compiled modules and their pure-Python references.

``ROUTER_NO_EXTENSIONS=1`` forces every reference; a compiled module that is not built (no
compiler, or installed with the switch set) falls back to its reference, unless
``ROUTER_REQUIRE_EXTENSIONS=1`` (set by CI) makes that an error: a build that silently lost its
compiled code must not pass as one that has it. Every selector (core, engine, scanner, matcher,
route computation) goes through :func:`choose`.
Must not import anything of the router.
"""
import importlib
import os
from types import ModuleType


def extensions_enabled() -> bool:
    return os.environ.get("ROUTER_NO_EXTENSIONS") != "1"


def extensions_required() -> bool:
    return os.environ.get("ROUTER_REQUIRE_EXTENSIONS") == "1"


def choose(compiled: str, reference: str) -> ModuleType:
    """Import ``compiled`` unless disabled or missing, else ``reference``.

    Raises ImportError for a missing compiled module under ROUTER_REQUIRE_EXTENSIONS=1."""
    if extensions_enabled():
        try:
            return importlib.import_module(compiled)
        except ImportError:
            if extensions_required():
                raise
    return importlib.import_module(reference)
