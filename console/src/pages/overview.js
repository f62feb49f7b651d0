// Overview: the network in numbers, then its routers, addresses and connections in tables.
import { formatBytes, formatDuration, formatNumber, h, replace, sortableTable } from '../dom.js';
import { Network, T } from '../network.js';

const CLASS_NAMES = { M: 'mobile', L: 'local', R: 'router', T: 'topological', C: 'link-route in', D: 'link-route out', E: 'edge', H: 'edge', A: 'area' };

/** The router's own addresses (management, routing protocol, router/topological/area keys):
 * the rule of the metrics pipelines, `agent.metrics.INTERNAL_KEY` (a test checks they match). */
export const INTERNAL_KEY = /^([RTA]|(L|M[0-9])(\$management|\$_management|\$qd|_\$qd\.|qdrouter|qdhello|_topo\/|_local\/))/;

export function isInternalKey(key) {
  return INTERNAL_KEY.test(String(key || ''));
}

/** A router.address key (`M0orders`, `Lqdrouter.ma`, `RRouter.B`) as class and address. */
export function splitKey(key) {
  const k = String(key || '');
  const cls = k[0];
  if (cls === 'M') return { cls: CLASS_NAMES.M, addr: k.slice(2), phase: k[1] };
  return { cls: CLASS_NAMES[cls] || cls, addr: k.slice(1), phase: '' };
}

