// Small DOM helpers: element creation, value formatting and a sortable table.

/** h('div', {class: 'x', onclick: fn}, child, 'text', [more children]) */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (key === 'value' && !svg) {
      el.value = value;
    } else if (key === 'checked' && !svg) {
      el.checked = !!value;
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function s(tag, attrs, ...children) {
  return h(`svg:${tag}`, attrs, ...children);
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const numberFormat = new Intl.NumberFormat('en-US');

export function isNumber(value) {
  return typeof value === 'number' && Number.isFinite(value);
}

export function formatNumber(value, digits = 0) {
  if (!isNumber(value)) return '';
  if (digits) return value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  return numberFormat.format(Math.round(value) === value ? value : Number(value.toFixed(2)));
}

export function formatBytes(value) {
  if (!isNumber(value)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = value;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function formatDuration(seconds) {
  if (!isNumber(seconds)) return '';
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  const ss = s % 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${mm}m`;
  if (mm) return `${mm}m ${ss}s`;
  return `${ss}s`;
}

/** A management value as text: lists joined, maps as JSON, numbers grouped. */
export function formatValue(value, name = '') {
  if (value === undefined || value === null) return '';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (isNumber(value)) {
    if (/uptimeSeconds$|Seconds$/.test(name) && !/Interval|MaxAge/.test(name)) return formatDuration(value);
    if (/memoryUsage|memoryResident|Bytes$/.test(name)) return formatBytes(value);
    return formatNumber(value);
  }
  if (Array.isArray(value)) return value.map((v) => formatValue(v)).join(', ');
  if (typeof value === 'object') {
    try { return JSON.stringify(value); } catch (e) { return String(value); }
  }
  return String(value);
}

function compare(a, b) {
  const an = a === undefined || a === null || a === '';
  const bn = b === undefined || b === null || b === '';
  if (an || bn) return an === bn ? 0 : an ? 1 : -1;
  if (isNumber(a) && isNumber(b)) return a - b;
  return String(formatValue(a)).localeCompare(String(formatValue(b)), undefined, { numeric: true });
}

/**
 * A sortable table. ``state`` ({sortKey, sortDir}) persists the user's choice across renders.
 * columns: [{key, label, format?(value,row), numeric?, title?}]
 */
export function sortableTable({ columns, rows, state, onChange, onRowClick, rowKey, selected, empty = 'Nothing to show', testid }) {
  const sorted = rows.slice();
  if (state.sortKey) {
    const dir = state.sortDir === 'desc' ? -1 : 1;
    sorted.sort((ra, rb) => dir * compare(ra[state.sortKey], rb[state.sortKey]));
  }
  const head = h('tr', {}, columns.map((col) => {
    const active = state.sortKey === col.key;
    const arrow = active ? (state.sortDir === 'desc' ? ' \u25BE' : ' \u25B4') : '';
    return h('th', {
      class: `${col.numeric ? 'num ' : ''}${active ? 'sorted' : ''}`,
      title: col.title || `Sort by ${col.label || col.key}`,
      'aria-sort': active ? (state.sortDir === 'desc' ? 'descending' : 'ascending') : 'none',
      dataset: { key: col.key },
      onclick: () => {
        if (state.sortKey === col.key) state.sortDir = state.sortDir === 'desc' ? 'asc' : 'desc';
        else { state.sortKey = col.key; state.sortDir = 'asc'; }
        onChange && onChange();
      },
    }, (col.label || col.key) + arrow);
  }));
  const body = sorted.length
    ? sorted.map((row) => {
      const key = rowKey ? rowKey(row) : undefined;
      return h('tr', {
        class: `${onRowClick ? 'clickable ' : ''}${key !== undefined && key === selected ? 'selected' : ''}`,
        dataset: key !== undefined ? { key } : undefined,
        onclick: onRowClick ? () => onRowClick(row) : undefined,
      }, columns.map((col) => {
        const value = row[col.key];
        const text = col.format ? col.format(value, row) : formatValue(value, col.key);
        return h('td', { class: col.numeric ? 'num' : '' }, text);
      }));
    })
    : [h('tr', { class: 'empty' }, h('td', { colspan: columns.length }, empty))];
  return h('table', { class: 'grid', 'data-testid': testid }, h('thead', {}, head), h('tbody', {}, body));
}

/** Key/value details of one entity. ``extra(name, value)`` may add a control per row. */
export function detailsTable(entity, { order, extra } = {}) {
  const names = order ? order.filter((n) => n in entity) : Object.keys(entity);
  for (const n of Object.keys(entity)) if (!names.includes(n)) names.push(n);
  return h('table', { class: 'details' }, h('tbody', {}, names.map((name) => h('tr', {},
    h('th', {}, name),
    h('td', {}, extra ? extra(name, entity[name]) : null, formatValue(entity[name], name)),
  ))));
}

export function shortType(type) {
  return (type || '').replace(/^org\.apache\.qpid\.dispatch\./, '');
}
