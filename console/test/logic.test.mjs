// The console's logic without a browser: addresses, URLs, edges and costs, layout, schema types.
//   npm test     (tests/browser/test_console_logic.py runs it under pytest)
import test from 'node:test';
import assert from 'node:assert/strict';
import { managementAddress, normaliseUrl } from '../src/mgmt.js';
import { Network, T, computeEdges, computeUplinks, edgeRouters, uplinkOf, withResident } from '../src/network.js';
import { formatValue } from '../src/dom.js';
import { Layout } from '../src/graph.js';
import { isInternalKey, splitKey } from '../src/pages/overview.js';
import { isCounter, schemaTypes } from '../src/pages/list.js';

test('management addresses: own agent, other routers through _topo', () => {
  assert.equal(managementAddress('Router.A', 'Router.A'), '$management');
  assert.equal(managementAddress('Router.B', 'Router.A'), 'amqp:/_topo/0/Router.B/$management');
  assert.equal(managementAddress(null, 'Router.A'), '$management');
  assert.equal(managementAddress('Edge.1', 'Router.A', true), 'amqp:/_edge/Edge.1/$management');
  assert.equal(managementAddress('Edge.1', 'Edge.1', true), '$management');
});

test('edge routers: learned from the interior routers\' accepted edge connections', () => {
  const edgeConn = (container, extra = {}) => ({ role: 'edge', dir: 'in', container, ...extra });
  const found = edgeRouters([
    { id: 'I1', connections: [edgeConn('E2'), { role: 'normal', dir: 'in', container: 'c' }, edgeConn('E1', { active: false })] },
    { id: 'I2', connections: [edgeConn('E1', { active: true }), { role: 'edge', dir: 'out', container: 'X' }] },
  ]);
  // E1 stands by on I1 and is active on I2: attached to I2
  assert.deepEqual(found, [{ id: 'E1', uplink: 'I2' }, { id: 'E2', uplink: 'I1' }]);
  assert.equal(uplinkOf([{ role: 'edge', dir: 'out', container: 'I1', active: false },
    { role: 'edge', dir: 'out', container: 'I2', active: true }]), 'I2');
  assert.equal(uplinkOf([{ role: 'normal', dir: 'in', container: 'c' }]), null);
  const routers = new Map([
    router('I1', []),
    ['E1', { id: 'E1', edge: true, uplink: 'I1', connections: [edgeConn('x')], data: {} }],
    ['E9', { id: 'E9', edge: true, uplink: 'Gone', connections: [], data: {} }],
  ]);
  assert.deepEqual(computeUplinks(routers).map((u) => [u.key, u.a, u.b, u.uplink]), [['I1|E1', 'I1', 'E1', true]]);
  // an uplink is not a client connection
  assert.equal(Network.clients(routers.get('E1')).length, 0);
});

test('router addresses typed by a person become WebSocket URLs', () => {
  assert.equal(normaliseUrl('127.0.0.1:8672'), 'ws://127.0.0.1:8672/');
  assert.equal(normaliseUrl(' ws://h:1/x '), 'ws://h:1/x');
  assert.equal(normaliseUrl('wss://h:1/'), 'wss://h:1/');
  assert.equal(normaliseUrl('http://h:1/'), 'ws://h:1/');
  assert.equal(normaliseUrl('https://h:1/'), 'wss://h:1/');
  assert.throws(() => normaliseUrl('amqp://h:5672'), /WebSockets/);
  assert.throws(() => normaliseUrl('   '), /enter the router address/);
});

function router(id, linkState, { conns = [], nodes = [], own = false } = {}) {
  return [id, {
    id, own, node: { id, linkState }, router: { id }, connections: conns,
    data: { [T.node]: nodes, [T.connection]: conns },
  }];
}

function irConn(peer, peerCost) {
  return { role: 'inter-router', container: peer, properties: peerCost === undefined ? {} : { 'qd.inter-router-cost': peerCost } };
}

test('edges: one per linked pair, cost the larger configured cost of the two ends', () => {
  const routers = new Map([
    router('A', ['B'], { own: true, conns: [irConn('B', 1)] }),
    router('B', ['A', 'C', 'Gone'], { conns: [irConn('A', 5), irConn('C', 3)] }),
    router('C', ['B'], { conns: [irConn('B', 2)] }),
  ]);
  const edges = computeEdges(routers);
  assert.deepEqual(edges.map((e) => [e.key, e.cost, e.exact]), [['A|B', 5, true], ['B|C', 3, true]]);
  assert.equal(edges[0].connA.container, 'B');
  assert.equal(edges[0].connB.container, 'A');
});

