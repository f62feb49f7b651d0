"""The packages under src/ (and pipelines/) depend one way: no two import each other.

Read from the source (every import statement, at any depth), so a lazy import inside a
function counts too."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


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


def test_the_pipelines_read_the_metrics_schema_from_common_not_the_agent():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    deps = {dep for (_, dep) in _edges(ROOT / "pipelines", packages | {"pipelines"})}
    assert "agent" not in deps
