"""common/policy.py (vhost resolution, groups, remote hosts, link names) and
router_core/policycount.py (the core's router-wide counts), pure."""
from __future__ import annotations

import ipaddress
import json

import pytest
from hypothesis import given, strategies as st

from router_core.policycount import PolicyCounts
from common import policy as p

WORD = st.text("abcdefgh", min_size=1, max_size=6)


def vhost(name="v", **kw):
    attrs = {"hostname": name, "allowUnknownUser": True,
             "groups": {"$default": {"remoteHosts": "*", "sources": "*", "targets": "*"}}}
    attrs.update(kw)
    return attrs


# --- remote hosts ------------------------------------------------------------------------------
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_host_range_matches_inclusive_bounds(a, b, x):
    low, high = sorted((a, b))
    spec = f"{ipaddress.IPv4Address(low)}-{ipaddress.IPv4Address(high)}"
    assert p.HostRange(spec).matches(str(ipaddress.IPv4Address(x))) == (low <= x <= high)


def test_host_range_forms():
    assert p.HostRange("*").matches("::1") and p.HostRange("*").matches("10.1.1.1")
    assert p.HostRange("127.0.0.1").matches("127.0.0.1")
    assert not p.HostRange("127.0.0.1").matches("127.0.0.2")
    assert p.HostRange("::1").matches("::1") and not p.HostRange("::1").matches("127.0.0.1")
    assert p.HostRange("10.0.0.0-10.0.0.9").matches("::ffff:10.0.0.5")  # v4-mapped
    for bad in ("10.0.0.9-10.0.0.1", "10.0.0.1-::1", "1-2-3"):
        with pytest.raises(p.PolicyError):
            p.HostRange(bad)


def test_remote_ip():
    assert p.remote_ip("127.0.0.1:5672") == "127.0.0.1"
    assert p.remote_ip("[::1]:5672") == "::1"


# --- link names --------------------------------------------------------------------------------
@given(WORD, WORD, WORD)
def test_user_substitution(user, prefix, suffix):
    rules = p.compile_names("v", "g", "sources", f"{prefix}${{user}}{suffix}")
    assert p.approve_name(user, rules, prefix + user + suffix)
    assert not p.approve_name(user, rules, prefix + user + "X" + suffix)
    rules = p.compile_names("v", "g", "sources", f"${{user}}{suffix}")
    assert p.approve_name(user, rules, user + suffix)


@given(WORD, st.text("abcdefgh./", max_size=8))
def test_trailing_wildcard_is_a_prefix(stem, rest):
    rules = p.compile_names("v", "g", "targets", f"{stem}*")
    assert p.approve_name("u", rules, stem + rest)
    assert not p.approve_name("u", rules, "Z" + stem + rest)


def test_names_as_1_19():
    rules = p.compile_names("v", "g", "sources", "public, tmp-${user}, a*")
    assert p.approve_name("anonymous", rules, "public")
    assert p.approve_name("anonymous", rules, "tmp-anonymous")
    assert p.approve_name("anonymous", rules, "abc")
    assert not p.approve_name("anonymous", rules, "private")
    assert not p.approve_name("anonymous", rules, "")
    assert p.approve_name("x", p.compile_names("v", "g", "sources", "*"), "anything")
    assert not p.approve_name("x", p.compile_names("v", "g", "sources", ""), "anything")
    with pytest.raises(p.PolicyError, match="multiple user subtitution tokens"):
        p.compile_names("v", "g", "sources", "${user}.${user}")
    with pytest.raises(p.PolicyError, match="as a prefix or a suffix only"):
        p.compile_names("v", "g", "sourcePattern", "a.${user}.b")


@given(WORD, st.lists(WORD, min_size=1, max_size=4))
def test_patterns_with_user(user, words):
    rules = p.compile_names("v", "g", "targetPattern", "${user}.#")
    assert p.approve_pattern(user, rules, ".".join([user] + words))
    assert not p.approve_pattern(user, rules, ".".join(["Z" + user] + words))
    rules = p.compile_names("v", "g", "targetPattern", "q.*.${user}")
    assert p.approve_pattern(user, rules, f"q.{words[0]}.{user}")
    assert not p.approve_pattern(user, rules, f"q.{words[0]}.x.{user}")


