"""The build selector (router_core.builds.choose): one switch, and CI's 'required' guard."""
from __future__ import annotations

import pytest

from router_core import builds


def test_compiled_is_chosen_when_present(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    assert builds.choose("json", "router_core.addrmatch").__name__ == "json"


def test_missing_compiled_falls_back_to_the_reference(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    monkeypatch.delenv("ROUTER_REQUIRE_EXTENSIONS", raising=False)
    chosen = builds.choose("router_core._no_such_module", "router_core.addrmatch")
    assert chosen.__name__ == "router_core.addrmatch"


def test_missing_compiled_is_an_error_when_required(monkeypatch):
    monkeypatch.delenv("ROUTER_NO_EXTENSIONS", raising=False)
    monkeypatch.setenv("ROUTER_REQUIRE_EXTENSIONS", "1")
    with pytest.raises(ImportError):
        builds.choose("router_core._no_such_module", "router_core.addrmatch")


def test_the_switch_forces_the_reference(monkeypatch):
    monkeypatch.setenv("ROUTER_NO_EXTENSIONS", "1")
    monkeypatch.setenv("ROUTER_REQUIRE_EXTENSIONS", "1")  # the switch wins: nothing is required
    assert builds.choose("json", "router_core.addrmatch").__name__ == "router_core.addrmatch"
