// The router network as the management agents describe it, refreshed by polling.
//
// The connected router's `router.node` table names every router of the network and, per router,
// the routers it has links to (`linkState`). Each router is then asked for its own `router` and
// `connection` entities (plus any type a page asks for) at `amqp:/_topo/0/<id>/$management`.
// An edge's cost is the inter-router link's cost: the larger of the two ends' configured costs,
// which each end learns from the other's Open (`qd.inter-router-cost` in the connection's
// `properties`), as the routers themselves compute it. A router that does not report those
// properties leaves the least path cost between the two ends (each router's `router.node` row
// of the other), which is the link's cost whenever the link lies on a shortest path.
import { managementAddress } from './mgmt.js';

export const T = {
  router: 'org.apache.qpid.dispatch.router',
  node: 'org.apache.qpid.dispatch.router.node',
  connection: 'org.apache.qpid.dispatch.connection',
  address: 'org.apache.qpid.dispatch.router.address',
  link: 'org.apache.qpid.dispatch.router.link',
};

export const POLL_MS = 2000;

/** Asked of every router beside its `router` row: qdrouter-py's resident memory (VmRSS summed
 * over the router's processes). 1.19 answers null for a name it does not know. */
export const RESIDENT = 'memoryResident';

/** The `router` row with `memoryResident` from the answer to its own query (a settled
 * promise); when that query failed, the last known value. */
export function withResident(router, answer, old) {
  let value;
  if (answer && answer.status === 'fulfilled') value = answer.value[0] ? answer.value[0][RESIDENT] : undefined;
  else value = old ? old[RESIDENT] : undefined;
  return typeof value === 'number' ? { ...router, [RESIDENT]: value } : router;
}

export class Network {
  constructor(mgmt) {
    this.mgmt = mgmt;
    this.ownId = null;
    this.routers = new Map(); // id -> {id, node, router, connections, data: {type: rows}, error}
    this.edges = [];
    this.extraTypes = new Map(); // type -> how many pages want it
    this.listeners = new Set();
    this.timer = null;
    this.running = false;
    this.lastUpdate = null;
    this.error = null;
    this.schema = null;
    this.history = []; // {time, text}: routers that joined or left
  }

