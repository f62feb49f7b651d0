"""The examples in README.md and docs/*.md work: configurations load, command lines use real flags.

* Every fenced block tagged ```conf is loaded by the router's own configuration loader
  (``supervisor.config.parse_config``, what ``qdrouterd -c`` runs): a misspelt attribute, a bad
  value or a missing reference fails here as it would at start. A block that looks like a
  qdrouterd.conf section (``name {`` on a line of its own) must be tagged ``conf``, so no
  example escapes the check. The examples name files under ``/etc/qpid-dispatch/``; the test
  gives them that directory in a temporary place (with an empty ``policies`` directory),
  because the loader checks that a ``policyDir`` exists.
* Every command line in a ```sh block, and every inline code span that starts with one of the
  project's commands, calling ``qdrouterd``, ``qdstat``, ``qdmanage``, ``python -m
  pipelines.*``, ``benchmarks/*.py`` or ``scripts/*``, uses only options that command has:
  each one is looked up in the command's own ``--help`` output (run here, from this source
  tree), or for a shell script in the options its argument parsing compares against.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config import ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
SECTION = re.compile(r"^[A-Za-z][\w-]*\s*\{\s*$", re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
TOOLS = ("qdrouterd", "qdstat", "qdmanage")


def _blocks(path: Path):
    """(tag, text, line) of every fenced block of a page."""
    text = path.read_text()
    for m in FENCE.finditer(text):
        yield m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1


def _conf_examples():
    return [pytest.param(text, id=f"{p.relative_to(ROOT)}:{line}")
            for p in PAGES for tag, text, line in _blocks(p) if tag == "conf"]


def _command_lines():
    """(command line, where) of every sh block line and inline span naming a project command."""
    found = []
    for p in PAGES:
        text = p.read_text()
        spans = set()
        for tag, body, line in _blocks(p):
            spans.add((text.find(body), text.find(body) + len(body)))
            if tag != "sh":
                continue
            body = body.replace("\\\n", " ")
            for n, cmd in enumerate(body.splitlines()):
                if cmd.strip() and not cmd.lstrip().startswith("#"):
                    found.append(pytest.param(cmd, id=f"{p.relative_to(ROOT)}:{line + n + 1}"))
        for m in INLINE.finditer(text):
            if any(a <= m.start() < b for a, b in spans):
                continue            # inside a fenced block
            if _command_of(shlex.split(m.group(1), comments=True)
                           if _splits(m.group(1)) else []):
                line = text.count("\n", 0, m.start()) + 1
                found.append(pytest.param(m.group(1), id=f"{p.relative_to(ROOT)}:{line}:inline"))
    return found


def _splits(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
        return True
    except ValueError:
        return False


def _command_of(words: list[str]):
    """(help command, words after the command) when ``words`` call a project command, else None."""
    words = [w for w in words if w not in ("sudo",)]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]                       # VAR=value before the command
    if not words:
        return None
    head, rest = words[0], words[1:]
    name = os.path.basename(head)
    if name in TOOLS:
        module = {"qdrouterd": "supervisor.main", "qdstat": "tools.qdstat",
                  "qdmanage": "tools.qdmanage"}[name]
        return ("-m", module), rest
    if name.startswith("python"):
        if len(rest) >= 2 and rest[0] == "-m" and rest[1].startswith("pipelines."):
            return ("-m", rest[1]), rest[2:]
        if rest and re.match(r"(benchmarks|scripts)/\w+\.py$", rest[0]):
            return (rest[0],), rest[1:]
        return None
    if re.match(r"(benchmarks|scripts)/\w+\.py$", head):
        return (head,), rest
    if head == "bash" and rest and re.match(r"scripts/[\w-]+\.sh$", rest[0]):
        return ("bash", rest[0]), rest[1:]
    return None


@functools.lru_cache(maxsize=None)
def _known_flags(command: tuple, subcommand: tuple) -> frozenset:
    """The options ``command`` has: from its --help output, or a shell script's own text."""
    if command[0] == "bash":
        text = (ROOT / command[1]).read_text()
        return frozenset(re.findall(r"[\"'(|\s](--?[A-Za-z][\w-]*)(?=[\"')|])", text))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, *command, *subcommand, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command} --help: {done.stderr[-2000:]}"
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", done.stdout))


def _flags_used(rest: list[str]) -> tuple[tuple, list[str]]:
    """(leading sub-command words, options) of a command's arguments."""
    sub, flags = [], []
    for w in rest:
        w = w.strip("[]")
        if w.startswith("-") and len(w) > 1 and not re.fullmatch(r"-[\d.]+", w):
            flags.append(w.split("=", 1)[0])
        elif not flags and re.fullmatch(r"[a-z][a-z-]*", w):
            sub.append(w)                     # loadgen.py sender, qdmanage query, ...
    return tuple(sub), flags


