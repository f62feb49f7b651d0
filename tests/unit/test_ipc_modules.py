"""The IPC schema's modules: ``common.ipc`` is the one entry, whatever module a type lives in.

The message types are grouped by direction in common/ipc_*.py; every name they define must be
reachable as ``common.ipc.X`` (callers import it from there), and every message type must have
a code in ``MESSAGE_TYPES`` (a type left out of the table could not cross a process)."""
from __future__ import annotations

import importlib
import pkgutil
import types

import common
from common import ipc


def _schema_modules() -> list:
    return [importlib.import_module(f"common.{m.name}") for m in pkgutil.iter_modules(
        common.__path__) if m.name.startswith("ipc_")]


def test_the_schema_is_split_by_direction():
    names = {m.__name__ for m in _schema_modules()}
    assert {"common.ipc_base", "common.ipc_peer", "common.ipc_effects", "common.ipc_control",
            "common.ipc_interior", "common.ipc_stream"} <= names


def test_common_ipc_re_exports_every_name_of_the_schema_modules():
    for module in _schema_modules():
        for name, value in vars(module).items():
            if name.startswith("_") or isinstance(value, types.ModuleType) or getattr(
                    value, "__module__", module.__name__) != module.__name__:
                continue  # imports of the module (typing, other schema modules)
            assert getattr(ipc, name, None) is value, f"common.ipc.{name} ({module.__name__})"


def test_every_message_type_has_a_code():
    types = {value for module in _schema_modules() for value in vars(module).values()
             if isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")
             and value.__module__ == module.__name__}
    assert types and types == set(ipc.MESSAGE_TYPES)
