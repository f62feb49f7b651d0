"""The web console in a real browser: headless Chromium (Debian's) driven by Playwright against a
launched network of three interior routers, the first with an http listener serving the console
(its default root, console/dist) and AMQP over WebSockets.

    Router.A <--1-- Router.B <--3-- Router.C        (arrow: who connects; number: link cost)
    console -> ws://A/ ; a receiver client on B

The console's pages are checked as a person would see them: it loads, connects over a WebSocket,
Overview counts 3 routers, Topology draws 3 routers and 2 links (costs 1 and 3) and redraws with
2 and 1 when Router.C stops (first the link, then the router), List shows A's connections (the
console's own among them), Charts draws a series, Schema lists the entity types. Screenshots of
every page are kept in the test's temporary directory (printed at the end).

Skipped, with the reason, when chromium, node or the built console are missing, unless
ROUTER_REQUIRE_BROWSER=1 (CI sets it): then a missing part fails the test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from chromium_driver import Chromium, missing_parts
from conftest import free_port

WAIT = 30.0          # a page shows what the network has
# a stopped router leaves the others' router.node tables when its link state ages out
# (remoteLsMaxAgeSeconds, 60 s by default; Qpid Dispatch 1.19 keeps it as long). The network
# here ages it out after 10 s, with RAs every 3 s keeping the live routers' link states fresh
# (RA_TIMERS): the console is what is tested, not how long the routers keep a lost router.
RA_TIMERS = """
    raIntervalSeconds: 3
    remoteLsMaxAgeSeconds: 10
    """
TOPOLOGY_WAIT = 90.0

RECEIVER = textwrap.dedent("""
    import sys
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Receive(MessagingHandler):
        def on_start(self, event):
            conn = event.container.connect(sys.argv[1])
            event.container.create_receiver(conn, sys.argv[2])

        def on_link_opened(self, event):
            print("ready", flush=True)

    Container(Receive()).run()
    """)


@pytest.fixture
def browser_parts():
    missing = missing_parts()
    if missing:
        reason = "the browser tests need " + "; ".join(missing)
        if os.environ.get("ROUTER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ROUTER_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture
def chromium(browser_parts, tmp_path):
    browser = Chromium(tmp_path / "chromium-profile")
    yield browser
    browser.close()


@pytest.fixture
def receiver_client():
    procs = []

    def start(url: str, address: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", RECEIVER, url, address],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait_ready(proc: subprocess.Popen, timeout: float = WAIT) -> None:
    """The receiver printed "ready" (its link is attached); bounded by a timer that kills it."""
    import threading
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        line = proc.stdout.readline()
    finally:
        timer.cancel()
    assert line.strip() == "ready", f"receiver client did not attach: {line!r}"


def interior(router_factory, name: str, ir_port: int, connect_to=None, cost: int = 1,
             http_port=None):
    extra = f"""
        listener {{
            host: 127.0.0.1
            port: {ir_port}
            role: inter-router
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """
    if http_port:
        extra += f"""
        listener {{
            host: 127.0.0.1
            port: {http_port}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """
    if connect_to:
        extra += f"""
        connector {{
            name: to-{connect_to[0]}
            host: 127.0.0.1
            port: {connect_to[1]}
            role: inter-router
            cost: {cost}
        }}
        """
    return router_factory(router_id=f"Router.{name}", mode="interior", extra=extra,
                          router_attrs=RA_TIMERS)


def test_console_pages_in_chromium(router_factory, chromium, receiver_client, tmp_path):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        scenario(router_factory, chromium, receiver_client, shots)
    except BaseException:
        # what the page showed when it went wrong: a screenshot, its text and its errors
        try:
            chromium.screenshot(shots / "failure.png", full_page=True)
            print(f"failure screenshot: {shots / 'failure.png'}")
            print("page text:\n" + chromium.js("return document.body.innerText"))
            print("page errors:", chromium.errors())
        except Exception as exc:  # the browser itself may be what failed
            print(f"no failure screenshot: {exc}")
        raise


def scenario(router_factory, chromium, receiver_client, shots):
    http_port, ir_a, ir_b, ir_c = (free_port() for _ in range(4))
    a = interior(router_factory, "A", ir_a, http_port=http_port)
    b = interior(router_factory, "B", ir_b, connect_to=("A", ir_a), cost=1)
    c = interior(router_factory, "C", ir_c, connect_to=("B", ir_b), cost=3)
    wait_ready(receiver_client(b.url, "console/orders"))
    base = f"http://127.0.0.1:{http_port}"

    # the console is the http listener's default root
    with urllib.request.urlopen(base + "/", timeout=10) as answer:
        assert answer.status == 200 and b"qdrouter console" in answer.read()

    # --- connect: the form defaults to the page's own host:port, as a WebSocket URL
    assert chromium.goto(base + "/") == 200
    chromium.wait("[data-testid=connect]")
    address = chromium.js("return document.querySelector('#address').value")
    assert address == f"ws://127.0.0.1:{http_port}/"
    chromium.screenshot(shots / "console-connect.png")
    chromium.click("[data-testid=connect]")
    chromium.wait("[data-testid=stat-routers]")
    assert chromium.texts("[data-testid=status-router]") == ["Router.A"]

    # --- overview: three routers, their connections and the receiver's address
    chromium.wait_js("return document.querySelector('[data-testid=stat-routers] .value')"
                     ".textContent === '3'", timeout=WAIT)
    chromium.wait_js("return [...document.querySelectorAll('[data-testid=addresses-table] td')]"
                     ".some(td => td.textContent === 'console/orders')", timeout=WAIT)
    routers = chromium.texts("[data-testid=routers-table] tbody tr td:first-child")
    assert routers == ["Router.A", "Router.B", "Router.C"]
    # memory as a user means it: resident (memoryResident, VmRSS summed over the router's
    # processes), labelled so; not memoryUsage (1.19's VmSize, several times larger)
    memory = ("const t = document.querySelector('[data-testid=routers-table]');"
              "const i = [...t.querySelectorAll('th')].findIndex(th => th.dataset.key === 'memory');"
              "return i < 0 ? null : {label: t.querySelectorAll('th')[i].textContent,"
              " cells: [...t.querySelectorAll('tbody tr')].map(r => r.children[i].textContent)}")
    chromium.wait_js(f"const m = (() => {{ {memory} }})(); "
                     "return m && m.cells.every(c => /iB$/.test(c))", timeout=WAIT)
    shown = chromium.js(memory)
    assert shown["label"] == "Resident memory", shown
    assert "Memory" not in chromium.texts("[data-testid=routers-table] th")
    chromium.screenshot(shots / "console-overview.png", full_page=True)

    # --- topology: 3 routers, 2 links with their costs, B's client; details on click
    chromium.click("#nav a[data-page=topology]")
    chromium.wait_js("return document.querySelectorAll('[data-testid=topology-graph] g.node')"
                     ".length === 3 && document.querySelectorAll("
                     "'[data-testid=topology-graph] g.edge').length === 2", timeout=WAIT)
    edges = "[...document.querySelectorAll('g.edge')]" \
            ".map(e => e.dataset.edge + '=' + e.querySelector('text.cost').textContent).sort()"
    try:
        chromium.wait_js(f"return JSON.stringify({edges}) === arg",
                         arg='["Router.A|Router.B=1","Router.B|Router.C=3"]', timeout=WAIT)
    except AssertionError:
        raise AssertionError(f"links and costs drawn: {chromium.js('return ' + edges)}") from None
    chromium.wait_js("return document.querySelector('g.node[data-router=\"Router.B\"] .badge text')"
                     "?.textContent === '1'", timeout=WAIT)
    chromium.click('g.node[data-router="Router.B"]')
    chromium.wait("[data-testid=router-details]")
    assert "Router.B" in chromium.texts("[data-testid=router-details] h2")
    chromium.screenshot(shots / "console-topology.png")
    chromium.click('g.edge[data-edge="Router.B|Router.C"]')
    chromium.wait("[data-testid=link-details]")
    assert chromium.texts("[data-testid=link-details] h2") == ["Router.B \u2194 Router.C"]

    # Router.C stops: its link goes at once (B stops reporting it), the router itself when the
    # others' link state forgets it
    assert c.proc.stop() == 0
    chromium.wait_js("return document.querySelectorAll('[data-testid=topology-graph] g.edge')"
                     ".length === 1", timeout=WAIT)
    chromium.wait_js("return document.querySelectorAll('[data-testid=topology-graph] g.node')"
                     ".length === 2 && document.querySelectorAll("
                     "'[data-testid=topology-graph] g.edge').length === 1", timeout=TOPOLOGY_WAIT)
    assert chromium.js("return [...document.querySelectorAll('g.node')].map(n => n.dataset.router)"
                       ".sort()") == ["Router.A", "Router.B"]
    chromium.screenshot(shots / "console-topology-after-stop.png")

    # --- list: A's connections, the console's own (over the WebSocket) among them
    chromium.click("#nav a[data-page=list]")
    chromium.click("[data-type=connection]")
    chromium.wait_js("return [...document.querySelectorAll('[data-testid=entity-table] td')]"
                     ".some(td => td.textContent.startsWith('qdrouter-console-'))", timeout=WAIT)
    roles = chromium.js("const t = document.querySelector('[data-testid=entity-table]');"
                        "const i = [...t.querySelectorAll('th')]"
                        "  .findIndex(th => th.dataset.key === 'role');"
                        "return [...t.querySelectorAll('tbody tr')]"
                        "  .map(r => r.children[i].textContent).sort()")
    assert roles == ["inter-router", "normal"]
    # sortable: a click on a column header orders the rows by it
    chromium.click("[data-testid=entity-table] th[data-key=role]")
    chromium.wait("[data-testid=entity-table] th.sorted[data-key=role]")
    chromium.click("[data-testid=entity-table] tbody tr")
    chromium.wait("[data-testid=entity-details] table.details")
    chromium.screenshot(shots / "console-list.png")

    # --- charts: the rate of A's deliveries in, a series that grows
    chromium.click("#nav a[data-page=charts]")
    chromium.wait("[data-testid=add-chart]:not([disabled])", timeout=WAIT)
    chromium.select("#chart-attribute", "deliveriesIngress")
    chromium.select("#chart-mode", "value")
    chromium.click("[data-testid=add-chart]")
    chromium.wait_js("const s = document.querySelector('[data-testid=chart] svg.chart');"
                     "return s && Number(s.dataset.points) >= 3 && "
                     "s.querySelector('[data-testid=chart-series]')", timeout=WAIT)
    chromium.screenshot(shots / "console-charts.png")

    # --- schema: every entity type, with its attributes
    chromium.click("#nav a[data-page=schema]")
    chromium.wait("[data-testid=schema-type]")
    types = chromium.js("return [...document.querySelectorAll('[data-testid=schema-type]')]"
                        ".map(e => e.dataset.type)")
    assert {"router", "router.node", "connection", "listener", "connector", "router.address",
            "router.link", "sslProfile"} <= set(types)
    chromium.click("[data-testid=schema-type][data-type=listener] summary")
    chromium.wait("[data-testid=schema-type][data-type=listener] table.schema-attrs")
    chromium.screenshot(shots / "console-schema.png")

    assert not [e for e in chromium.errors() if e.startswith("pageerror")]
    print(f"screenshots: {shots}")
    assert a.proc.proc.poll() is None and b.proc.proc.poll() is None


def http_listener(port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            http: yes
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """


def test_console_shows_edge_routers(router_factory, chromium, receiver_client, tmp_path):
    """Edge.1 ==> Router.A (an edge router on its interior), a client on the edge. As 1.19's
    console: the edge is learned from A's connections with role edge and shown on the
    Topology page, linked to A, and in the router lists; a console connected to the edge sees
    the same network through its uplink."""
    http_a, http_e, edge_port = free_port(), free_port(), free_port()
    router_factory(router_id="Router.A", mode="interior", extra=http_listener(http_a) + f"""
        listener {{
            host: 127.0.0.1
            port: {edge_port}
            role: edge
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
        }}
        """)
    e1 = router_factory(router_id="Edge.1", mode="edge", extra=http_listener(http_e) + f"""
        connector {{
            name: uplink
            host: 127.0.0.1
            port: {edge_port}
            role: edge
        }}
        """)
    wait_ready(receiver_client(e1.url, "console/edge"))
    shots = tmp_path / "screenshots"
    shots.mkdir()
    nodes = ("return [...document.querySelectorAll('[data-testid=topology-graph] g.node')]"
             ".map(n => n.dataset.router + (n.classList.contains('edge-router') ? ':edge' : ''))"
             ".sort().join(' ')")
    uplinks = ("return [...document.querySelectorAll('[data-testid=topology-graph] g.uplink')]"
               ".map(e => e.dataset.edge).join(' ')")
    try:
        # clients per router: the receiver on the edge, the console's own connection where it
        # is connected (an uplink is no client of either router)
        for port, own, badges in ((http_a, "Router.A", ["1", "1"]),
                                   (http_e, "Edge.1", ["2", None])):
            assert chromium.goto(f"http://127.0.0.1:{port}/") == 200
            chromium.click("[data-testid=connect]")
            chromium.wait("[data-testid=stat-routers]")
            assert chromium.texts("[data-testid=status-router]") == [own]
            # the router list of the Overview page
            chromium.wait_js("return [...document.querySelectorAll("
                             "'[data-testid=routers-table] tbody tr td:first-child')]"
                             ".map(td => td.textContent).join(' ') === 'Edge.1 Router.A'",
                             timeout=WAIT)
            chromium.click("#nav a[data-page=topology]")
            chromium.wait_js(f"return (() => {{ {nodes} }})() === 'Edge.1:edge Router.A' && "
                             f"(() => {{ {uplinks} }})() === 'Router.A|Edge.1'", timeout=WAIT)
            chromium.wait_js("return JSON.stringify(['Edge.1', 'Router.A'].map(id => document"
                             ".querySelector(`g.node[data-router=\"${id}\"] .badge text`)"
                             "?.textContent ?? null)) === arg", arg=json.dumps(badges, separators=(",", ":")),
                             timeout=WAIT)
            chromium.click('g.node[data-router="Edge.1"]')
            chromium.wait("[data-testid=router-details]")
            details = " ".join(chromium.texts("[data-testid=router-details] p"))
            assert "edge router, attached to Router.A" in details, details
            chromium.screenshot(shots / f"console-edge-from-{own}.png")
            # the List page asks the edge itself (through its edge address)
            chromium.click("#nav a[data-page=list]")
            chromium.select("#list-router", "Edge.1")
            chromium.click("[data-type=connection]")
            chromium.wait_js("return [...document.querySelectorAll('[data-testid=entity-table]"
                             " td')].some(td => td.textContent === 'Router.A')", timeout=WAIT)
    except BaseException:
        chromium.screenshot(shots / "failure.png", full_page=True)
        print(f"failure screenshot: {shots / 'failure.png'}")
        print("page text:\n" + chromium.js("return document.body.innerText"))
        raise
    assert not [e for e in chromium.errors() if e.startswith("pageerror")]