export function overviewPage(app) {
  const net = app.network;
  const state = { routers: { sortKey: 'id' }, addresses: { sortKey: 'addr' }, connections: { sortKey: 'router' }, internal: false };
  let el;
  let off;
  let unwant;

  function card(label, value, sub, testid) {
    return h('div', { class: 'stat', 'data-testid': testid }, h('div', { class: 'value' }, value), h('div', { class: 'label' }, label), sub ? h('div', { class: 'sub' }, sub) : null);
  }

  function addressRows() {
    const byKey = new Map();
    for (const row of net.rowsOf(T.address)) {
      const { cls, addr, phase } = splitKey(row.key);
      if (!state.internal && isInternalKey(row.key)) continue;
      const key = row.key;
      let agg = byKey.get(key);
      if (!agg) {
        agg = { key, addr, cls, phase, distribution: row.distribution, routers: [], local: 0, in: 0, out: 0, transit: 0 };
        byKey.set(key, agg);
      }
      agg.routers.push(row.router);
      agg.local += row.subscriberCount || 0;
      agg.in += row.deliveriesIngress || 0;
      agg.out += row.deliveriesEgress || 0;
      agg.transit += row.deliveriesTransit || 0;
    }
    return [...byKey.values()];
  }

  function render() {
    const t = net.totals();
    const routers = [...net.routers.values()].map((r) => ({
      id: r.id,
      mode: r.router.mode,
      version: r.router.version,
      connections: r.connections.length,
      clients: Network.clients(r).length,
      addresses: r.router.addrCount,
      links: r.router.linkCount,
      cost: r.node ? r.node.cost : null,
      uptime: r.router.uptimeSeconds,
      memory: r.router.memoryResident,
      ingress: r.router.deliveriesIngress,
      egress: r.router.deliveriesEgress,
      transit: r.router.deliveriesTransit,
      state: r.error ? 'unreachable' : 'ok',
      error: r.error,
    }));
    const addresses = addressRows();
    const mobile = new Set(net.rowsOf(T.address).filter((a) => splitKey(a.key).cls === 'mobile').map((a) => a.key));
    const connections = [];
    for (const r of net.routers.values()) {
      for (const c of r.connections) {
        connections.push({
          router: r.id, identity: c.identity, host: c.host, container: c.container, role: c.role, dir: c.dir,
          security: c.isEncrypted ? (c.sslProto || 'TLS') : 'plain', auth: c.isAuthenticated ? `${c.sasl || ''} ${c.user || ''}`.trim() : (c.sasl || 'none'),
          uptime: c.uptimeSeconds,
        });
      }
    }
    const deliveries = routers.reduce((sum, r) => sum + (r.ingress || 0), 0);
    replace(el,
      h('div', { class: 'page-head' }, h('h1', {}, 'Overview'),
        h('p', { class: 'muted' }, `Seen from ${net.ownId}`, net.lastUpdate ? ` \u00b7 updated ${net.lastUpdate.toLocaleTimeString()}` : '')),
      net.error ? h('p', { class: 'banner warn' }, `The last refresh failed: ${net.error}`) : null,
      h('div', { class: 'stats' },
        card('Routers', String(t.routers), `${t.edges} inter-router link${t.edges === 1 ? '' : 's'}`, 'stat-routers'),
        card('Connections', String(t.connections), `${t.clients} client${t.clients === 1 ? '' : 's'}`, 'stat-connections'),
        card('Addresses', String(mobile.size), 'mobile addresses', 'stat-addresses'),
        card('Deliveries in', formatNumber(deliveries), 'accepted from clients, all routers', 'stat-deliveries')),
      h('section', {}, h('h2', {}, 'Routers'),
        sortableTable({
          testid: 'routers-table',
          columns: [
            { key: 'id', label: 'Router' }, { key: 'mode', label: 'Mode' }, { key: 'version', label: 'Version' },
            { key: 'cost', label: 'Cost', numeric: true, title: `Cost of the path from ${net.ownId}` },
            { key: 'connections', label: 'Connections', numeric: true }, { key: 'clients', label: 'Clients', numeric: true },
            { key: 'addresses', label: 'Addresses', numeric: true }, { key: 'links', label: 'Links', numeric: true },
            { key: 'ingress', label: 'In', numeric: true, title: 'Deliveries in from clients' },
            { key: 'egress', label: 'Out', numeric: true, title: 'Deliveries out to clients' },
            { key: 'transit', label: 'Transit', numeric: true },
            routers.some((r) => typeof r.memory === 'number') ? {
              key: 'memory', label: 'Resident memory', numeric: true, format: (v) => formatBytes(v),
              title: 'Resident memory (RSS) summed over the router\u2019s processes (memoryResident; memoryUsage is their virtual size)',
            } : null,
            { key: 'uptime', label: 'Up', numeric: true, format: (v) => formatDuration(v) },
            { key: 'state', label: 'State', format: (v, row) => (row.error ? h('span', { class: 'pill bad', title: row.error }, 'unreachable') : h('span', { class: 'pill good' }, 'ok')) },
          ].filter(Boolean),
          rows: routers,
          state: state.routers,
          onChange: render,
          rowKey: (r) => r.id,
        })),
      h('section', {}, h('div', { class: 'section-head' }, h('h2', {}, 'Addresses'),
        h('label', { class: 'toggle' }, h('input', { type: 'checkbox', checked: state.internal, onchange: (ev) => { state.internal = ev.target.checked; render(); } }), ' show router-internal addresses')),
      sortableTable({
        testid: 'addresses-table',
        columns: [
          { key: 'addr', label: 'Address' }, { key: 'cls', label: 'Class' }, { key: 'phase', label: 'Phase' },
          { key: 'distribution', label: 'Distribution' },
          { key: 'routers', label: 'Routers', format: (v) => v.join(', ') },
          { key: 'local', label: 'Consumers', numeric: true, title: 'Local consumers summed over the routers' },
          { key: 'in', label: 'In', numeric: true }, { key: 'out', label: 'Out', numeric: true }, { key: 'transit', label: 'Transit', numeric: true },
        ],
        rows: addresses,
        state: state.addresses,
        onChange: render,
        empty: 'No addresses yet: an address appears when a client attaches to it.',
      })),
      h('section', {}, h('h2', {}, 'Connections'),
        sortableTable({
          testid: 'connections-table',
          columns: [
            { key: 'router', label: 'Router' }, { key: 'host', label: 'Peer' }, { key: 'container', label: 'Container' },
            { key: 'role', label: 'Role' }, { key: 'dir', label: 'Dir' }, { key: 'security', label: 'Security' },
            { key: 'auth', label: 'Authentication' }, { key: 'uptime', label: 'Up', numeric: true, format: (v) => formatDuration(v) },
          ],
          rows: connections,
          state: state.connections,
          onChange: render,
        })),
      net.history.length ? h('section', {}, h('h2', {}, 'Recent changes'),
        h('ul', { class: 'history' }, net.history.slice(0, 10).map((e) => h('li', {}, h('time', {}, e.time.toLocaleTimeString()), ' ', e.text)))) : null);
  }

  return {
    mount(target) {
      el = h('div', { class: 'page overview' });
      target.append(el);
      unwant = net.want(T.address);
      off = net.on(render);
      render();
      net.refresh();
    },
    unmount() {
      off && off();
      unwant && unwant();
    },
  };
}
