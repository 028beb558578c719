// chart.js — the tenant page's live chart as SVG: deliveries per second
// against the configured and the effective rate over the last 15 minutes.
const NS = 'http://www.w3.org/2000/svg';
const W = 900, H = 280, L = 56, R = 150, T = 16, B = 248;
export const WINDOW_MS = 15 * 60 * 1000;

function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

export function newChart() {
  return el('svg', { id: 'chart', class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': 'deliveries per second against the configured and effective rate', 'data-points': '0' });
}

// draw replaces the chart's contents with points ({t, delivered_per_s,
// rate, effective_rate}, oldest first). The x axis ends at the last point
// and spans the points held, from 1 to 15 minutes (whole minutes).
export function draw(svg, points) {
  const end = points.length ? points[points.length - 1].t : Date.now();
  const held = points.length ? end - points[0].t : 0;
  const span = Math.min(WINDOW_MS, Math.max(60000, Math.ceil(held / 60000) * 60000));
  const start = end - span;
  const ymax = niceMax(Math.max(1, ...points.map((p) => Math.max(p.delivered_per_s, p.rate, p.effective_rate))));
  const x = (t) => L + ((t - start) / span) * (W - L - R);
  const y = (v) => B - (v / ymax) * (B - T);
  const kids = [];
  for (const f of [0, 0.5, 1]) {
    kids.push(el('line', { class: 'grid', x1: L, x2: W - R, y1: y(ymax * f), y2: y(ymax * f) }));
    kids.push(el('text', { x: L - 6, y: y(ymax * f) + 4, 'text-anchor': 'end' }, fmt(ymax * f)));
  }
  for (const f of [1, 2 / 3, 1 / 3, 0]) {
    const s = Math.round((span * f) / 1000);
    const label = s === 0 ? 'now' : s % 60 ? `−${s} s` : `−${s / 60} min`;
    kids.push(el('text', { x: x(end - s * 1000), y: B + 18, 'text-anchor': 'middle' }, label));
  }
  kids.push(el('line', { class: 'axis', x1: L, x2: W - R, y1: B, y2: B }));
  kids.push(el('text', { x: 4, y: T + 4 }, '/s'));
  const series = [['delivered', 'delivered_per_s', 'delivered/s'], ['rate', 'rate', 'configured rate'],
    ['effective', 'effective_rate', 'effective rate']];
  series.forEach(([cls, field, label], i) => {
    if (points.length) {
      const d = points.map((p, j) => `${j ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p[field]).toFixed(1)}`).join('');
      kids.push(el('path', { class: cls, d }));
    }
    kids.push(el('line', { class: cls, x1: W - R + 14, x2: W - R + 40, y1: T + 10 + i * 20, y2: T + 10 + i * 20 }));
    kids.push(el('text', { x: W - R + 46, y: T + 14 + i * 20 }, label));
  });
  svg.replaceChildren(...kids);
  svg.setAttribute('data-points', String(points.length));
}

function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v * 1.1 <= m * p) return m * p;
  return 10 * p;
}

function fmt(v) { return Number.isInteger(v) ? String(v) : v.toFixed(1); }
