// A line chart of one series over time, drawn as SVG: value or per-second rate, last minutes.
import { formatNumber, s } from './dom.js';

const W = 560;
const H = 200;
const PAD = { left: 64, right: 16, top: 14, bottom: 28 };

function niceStep(span, ticks) {
  const raw = span / ticks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
  return step * mag;
}

function shortNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return `${formatNumber(v / 1e9, 1)}G`;
  if (a >= 1e6) return `${formatNumber(v / 1e6, 1)}M`;
  if (a >= 1e4) return `${formatNumber(v / 1e3, 1)}k`;
  return formatNumber(v, a < 10 ? 2 : 0);
}

function clock(t) {
  const d = new Date(t);
  return d.toTimeString().slice(0, 8);
}

/** points: [{t: ms, v: number}], windowMs: how much of the past to show. */
export function lineChart(points, { windowMs, label }) {
  const now = points.length ? points[points.length - 1].t : Date.now();
  const t0 = now - windowMs;
  const shown = points.filter((p) => p.t >= t0);
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label, 'data-points': shown.length });
  const iw = W - PAD.left - PAD.right;
  const ih = H - PAD.top - PAD.bottom;
  let lo = Math.min(0, ...shown.map((p) => p.v));
  let hi = Math.max(...shown.map((p) => p.v), 0);
  if (hi === lo) hi = lo + 1;
  const step = niceStep(hi - lo, 4);
  lo = Math.floor(lo / step) * step;
  hi = Math.ceil(hi / step) * step;
  const x = (t) => PAD.left + ((t - t0) / windowMs) * iw;
  const y = (v) => PAD.top + ih - ((v - lo) / (hi - lo)) * ih;

  const grid = s('g', { class: 'grid-lines' });
  for (let v = lo; v <= hi + step / 2; v += step) {
    grid.append(
      s('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }),
      s('text', { x: PAD.left - 8, y: y(v) + 4, 'text-anchor': 'end' }, shortNumber(v)),
    );
  }
  const tickMs = niceStep(windowMs, 5);
  for (let t = Math.ceil(t0 / tickMs) * tickMs; t <= now; t += tickMs) {
    if (x(t) > W - PAD.right - 24 || x(t) < PAD.left + 20) continue; // a label would be cut
    grid.append(s('text', { x: x(t), y: H - 8, 'text-anchor': 'middle' }, clock(t)));
  }
  svg.appendChild(grid);
  svg.appendChild(s('rect', { x: PAD.left, y: PAD.top, width: iw, height: ih, class: 'frame' }));
  if (shown.length) {
    const d = shown.map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
    const area = `${d} L${x(shown[shown.length - 1].t).toFixed(1)},${y(lo)} L${x(shown[0].t).toFixed(1)},${y(lo)} Z`;
    svg.append(s('path', { d: area, class: 'area' }), s('path', { d, class: 'series', 'data-testid': 'chart-series' }));
    const last = shown[shown.length - 1];
    svg.appendChild(s('circle', { cx: x(last.t), cy: y(last.v), r: 3.5, class: 'last' }));
  } else {
    svg.appendChild(s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'waiting' }, 'waiting for samples\u2026'));
  }
  return svg;
}