# --- vhosts and groups -------------------------------------------------------------------------
def test_resolve_by_name_alias_pattern_and_default():
    db = p.PolicyDb({"enableVhostPolicy": True}, [vhost("a.com", aliases="b.com, c.com"),
                                                  vhost("$default")])
    assert db.resolve("a.com").name == "a.com"
    assert db.resolve("c.com").name == "a.com"
    assert db.resolve("nowhere").name == "$default"
    db = p.PolicyDb({"enableVhostPolicy": True, "enableVhostNamePatterns": True,
                     "defaultVhost": ""}, [vhost("*.example.com"), vhost("#.com")])
    assert db.resolve("x.example.com").name == "*.example.com"
    assert db.resolve("y.z.com").name == "#.com"
    assert db.resolve("y.org") is None


def test_alias_conflicts_as_1_19():
    db = p.PolicyDb({}, [vhost("a", aliases="b")])
    with pytest.raises(p.PolicyError, match="already an alias"):
        db.add(p.Vhost(vhost("b")))
    with pytest.raises(p.PolicyError, match="conflicts with existing alias"):
        db.add(p.Vhost(vhost("c", aliases="b")))
    with pytest.raises(p.PolicyError, match="conflicts with an existing vhost"):
        db.add(p.Vhost(vhost("d", aliases="a")))
    db.add(p.Vhost(vhost("a", aliases="e")))  # replacing a vhost frees its old aliases
    db.add(p.Vhost(vhost("b")))
    with pytest.raises(p.PolicyError, match="duplicates vhost name"):
        p.Vhost(vhost("x", aliases="x"))


def test_lookup_user_denials_and_groups():
    db = p.PolicyDb({"enableVhostPolicy": True, "defaultVhost": ""}, [
        {"hostname": "h", "groups": {
            "admins": {"users": "alice, bob", "remoteHosts": "127.0.0.1", "maxSessions": 3},
            "open": {"users": "*", "remoteHosts": "10.0.0.0-10.0.0.255"}}},
        {"hostname": "closed", "groups": {"g": {"users": "carol", "remoteHosts": "*"}}}])
    vh, group, settings, _ = db.lookup_user("alice", "127.0.0.1", "h")
    assert group == "admins" and settings.max_sessions == 3
    _, group, _, _ = db.lookup_user("zed", "10.0.0.7", "h")
    assert group == "open"
    _, _, settings, logs = db.lookup_user("alice", "10.9.9.9", "h")
    assert settings is None and "not allowed to connect from this network host" in logs[-1][1]
    _, _, settings, logs = db.lookup_user("dave", "1.1.1.1", "closed")
    assert settings is None and "unknown users are denied" in logs[-1][1]
    _, _, settings, logs = db.lookup_user("dave", "1.1.1.1", "missing")
    assert settings is None and "No policy defined for vhost" in logs[-1][1]


def test_group_defaults_and_validation():
    g = p.Vhost(vhost()).groups["$default"]
    assert (g.max_senders, g.max_receivers) == (p.UNLIMITED_LINKS, p.UNLIMITED_LINKS)
    assert not g.allowAnonymousSender and not g.allowDynamicSource and not g.allowUserIdProxy
    assert g.allowWaypointLinks and g.allowFallbackLinks
    assert g.check_capabilities(["qd.waypoint.1"]) is None
    g2 = p.GroupSettings("v", "g", {"allowWaypointLinks": False, "allowFallbackLinks": False})
    assert g2.check_capabilities(["qd.waypoint.2"]) == "Waypoint"
    assert g2.check_capabilities(["qd.fallback"]) == "Fallback"
    with pytest.raises(p.PolicyError, match="conflicting 'sources' and 'sourcePattern'"):
        p.GroupSettings("v", "g", {"sources": "a", "sourcePattern": "b"})
    assert p.GroupSettings("v", "g", {"someNewThing": 1}).warnings == [
        "Policy vhost 'v' user group 'g' option 'someNewThing' is ignored."]
    with pytest.raises(p.PolicyError, match="multiple user groups"):
        p.Vhost({"hostname": "v", "groups": {"a": {"users": "u"}, "b": {"users": "u"}}})
    with pytest.raises(p.PolicyError, match="default settings are not defined"):
        p.Vhost({"hostname": "v", "allowUnknownUser": True, "groups": {}})


