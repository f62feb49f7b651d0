// List: every entity type of the schema, the instances of the picked one on the picked router
// (sortable, filterable, columns to choose), and one instance's attributes in full.
import { detailsTable, h, isNumber, replace, shortType, sortableTable } from '../dom.js';

const REFRESH_MS = 3000;
const DEFAULT_COLUMNS = 6;
// the first columns of a type's table, before the rest in the schema's order
const PREFERRED_COLUMNS = {
  connection: ['container', 'host', 'role', 'dir', 'user'],
  'router.link': ['linkType', 'linkDir', 'owningAddr', 'linkName', 'deliveryCount'],
  'router.address': ['distribution', 'subscriberCount', 'remoteCount', 'deliveriesIngress', 'deliveriesEgress'],
};

function shortName(long) {
  return String(long || '').replace(/^org\.apache\.qpid\.dispatch\./, '');
}
const ABSTRACT = new Set(['entity', 'configurationEntity', 'operationalEntity']);
const STATE_KEY = 'qdrouter-console.list';

/** Concrete entity types of a GET-SCHEMA answer: [{short, long, spec}], sorted by short name. */
export function schemaTypes(schema) {
  const types = (schema && schema.entityTypes) || {};
  return Object.entries(types)
    .filter(([short]) => !ABSTRACT.has(short))
    .map(([short, spec]) => ({ short, long: spec.fullyQualifiedType || `org.apache.qpid.dispatch.${short}`, spec }))
    .sort((a, b) => a.short.localeCompare(b.short));
}

export function isCounter(spec, name) {
  const attr = ((spec && spec.attributes) || {})[name] || {};
  return /^Counter/i.test(attr.description || '') || /Count$|Deliveries$/.test(name);
}

