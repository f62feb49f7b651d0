"""qdrouterd's command line and the start-up checks of the configuration, worded as 1.19's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.config import ConfigError, parse_config, router_id_problem
from supervisor.main import main


def _router(id_line: str) -> str:
    return f"router {{\n    mode: standalone\n{id_line}}}\n"


# ---- router id -------------------------------------------------------------------------------
def test_router_id_of_127_characters_is_accepted():
    assert parse_config(_router(f"    id: {'x' * 127}\n")).router.get("id") == "x" * 127


def test_router_id_longer_than_127_characters_names_the_line():
    with pytest.raises(ConfigError) as info:
        parse_config("# a comment\n" + _router(f"    id: {'x' * 128}\n"), "r.conf")
    assert str(info.value) == (f'r.conf:4: Router ID "{"x" * 128}" exceeds the maximum allowed '
                               f"length (127 characters)")


@pytest.mark.parametrize("char", [" ", "\t", "\x01", "\u00a0", "\u200b", "\u2028"])
def test_router_id_with_white_space_or_control_characters_is_refused(char):
    rid = f"a{char}b"
    text = json.dumps([["router", {"mode": "standalone", "id": rid}]])
    with pytest.raises(ConfigError) as info:
        parse_config(text, "r.json")
    assert info.value.message == (f"AttributeError: Router id attribute containing character "
                                  f"'{char}' in id '{rid}' is disallowed.")


@pytest.mark.parametrize("rid", ["R1", "a/b", "é", "a.b-c_d", "x" * 127])
def test_router_ids_1_19_accepts(rid):
    assert router_id_problem(rid) is None


def test_bad_router_id_is_a_start_up_error_exit_1(tmp_path: Path, capsys):
    path = tmp_path / "id.conf"
    path.write_text(_router("    id: a b\n"))
    assert main(["-c", str(path)]) == 1
    assert capsys.readouterr().err == (f"qdrouterd: configuration error: {path}:3: "
                                       f"AttributeError: Router id attribute containing character "
                                       f"' ' in id 'a b' is disallowed.\n")


# ---- deprecated attribute names ----------------------------------------------------------------
DEPRECATED = [
    ("log", "output", "outputFile", "/tmp/qdrouterd-test.log", "/tmp/qdrouterd-test.log"),
    ("log", "timestamp", "includeTimestamp", "false", False),
    ("log", "source", "includeSource", "true", True),
    ("listener", "failoverList", "failoverUrls", "amqp://h:1", "amqp://h:1"),
    ("listener", "httpRoot", "httpRootDir", "/tmp", "/tmp"),
    ("listener", "logMessage", "messageLoggingComponents", "all", "all"),
    ("connector", "verifyHostName", "verifyHostname", "false", False),
    ("connector", "logMessage", "messageLoggingComponents", "all", "all"),
    ("connector", "failoverList", "failoverUrls", "amqp://h:1", "amqp://h:1"),
]


def _section(kind: str, body: str) -> str:
    if kind == "log":
        return f"log {{\n    module: DEFAULT\n{body}}}\n"
    return f"{kind} {{\n    host: 127.0.0.1\n    port: 34111\n{body}}}\n"


@pytest.mark.parametrize("kind, old, new, text, value", DEPRECATED)
def test_deprecated_attribute_names_are_accepted_with_1_19s_warning(kind, old, new, text, value):
    config = parse_config(_router("    id: R\n") + _section(kind, f"    {old}: {text}\n"))
    entity = next(e for e in config.entities if e.short_type == kind
                  and (kind != "log" or e.get("module") == "DEFAULT"))
    assert entity.get(new) == value and old not in entity.attributes
    assert config.warnings == [f"Attribute '{old}' of entity '{kind}' has been deprecated. "
                               f"Use '{new}' instead"]


def test_listener_trusted_certs_is_trusted_certs_file(pki):
    """``trustedCerts`` is read as ``trustedCertsFile``, which this router refuses with a reason
    (1.19 ignores the file; silently ignoring a security setting is not an option here)."""
    ssl = (f"sslProfile {{\n    name: s\n    caCertFile: {pki['ca']}\n    certFile: "
           f"{pki['server']}\n    privateKeyFile: {pki['server_key']}\n}}\n")
    errors = []
    for name in ("trustedCerts", "trustedCertsFile"):
        with pytest.raises(ConfigError) as info:
            parse_config(_router("    id: R\n") + ssl + _section(
                "listener", f"    sslProfile: s\n    {name}: {pki['ca']}\n"))
        errors.append(info.value.message)
    assert errors[0] == errors[1] and "'trustedCertsFile' is not supported" in errors[0]


def test_deprecated_and_new_name_together_is_an_error():
    with pytest.raises(ConfigError) as info:
        parse_config(_router("    id: R\n") + _section(
            "connector", "    verifyHostName: false\n    verifyHostname: true\n"), "c.conf")
    assert str(info.value) == ("c.conf:9: org.apache.qpid.dispatch.connector: Both "
                               "'verifyHostName' and 'verifyHostname' cannot be specified for "
                               "entity 'connector'")


def test_deprecation_warnings_come_before_the_error_exit_1(tmp_path: Path, capsys):
    """1.19 logs its AGENT deprecation warnings for the sections it read before it meets a
    deprecated pair given twice, then fails with the error prefixed with the entity type."""
    path = tmp_path / "pair.conf"
    path.write_text(_router("    id: R\n") + _section("listener", "    failoverList: amqp://h:1\n")
                    + "linkRoute {\n    prefix: a\n    dir: in\n    direction: in\n}\n")
    assert main(["-c", str(path)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2 and captured.out == ""
    assert lines[0].endswith("AGENT (warning) Attribute 'failoverList' of entity 'listener' has "
                             "been deprecated. Use 'failoverUrls' instead")
    assert lines[1] == (f"qdrouterd: configuration error: {path}:13: "
                        "org.apache.qpid.dispatch.router.config.linkRoute: Both 'dir' and "
                        "'direction' cannot be specified for entity 'linkRoute'")


def test_values_are_json_string_text_as_in_1_19(tmp_path: Path, capsys):
    r"""1.19 reads ``name: value`` as the JSON string "value": ``\b`` is a backspace (a router
    id with one is refused with 1.19's text), ``\\`` one backslash, ``\d`` an error."""
    assert parse_config(_router("    id: R\n") + "address {\n    prefix: a\\\\b\n}\n").of_type(
        "address")[0].get("prefix") == "a\\b"
    path = tmp_path / "id.conf"
    path.write_text(_router("    id: abc\\bdef\n"))
    assert main(["-c", str(path)]) == 1
    assert capsys.readouterr().err == (f"qdrouterd: configuration error: {path}:3: "
                                       f"AttributeError: Router id attribute containing character "
                                       f"'\b' in id 'abc\bdef' is disallowed.\n")
    with pytest.raises(ConfigError) as info:
        parse_config(_router("    id: abc\\ddef\n"), "d.conf")
    assert info.value.line == 3 and "Invalid \\escape" in info.value.message


# ---- options -----------------------------------------------------------------------------------
def test_help_and_version(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: qdrouterd [OPTIONS]\n\n  -c, --config=PATH (")
    assert "  -T, --test-hooks           Enable internal system testing features\n" in out
    # 1.19's text, then our --build-info and a line pointing at the documentation
    assert "  -h, --help                 Print this help\n      --build-info  " in out
    docs = out.rstrip("\n").rsplit("\n", 1)[1]
    pages, where = docs.removeprefix("Documentation: ").split(" in ")
    for page in pages.split(", "):      # the checkout's docs/: the pages exist
        assert (Path(where) / page).is_file(), docs
    assert main(["-v"]) == 0 and capsys.readouterr().out == "1.19.0\n"
    assert main(["--version"]) == 0 and capsys.readouterr().out == "1.19.0\n"


@pytest.mark.parametrize("argv, message", [
    (["-h"], "qdrouterd: option requires an argument -- 'h'\n"),   # 1.19's getopt: "h:"
    (["-x"], "qdrouterd: invalid option -- 'x'\n"),
    (["--bogus"], "qdrouterd: unrecognized option '--bogus'\n"),
    (["-c"], "qdrouterd: option requires an argument -- 'c'\n"),
    (["foo", "bar"], "Unexpected arguments: foo bar\n\n"),
])
def test_bad_command_lines_print_usage_and_exit_1(argv, message, capsys):
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == message
    assert captured.out.startswith("Usage: qdrouterd [OPTIONS]")


def test_test_hooks_option_is_accepted(tmp_path: Path, capsys):
    path = tmp_path / "bad.conf"
    path.write_text("router {\n    prot: 1\n}\n")
    for flag in ("-T", "--test-hooks"):
        assert main([flag, "-c", str(path)]) == 1      # got as far as the configuration
        assert "configuration error" in capsys.readouterr().err


def test_build_info_names_this_build_and_version_stays_1_19(capsys):
    """--version prints 1.19.0 (1.19's tools parse it); --build-info names the build itself:
    the installed package's version, its Python and proton, the compiled modules and the
    documentation directory."""
    import importlib.metadata
    assert main(["--build-info"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"qdrouter-py {importlib.metadata.version('qdrouter-py')}"
    assert "compatible with: Qpid Dispatch Router 1.19.0" in out
    assert any(line.startswith("compiled modules: core ") for line in lines)
    docs = [line for line in lines if line.startswith("documentation: ")][0]
    assert (Path(docs.split(": ", 1)[1]) / "configuration.md").is_file()
    assert main(["--version"]) == 0 and capsys.readouterr().out == "1.19.0\n"
    assert main(["--bogus-option", "--build-info"]) == 1    # still getopt's rules


def test_build_info_names_every_compiled_module_the_router_selects():
    """--build-info's list is the compiled modules common.builds.choose() picks: a module moved
    or added under src/ without the list fails here."""
    import re
    from common import buildinfo
    src = Path(__file__).resolve().parents[2] / "src"
    chosen = {m for p in src.rglob("*.py")
              for m in re.findall(r'choose\("([\w.]+)"', p.read_text(encoding="utf-8"))}
    assert chosen == {module for module, _ in buildinfo.COMPILED}