def check_command_line(line: str) -> list[str]:
    """The problems of one command line: options its commands do not have."""
    problems = []
    for segment in re.split(r"&&|\|\||[|;&]", line):
        segment = segment.split(">", 1)[0]
        if not _splits(segment):
            if re.search(r"\b(qdrouterd|qdstat|qdmanage|pipelines|benchmarks/|scripts/)", segment):
                problems.append(f"cannot read the command line {segment!r}")
            continue
        found = _command_of(shlex.split(segment, comments=True))
        if found is None:
            continue
        command, rest = found
        sub, flags = _flags_used(rest)
        if command[0] == "bash":
            sub = ()
        if command == ("-m", "tools.qdmanage"):
            sub = sub[:1]
        known = _known_flags(command, sub)
        problems += [f"{' '.join(command)}: no option {f}" for f in flags if f not in known]
    return problems


def check_conf(text: str, tmp: Path) -> None:
    """Load one configuration example; raises ConfigError as qdrouterd -c would fail."""
    etc = tmp / "etc" / "qpid-dispatch"
    (etc / "policies").mkdir(parents=True, exist_ok=True)
    parse_config(text.replace("/etc/qpid-dispatch/", f"{etc}/"), "example.conf")


# ---- the examples ------------------------------------------------------------------------------
def test_the_pages_have_examples():
    assert len(_conf_examples()) >= 10 and len(_command_lines()) >= 20
    assert {p.name for p in PAGES} >= {"README.md", "configuration.md", "security.md",
                                       "networks.md", "routing.md", "metrics.md"}


@pytest.mark.parametrize("text", _conf_examples())
def test_config_example_loads(text, tmp_path):
    check_conf(text, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_like_blocks_are_tagged_conf(page):
    untagged = [line for tag, text, line in _blocks(page) if tag != "conf" and SECTION.search(text)]
    assert not untagged, f"{page.name}: blocks at lines {untagged} look like qdrouterd.conf: tag them conf"


@pytest.mark.parametrize("line", _command_lines())
def test_command_line_uses_real_options(line):
    assert check_command_line(line) == []


def test_readme_test_command_is_the_one_ci_runs():
    command = ("bash scripts/install.sh --test && "
               ".venv/bin/python -m pytest -q -n 2 --dist loadfile")
    assert command in (ROOT / "README.md").read_text()
    assert command in (ROOT / ".ci" / "run").read_text()


# ---- the checks can fail -----------------------------------------------------------------------
def test_a_broken_config_example_fails(tmp_path):
    with pytest.raises(ConfigError):
        check_conf("listener {\n    port: 5672\n    rol: normal\n}\n", tmp_path)
    with pytest.raises(ConfigError):
        check_conf("autoLink {\n    address: a\n    direction: sideways\n}\n", tmp_path)


def test_an_unknown_option_fails():
    assert check_command_line("qdstat -b 127.0.0.1:5672 --linkroutes") == []
    assert check_command_line("qdstat --link-routes") == ["-m tools.qdstat: no option --link-routes"]
    assert check_command_line(".venv/bin/qdrouterd -c x.conf --daemonize") == [
        "-m supervisor.main: no option --daemonize"]
    assert check_command_line("bash scripts/install.sh --tests") == [
        "bash scripts/install.sh: no option --tests"]
    assert check_command_line(
        "python benchmarks/loadgen.py sender --url 127.0.0.1:5672 --presettle") == [
        "benchmarks/loadgen.py: no option --presettle"]


# ---- --help points at the docs -----------------------------------------------------------------
@pytest.mark.parametrize("command", [("-m", "supervisor.main"), ("-m", "tools.qdstat"),
                                     ("-m", "tools.qdmanage"), ("-m", "pipelines.batch_job"),
                                     ("-m", "pipelines.streaming_job")])
def test_help_names_a_docs_page_that_exists(command):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.rstrip().splitlines()[-1]
    if command[1].startswith("pipelines."):     # not installed: the source tree's pages
        pages = re.findall(r"docs/[\w-]+\.md", last)
        assert pages and "qdrouter-py source" in last, last
        assert all((ROOT / p).is_file() for p in pages), last
        return
    # the router and its tools name the documentation directory: the installed one
    # (install-service.sh), here the checkout's docs/
    m = re.fullmatch(r"Documentation: ([\w., -]+\.md) in (\S+)", last)
    assert m and Path(m.group(2)) == ROOT / "docs", last
    assert all((ROOT / "docs" / page).is_file() for page in m.group(1).split(", ")), last


def test_the_migration_page_is_the_generated_one():
    """docs/migration.md's entity-type tables are what scripts/gen_migration.py makes of the
    schema and the configuration checks now: a change to either without the page fails here."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_migration.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files(page):
    """A page moved or renamed leaves no link of README.md or docs/ pointing nowhere."""
    text = FENCE.sub("", page.read_text())
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    broken = [t for t in targets if "://" not in t and not (page.parent / t).exists()]
    assert not broken, f"{page.name}: {broken}"
