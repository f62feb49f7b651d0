"""The test tree itself: pytest imports test modules by their basename here (no packages), so
two test files with one name in different folders stop the whole run at collection."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts)
    assert [name for name, n in names.items() if n > 1] == []
