"""The packages under src/ (and pipelines/) depend one way, in the layers of the design: each
process package (router_core, router_io, agent, supervisor) and the tools import only common;
common imports none of them. What two processes share lives in common.

Read from the source (every import statement, at any depth), so a lazy import inside a
function counts too. Also: no module under src/ is over MAX_LINES lines.

Must not import any package under src/ (it reads their text)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MAX_LINES = 700

# package -> the other packages under src/ it may import (a new package must be added here)
ALLOWED = {
    "common": set(),
    "router_core": {"common"},
    "router_io": {"common"},
    "agent": {"common"},
    "supervisor": {"common"},
    "tools": {"common"},
}


def _edges(base: Path, packages: set) -> dict:
    edges: dict = {}
    for path in base.rglob("*.py"):
        top = path.relative_to(base).parts[0]
        top = top[:-3] if top.endswith(".py") else top
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                dep = mod.split(".")[0]
                if dep in packages and dep != top:
                    edges.setdefault((top, dep), set()).add(str(path.relative_to(ROOT)))
    return edges


def test_no_two_packages_import_each_other():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    edges = _edges(SRC, packages)
    both_ways = {(a, b): (sorted(files), sorted(edges[(b, a)]))
                 for (a, b), files in edges.items() if (b, a) in edges and a < b}
    assert not both_ways, both_ways


def test_each_package_imports_only_the_layers_below_it():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), f"packages not in ALLOWED: {packages ^ set(ALLOWED)}"
    wrong = {f"{a} -> {b}": sorted(files) for (a, b), files in _edges(SRC, packages).items()
             if b not in ALLOWED[a]}
    assert not wrong, wrong


def test_no_module_under_src_is_over_the_size_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in SRC.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def test_the_pipelines_read_the_metrics_schema_from_common_not_the_agent():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    deps = {dep for (_, dep) in _edges(ROOT / "pipelines", packages | {"pipelines"})}
    assert "agent" not in deps
