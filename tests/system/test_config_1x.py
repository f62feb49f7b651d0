"""Configurations Qpid Dispatch 1.19 runs (or refuses), given to both routers (issue #28 A).

Each case starts this router and, when ``QDROUTERD_1X`` names a 1.x install prefix, the 1.x
router with the same configuration and policy directory, and checks that both do the same
thing: start and log the same POLICY warnings, or refuse with exit status 1 and the same
1.19 text. Without ``QDROUTERD_1X`` the 1.x half is skipped and this router is checked against
the facts recorded from 1.19.
"""
from __future__ import annotations

import json
import os

import pytest
from proton.utils import BlockingConnection, LinkDetached

from conftest import RouterProcess, free_port
from test_mixed_1x import ONE_X, OneXProcess

TIMEOUT = 20
BUILDS = ["ours", pytest.param("1x", marks=pytest.mark.skipif(
    not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK),
    reason="set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare"))]


def start(which: str, conf) -> RouterProcess:
    return RouterProcess(conf) if which == "ours" else OneXProcess(conf)


def refused(which: str, conf) -> str:
    """What a router that must refuse ``conf`` printed, once it exited with status 1."""
    router = start(which, conf)
    try:
        assert router.proc.wait(TIMEOUT) == 1
    finally:
        router.stop()
    return router.output()


def write_policy_dir(path) -> None:
    """Our own policy file shaped like the ones 1.19 ships: '##' header lines, a vhost named
    '', groups with options 1.19's policy code does not use."""
    path.mkdir()
    vhosts = [
        ["vhost", {"hostname": "", "allowUnknownUser": True,
                   "groups": {"$default": {"remoteHosts": "*", "maxConnections": 4}}}],
        ["vhost", {"hostname": "shop.example", "allowUnknownUser": True,
                   "groups": {"$default": {"remoteHosts": "*", "sources": "orders",
                                           "targets": "orders", "maxConnections": 9,
                                           "aliases": "unused"}}}]]
    (path / "shop.json").write_text("##\n## Shop tenants (test data)\n##\n\n"
                                    + json.dumps(vhosts, indent=4) + "\n")


@pytest.mark.parametrize("which", BUILDS)
def test_policy_dir_shaped_like_1_19s_loads(tmp_path, which):
    pdir = tmp_path / "policies"
    write_policy_dir(pdir)
    port = free_port()
    conf = tmp_path / "r.conf"
    conf.write_text(f"router {{\n    mode: standalone\n    id: Cfg\n}}\n"
                    f"listener {{\n    host: 127.0.0.1\n    port: {port}\n"
                    f"    saslMechanisms: ANONYMOUS\n    authenticatePeer: no\n}}\n"
                    f"policy {{\n    enableVhostPolicy: true\n    policyDir: {pdir}\n}}\n"
                    f"log {{\n    module: POLICY\n    enable: info+\n}}\n")
    router = start(which, conf)
    try:
        for vhost, group, option in (("", "$default", "maxConnections"),
                                     ("shop.example", "$default", "maxConnections"),
                                     ("shop.example", "$default", "aliases")):
            router.wait_for_line(f"POLICY (warning) Policy vhost '{vhost}' user group '{group}' "
                                 f"option '{option}' is ignored.", TIMEOUT)
        router.wait_for_line("Operational, ", TIMEOUT)
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=TIMEOUT,
                                  virtual_host="shop.example")
        try:
            conn.create_receiver("orders")
            with pytest.raises(LinkDetached, match="amqp:unauthorized-access"):
                conn.create_receiver("elsewhere")
        finally:
            conn.close()
    finally:
        router.stop()


@pytest.mark.parametrize("which", BUILDS)
@pytest.mark.parametrize("body, text", [
    ("linkRoute {\n    prefix: a\n    dir: in\n    direction: in\n}\n",
     "org.apache.qpid.dispatch.router.config.linkRoute: Both 'dir' and 'direction' cannot be "
     "specified for entity 'linkRoute'"),
    ("listener {\n    port: 1\n    prot: 2\n}\n",
     "org.apache.qpid.dispatch.listener: Unknown attribute 'prot' for "
     "'org.apache.qpid.dispatch.listener'"),
])
def test_start_up_errors_worded_as_1_19(tmp_path, which, body, text):
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: standalone\n    id: Bad\n}\n" + body)
    output = refused(which, conf)
    assert text in output


