// The topology drawing: a small force-directed layout (springs on links, repulsion between
// routers, a pull to the centre) computed in place, so positions stay where they were when the
// network changes, and an SVG with routers, their links (cost on each) and their clients.
import { s } from './dom.js';

const WIDTH = 900;
const HEIGHT = 560;
const NODE_R = 28;

export class Layout {
  constructor() {
    this.pos = new Map(); // id -> {x, y, fixed}
  }

  /** Place new nodes, drop gone ones, relax the whole graph. */
  update(ids, edges) {
    const cx = WIDTH / 2;
    const cy = HEIGHT / 2;
    for (const id of [...this.pos.keys()]) if (!ids.includes(id)) this.pos.delete(id);
    const fresh = ids.filter((id) => !this.pos.has(id));
    fresh.forEach((id, i) => {
      // a newcomer starts next to a neighbour already placed, else on a circle
      const edge = edges.find((e) => (e.a === id && this.pos.has(e.b)) || (e.b === id && this.pos.has(e.a)));
      const angle = (2 * Math.PI * (i + 1)) / (fresh.length + 1) + hashAngle(id);
      if (edge) {
        const n = this.pos.get(edge.a === id ? edge.b : edge.a);
        this.pos.set(id, { x: n.x + 120 * Math.cos(angle), y: n.y + 120 * Math.sin(angle) });
      } else {
        const r = ids.length > 1 ? 180 : 0;
        this.pos.set(id, { x: cx + r * Math.cos(angle), y: cy + r * Math.sin(angle) });
      }
    });
    if (fresh.length || this.shape !== shapeKey(ids, edges)) this.relax(ids, edges, fresh.length ? 400 : 150);
    this.shape = shapeKey(ids, edges);
  }

  /** Fruchterman-Reingold: routers repel (k²/d), links pull (d²/k), a weak pull to the centre
   *  (stronger vertically: the drawing is wide); moves shrink as the layout cools. */
  relax(ids, edges, iterations) {
    const cx = WIDTH / 2;
    const cy = HEIGHT / 2;
    const k = Math.max(120, Math.min(230, 480 / Math.sqrt(Math.max(ids.length, 1))));
    let temp = iterations > 200 ? 80 : 25;
    for (let it = 0; it < iterations; it++) {
      const disp = new Map(ids.map((id) => [id, { x: 0, y: 0 }]));
      for (let i = 0; i < ids.length; i++) {
        for (let j = i + 1; j < ids.length; j++) {
          const p = this.pos.get(ids[i]);
          const q = this.pos.get(ids[j]);
          let dx = p.x - q.x;
          let dy = p.y - q.y;
          let d = Math.sqrt(dx * dx + dy * dy);
          if (d < 0.5) { dx = Math.random() - 0.5; dy = Math.random() - 0.5; d = 0.5; }
          const f = (k * k) / d;
          disp.get(ids[i]).x += (dx / d) * f;
          disp.get(ids[i]).y += (dy / d) * f;
          disp.get(ids[j]).x -= (dx / d) * f;
          disp.get(ids[j]).y -= (dy / d) * f;
        }
      }
      for (const e of edges) {
        const p = this.pos.get(e.a);
        const q = this.pos.get(e.b);
        if (!p || !q) continue;
        const dx = p.x - q.x;
        const dy = p.y - q.y;
        const d = Math.sqrt(dx * dx + dy * dy) || 0.5;
        const f = (d * d) / k;
        disp.get(e.a).x -= (dx / d) * f;
        disp.get(e.a).y -= (dy / d) * f;
        disp.get(e.b).x += (dx / d) * f;
        disp.get(e.b).y += (dy / d) * f;
      }
      for (const id of ids) {
        const p = this.pos.get(id);
        if (p.fixed) continue;
        const v = disp.get(id);
        v.x += (cx - p.x) * 0.6;
        v.y += (cy - p.y) * 1.6;
        const len = Math.sqrt(v.x * v.x + v.y * v.y) || 1;
        const stepLen = Math.min(len, temp);
        p.x = clamp(p.x + (v.x / len) * stepLen, 70, WIDTH - 70);
        p.y = clamp(p.y + (v.y / len) * stepLen, 60, HEIGHT - 70);
      }
      temp = Math.max(0.5, temp * 0.97);
    }
  }
}

