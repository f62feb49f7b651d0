// The series picked for the Charts page, sampled every few seconds while the console is
// connected (also when another page is shown), kept for the last minutes.
import { managementAddress } from './mgmt.js';
import { shortType } from './dom.js';

export const SAMPLE_MS = 2000;
export const KEEP_MS = 10 * 60 * 1000;
const STORE_KEY = 'qdrouter-console.charts';

export class ChartStore {
  constructor(mgmt) {
    this.mgmt = mgmt;
    this.ownId = null;
    this.series = [];
    this.listeners = new Set();
    this.timer = null;
    this.nextId = 1;
    this.url = null;
    this.addressOf = null; // router id -> its management address (the network's), if set
  }

  on(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit() {
    for (const fn of this.listeners) fn(this);
  }

  /** spec: {router, type, identity, label, attribute, mode: 'value'|'rate'} */
  add(spec, persist = true) {
    const existing = this.series.find((x) => x.router === spec.router && x.type === spec.type
      && x.identity === spec.identity && x.attribute === spec.attribute && x.mode === spec.mode);
    if (existing) return existing;
    const series = { ...spec, id: this.nextId++, points: [], last: null, error: null };
    this.series.push(series);
    if (persist) this.save();
    this.emit();
    if (this.running) this.sample();
    return series;
  }

  remove(id) {
    this.series = this.series.filter((x) => x.id !== id);
    this.save();
    this.emit();
  }

  save() {
    try {
      localStorage.setItem(`${STORE_KEY}:${this.url}`, JSON.stringify(this.series.map(({ router, type, identity, label, attribute, mode }) => ({ router, type, identity, label, attribute, mode }))));
    } catch (e) { /* private mode: charts are not remembered */ }
  }

  /** Start sampling for the network behind ``url``; the charts picked there last time return. */
  start(ownId, url) {
    this.ownId = ownId;
    if (this.url !== url) {
      this.url = url;
      this.series = [];
      for (const spec of load(url)) this.add(spec, false);
    }
    this.running = true;
    this.sample();
  }

  stop() {
    this.running = false;
    clearTimeout(this.timer);
  }

  title(x) {
    return `${x.attribute}${x.mode === 'rate' ? ' per second' : ''}`;
  }

  subtitle(x) {
    return `${shortType(x.type)} ${x.label || x.identity} on ${x.router}`;
  }

  async sample() {
    clearTimeout(this.timer);
    if (!this.running) return;
    if (this.sampling) return;
    this.sampling = true;
    try {
      const groups = new Map();
      for (const x of this.series) {
        const key = `${x.router}\u0000${x.type}`;
        if (!groups.has(key)) groups.set(key, []);
        groups.get(key).push(x);
      }
      await Promise.all([...groups.values()].map(async (list) => {
        const { router, type } = list[0];
        let rows;
        try {
          rows = await this.mgmt.query(this.addressOf ? this.addressOf(router) : managementAddress(router, this.ownId), type, []);
        } catch (e) {
          for (const x of list) x.error = e.message;
          return;
        }
        const t = Date.now();
        for (const x of list) {
          const row = rows.find((r) => r.identity === x.identity) || rows.find((r) => r.name === x.identity);
          const raw = row ? row[x.attribute] : undefined;
          if (typeof raw !== 'number') {
            x.error = row ? `${x.attribute} is not a number here` : 'the entity is gone';
            continue;
          }
          x.error = null;
          if (x.mode === 'rate') {
            if (x.last && t > x.last.t) x.points.push({ t, v: Math.max(0, (raw - x.last.raw) / ((t - x.last.t) / 1000)) });
          } else {
            x.points.push({ t, v: raw });
          }
          x.last = { t, raw };
          while (x.points.length && x.points[0].t < t - KEEP_MS) x.points.shift();
        }
      }));
    } finally {
      this.sampling = false;
    }
    this.emit();
    if (this.running) this.timer = setTimeout(() => this.sample(), SAMPLE_MS);
  }
}

function load(url) {
  try {
    const list = JSON.parse(localStorage.getItem(`${STORE_KEY}:${url}`) || '[]');
    return Array.isArray(list) ? list.filter((x) => x && x.router && x.type && x.identity && x.attribute) : [];
  } catch (e) {
    return [];
  }
}
