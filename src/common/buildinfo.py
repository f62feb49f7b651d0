"""The installed build's own identity, and where its documentation is.

``qdrouterd --version`` prints the Qpid Dispatch release this router replaces (1.19.0, which
1.19's tools and scripts expect: ``common.identity``); this module names the build itself, for
``qdrouterd --build-info``, the start-up log line and the tools' ``--help``: the package version
(``common.identity.BUILD_VERSION``, which pyproject.toml reads too), the Python and
proton it runs on, which compiled
modules are present, and the documentation directory.

Documentation: ``scripts/install-service.sh`` installs the user pages under
``<virtualenv>/share/doc/qdrouter-py``; a checkout run from its own virtualenv uses the
checkout's ``docs/``. Must not import anything of the router's packages but ``common.identity``.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Optional

from common.identity import BUILD_VERSION, VERSION

DISTRIBUTION = "qdrouter-py"
# (selector's compiled module, what it is): common.builds.choose picks them at import time
COMPILED = (("router_core._core", "core"), ("router_core._pathcomp", "route computation"),
            ("router_core._addrmatch", "address matcher"), ("router_io._engine", "engine"),
            ("common._amqpscan", "AMQP scanner"), ("common._ipccodec", "IPC codec"),
            ("common._zmqopt", "ZeroMQ options"), ("router_io._frameguard", "SASL guard"))
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_version() -> str:
    """This package's version (without importlib.metadata: the router logs it at every start,
    and that module with its e-mail parser would stay in every process's memory)."""
    return BUILD_VERSION


def docs_dir() -> Optional[str]:
    """The documentation directory: the installed one, else the checkout's; None if neither."""
    for candidate in (os.path.join(sys.prefix, "share", "doc", DISTRIBUTION),
                      os.path.join(_CHECKOUT, "docs")):
        if os.path.isfile(os.path.join(candidate, "configuration.md")):
            return candidate
    return None


def docs_pointer(*pages: str) -> str:
    """The last line of a ``--help``: where ``pages`` (file names under docs/) are."""
    where = docs_dir()
    if where is None:
        return (f"Documentation: {', '.join(pages)} under docs/ in the qdrouter-py source tree "
                f"(scripts/install-service.sh installs them in "
                f"<prefix>/share/doc/{DISTRIBUTION}).")
    return f"Documentation: {', '.join(pages)} in {where}"


def compiled_modules() -> list[tuple[str, bool]]:
    """(what, present) for every compiled module (present: its extension file is importable;
    ``ROUTER_NO_EXTENSIONS=1`` still makes the router use the Python references)."""
    out = []
    for module, what in COMPILED:
        try:
            present = importlib.util.find_spec(module) is not None
        except ImportError:
            present = False
        out.append((what, present))
    return out


def proton_version() -> str:
    """The proton library's version, as the library itself reports it."""
    try:
        import cproton
        return f"{cproton.PN_VERSION_MAJOR}.{cproton.PN_VERSION_MINOR}.{cproton.PN_VERSION_POINT}"
    except (ImportError, AttributeError):
        return "unknown"


def startup_line() -> str:
    """The SERVER notice the router logs as it starts."""
    compiled = compiled_modules()
    built = sum(1 for _, present in compiled if present)
    pure = " (ROUTER_NO_EXTENSIONS=1: not used)" \
        if os.environ.get("ROUTER_NO_EXTENSIONS") == "1" else ""
    return (f"{DISTRIBUTION} {build_version()}, compatible with Qpid Dispatch Router {VERSION}; "
            f"Python {sys.version.split()[0]}, proton {proton_version()}, "
            f"compiled modules {built} of {len(compiled)}{pure}")


def build_info() -> str:
    """What ``qdrouterd --build-info`` prints."""
    pure = os.environ.get("ROUTER_NO_EXTENSIONS") == "1"
    lines = [f"{DISTRIBUTION} {build_version()}",
             f"compatible with: Qpid Dispatch Router {VERSION} (what qdrouterd --version prints)",
             f"python: {sys.version.split()[0]} ({sys.executable})",
             f"proton: {proton_version()}",
             "compiled modules: " + ", ".join(f"{what} {'yes' if present else 'no'}"
                                              for what, present in compiled_modules()),
             f"extensions: {'off (ROUTER_NO_EXTENSIONS=1)' if pure else 'on'}",
             f"documentation: {docs_dir() or 'not installed (docs/ in the source tree)'}"]
    return "\n".join(lines) + "\n"
