// Schema: the management schema the router answers to GET-SCHEMA, one entry per entity type
// with its operations and attributes (type, default, required, create/update), searchable.
import { formatValue, h, replace } from '../dom.js';

const BASE = new Set(['entity', 'configurationEntity', 'operationalEntity']);

function attrType(a) {
  if (Array.isArray(a.type)) return a.type.join(' | ');
  return a.type || '';
}

export function schemaPage(app) {
  const schema = app.network.schema || {};
  const entries = Object.entries(schema.entityTypes || {}).sort(([a], [b]) => a.localeCompare(b));
  let filter = '';
  let listEl;
  let countEl;

  function matches(short, spec) {
    if (!filter) return true;
    const needle = filter.toLowerCase();
    if (short.toLowerCase().includes(needle) || (spec.description || '').toLowerCase().includes(needle)) return true;
    return Object.keys(spec.attributes || {}).some((n) => n.toLowerCase().includes(needle));
  }

  function typeEntry(short, spec) {
    const attrs = Object.entries(spec.attributes || {});
    const flags = [];
    if (spec.operations) flags.push(...spec.operations);
    return h('details', { class: 'schema-type', 'data-testid': 'schema-type', 'data-type': short, open: filter && attrs.length < 40 ? true : false },
      h('summary', {},
        h('span', { class: 'type-name' }, short, BASE.has(short) ? h('span', { class: 'pill base' }, 'base type') : null),
        h('span', { class: 'ops' }, flags.map((op) => h('span', { class: 'pill' }, op))),
        h('span', { class: 'muted desc' }, spec.description || '')),
      h('div', { class: 'schema-body' },
        h('p', { class: 'muted small' }, spec.fullyQualifiedType || '', spec.extends ? ` \u00b7 extends ${spec.extends}` : '',
          spec.singleton ? ' \u00b7 singleton' : ''),
        h('table', { class: 'grid schema-attrs' },
          h('thead', {}, h('tr', {}, ['Attribute', 'Type', 'Default', 'Flags', 'Description'].map((t) => h('th', {}, t)))),
          h('tbody', {}, attrs.map(([name, a]) => h('tr', { class: filter && name.toLowerCase().includes(filter.toLowerCase()) ? 'hit' : '' },
            h('td', { class: 'mono' }, name),
            h('td', { class: 'mono' }, attrType(a)),
            h('td', { class: 'mono' }, a.default === undefined ? '' : formatValue(a.default)),
            h('td', {}, [a.required ? 'required' : null, a.unique ? 'unique' : null, a.create ? 'create' : null, a.update ? 'update' : null, a.graph ? 'graph' : null].filter(Boolean).join(', ')),
            h('td', {}, a.description || '')))))));
  }

  function render() {
    const shown = entries.filter(([short, spec]) => matches(short, spec));
    countEl.textContent = `${shown.length} of ${entries.length} entity types`;
    replace(listEl, shown.map(([short, spec]) => typeEntry(short, spec)));
  }

  return {
    mount(target) {
      listEl = h('div', { class: 'schema-list' });
      countEl = h('span', { 'data-testid': 'schema-count' });
      target.append(h('div', { class: 'page schema' },
        h('div', { class: 'page-head' },
          h('h1', {}, 'Schema'),
          h('p', { class: 'muted' }, schema.description || 'The management schema', ' \u00b7 prefix ', h('code', {}, schema.prefix || ''), ' \u00b7 ', countEl)),
        h('div', { class: 'toolbar' }, h('input', {
          type: 'search', class: 'filter', placeholder: 'Find an entity type or attribute', 'aria-label': 'Find in schema',
          oninput: (ev) => { filter = ev.target.value.trim(); render(); },
        })),
        listEl));
      render();
    },
  };
}
