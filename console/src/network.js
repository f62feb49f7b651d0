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
// Edge routers run no routing protocol, so `router.node` does not name them: as 1.19's console
// does, they are learned from the interior routers' connections with role `edge` (the peer's
// container is the edge router's id) and asked at `amqp:/_edge/<id>/$management`; each is
// drawn linked to the interior router it is attached to (its uplink). A console connected to
// an edge router reads the network from the interior router at the other end of its uplink.
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
    this.edges = [];   // inter-router links
    this.uplinks = []; // edge routers' uplinks: {key, a: interior id, b: edge id, uplink: true}
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
    const known = this.routers.get(routerId);
    return managementAddress(routerId, this.ownId, !!(known && known.edge));
  }

  async start() {
    const [own] = await this.mgmt.query('$management', T.router, []);
    if (!own) throw new Error('the router answered no router entity');
    this.ownId = own.id;
    this.ownMode = own.mode;
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

  /** Where the network's `router.node` table is read: the connected router, or for an edge
   *  router the interior router of its active uplink (null: it has none now). */
  async nodesAddress() {
    if (this.ownMode !== 'edge') return { address: '$management', id: this.ownId };
    const conns = await this.mgmt.query('$management', T.connection, []);
    const up = uplinkOf(conns);
    return up ? { address: managementAddress(up, this.ownId), id: up } : null;
  }

  async doRefresh() {
    if (!this.mgmt.connected) return;
    let nodes;
    let from;
    try {
      from = await this.nodesAddress();
      nodes = from ? await this.mgmt.query(from.address, T.node, []) : [];
      this.error = null;
    } catch (e) {
      this.error = e.message;
      this.emit();
      return;
    }
    const nodeById = new Map(nodes.map((n) => [n.id, n]));
    if (from && !nodeById.has(from.id)) nodeById.set(from.id, { id: from.id, linkState: [], cost: 0, nextHop: '(self)' });
    const ids = [...nodeById.keys()].sort();
    const extra = [...this.extraTypes.keys()].filter((t) => t !== T.node);
    const types = [T.router, T.connection, T.node, ...extra];
    const ask = async (id, edge, asked) => {
      const address = managementAddress(id, this.ownId, edge);
      const answers = await Promise.allSettled([...asked.map((type) => this.mgmt.query(address, type, [])),
        this.mgmt.query(address, T.router, [RESIDENT])]);
      const resident = answers.pop();
      return { id, answers, resident, types: asked };
    };
    const results = await Promise.all(ids.map((id) => ask(id, false, types)));
    // then the edge routers the interior routers have connections from (no router.node there)
    const edgeTypes = [T.router, T.connection, ...extra];
    const attached = edgeRouters(results.map(({ id, answers }) => {
      const i = types.indexOf(T.connection);
      const old = this.routers.get(id);
      const conns = answers[i].status === 'fulfilled' ? answers[i].value : (old ? old.connections : []);
      return { id, connections: conns };
    }));
    if (this.ownMode === 'edge' && !attached.some((e) => e.id === this.ownId)) attached.push({ id: this.ownId, uplink: null });
    const edgeResults = await Promise.all(attached.map(async (e) => ({ ...(await ask(e.id, true, edgeTypes)), uplink: e.uplink })));
    const previous = new Set(this.routers.keys());
    const routers = new Map();
    for (const { id, answers, resident, types, uplink } of [...results, ...edgeResults]) {
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
      const edge = uplink !== undefined;
      routers.set(id, {
        id,
        node: edge ? null : nodeById.get(id),
        router,
        connections: data[T.connection] || [],
        data,
        error,
        own: id === this.ownId,
        edge,
        uplink: edge ? (uplink || uplinkOf(data[T.connection] || [])) : null,
      });
    }
    const now = new Date();
    for (const id of routers.keys()) if (!previous.has(id) && previous.size) this.history.unshift({ time: now, text: `${id} joined` });
    for (const id of previous) if (!routers.has(id)) this.history.unshift({ time: now, text: `${id} left` });
    this.history.length = Math.min(this.history.length, 50);
    this.routers = routers;
    this.edges = computeEdges(routers);
    this.uplinks = computeUplinks(routers);
    this.lastUpdate = now;
    this.emit();
  }

  /** Normal (client) connections of a router: not inter-router, not edge uplinks. */
  static clients(router) {
    return router.connections.filter((c) => c.role !== 'inter-router' && c.role !== 'inter-router-data' && c.role !== 'edge');
  }

  totals() {
    let connections = 0;
    let clients = 0;
    let edgeRouters = 0;
    for (const r of this.routers.values()) {
      connections += r.connections.length;
      clients += Network.clients(r).length;
      if (r.edge) edgeRouters += 1;
    }
    return { routers: this.routers.size, edges: this.edges.length, edgeRouters, connections, clients };
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

/** The edge routers attached to the interior ``routers`` ([{id, connections}]): the containers
 *  of their connections with role `edge` accepted from a peer, each once, with the interior
 *  router it is attached to (its active connection first). */
export function edgeRouters(routers) {
  const found = new Map();
  for (const r of routers) {
    for (const c of r.connections || []) {
      if (c.role !== 'edge' || c.dir !== 'in' || !c.container) continue;
      const seen = found.get(c.container);
      if (!seen || (seen.standby && c.active !== false)) found.set(c.container, { id: c.container, uplink: r.id, standby: c.active === false });
    }
  }
  return [...found.values()].map(({ id, uplink }) => ({ id, uplink })).sort((a, b) => a.id.localeCompare(b.id));
}

/** The interior router an edge router's connections lead to: its active `edge` connector's
 *  peer (null: no uplink). */
export function uplinkOf(connections) {
  const ups = (connections || []).filter((c) => c.role === 'edge' && c.dir === 'out' && c.container);
  const active = ups.find((c) => c.active !== false) || null;
  return active ? active.container : null;
}

/** One link per edge router, to the interior router it is attached to (both known). */
export function computeUplinks(routers) {
  const out = [];
  for (const r of routers.values()) {
    if (!r.edge || !r.uplink || !routers.has(r.uplink)) continue;
    out.push({ key: `${r.uplink}|${r.id}`, a: r.uplink, b: r.id, uplink: true, cost: null });
  }
  return out.sort((x, y) => x.key.localeCompare(y.key));
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