def test_lenient_as_1_19():
    """What 1.19's policy compiler accepts (warning about what it does not use) and refuses,
    with its texts (checked against a 1.19 router loading the same vhost)."""
    v = p.Vhost({"hostname": "", "maxConnections": 5, "allowUnknownUser": True, "color": "x",
                 "groups": {"$default": {"remoteHosts": "*", "maxConnections": 10},
                            "g": {"users": "bob", "remoteHosts": "*", "maxConnections": 3}}})
    assert v.name == "" and v.max_connections == 5 and v.group_of("bob") == "g"
    assert v.warnings == [
        "Policy vhost '' option 'color' is ignored.",
        "Policy vhost '' user group '$default' option 'maxConnections' is ignored.",
        "Policy vhost '' user group 'g' option 'maxConnections' is ignored."]
    db = p.PolicyDb({"defaultVhost": "other"}, [])
    db.add(v)
    assert db.resolve("").name == ""
    assert p.Vhost({"hostname": None, "name": "named"}).name == "named"  # an unset hostname
    # groups without users each hold the user '': 1.19 refuses two of them
    with pytest.raises(p.PolicyError) as info:
        p.Vhost({"hostname": "v", "groups": {"a": {}, "b": {"remoteHosts": "*"}}})
    assert str(info.value) == ("Policy 'v' is invalid: Policy vhost 'v' user '' is in multiple "
                               "user groups 'a' and 'b'")
    for group, text in (
            ({"maxSessions": -1}, "option 'maxSessions' has error 'Value '-1' is below minimum "
                                  "'0'.'."),
            ({"maxConnectionsPerUser": 70000}, "option 'maxConnectionsPerUser' has error "
                                               "'Value '70000' is above maximum '65535'.'."),
            ({"maxSenders": "x"}, "option 'maxSenders' has error 'Value 'x' does not resolve to "
                                  "an integer.'."),
            ({"remoteHosts": "*, 1-2-3"}, "option 'remoteHosts' connectionOption '1-2-3' "
                                          "failed to translate: "),
            ({"allowDynamicSource": "yes"}, "option 'allowDynamicSource' has illegal boolean "
                                            "value 'yes'.")):
        with pytest.raises(p.PolicyError) as info:
            p.Vhost({"hostname": "v", "groups": {"g": group}})
        assert str(info.value).startswith(f"Policy 'v' is invalid: Policy vhost 'v' user group "
                                          f"'g' {text}")


def test_connector_group():
    """connector policyVhost: the '$connector' group of the vhost named (alias, default vhost
    as 1.19's lookup), without the group's maxSessionWindow (not applied to outgoing
    connections in 1.19); None without such a group."""
    conn_group = {"sources": "a.*", "maxSessionWindow": 999, "maxSenders": 2}
    db = p.PolicyDb({"defaultVhost": "fallback"}, [
        {"hostname": "c.vh", "aliases": "alias.vh", "groups": {"$connector": conn_group}},
        {"hostname": "fallback", "groups": {"$connector": {"targets": "t"}}},
        {"hostname": "none.vh", "groups": {"g": {"users": "u"}}}])
    vhost, settings = db.connector_group("alias.vh")
    assert vhost.name == "c.vh" and settings.max_senders == 2
    assert settings.max_session_window == 0
    assert db.vhosts["c.vh"].groups["$connector"].max_session_window == 999  # not changed
    assert settings.approve_address("anonymous", "a.b", True)
    assert not settings.approve_address("anonymous", "b", True)
    assert db.connector_group("unknown.vh")[0].name == "fallback"
    assert db.connector_group("none.vh") is None
    assert db.connector_failure(7, "none.vh") == ("[C7] Failed to find policyVhost settings for "
                                                  "connection '7', policyVhost: 'none.vh'")


def test_message_size_resolution():
    db = p.PolicyDb({"maxMessageSize": 100}, [
        vhost("a", maxMessageSize=50), vhost("b"),
        {"hostname": "c", "maxMessageSize": 50, "allowUnknownUser": True,
         "groups": {"$default": {"remoteHosts": "*", "maxMessageSize": 0}}}])
    for name, size in (("a", 50), ("b", 100), ("c", 0)):
        v = db.vhosts[name]
        assert db.message_size(v, v.groups["$default"]) == size


def test_policy_dir(tmp_path):
    attrs = {k: v for k, v in vhost("").items() if k != "hostname"}
    (tmp_path / "one.json").write_text(json.dumps([["vhost", {"id": "x.com", **attrs}]]))
    (tmp_path / "ignored.txt").write_text("nothing")
    found = p.load_policy_dir(str(tmp_path))
    assert [v["hostname"] for v in found] == ["x.com"]
    (tmp_path / "two.json").write_text("[[\"listener\", {}]]")  # only vhosts are read
    assert [v["hostname"] for v in p.load_policy_dir(str(tmp_path))] == ["x.com"]
    (tmp_path / "two.json").write_text("[[\"vhost\"]]")
    with pytest.raises(p.PolicyError, match="two.json"):
        p.load_policy_dir(str(tmp_path))
    (tmp_path / "two.json").unlink()
    warnings: list = []
    p.load_policy_dir(str(tmp_path), warnings)
    assert warnings == [("AGENT", "Attribute 'id' of entity 'vhost' has been deprecated. Use "
                                  "'hostname' instead")]