function shapeKey(ids, edges) {
  return `${ids.join(',')}#${edges.map((e) => e.key).join(',')}`;
}

function hashAngle(id) {
  let hsh = 0;
  for (const ch of id) hsh = (hsh * 31 + ch.charCodeAt(0)) | 0;
  return (Math.abs(hsh) % 628) / 100;
}

function clamp(v, lo, hi) {
  return Math.max(lo, Math.min(hi, v));
}

/**
 * The SVG of the network. ``model``: {routers: [{id, own, clients, error}], edges: [{key, a, b,
 * cost}]}; ``selected``: 'router:<id>' or 'edge:<key>'; ``onSelect(kind, id)`` on click;
 * ``onMoved()`` after a router was dragged.
 */
export function drawTopology(layout, model, { selected, onSelect, onMoved }) {
  const svg = s('svg', {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'topology', role: 'img',
    'aria-label': `Router network: ${model.routers.length} routers, ${model.edges.length} links`,
    'data-testid': 'topology-graph',
  });
  svg.appendChild(s('rect', { x: 0, y: 0, width: WIDTH, height: HEIGHT, class: 'backdrop', onclick: () => onSelect(null, null) }));
  const edgeLayer = s('g', { class: 'edges' });
  const clientLayer = s('g', { class: 'clients' });
  const nodeLayer = s('g', { class: 'nodes' });
  svg.append(edgeLayer, clientLayer, nodeLayer);

  for (const e of model.edges) {
    const p = layout.pos.get(e.a);
    const q = layout.pos.get(e.b);
    if (!p || !q) continue;
    const mx = (p.x + q.x) / 2;
    const my = (p.y + q.y) / 2;
    const isSel = selected === `edge:${e.key}`;
    const label = e.cost === null || e.cost === undefined ? '?' : String(e.cost);
    // an edge router's uplink has no cost (edges run no routing protocol): a plain wire
    edgeLayer.appendChild(s('g', {
      class: `${e.uplink ? 'uplink' : 'edge'}${isSel ? ' selected' : ''}`, 'data-edge': e.key, tabindex: 0,
      onclick: (ev) => { ev.stopPropagation(); onSelect('edge', e.key); },
      onkeydown: (ev) => { if (ev.key === 'Enter') onSelect('edge', e.key); },
    },
    s('title', {}, e.uplink ? `${e.b}: edge router attached to ${e.a}` : `${e.a} \u2194 ${e.b}, cost ${label}`),
    s('line', { x1: p.x, y1: p.y, x2: q.x, y2: q.y, class: 'hit' }),
    s('line', { x1: p.x, y1: p.y, x2: q.x, y2: q.y, class: 'wire' }),
    e.uplink ? null : s('rect', { x: mx - 14, y: my - 11, width: 28, height: 22, rx: 11, class: 'cost-bg' }),
    e.uplink ? null : s('text', { x: mx, y: my + 4, class: 'cost', 'text-anchor': 'middle' }, label)));
  }

  for (const r of model.routers) {
    const p = layout.pos.get(r.id);
    if (!p) continue;
    // clients as small dots on an arc in the widest gap between the router's links
    const shown = Math.min(r.clients, 12);
    const base = freeAngle(p, model.edges.filter((e) => e.a === r.id || e.b === r.id)
      .map((e) => layout.pos.get(e.a === r.id ? e.b : e.a)).filter(Boolean));
    for (let i = 0; i < shown; i++) {
      const angle = base + (i - (shown - 1) / 2) * 0.32;
      const x = p.x + (NODE_R + 26) * Math.cos(angle);
      const y = p.y + (NODE_R + 26) * Math.sin(angle);
      clientLayer.append(
        s('line', { x1: p.x + NODE_R * Math.cos(angle), y1: p.y + NODE_R * Math.sin(angle), x2: x, y2: y, class: 'client-wire' }),
        s('circle', { cx: x, cy: y, r: 6, class: 'client' }),
      );
    }
    const isSel = selected === `router:${r.id}`;
    const g = s('g', {
      class: `node${r.edge ? ' edge-router' : ''}${r.own ? ' own' : ''}${r.error ? ' unreachable' : ''}${isSel ? ' selected' : ''}`,
      'data-router': r.id, transform: `translate(${p.x},${p.y})`, tabindex: 0,
      onkeydown: (ev) => { if (ev.key === 'Enter') onSelect('router', r.id); },
    },
    s('title', {}, `${r.id}${r.edge ? ' (edge router)' : ''}${r.own ? ' (connected to this one)' : ''}: ${r.clients} client connection${r.clients === 1 ? '' : 's'}${r.error ? `; ${r.error}` : ''}`),
    s('circle', { r: NODE_R, class: 'disc' }),
    s('text', { y: 5, class: 'initials', 'text-anchor': 'middle' }, initials(r.id)),
    s('text', { y: NODE_R + 18, class: 'label', 'text-anchor': 'middle' }, r.id),
    r.clients ? s('g', { class: 'badge', transform: `translate(${NODE_R * 0.75},${-NODE_R * 0.75})` },
      s('circle', { r: 10 }), s('text', { y: 4, 'text-anchor': 'middle' }, String(r.clients))) : null);
    makeDraggable(g, svg, layout, r.id, () => onSelect('router', r.id), onMoved);
    nodeLayer.appendChild(g);
  }
  return svg;
}