export function listPage(app) {
  const net = app.network;
  const types = schemaTypes(net.schema);
  const saved = loadState();
  const state = {
    type: types.some((t) => t.long === saved.type) ? saved.type : (types.find((t) => t.short === 'connection') || types[0] || {}).long,
    router: net.routers.has(saved.router) ? saved.router : net.ownId,
    rows: [],
    error: null,
    loading: false,
    selected: null,
    filter: '',
    table: { sortKey: null },
    columns: new Map(), // type -> [names]
    added: null,
  };
  let el;
  let typesEl;
  let mainEl;
  let detailEl;
  let routerSelect;
  let timer;
  let off;
  let seq = 0;

  function spec() {
    const t = types.find((x) => x.long === state.type);
    return t ? t.spec : { attributes: {} };
  }

  function attributeNames() {
    return Object.keys(spec().attributes || {});
  }

  function columns() {
    if (state.columns.has(state.type)) return state.columns.get(state.type);
    const names = attributeNames();
    const first = ['name', 'identity'].filter((n) => names.includes(n)).slice(0, 1);
    // GET-SCHEMA lists attributes in 1.19's order (a connection's adminStatus and operStatus
    // first), so the columns a user looks for come first where a type has them
    const preferred = (PREFERRED_COLUMNS[shortName(state.type)] || []).filter((n) => names.includes(n));
    const skip = new Set(['name', 'identity', 'type', 'properties', 'linkState', 'validOrigins', 'remoteHostRouters', 'transitOutstanding', ...preferred]);
    const rest = names.filter((n) => !skip.has(n));
    return [...first, ...preferred, ...rest].slice(0, DEFAULT_COLUMNS);
  }

  function rowKey(row) {
    return String(row.identity ?? row.name ?? JSON.stringify(row));
  }

  async function load() {
    clearTimeout(timer);
    const mine = ++seq;
    state.loading = true;
    try {
      const rows = await app.mgmt.query(net.address(state.router), state.type, []);
      if (mine !== seq) return;
      state.rows = rows;
      state.error = null;
    } catch (e) {
      if (mine !== seq) return;
      state.error = e.message;
    }
    state.loading = false;
    renderMain();
    timer = setTimeout(load, REFRESH_MS);
  }

  function pick(type) {
    state.type = type;
    state.rows = [];
    state.selected = null;
    state.table = { sortKey: null };
    state.error = null;
    saveState(state);
    renderTypes();
    renderMain();
    load();
  }

  function renderTypes() {
    replace(typesEl, types.map((t) => h('li', {},
      h('button', {
        class: t.long === state.type ? 'active' : '', 'data-type': t.short, title: t.long,
        onclick: () => pick(t.long),
      }, t.short))));
  }

  function renderRouters() {
    const ids = [...net.routers.keys()];
    if (!ids.includes(state.router)) ids.push(state.router);
    replace(routerSelect, ids.map((id) => h('option', { value: id, selected: id === state.router ? 'selected' : false }, `${id}${id === net.ownId ? ' (connected)' : ''}`)));
    routerSelect.value = state.router;
  }

  function chartButton(name, value, row) {
    if (!isNumber(value) || name === 'identity') return null;
    const counter = isCounter(spec(), name);
    const mode = counter ? 'rate' : 'value';
    return h('button', {
      class: 'small', title: `Chart ${name}${counter ? ' per second' : ''} on the Charts page`, 'data-chart': name,
      onclick: () => {
        app.charts.add({ router: state.router, type: state.type, identity: row.identity ?? row.name, label: row.name || row.identity, attribute: name, mode });
        state.added = `${name} added to Charts`;
        renderDetail();
      },
    }, counter ? '\u2197 rate' : '\u2197');
  }

  function renderDetail() {
    const row = state.rows.find((r) => rowKey(r) === state.selected);
    if (!row) {
      replace(detailEl);
      detailEl.hidden = true;
      return;
    }
    detailEl.hidden = false;
    replace(detailEl,
      h('div', { class: 'panel-head' },
        h('h2', {}, row.name || row.identity || shortType(state.type)),
        h('button', { class: 'link', onclick: () => { state.selected = null; renderMain(); } }, 'Close')),
      h('p', { class: 'muted' }, `${shortType(state.type)} on ${state.router}`),
      state.added ? h('p', { class: 'banner ok' }, state.added, ' \u00b7 ', h('a', { href: '#/charts' }, 'open Charts')) : null,
      detailsTable(row, { order: attributeNames(), extra: (name, value) => chartButton(name, value, row) }));
  }

  function renderMain() {
    const cols = columns();
    const s = spec();
    const needle = state.filter.toLowerCase();
    const rows = needle ? state.rows.filter((r) => JSON.stringify(r).toLowerCase().includes(needle)) : state.rows;
    const picker = h('details', { class: 'columns' },
      h('summary', {}, `Columns (${cols.length} of ${attributeNames().length})`),
      h('div', { class: 'column-list' }, attributeNames().map((name) => h('label', {},
        h('input', {
          type: 'checkbox', checked: cols.includes(name),
          onchange: (ev) => {
            const now = columns().slice();
            if (ev.target.checked) now.push(name); else now.splice(now.indexOf(name), 1);
            const order = attributeNames();
            state.columns.set(state.type, order.filter((n) => now.includes(n)));
            renderMain();
          },
        }), ` ${name}`))));
    const keepOpen = mainEl.querySelector('details.columns');
    if (keepOpen && keepOpen.open) picker.open = true;
    replace(mainEl,
      h('div', { class: 'page-head' },
        h('h1', {}, shortType(state.type)),
        h('p', { class: 'muted' }, s.description || '', ' ',
          h('span', { 'data-testid': 'list-count' }, `${state.rows.length} on ${state.router}`),
          state.loading && !state.rows.length ? ' \u00b7 loading\u2026' : '')),
      state.error ? h('p', { class: 'banner warn' }, state.error) : null,
      h('div', { class: 'toolbar' },
        h('input', {
          type: 'search', placeholder: 'Filter rows', value: state.filter, class: 'filter', 'aria-label': 'Filter rows',
          oninput: (ev) => { state.filter = ev.target.value; renderMainKeepFocus(); },
        }),
        picker),
      h('div', { class: 'table-wrap' }, sortableTable({
        testid: 'entity-table',
        columns: cols.map((name) => ({ key: name, label: name, numeric: ['integer'].includes((s.attributes[name] || {}).type) })),
        rows,
        state: state.table,
        onChange: renderMain,
        rowKey,
        selected: state.selected,
        onRowClick: (row) => { state.selected = rowKey(row); state.added = null; renderMain(); },
        empty: state.loading ? 'Loading\u2026' : `No ${shortType(state.type)} entities on ${state.router}`,
      })));
    renderDetail();
  }

  function renderMainKeepFocus() {
    const input = mainEl.querySelector('input.filter');
    const pos = input ? input.selectionStart : 0;
    renderMain();
    const again = mainEl.querySelector('input.filter');
    if (again) { again.focus(); again.setSelectionRange(pos, pos); }
  }

  return {
    mount(target) {
      routerSelect = h('select', {
        id: 'list-router', 'aria-label': 'Router',
        onchange: (ev) => { state.router = ev.target.value; state.rows = []; state.selected = null; saveState(state); renderMain(); load(); },
      });
      typesEl = h('ul', { class: 'type-list', 'data-testid': 'type-list' });
      mainEl = h('div', { class: 'list-main' });
      detailEl = h('aside', { class: 'side detail', hidden: true, 'data-testid': 'entity-details' });
      el = h('div', { class: 'page list' },
        h('nav', { class: 'types' }, h('label', { for: 'list-router' }, 'Router'), routerSelect, h('h2', {}, 'Entity types'), typesEl),
        mainEl, detailEl);
      target.append(el);
      renderRouters();
      renderTypes();
      renderMain();
      off = net.on(renderRouters);
      load();
    },
    unmount() {
      clearTimeout(timer);
      seq++;
      off && off();
    },
  };
}

function loadState() {
  try { return JSON.parse(sessionStorage.getItem(STATE_KEY) || '{}') || {}; } catch (e) { return {}; }
}

function saveState(state) {
  try { sessionStorage.setItem(STATE_KEY, JSON.stringify({ type: state.type, router: state.router })); } catch (e) { /* not kept */ }
}