def test_policy_dir_comment_lines(tmp_path):
    """1.19 blanks lines whose first non-blank character is '#' (its shipped files open with
    '##' licence lines); a '#' inside a JSON string on another line stays."""
    body = json.dumps([["vhost", vhost("c.com", aliases="x#y")]], indent=2)
    (tmp_path / "c.json").write_text("##\n## Licence header\n##\n  # indented\n" + body
                                     + "\n# trailing\n")
    found = p.load_policy_dir(str(tmp_path))
    assert [v["hostname"] for v in found] == ["c.com"] and found[0]["aliases"] == "x#y"
    (tmp_path / "d.json").write_text("##\n[\n  [\"vhost\", {\n}")  # error keeps line numbers
    with pytest.raises(p.PolicyError, match=r"d.json.*line 4"):
        p.load_policy_dir(str(tmp_path))


# --- the core's counts -------------------------------------------------------------------------
def test_counts_router_wide():
    counts = PolicyCounts()
    info = lambda user, host: [3, "v", user, host, 2, 1, 65535]  # noqa: E731
    assert counts.admit(1, "h:1", info("u1", "h")) is None
    assert counts.admit(2, "h:2", info("u1", "h")) is not None  # per user
    assert counts.admit(3, "h:3", info("u2", "h")) is None
    assert counts.admit(4, "h:4", info("u3", "h")) is not None  # vhost total
    assert counts.admit(5, "h:5", [3, None, "x", "h", 0, 0, 0]) is None
    assert counts.admit(6, "h:6", [3, None, "x", "h", 0, 0, 0]) is not None  # global
    stats = counts.view()
    assert (stats["connectionsCurrent"], stats["connectionsDenied"]) == (3, 1)
    v = stats["vhosts"][0]
    assert (v["connectionsApproved"], v["connectionsDenied"], v["connectionsCurrent"]) == (2, 2, 2)
    assert v["perUserState"] == {"u1": ["h:1"], "u2": ["h:3"]}
    counts.release(1)
    counts.release(1)  # twice: counted once
    assert counts.admit(7, "h:7", info("u1", "h")) is None
    counts.event("v", "sender")
    counts.event("v", "maxMessageSize")
    v = counts.view()["vhosts"][0]
    assert (v["senderDenied"], v["maxMessageSizeDenied"]) == (1, 1)
    assert counts.view()["linksDenied"] == 1 and counts.view()["totalDenials"] == 3


def test_close_line_reports_the_vhosts_denials_from_every_worker():
    """Denials reach the core as PolicyEvents from whichever worker decided them; the POLICY
    line at a connection's close reports its vhost's totals, as 1.19 counts them per vhost."""
    counts = PolicyCounts()
    for vhost, kind in (("v", "sender"), ("v", "receiver"), ("v", "receiver"),
                        ("v", "session"), ("w", "sender"), ("v", "maxMessageSize")):
        counts.event(vhost, kind)
    counts.closed(7, "v", "127.0.0.1:4567", 1, 2, 0, 3)
    counts.closed(8, "nobody", "127.0.0.1:4568", 0, 0, 0, 2)
    assert counts.take_logs() == [
        ("debug", "[C7] Connection '127.0.0.1:4567' closed with resources n_sessions=1, "
                  "n_senders=2, n_receivers=0, sessions_denied=1, senders_denied=1, "
                  "receivers_denied=2, max_message_size_denied:1, nConnections= 3."),
        ("debug", "[C8] Connection '127.0.0.1:4568' closed with resources n_sessions=0, "
                  "n_senders=0, n_receivers=0, sessions_denied=0, senders_denied=0, "
                  "receivers_denied=0, max_message_size_denied:0, nConnections= 2.")]


def test_the_allow_line_is_made_only_while_policy_trace_is_on():
    """1.19's 'ALLOW Connection' line is a trace line: with POLICY trace off (the core sets
    ``trace`` when the levels change) an admitted connection makes no line at all."""
    counts = PolicyCounts()
    counts.trace = False
    assert counts.admit(1, "h:1", [9, None, "u", "10.0.0.1", 0, 0, 0]) is None
    assert counts.take_logs() == []
    counts.trace = True
    assert counts.admit(2, "h:2", [9, None, "u", "10.0.0.2", 0, 0, 0]) is None
    assert counts.take_logs() == [("trace", "ALLOW Connection '10.0.0.2' based on global "
                                            "connection count. nConnections= 2")]
