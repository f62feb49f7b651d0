"""Our qdstat and qdmanage print what 1.19's print (compared against 1.19's tools on the same
routers): -a columns, -g fallback row, -l delay/rate/stuck/blkd, -m pools, -c last dlv/uptime,
qdmanage QUERY without nulls, positional TYPE, paging at 500 rows, typed values unwrapped. The
tools run here on a client that answers from fixed entities (no router)."""
from __future__ import annotations


from proton import int32, symbol, uint, ulong

from tools import qdmanage, qdstat
from tools.client import PAGE, ManagementClient, plain
from tools.display import kmg

T = "org.apache.qpid.dispatch."

ENTITIES = {
    "router": [{"id": "R1", "version": "1.19.0", "mode": "standalone", "workerThreads": 4,
                "uptimeSeconds": 5, "memoryUsage": 335564800, "area": "0",
                "linkRouteCount": 0, "autoLinkCount": 0, "linkCount": 2, "nodeCount": 0,
                "addrCount": 3, "connectionCount": 1, "presettledDeliveries": 0,
                "droppedPresettledDeliveries": 0, "acceptedDeliveries": 1,
                "rejectedDeliveries": 0, "releasedDeliveries": 0, "modifiedDeliveries": 0,
                "deliveriesDelayed1Sec": 0, "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0,
                "deliveriesRedirectedToFallback": 7, "deliveriesIngress": 1,
                "deliveriesEgress": 1, "deliveriesTransit": 0,
                "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0}],
    "router.address": [{"name": "M0orders", "distribution": "balanced", "priority": -1,
                        "inProcess": 0, "subscriberCount": 1, "remoteCount": 0,
                        "containerCount": 0, "deliveriesIngress": 12345,
                        "deliveriesEgress": 2, "deliveriesTransit": 0,
                        "deliveriesRedirectedToFallback": 3, "deliveriesToContainer": 0,
                        "deliveriesFromContainer": 0}],
    "router.link": [{"linkType": "endpoint", "linkDir": "in", "connectionId": "4",
                     "identity": "9", "peer": None, "owningAddr": "M0q", "capacity": 250,
                     "priority": 4, "undeliveredCount": 0, "unsettledCount": 0,
                     "deliveryCount": 2, "presettledCount": 0, "droppedPresettledCount": 0,
                     "acceptedCount": 2, "rejectedCount": 0, "releasedCount": 0,
                     "modifiedCount": 0, "deliveriesDelayed1Sec": 1,
                     "deliveriesDelayed10Sec": 2, "settleRate": 0, "deliveriesStuck": 0,
                     "creditAvailable": 250, "zeroCreditSeconds": 0, "adminStatus": "enabled",
                     "operStatus": "up", "linkName": "x"}],
    "connection": [{"identity": "4", "host": "127.0.0.1:5000", "container": "c",
                    "role": "normal", "protocol": "amqp", "dir": "in", "isEncrypted": False,
                    "isAuthenticated": False, "sasl": None, "user": None, "tenant": None,
                    "lastDlvSeconds": None, "uptimeSeconds": 61}],
    "allocator": [{"identity": "allocator/qdr_link_t", "typeSize": 1000,
                   "transferBatchSize": 0, "localFreeListMax": 0, "totalAllocFromHeap": 3,
                   "heldByThreads": 0, "batchesRebalancedToThreads": 0,
                   "batchesRebalancedToGlobal": 0}],
}


class FakeClient(ManagementClient):
    """Answers QUERY from ENTITIES (honouring offset/count), records the requests."""

    def __init__(self, entities: dict) -> None:  # no connection
        self.entities = entities
        self.requests: list = []

    def call(self, operation, body=None, **properties):
        self.requests.append((operation, body, properties))
        short = (properties.get("entityType") or "").replace(T, "")
        rows = self.entities.get(short, [])
        offset = properties.get("offset") or 0
        count = properties.get("count")
        rows = rows[offset:] if count is None else rows[offset:offset + count]
        names = (body or {}).get("attributeNames") or sorted({k for r in rows for k in r})
        return {"attributeNames": names, "results": [[r.get(n) for n in names] for r in rows]}


def stat(view: str, *flags: str) -> list[str]:
    opts = qdstat.parse_args([*flags])
    tool = qdstat.Qdstat(FakeClient(ENTITIES), opts)
    getattr(tool, view)()
    return "\n".join(tool.out).splitlines()


def test_addresses_have_1x_columns():
    lines = stat("addresses")
    assert lines[1].split() == ["class", "addr", "phs", "distrib", "pri", "local", "remote",
                                "in", "out", "thru", "fallback"]
    assert lines[3].split() == ["mobile", "orders", "0", "balanced", "-", "1", "0", "12,345",
                                "2", "0", "3"]
    lines = stat("addresses", "-v")
    assert lines[1].split() == ["class", "addr", "phs", "distrib", "pri", "in-proc", "local",
                                "remote", "in", "out", "thru", "fallback", "to-proc",
                                "from-proc"]


def test_general_has_fallback_and_vm_size_in_units():
    rows = {line[:35].strip(): line[35:].strip() for line in stat("general")[3:]}
    assert rows["Deliveries to Fallback"] == "7"
    assert rows["VmSize"] == "320 MiB"


def test_links_have_delay_rate_stuck_and_blocked():
    lines = stat("links")
    heads = lines[1].replace("conn id", "conn-id").split()
    assert heads[-5:] == ["delay", "rate", "stuck", "cred", "blkd"]
    row = lines[3].split()
    assert row[-5:] == ["3", "0", "0", "250", "-"]


def test_connections_have_last_delivery_and_uptime():
    lines = stat("connections")
    assert lines[1].split()[-4:] == ["tenant", "last", "dlv", "uptime"]
    assert lines[3].split()[-2:] == ["-", "000:00:01:01"]


def test_memory_prints_pools_and_summary():
    lines = stat("memory")
    assert lines[0] == "Memory Pools"
    assert lines[3].split() == ["qdr_link_t", "1,000", "0", "0", "3", "0", "0", "0"]
    assert "Memory Summary" in lines
    assert lines[-1].split() == ["320", "MiB", "2.93", "KiB"]


def test_kmg_units():
    assert [kmg(v, 1024) for v in (1000, 2048, 335564800, 15 * 2 ** 30)] == [
        "1000", "2.00 KiB", "320 MiB", "15.0 GiB"]


def test_queries_are_paged_at_500_rows():
    many = {"router.address": [{"name": f"M0a{i}"} for i in range(1234)]}
    client = FakeClient(many)
    rows = client.query(T + "router.address", ["name"])
    assert len(rows) == 1234 and PAGE == 500
    assert [r[2].get("offset") for r in client.requests] == [None, 500, 1000]
    assert all(r[2]["count"] == 500 for r in client.requests)
    assert len(client.query(T + "router.address", ["name"], count=10)) == 10


def test_qdmanage_query_leaves_out_nulls_and_takes_a_positional_type():
    client = FakeClient({"connection": [{"identity": "4", "tenant": None}]})
    opts = qdmanage.parse_args(["query", "--type", "connection"])
    [(op, body, props)] = qdmanage.build_requests(opts)
    assert qdmanage.run_request(client, op, body, props) == [{"identity": "4"}]
    for op in ("get-attributes", "get-operations", "get-types"):
        [(_, _, props)] = qdmanage.build_requests(qdmanage.parse_args([op, "listener"]))
        assert props["entityType"] == T + "listener"


def test_typed_values_of_a_1x_router_are_unwrapped():
    answer = {"results": [[uint(1), ulong(0), int32(-3), symbol("s")]], "n": [True, None]}
    got = plain(answer)
    assert got == {"results": [[1, 0, -3, "s"]], "n": [True, None]}
    assert [type(v) for v in got["results"][0]] == [int, int, int, str]
    assert str(got["results"][0][0]) == "1"


def test_edge_view_as_1x():
    edge = dict(ENTITIES["connection"][0], identity="7", role="edge", active=True)
    tool = qdstat.Qdstat(FakeClient({"connection": [ENTITIES["connection"][0], edge]}),
                         qdstat.parse_args(["-e"]))
    tool.edges()
    lines = "\n".join(tool.out).splitlines()
    assert lines[0] == "Connections" and lines[1].split()[-2:] == ["tenant", "active"]
    assert lines[3].split()[0] == "7" and lines[3].split()[-1] == "yes" and len(lines) == 4
    tool = qdstat.Qdstat(FakeClient({}), qdstat.parse_args(["-e"]))
    tool.edges()
    assert tool.out == ["No Edge Router Connections"]
    tool = qdstat.Qdstat(FakeClient(ENTITIES), qdstat.parse_args(["-e"]))
    tool.edges()
    assert tool.out == []  # connections, none from an edge router: nothing, as 1.19


def test_empty_table_is_its_title_and_csv_leaves_empty_cells_unquoted():
    from tools.display import format_table
    assert format_table("Vhost User Stats", ["vhost", "user"], []) == "Vhost User Stats"
    assert format_table("T", ["a", "b"], [["x", None]], csv=True) == 'T\n"a","b"\n"x",'


def test_limit_zero_means_no_limit_as_in_1x():
    many = {"router.address": [{"name": f"M0a{i}"} for i in range(3)]}
    assert len(FakeClient(many).query(T + "router.address", ["name"], count=0)) == 3

    class LogClient(FakeClient):
        def call(self, operation, body=None, **properties):
            self.requests.append((operation, body, properties))
            return []

    client = LogClient(ENTITIES)
    tool = qdstat.Qdstat(client, qdstat.parse_args(["--log", "--limit=0"]))
    tool.log()
    assert client.requests == [("GET-LOG", None, {"limit": None})]


def test_qdmanage_get_log_takes_limit_as_1x_does():
    """1.19's qdmanage sends ATTR=VALUE of an operation it has no method for (GET-LOG) as
    request properties: ``qdmanage get-log limit=2``."""
    [(op, _, props)] = qdmanage.build_requests(qdmanage.parse_args(["get-log", "limit=2"]))
    assert op == "get-log" and props["limit"] == 2  # sent as typed, as 1.19's qdmanage does
    [(_, _, props)] = qdmanage.build_requests(qdmanage.parse_args(["get-log", "--limit=3"]))
    assert props["limit"] == 3


def test_qdmanage_read_without_a_name_goes_to_the_router():
    """1.19's qdmanage sends it; the router answers (1.19: the management entity itself, or
    400 naming the type)."""
    [(op, _, props)] = qdmanage.build_requests(qdmanage.parse_args(["read"]))
    assert op == "READ" and props.get("name") is None and props.get("identity") is None
    [(_, _, props)] = qdmanage.build_requests(qdmanage.parse_args(["read", "--type=listener"]))
    assert props["type"] == T + "listener"


def test_open_hostname_is_the_host_the_user_gave(monkeypatch):
    """1.19's tools open with the bus host as hostname (``0.0.0.0`` too), which the router's
    vhost policy matches; we connect to loopback for 0.0.0.0 but say what the user gave."""
    from tools import client as client_mod
    seen = []

    class Conn:
        def __init__(self, url, **kwargs):
            seen.append((url, kwargs.get("virtual_host")))

        def create_receiver(self, *a, **k):
            raise RuntimeError("enough")

        create_sender = create_receiver

    monkeypatch.setattr(client_mod, "BlockingConnection", Conn)
    for bus in ("0.0.0.0", "localhost:5999", "amqp://vh.example:5672", "127.0.0.1"):
        opts = qdstat.parse_args(["-g", "-b", bus])
        try:
            ManagementClient(opts)
        except RuntimeError:
            pass
    assert [hostname for _, hostname in seen] == ["0.0.0.0", "localhost", "vh.example",
                                                  "127.0.0.1"]
    assert seen[0][0].startswith("amqp://127.0.0.1:")  # 0.0.0.0: this host