@pytest.mark.parametrize("which", BUILDS)
def test_router_id_value_is_json_decoded(tmp_path, which):
    """'id: abc\\bdef' is a backspace for 1.19 (its value is JSON string text), refused."""
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: standalone\n    id: abc\\bdef\n}\n")
    output = refused(which, conf)
    assert ("AttributeError: Router id attribute containing character '\b' in id 'abc\bdef' "
            "is disallowed." in output)


@pytest.mark.parametrize("which", BUILDS)
@pytest.mark.parametrize("rid", ["bad id", "tab\\tx", "ctl\\u0001x"])
def test_router_id_refusal_names_the_exception_as_1_19(tmp_path, which, rid):
    """Start-up scripts grep 1.19's output for the exception it names."""
    conf = tmp_path / "bad.conf"
    conf.write_text(f"router {{\n    mode: standalone\n    id: {rid}\n}}\n")
    output = refused(which, conf)
    shown = json.loads(f'"{rid}"')
    bad = next(ch for ch in shown if not ch.isalnum())
    assert (f"AttributeError: Router id attribute containing character '{bad}' in id "
            f"'{shown}' is disallowed." in output)


@pytest.mark.parametrize("which", BUILDS)
def test_empty_configuration_file_is_refused_as_1_19(tmp_path, which):
    """A zero-byte file is a start-up error (exit 1) with 1.19's text, not a router with
    nothing configured."""
    conf = tmp_path / "empty.conf"
    conf.write_bytes(b"")
    output = refused(which, conf)
    assert "Configuration file was empty" in output


def _vhost_json(hostname: str) -> list:
    return ["vhost", {"hostname": hostname, "allowUnknownUser": True,
                      "groups": {"$default": {"remoteHosts": "*"}}}]


@pytest.mark.parametrize("which", BUILDS)
@pytest.mark.parametrize("where", ["file", "policyDir", "both"])
def test_overlapping_vhost_patterns_refuse_start_as_1_19(tmp_path, which, where):
    """With enableVhostNamePatterns, '#.#.0.0' is stored as '#.0.0': a vhost with it after one
    named '#.0.0' is refused at start (exit 1) whether the two come from the configuration
    file, from a policy directory or one from each, as a management CREATE is."""
    in_file = {"file": ["#.0.0", "#.#.0.0"], "policyDir": [], "both": ["#.0.0"]}[where]
    in_dir = {"file": [], "policyDir": ["#.0.0", "#.#.0.0"], "both": ["#.#.0.0"]}[where]
    policy = "policy {\n    enableVhostPolicy: true\n    enableVhostNamePatterns: true\n"
    if in_dir:
        pdir = tmp_path / "policies"
        pdir.mkdir()
        (pdir / "tenants.json").write_text(json.dumps([_vhost_json(h) for h in in_dir]))
        policy += f"    policyDir: {pdir}\n"
    conf = tmp_path / "overlap.conf"
    conf.write_text("router {\n    mode: standalone\n    id: Overlap\n}\n" + policy + "}\n"
                    + "".join(f"vhost {{\n    hostname: {h}\n    allowUnknownUser: true\n"
                              f"    groups: {{\n        \"$default\": {{\n"
                              f"            \"remoteHosts\": \"*\"\n        }}\n    }}\n}}\n"
                              for h in in_file))
    output = refused(which, conf)
    assert ("PolicyError: Policy for vhost '#.#.0.0' alias '#.#.0.0' optimized pattern "
            "conflicts with existing pattern" in output)
    if which == "ours":
        line = 18 if where == "file" else 5  # the vhost's section, or the policy's
        assert f"{conf}:{line}: PolicyError: " in output