  on(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit() {
    for (const fn of this.listeners) {
      try { fn(this); } catch (e) { console.error(e); } // one page's failure must not stop the others
    }
  }

  /** Pages ask for more per-router entity types while they are shown. */
  want(type) {
    this.extraTypes.set(type, (this.extraTypes.get(type) || 0) + 1);
    return () => {
      const n = (this.extraTypes.get(type) || 1) - 1;
      if (n) this.extraTypes.set(type, n); else this.extraTypes.delete(type);
    };
  }

  address(routerId) {
    return managementAddress(routerId, this.ownId);
  }

  async start() {
    const [own] = await this.mgmt.query('$management', T.router, []);
    if (!own) throw new Error('the router answered no router entity');
    this.ownId = own.id;
    this.schema = await this.mgmt.request('$management', 'GET-SCHEMA', {}, {});
    this.running = true;
    await this.refresh();
    this.schedule();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }

  schedule() {
    clearTimeout(this.timer);
    if (!this.running) return;
    this.timer = setTimeout(async () => {
      await this.refresh();
      this.schedule();
    }, POLL_MS);
  }

  /** Refresh now (e.g. when a page asks for a new type), at most one refresh at a time. */
  async refresh() {
    if (this.refreshing) return this.refreshing;
    this.refreshing = this.doRefresh().finally(() => { this.refreshing = null; });
    return this.refreshing;
  }

  async doRefresh() {
    if (!this.mgmt.connected) return;
    let nodes;
    try {
      nodes = await this.mgmt.query('$management', T.node, []);
      this.error = null;
    } catch (e) {
      this.error = e.message;
      this.emit();
      return;
    }
    const nodeById = new Map(nodes.map((n) => [n.id, n]));
    if (!nodeById.has(this.ownId)) nodeById.set(this.ownId, { id: this.ownId, linkState: [], cost: 0, nextHop: '(self)' });
    const ids = [...nodeById.keys()].sort();
    const types = [T.router, T.connection, T.node, ...[...this.extraTypes.keys()].filter((t) => t !== T.node)];
    const results = await Promise.all(ids.map(async (id) => {
      const address = this.address(id);
      const answers = await Promise.allSettled([...types.map((type) => this.mgmt.query(address, type, [])),
        this.mgmt.query(address, T.router, [RESIDENT])]);
      const resident = answers.pop();
      return { id, answers, resident };
    }));
    const previous = new Set(this.routers.keys());
    const routers = new Map();
    for (const { id, answers, resident } of results) {
      const old = this.routers.get(id);
      const data = {};
      let error = null;
      answers.forEach((answer, i) => {
        if (answer.status === 'fulfilled') data[types[i]] = answer.value;
        else {
          error = answer.reason.message;
          if (old && old.data[types[i]]) data[types[i]] = old.data[types[i]]; // keep the last known
        }
      });
      const router = withResident((data[T.router] || [])[0] || (old && old.router) || { id }, resident, old && old.router);
      routers.set(id, {
        id,
        node: nodeById.get(id),
        router,
        connections: data[T.connection] || [],
        data,
        error,
        own: id === this.ownId,
      });
    }
    const now = new Date();
    for (const id of routers.keys()) if (!previous.has(id) && previous.size) this.history.unshift({ time: now, text: `${id} joined` });
    for (const id of previous) if (!routers.has(id)) this.history.unshift({ time: now, text: `${id} left` });
    this.history.length = Math.min(this.history.length, 50);
    this.routers = routers;
    this.edges = computeEdges(routers);
    this.lastUpdate = now;
    this.emit();
  }

  /** Normal (client) connections of a router: not inter-router, not edge uplinks. */
  static clients(router) {
    return router.connections.filter((c) => c.role !== 'inter-router' && c.role !== 'inter-router-data');
  }

  totals() {
    let connections = 0;
    let clients = 0;
    for (const r of this.routers.values()) {
      connections += r.connections.length;
      clients += Network.clients(r).length;
    }
    return { routers: this.routers.size, edges: this.edges.length, connections, clients };
  }

  /** Every router's rows of ``type`` with a `router` column naming the router. */
  rowsOf(type) {
    const rows = [];
    for (const r of this.routers.values()) {
      for (const row of r.data[type] || []) rows.push({ router: r.id, ...row });
    }
    return rows;
  }
}

/** The least path cost from ``router`` to ``peerId`` in ``router``'s own router.node table. */
function pathCost(router, peerId) {
  const row = (router.data[T.node] || []).find((n) => n.id === peerId);
  return row ? row.cost : null;
}

function peerCost(router, peerId) {
  const conn = router.connections.find((c) => c.role === 'inter-router' && c.container === peerId);
  if (!conn) return { conn: null, cost: null };
  const props = conn.properties || {};
  const cost = props['qd.inter-router-cost'];
  return { conn, cost: typeof cost === 'number' ? cost : null };
}

/** Undirected links between known routers that both ends report, each with its cost and both
 *  ends' connections. */
export function computeEdges(routers) {
  const edges = new Map();
  for (const r of routers.values()) {
    for (const peer of (r.node && r.node.linkState) || []) {
      if (!routers.has(peer) || peer === r.id) continue;
      // a link both ends report: a router that stopped keeps its last link state for a while
      // (until it ages out), but its neighbours drop the link at once
      const back = routers.get(peer).node;
      if (!back || !(back.linkState || []).includes(r.id)) continue;
      const [a, b] = [r.id, peer].sort();
      const key = `${a}|${b}`;
      if (edges.has(key)) continue;
      const ra = routers.get(a);
      const rb = routers.get(b);
      // a's connection to b carries b's configured cost, and the other way round
      const fromA = peerCost(ra, b);
      const fromB = peerCost(rb, a);
      const known = [fromA.cost, fromB.cost].filter((c) => c !== null);
      let cost = known.length ? Math.max(...known) : null;
      let exact = cost !== null;
      if (cost === null) {
        const paths = [pathCost(ra, b), pathCost(rb, a)].filter((c) => typeof c === 'number');
        if (paths.length) cost = Math.min(...paths);
      }
      edges.set(key, { key, a, b, cost, exact, connA: fromA.conn, connB: fromB.conn });
    }
  }
  return [...edges.values()];
}
