// Sparklines: a rate's recent history as a small inline SVG chart.

import { h } from './dom.js';

// History keeps the last size samples of each entity's cumulative sent
// and received counters, and gives their rates per second.
export class History {
  constructor(size = 60) {
    this.size = size + 1; // n rates need n+1 samples
    this.samples = new Map(); // path -> [{t, sent, received}]
  }

  // add records one poll's counters of every entity, at time t (ms).
  // Entities no longer listed are forgotten.
  add(entities, t) {
    const seen = new Set();
    for (const e of entities) {
      seen.add(e.path);
      let list = this.samples.get(e.path);
      if (!list) this.samples.set(e.path, (list = []));
      const last = list[list.length - 1];
      // A counter that went down means the broker restarted: start over.
      if (last && (e.sent < last.sent || e.received < last.received)) list.length = 0;
      list.push({ t, sent: e.sent || 0, received: e.received || 0 });
      if (list.length > this.size) list.shift();
    }
    for (const path of this.samples.keys()) if (!seen.has(path)) this.samples.delete(path);
  }

  // rates are path's rates per second of counter ("sent" or "received"),
  // oldest first.
  rates(path, counter) {
    const list = this.samples.get(path) || [];
    const out = [];
    for (let i = 1; i < list.length; i++) {
      const dt = (list[i].t - list[i - 1].t) / 1000;
      out.push(dt > 0 ? (list[i][counter] - list[i - 1][counter]) / dt : 0);
    }
    return out;
  }
}

// sparkline draws rates (oldest first) in a width x height box, the
// highest at the top; slots is how many points a full chart holds, so a
// young history is drawn from the right.
export function sparkline(rates, { width = 120, height = 26, slots = 60, testid, label = '' } = {}) {
  const max = Math.max(1e-9, ...rates);
  const step = width / Math.max(1, slots - 1);
  const x0 = width - step * (rates.length - 1);
  const points = rates.map((r, i) => [x0 + i * step, height - 1 - (r / max) * (height - 3)]);
  const line = points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
  const area = points.length > 1
    ? `${points[0][0].toFixed(1)},${height} ${line} ${points[points.length - 1][0].toFixed(1)},${height}` : '';
  return h('svg', {
    class: 'spark', width, height, viewBox: `0 0 ${width} ${height}`, 'data-testid': testid,
    'data-points': rates.length, role: 'img', 'aria-label': label,
  },
  h('line', { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: 'spark-base' }),
  area ? h('polygon', { points: area, class: 'spark-area' }) : null,
  line ? h('polyline', { points: line, class: 'spark-line' }) : null);
}
