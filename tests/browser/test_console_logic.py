"""The web console's logic in Node.js (``console/test/logic.test.mjs`` with node's test runner):
URLs and management addresses, edges and their costs, the graph layout, address keys, schema
types. Skipped with the reason when node or the console's npm packages are missing, unless
ROUTER_REQUIRE_BROWSER=1 (CI sets it)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from chromium_driver import CONSOLE_DIR


def test_console_logic_in_node():
    missing = []
    if not shutil.which("node"):
        missing.append("node (apt-get install nodejs npm)")
    if not (CONSOLE_DIR / "node_modules" / "rhea").is_dir():
        missing.append("console/node_modules (cd console && npm ci)")
    if missing:
        reason = "the console's logic tests need " + "; ".join(missing)
        if os.environ.get("ROUTER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ROUTER_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    out = subprocess.run(["node", "--test", "test/logic.test.mjs"], cwd=CONSOLE_DIR,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "# fail 0" in out.stdout and "# pass " in out.stdout, out.stdout


def test_console_hides_internal_addresses_by_the_pipelines_rule():
    """One rule for the router's own addresses: the console's INTERNAL_KEY (overview.js) is
    agent.metrics.INTERNAL_KEY, the one the Spark jobs apply."""
    import re

    from agent.metrics import INTERNAL_KEY
    source = (CONSOLE_DIR / "src" / "pages" / "overview.js").read_text()
    m = re.search(r"^export const INTERNAL_KEY = /(.*)/;$", source, re.M)
    assert m, "overview.js defines no INTERNAL_KEY"
    assert m.group(1).replace("\\/", "/") == INTERNAL_KEY
