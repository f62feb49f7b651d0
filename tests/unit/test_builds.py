"""The build selectors: common.builds.choose (one switch, and CI's 'required' guard) and
every selector that uses it, run for real in a child interpreter over a copy of src/ with its
compiled modules present or removed."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common import builds


def test_compiled_is_chosen_when_present(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    assert builds.choose("json", "common.addrmatch").__name__ == "json"


def test_missing_compiled_falls_back_to_the_reference(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    monkeypatch.delenv("ROUTER_REQUIRE_EXTENSIONS", raising=False)
    chosen = builds.choose("router_core._no_such_module", "common.addrmatch")
    assert chosen.__name__ == "common.addrmatch"


def test_missing_compiled_is_an_error_when_required(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    monkeypatch.setenv("ROUTER_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(ImportError):
        builds.choose("router_core._no_such_module", "common.addrmatch")


def test_the_switch_forces_the_reference(monkeypatch):
    monkeypatch.setenv("ROUTER_NO_EXTENSIONS", "1")
    monkeypatch.setenv("ROUTER_REQUIRE_EXTENSIONS", "1")  # the switch wins: nothing is required
    assert builds.choose("json", "common.addrmatch").__name__ == "common.addrmatch"


# ---- every real selector, in a fresh interpreter: extensions present, hidden, required ---------
# (selector import, expression naming the module it chose, compiled module, pure reference)
SELECTORS = [
    ("from router_core.core_select import get_core_class", "get_core_class().__module__",
     "router_core._core", "router_core.core"),
    ("from router_io.engine_select import get_engine_class", "get_engine_class().__module__",
     "router_io._engine", "router_io.engine"),
    ("from router_core.pathcomp_select import get_path_computer",
     "get_path_computer().__module__", "router_core._pathcomp", "router_core.pathcomp"),
    ("from router_core import matcher", "matcher.AddressRules.__module__",
     "router_core._addrmatch", "common.addrmatch"),
    ("from common import amqpscan_select", "amqpscan_select._impl.__name__",
     "common._amqpscan", "common.amqpscan"),
    ("from common import ipc", "type(ipc._CODEC).__module__", "common._ipccodec",
     "common.ipccodec"),
    ("from common import zmqcalls", "zmqcalls._OPT.__name__", "common._zmqopt", "common.zmqopt"),
    ("from router_io import frameguard_select", "frameguard_select.guard.__name__",
     "router_io._frameguard", "router_io.frameguard"),
]
SRC = Path(__file__).resolve().parents[2] / "src"


def _src_copy(dest: Path, with_extensions: bool) -> Path:
    """A copy of src/ (with or without its compiled modules) that a child interpreter imports."""
    ignore = ["__pycache__"] + ([] if with_extensions else ["*.so", "*.pyd"])
    shutil.copytree(SRC, dest, ignore=shutil.ignore_patterns(*ignore))
    return dest


def _choose(src: Path, selector: tuple, **env: str) -> subprocess.CompletedProcess:
    """Run one selector in a fresh interpreter over ``src``; prints the chosen module's name."""
    imp, expr, _, _ = selector
    code = (f"import router_core, sys; assert router_core.__file__.startswith({str(src)!r}), "
            f"router_core.__file__\n{imp}\nprint({expr})")
    environ = {k: v for k, v in os.environ.items()
               if k not in ("ROUTER_NO_EXTENSIONS", "ROUTER_REQUIRE_EXTENSIONS")}
    environ.update(env, PYTHONPATH=str(src))
    return subprocess.run([sys.executable, "-c", code], env=environ, cwd=src, text=True,
                          capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def bare_src(tmp_path_factory) -> Path:
    return _src_copy(tmp_path_factory.mktemp("bare") / "src", with_extensions=False)


@pytest.fixture(scope="module")
def built_src(tmp_path_factory) -> Path:
    missing = [s[2] for s in SELECTORS if not any(
        (SRC / s[2].replace(".", "/")).parent.glob(s[2].rsplit(".", 1)[1] + ".*.so"))]
    if missing:  # conftest stops the run before this under ROUTER_REQUIRE_EXTENSIONS=1
        pytest.skip(f"not built: {', '.join(missing)}")
    return _src_copy(tmp_path_factory.mktemp("built") / "src", with_extensions=True)


@pytest.mark.parametrize("selector", SELECTORS, ids=[s[3] for s in SELECTORS])
def test_selector_takes_the_compiled_module_when_built(built_src, selector):
    done = _choose(built_src, selector)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == selector[2]


@pytest.mark.parametrize("selector", SELECTORS, ids=[s[3] for s in SELECTORS])
def test_selector_switch_forces_the_reference_even_when_built(built_src, selector):
    done = _choose(built_src, selector, ROUTER_NO_EXTENSIONS="1", ROUTER_REQUIRE_EXTENSIONS="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == selector[3]


@pytest.mark.parametrize("selector", SELECTORS, ids=[s[3] for s in SELECTORS])
def test_selector_falls_back_to_the_reference_when_not_built(bare_src, selector):
    done = _choose(bare_src, selector)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == selector[3]


@pytest.mark.parametrize("selector", SELECTORS, ids=[s[3] for s in SELECTORS])
def test_selector_refuses_a_missing_module_when_required(bare_src, selector):
    done = _choose(bare_src, selector, ROUTER_REQUIRE_EXTENSIONS="1")
    assert done.returncode != 0 and done.stdout == ""
    assert "ModuleNotFoundError" in done.stderr and selector[2] in done.stderr, done.stderr