test('edges: without connection properties the least path cost between the ends', () => {
  const routers = new Map([
    router('A', ['B'], { own: true, conns: [irConn('B')], nodes: [{ id: 'A', cost: 0 }, { id: 'B', cost: 4 }] }),
    router('B', ['A'], { conns: [irConn('A')], nodes: [{ id: 'A', cost: 4 }] }),
    router('C', [], {}),
  ]);
  const edges = computeEdges(routers);
  assert.deepEqual(edges.map((e) => [e.key, e.cost, e.exact]), [['A|B', 4, false]]);
});

test('edges: unknown cost when neither end answered', () => {
  const edges = computeEdges(new Map([router('A', ['B']), router('B', ['A'])]));
  assert.deepEqual(edges.map((e) => [e.key, e.cost]), [['A|B', null]]);
});

test('edges: a link only one end still reports (a stopped router\'s stale state) is not drawn', () => {
  const edges = computeEdges(new Map([router('A', ['B']), router('B', ['A']), router('C', ['B'])]));
  assert.deepEqual(edges.map((e) => e.key), ['A|B']);
});

test('layout: routers inside the drawing, apart, kept where they were', () => {
  const layout = new Layout();
  const ids = ['A', 'B', 'C', 'D', 'E'];
  const edges = [['A', 'B'], ['B', 'C'], ['C', 'D'], ['D', 'E'], ['E', 'A']].map(([a, b]) => ({ key: `${a}|${b}`, a, b }));
  layout.update(ids, edges);
  const pos = ids.map((id) => layout.pos.get(id));
  for (const p of pos) {
    assert.ok(p.x >= 0 && p.x <= 900 && p.y >= 0 && p.y <= 560, JSON.stringify(p));
  }
  for (let i = 0; i < pos.length; i++) {
    for (let j = i + 1; j < pos.length; j++) {
      assert.ok(Math.hypot(pos[i].x - pos[j].x, pos[i].y - pos[j].y) > 60, `${ids[i]} and ${ids[j]} overlap`);
    }
  }
  const before = JSON.stringify([...layout.pos]);
  layout.update(ids, edges);
  assert.equal(JSON.stringify([...layout.pos]), before);
  layout.update(['A', 'B'], edges.slice(0, 1));
  assert.deepEqual([...layout.pos.keys()].sort(), ['A', 'B']);
});

test('address keys: class and address', () => {
  assert.deepEqual(splitKey('M0orders'), { cls: 'mobile', addr: 'orders', phase: '0' });
  assert.deepEqual(splitKey('RRouter.B'), { cls: 'router', addr: 'Router.B', phase: '' });
  assert.deepEqual(splitKey('Lqdrouter'), { cls: 'local', addr: 'qdrouter', phase: '' });
});

test('schema: concrete types only, counters known by their description', () => {
  const schema = { entityTypes: {
    entity: { attributes: {} },
    operationalEntity: { attributes: {} },
    'router.link': { fullyQualifiedType: 'org.apache.qpid.dispatch.router.link', attributes: { deliveryCount: { type: 'integer', description: 'Counter: deliveryCount.' }, capacity: { type: 'integer', description: 'Credit capacity' } } },
    connection: { attributes: {} },
  } };
  const types = schemaTypes(schema);
  assert.deepEqual(types.map((t) => t.long), ['org.apache.qpid.dispatch.connection', 'org.apache.qpid.dispatch.router.link']);
  const link = types[1].spec;
  assert.equal(isCounter(link, 'deliveryCount'), true);
  assert.equal(isCounter(link, 'capacity'), false);
});

test('resident memory: from its own query, kept when that query fails, none from a 1.19 router', () => {
  const row = { id: 'A', memoryUsage: 876000000 };
  const ok = (v) => ({ status: 'fulfilled', value: [{ memoryResident: v }] });
  assert.equal(withResident(row, ok(61000000), null).memoryResident, 61000000);
  assert.equal(withResident(row, ok(61000000), null).memoryUsage, 876000000);   // VmSize stays
  assert.equal(withResident(row, { status: 'rejected', reason: new Error('timeout') }, { memoryResident: 5 }).memoryResident, 5);
  assert.equal('memoryResident' in withResident(row, ok(null), { memoryResident: 5 }), false);  // 1.19: null
  assert.equal(formatValue(61000000, 'memoryResident'), '58.2 MiB');
});

test('internal addresses: the router\'s own by key, a client\'s dynamic address is not', () => {
  const internal = ['L$management', 'L$_management_internal', 'M0$management', 'L_$qd.x', 'Lqdrouter', 'Lqdrouter.ma',
    'Lqdhello', 'Tqdrouter', 'M0qdrouter.ma', 'M0_topo/0/A/b', 'RRouter.B', 'T0/all', 'AArea2'];
  const users = ['M0orders', 'M0management', 'Ltemp.x', 'M1orders', 'L_local_user', 'Cprefix'];
  assert.deepEqual(internal.filter(isInternalKey), internal);
  assert.deepEqual(users.filter(isInternalKey), []);
});
