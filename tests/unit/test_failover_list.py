"""common.failover: failoverUrls parsed as 1.19 parses them, the open's property, a peer's
offer merged into a connector's list, the order attempts and management follow."""
from __future__ import annotations

import pytest

from common.failover import FailoverList, from_property, parse_urls, property_value


def test_parse_urls_as_1_19():
    assert parse_urls(" amqp://127.0.0.1:9999 , amqps://otherhost:1234,plainhost") == [
        ("amqp", "127.0.0.1", "9999"), ("amqps", "otherhost", "1234"),
        (None, "plainhost", "5672")]
    assert parse_urls("a,b,") == [(None, "a", "5672"), (None, "b", "5672")]


@pytest.mark.parametrize("text", ["", ",a", "a,,b", "amqp://:5672"])
def test_parse_urls_refuses_an_item_without_host(text):
    with pytest.raises(ValueError, match="No network host in failover item"):
        parse_urls(text)


def test_property_value_has_scheme_only_when_given():
    assert property_value(parse_urls("amqp://h:1, g")) == [
        {"network-host": "h", "port": "1", "scheme": "amqp"},
        {"network-host": "g", "port": "5672"}]


def test_from_property_defaults_and_skips_what_is_not_an_address():
    assert from_property(None) is None
    assert from_property("x") is None
    assert from_property([]) == []
    assert from_property([{"network-host": "h"}, {"port": "1"}, "junk",
                          {"network-host": "g", "port": 7, "scheme": "amqps"}]) == [
        ("amqp", "h", "5672"), ("amqps", "g", "7")]


def test_failover_list_merge_and_round_robin():
    fl = FailoverList("amqp", "b", "1")
    assert not fl.has_failover() and fl.urls() == "amqp://b:1"
    fl.offered([("amqp", "c", "2"), ("amqps", "d", "3"), ("amqp", "b", "1")])
    assert fl.urls() == "amqp://b:1, amqp://c:2, amqps://d:3"
    fl.opened()
    fl.failed()  # the same address once more
    assert fl.current == ("amqp", "b", "1")
    fl.failed()  # then the next
    assert fl.current == ("amqp", "c", "2")
    assert fl.urls() == "amqp://c:2, amqps://d:3, amqp://b:1"
    # c's offer replaces d (b's): the own address and the current one stay
    fl.offered([("amqp", "e", "4")])
    assert fl.urls() == "amqp://c:2, amqp://e:4, amqp://b:1"
    fl.offered([])  # an empty list: only the own address and the current one
    assert fl.urls() == "amqp://c:2, amqp://b:1"
    # as 1.19: the first offered address is added even when it is the own one
    fl = FailoverList("amqp", "b", "1")
    fl.offered([("amqp", "b", "1"), ("amqp", "c", "2"), ("amqp", "b", "1")])
    assert fl.urls() == "amqp://b:1, amqp://b:1, amqp://c:2"
