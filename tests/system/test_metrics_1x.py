"""``GET /metrics`` on an http listener as a Qpid Dispatch 1.19 dashboard reads it: 1.19's
router-wide families under its names and types, without labels, and its allocator families
(``qdr_allocator_<pool>:<counter>_bytes``), with counts that follow the traffic. Run on our
router and, when ``QDROUTERD_1X`` names a 1.x install, on a 1.19 router alike."""
from __future__ import annotations

import http.client
import re

import pytest
from proton.utils import BlockingConnection

from conftest import free_port
from test_log_parity import send_one

TIMEOUT = 10
# 1.19's router-wide families and their types (its exported interface)
ONE_X_FAMILIES = {
    "qdr_connections_total": "gauge", "qdr_links_total": "gauge",
    "qdr_addresses_total": "gauge", "qdr_routers_total": "gauge",
    "qdr_link_routes_total": "gauge", "qdr_auto_links_total": "gauge",
    "qdr_presettled_deliveries_total": "counter",
    "qdr_dropped_presettled_deliveries_total": "counter",
    "qdr_accepted_deliveries_total": "counter", "qdr_released_deliveries_total": "counter",
    "qdr_rejected_deliveries_total": "counter", "qdr_modified_deliveries_total": "counter",
    "qdr_deliveries_ingress_total": "counter", "qdr_deliveries_egress_total": "counter",
    "qdr_deliveries_transit_total": "counter",
    "qdr_deliveries_ingress_route_container_total": "counter",
    "qdr_deliveries_egress_route_container_total": "counter",
    "qdr_deliveries_delayed_1sec_total": "counter",
    "qdr_deliveries_delayed_10sec_total": "counter",
    "qdr_deliveries_stuck_total": "gauge", "qdr_links_blocked_total": "gauge",
    "qdr_deliveries_redirected_to_fallback_total": "counter",
}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(port: int) -> tuple:
    """({name: value} of the unlabelled samples, {family: type})."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200
        text = response.read().decode()
    finally:
        conn.close()
    values, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, line
            if not m.group(2):
                values[m.group(1)] = float(m.group(3))
    return values, types


@pytest.mark.parametrize("kind", ["ours", "1.x"])
def test_metrics_have_1_19s_families(router_of_kind, kind):
    http_port = free_port()
    router = router_of_kind(kind, f"""
        listener {{
            host: 127.0.0.1
            port: {http_port}
            http: yes
            authenticatePeer: no
        }}
        """)
    router.proc.wait_for_line(f"Listening for HTTP on 127.0.0.1:{http_port}", TIMEOUT)
    before, types = scrape(http_port)
    assert {n: types.get(n) for n in ONE_X_FAMILIES} == ONE_X_FAMILIES
    assert all(n in before for n in ONE_X_FAMILIES)
    for pool in ("qdr_address_t", "qdr_connection_t", "qdr_link_t"):
        for counter in ("total_alloc_from_heap", "total_free_to_heap", "held_by_threads",
                        "batches_rebalanced_to_threads", "batches_rebalanced_to_global"):
            assert types.get(f"qdr_allocator_{pool}:{counter}_bytes") == "gauge"
    for _ in range(3):  # one accepted delivery each (test_log_parity's client)
        send_one(router.url)
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        conn.create_receiver("metrics.q")
        during, _ = scrape(http_port)
    finally:
        conn.close()
    assert during["qdr_deliveries_ingress_total"] - before["qdr_deliveries_ingress_total"] >= 3
    assert during["qdr_accepted_deliveries_total"] - before["qdr_accepted_deliveries_total"] >= 3
    assert during["qdr_links_total"] >= before["qdr_links_total"] + 1
    assert during["qdr_connections_total"] >= 1 and during["qdr_routers_total"] == 0
