// Topology: the routers as a graph (links with their cost, edge routers on their interior
// router, clients per router); click a router or a link for its details. Redrawn on every
// refresh, so joins and leaves show within seconds.
import { detailsTable, formatBytes, formatDuration, formatValue, h, replace, sortableTable } from '../dom.js';
import { Layout, drawTopology } from '../graph.js';
import { Network } from '../network.js';

const ROUTER_FIELDS = ['id', 'mode', 'version', 'uptimeSeconds', 'memoryResident', 'memoryUsage', 'connectionCount', 'addrCount', 'linkCount', 'nodeCount',
  'deliveriesIngress', 'deliveriesEgress', 'deliveriesTransit', 'acceptedDeliveries', 'releasedDeliveries', 'rejectedDeliveries', 'modifiedDeliveries'];

function costText(e) {
  if (e.cost === null || e.cost === undefined) return 'Cost unknown: neither end answered.';
  if (e.exact) return `Cost ${e.cost}: the larger of the two ends\u2019 configured costs.`;
  return `Cost ${e.cost}: the least path cost between the two routers (they do not report their configured link costs).`;
}

export function topologyPage(app) {
  const net = app.network;
  const layout = app.topologyLayout || (app.topologyLayout = new Layout());
  let selected = null; // 'router:<id>' | 'edge:<key>'
  let el;
  let graphEl;
  let sideEl;
  let summaryEl;
  let off;
  const connState = { sortKey: 'role' };

  function model() {
    const routers = [...net.routers.values()].map((r) => ({ id: r.id, own: r.own, edge: r.edge, clients: Network.clients(r).length, error: r.error }));
    return { routers, edges: [...net.edges, ...net.uplinks] };
  }

  function select(kind, id) {
    selected = kind ? `${kind}:${id}` : null;
    render();
  }

  function routerDetails(r) {
    const fields = {};
    for (const f of ROUTER_FIELDS) if (r.router[f] !== undefined && r.router[f] !== null) fields[f] = r.router[f];
    const node = r.node || {};
    let path;
    if (r.edge) path = `edge router${r.uplink ? `, attached to ${r.uplink}` : ', no uplink now'}${r.own ? '; the router the console is connected to' : ''}`;
    else if (r.own) path = 'this is the router the console is connected to';
    else if (node.cost === null || node.cost === undefined) path = `no path from ${net.ownId} (it has left, or is leaving, the network)`;
    else path = `cost ${formatValue(node.cost)} from ${net.ownId}${node.nextHop ? `, via ${node.nextHop}` : ', a neighbour'}`;
    return h('div', { class: 'panel', 'data-testid': 'router-details' },
      h('h2', {}, r.id),
      h('p', { class: 'muted' }, path),
      r.error ? h('p', { class: 'banner warn' }, r.error, '; what it reported last is shown.') : null,
      detailsTable(fields, { order: ROUTER_FIELDS }),
      h('h3', {}, r.edge ? 'Uplink to' : 'Links to'),
      h('p', {}, (r.edge ? [r.uplink].filter(Boolean) : (node.linkState || [])).join(', ') || 'none'),
      r.edge ? null : edgesOf(r.id),
      h('h3', {}, `Connections (${r.connections.length})`),
      h('div', { class: 'table-wrap' }, sortableTable({
        columns: [{ key: 'role', label: 'Role' }, { key: 'container', label: 'Peer' }, { key: 'dir', label: 'Dir' },
          { key: 'uptimeSeconds', label: 'Up', numeric: true, format: (v) => formatDuration(v) }],
        rows: r.connections.map((c) => ({ ...c, container: c.container || c.host })),
        state: connState,
        onChange: render,
      })));
  }

  function endInfo(router, conn, peer) {
    if (!conn) return h('p', { class: 'muted' }, `${router}: no connection to ${peer} reported`);
    return h('div', {},
      h('h3', {}, `${router} \u2192 ${peer}`),
      detailsTable({
        direction: conn.dir === 'out' ? `opened by ${router} (connector)` : `accepted by ${router} (listener)`,
        peer: conn.host,
        'peer\u2019s cost': conn.role === 'edge' ? undefined : (conn.properties || {})['qd.inter-router-cost'],
        encrypted: conn.isEncrypted,
        authenticated: conn.isAuthenticated,
        uptimeSeconds: conn.uptimeSeconds,
      }));
  }

  function edgesOf(id) {
    const attached = net.uplinks.filter((u) => u.a === id).map((u) => u.b);
    return attached.length ? [h('h3', {}, 'Edge routers'), h('p', { 'data-testid': 'edge-routers' }, attached.join(', '))] : null;
  }

  function uplinkConn(router, peer) {
    const r = net.routers.get(router);
    return r ? r.connections.find((c) => c.role === 'edge' && c.container === peer) : null;
  }

  function edgeDetails(e) {
    if (e.uplink) {
      return h('div', { class: 'panel', 'data-testid': 'link-details' },
        h('h2', {}, `${e.a} ↔ ${e.b}`),
        h('p', { class: 'muted' }, `Edge uplink: ${e.b} is an edge router attached to ${e.a}.`),
        endInfo(e.b, uplinkConn(e.b, e.a), e.a),
        endInfo(e.a, uplinkConn(e.a, e.b), e.b));
    }
    return h('div', { class: 'panel', 'data-testid': 'link-details' },
      h('h2', {}, `${e.a} \u2194 ${e.b}`),
      h('p', { class: 'muted' }, costText(e)),
      endInfo(e.a, e.connA, e.b),
      endInfo(e.b, e.connB, e.a));
  }

  function memoryLine() {
    const known = [...net.routers.values()].map((r) => r.router.memoryResident).filter((m) => typeof m === 'number');
    if (!known.length) return null;
    return h('p', { class: 'muted small', 'data-testid': 'memory-line' }, `Resident memory across the network: ${formatBytes(known.reduce((a, b) => a + b, 0))}`);
  }

  function summary() {
    const t = net.totals();
    return [
      h('span', { 'data-testid': 'topology-summary' }, `${t.routers} router${t.routers === 1 ? '' : 's'}${t.edgeRouters ? ` (${t.edgeRouters} edge)` : ''}, ${t.edges} link${t.edges === 1 ? '' : 's'}, ${t.clients} client${t.clients === 1 ? '' : 's'}`),
      net.lastUpdate ? h('span', { class: 'muted' }, ` \u00b7 updated ${net.lastUpdate.toLocaleTimeString()}`) : null,
    ];
  }

  function render() {
    const m = model();
    layout.update(m.routers.map((r) => r.id), m.edges);
    if (selected && selected.startsWith('router:') && !net.routers.has(selected.slice(7))) selected = null;
    if (selected && selected.startsWith('edge:') && !m.edges.some((e) => `edge:${e.key}` === selected)) selected = null;
    replace(summaryEl, summary());
    if (!layout.dragging) replace(graphEl, drawTopology(layout, m, { selected, onSelect: select, onMoved: render }));
    let side;
    if (selected && selected.startsWith('router:')) side = routerDetails(net.routers.get(selected.slice(7)));
    else if (selected && selected.startsWith('edge:')) side = edgeDetails(m.edges.find((e) => `edge:${e.key}` === selected));
    else {
      side = h('div', { class: 'panel hint-panel' },
        h('h2', {}, 'Network'),
        h('p', { class: 'muted' }, 'Click a router or a link for its details. Drag a router to move it.'),
        h('ul', { class: 'legend' },
          h('li', {}, h('span', { class: 'swatch own' }), 'the router the console is connected to'),
          h('li', {}, h('span', { class: 'swatch router' }), 'another router of the network'),
          h('li', {}, h('span', { class: 'swatch edge-router' }), 'an edge router, linked to its interior router'),
          h('li', {}, h('span', { class: 'swatch unreachable' }), 'a router whose agent does not answer'),
          h('li', {}, h('span', { class: 'swatch client' }), 'a client connection (number in the badge)'),
          h('li', {}, h('span', { class: 'swatch cost' }, '1'), 'cost of an inter-router link')),
        net.history.length ? h('div', {}, h('h3', {}, 'Recent changes'),
          h('ul', { class: 'history' }, net.history.slice(0, 8).map((e) => h('li', {}, h('time', {}, e.time.toLocaleTimeString()), ' ', e.text)))) : null,
        memoryLine());
    }
    replace(sideEl, side);
  }

  return {
    mount(target) {
      summaryEl = h('p', { class: 'muted' });
      graphEl = h('div', { class: 'graph-wrap' });
      sideEl = h('aside', { class: 'side' });
      el = h('div', { class: 'page topology' },
        h('div', { class: 'page-head' }, h('h1', {}, 'Topology'), summaryEl),
        h('div', { class: 'split' }, graphEl, sideEl));
      target.append(el);
      off = net.on(render);
      render();
    },
    unmount() {
      off && off();
    },
  };
}
