// Charts: numeric attributes over time, one chart per picked series (value or rate per second).
// Series are added here (router, type, entity, attribute) or from an entity's details on List.
import { formatNumber, h, isNumber, replace, shortType } from '../dom.js';
import { lineChart } from '../chart.js';
import { isCounter, schemaTypes } from './list.js';

const WINDOWS = [{ label: '1 min', ms: 60000 }, { label: '5 min', ms: 300000 }, { label: '10 min', ms: 600000 }];

export function chartsPage(app) {
  const net = app.network;
  const store = app.charts;
  const types = schemaTypes(net.schema);
  const pick = { router: net.ownId, type: 'org.apache.qpid.dispatch.router', rows: [], identity: null, attribute: null, mode: 'rate', error: null };
  let windowMs = app.chartWindowMs || 60000;
  let el;
  let listEl;
  let pickerEl;
  let off;
  let offNet;

  function numericAttributes(row) {
    return Object.entries(row || {}).filter(([name, v]) => isNumber(v) && name !== 'identity').map(([name]) => name);
  }

  async function loadRows() {
    pick.error = null;
    try {
      pick.rows = await app.mgmt.query(net.address(pick.router), pick.type, []);
    } catch (e) {
      pick.rows = [];
      pick.error = e.message;
    }
    const ids = pick.rows.map((r) => String(r.identity ?? r.name));
    if (!ids.includes(pick.identity)) pick.identity = ids[0] || null;
    const attrs = numericAttributes(current());
    if (!attrs.includes(pick.attribute)) {
      pick.attribute = attrs.find((a) => /^deliveries/.test(a)) || attrs.find((a) => /Deliveries$|Count$/.test(a)) || attrs[0] || null;
      pick.mode = defaultMode(pick.attribute);
    }
    renderPicker();
  }

  function defaultMode(attribute) {
    const t = types.find((x) => x.long === pick.type);
    return attribute && t && isCounter(t.spec, attribute) ? 'rate' : 'value';
  }

  function current() {
    return pick.rows.find((r) => String(r.identity ?? r.name) === pick.identity);
  }

  function select(id, label, value, options, onchange) {
    return h('label', { class: 'field' }, h('span', {}, label),
      h('select', { id, onchange: (ev) => onchange(ev.target.value) },
        options.map((o) => h('option', { value: o.value, selected: o.value === value ? 'selected' : false }, o.label))));
  }

  function renderPicker() {
    const row = current();
    replace(pickerEl,
      h('h2', {}, 'Add a chart'),
      h('div', { class: 'picker' },
        select('chart-router', 'Router', pick.router, [...net.routers.keys()].map((id) => ({ value: id, label: id })), (v) => { pick.router = v; loadRows(); }),
        select('chart-type', 'Entity type', pick.type, types.map((t) => ({ value: t.long, label: t.short })), (v) => { pick.type = v; pick.identity = null; loadRows(); }),
        select('chart-entity', 'Entity', pick.identity, pick.rows.map((r) => ({ value: String(r.identity ?? r.name), label: String(r.name || r.identity) })), (v) => { pick.identity = v; renderPicker(); }),
        select('chart-attribute', 'Attribute', pick.attribute, numericAttributes(row).map((a) => ({ value: a, label: a })), (v) => { pick.attribute = v; pick.mode = defaultMode(v); renderPicker(); }),
        select('chart-mode', 'Show', pick.mode, [{ value: 'rate', label: 'rate per second' }, { value: 'value', label: 'value' }], (v) => { pick.mode = v; }),
        h('button', {
          class: 'primary', 'data-testid': 'add-chart', disabled: !(row && pick.attribute),
          onclick: () => {
            store.add({ router: pick.router, type: pick.type, identity: row.identity ?? row.name, label: row.name || row.identity, attribute: pick.attribute, mode: pick.mode });
          },
        }, 'Add chart')),
      pick.error ? h('p', { class: 'banner warn' }, pick.error) : null,
      !pick.rows.length && !pick.error ? h('p', { class: 'muted' }, `No ${shortType(pick.type)} entities on ${pick.router}.`) : null);
  }

  function renderList() {
    if (!store.series.length) {
      replace(listEl, h('p', { class: 'empty-state' }, 'No charts yet. Pick an attribute above, or open an entity on the List page and press \u2197 next to a number.'));
      return;
    }
    replace(listEl, store.series.map((x) => {
      const last = x.points.length ? x.points[x.points.length - 1].v : null;
      return h('figure', { class: 'chart-card', 'data-testid': 'chart', 'data-series': `${x.router}/${shortType(x.type)}/${x.attribute}` },
        h('div', { class: 'chart-head' },
          h('div', {},
            h('figcaption', {}, store.title(x)),
            h('div', { class: 'muted small' }, store.subtitle(x))),
          h('div', { class: 'chart-value' }, last === null ? '\u2013' : formatNumber(last, x.mode === 'rate' ? 2 : 0)),
          h('button', { class: 'link', title: 'Remove this chart', onclick: () => store.remove(x.id) }, 'Remove')),
        x.error ? h('p', { class: 'banner warn' }, x.error) : null,
        lineChart(x.points, { windowMs, label: `${store.title(x)}, ${store.subtitle(x)}` }));
    }));
  }

  return {
    mount(target) {
      listEl = h('div', { class: 'chart-grid' });
      pickerEl = h('section', { class: 'card' });
      el = h('div', { class: 'page charts' },
        h('div', { class: 'page-head' }, h('h1', {}, 'Charts'),
          h('div', { class: 'segmented', role: 'group', 'aria-label': 'Time window' }, WINDOWS.map((w) => h('button', {
            class: w.ms === windowMs ? 'active' : '',
            onclick: (ev) => {
              windowMs = w.ms;
              app.chartWindowMs = w.ms;
              for (const b of ev.target.parentNode.children) b.classList.toggle('active', b === ev.target);
              renderList();
            },
          }, w.label)))),
        pickerEl, listEl);
      target.append(el);
      renderPicker();
      renderList();
      loadRows();
      off = store.on(renderList);
      offNet = net.on(() => { if (!document.activeElement || document.activeElement.tagName !== 'SELECT') renderPicker(); });
    },
    unmount() {
      off && off();
      offNet && offNet();
    },
  };
}