/** The middle of the widest angular gap between the directions to ``others`` (upwards gaps
 *  win ties), turned aside if it points at the label under the router. */
function freeAngle(p, others) {
  if (!others.length) return -Math.PI / 2;
  const angles = others.map((q) => Math.atan2(q.y - p.y, q.x - p.x)).sort((a, b) => a - b);
  let best = -Math.PI / 2;
  let bestScore = -Infinity;
  let bestGap = [0, 0];
  for (let i = 0; i < angles.length; i++) {
    const from = angles[i];
    const to = i + 1 < angles.length ? angles[i + 1] : angles[0] + 2 * Math.PI;
    const mid = (from + to) / 2;
    const score = to - from + (Math.sin(mid) < 0 ? 0.2 : 0);
    if (score > bestScore) {
      bestScore = score;
      best = mid;
      bestGap = [from, to];
    }
  }
  const down = Math.PI / 2;
  const off = Math.atan2(Math.sin(best - down), Math.cos(best - down)); // best - down in (-pi, pi]
  const aside = 0.9;
  if (Math.abs(off) < aside) {
    // stay inside the gap: turn towards whichever side of "down" still leaves room
    const turned = down + (off >= 0 ? aside : -aside);
    const rel = ((turned - bestGap[0]) % (2 * Math.PI) + 2 * Math.PI) % (2 * Math.PI);
    best = rel > 0.3 && rel < bestGap[1] - bestGap[0] - 0.3 ? turned : down - (off >= 0 ? aside : -aside);
  }
  return best;
}

function initials(id) {
  const last = id.split(/[./:]/).filter(Boolean).pop() || id;
  return last.length <= 3 ? last : last.slice(0, 3);
}

function makeDraggable(g, svg, layout, id, onClick, onMoved) {
  let start = null;
  g.addEventListener('pointerdown', (ev) => {
    ev.stopPropagation();
    start = { x: ev.clientX, y: ev.clientY, moved: false };
    layout.dragging = true;
    g.setPointerCapture(ev.pointerId);
  });
  g.addEventListener('pointermove', (ev) => {
    if (!start) return;
    const dx = ev.clientX - start.x;
    const dy = ev.clientY - start.y;
    if (!start.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    start.moved = true;
    const pt = svg.createSVGPoint();
    pt.x = ev.clientX;
    pt.y = ev.clientY;
    const local = pt.matrixTransform(svg.getScreenCTM().inverse());
    const p = layout.pos.get(id);
    p.x = clamp(local.x, 40, WIDTH - 40);
    p.y = clamp(local.y, 40, HEIGHT - 40);
    p.fixed = true;
    g.setAttribute('transform', `translate(${p.x},${p.y})`);
  });
  g.addEventListener('pointerup', (ev) => {
    if (!start) return;
    g.releasePointerCapture(ev.pointerId);
    const moved = start.moved;
    start = null;
    layout.dragging = false;
    if (moved) onMoved(); else onClick();
  });
  g.addEventListener('pointercancel', () => {
    start = null;
    layout.dragging = false;
  });
}
