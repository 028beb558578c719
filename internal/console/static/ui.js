// ui.js — building the DOM without HTML strings (nothing the API returns is
// ever parsed as markup), and formatting.

// h makes an element: attrs are properties/attributes (on* are listeners),
// children are nodes, strings or arrays of them (null skipped).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function fmtNum(n) {
  if (n === null || n === undefined) return '–';
  if (typeof n === 'number' && Math.abs(n - Math.round(n)) >= 0.005) return n.toFixed(n < 10 ? 2 : 1);
  if (typeof n === 'number') n = Math.round(n);
  return Number(n).toLocaleString('en-US');
}

export function fmtSecs(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

// fmtRate shows a rate given per second in the first unit where it is at
// least 1 (s, m, h, d: a daily quota's 1/d is 0.0000116/s), like the
// policy's N/s … N/d.
export function fmtRate(r) {
  if (r === null || r === undefined) return '–';
  for (const [per, unit] of [[1, 's'], [60, 'm'], [3600, 'h']]) {
    if (r === 0 || r * per >= 1) return `${fmtNum(r * per)}/${unit}`;
  }
  return `${fmtNum(r * 86400)}/d`;
}

// state is a tenant view's state word: disabled, paused, behind (not
// draining with a backlog) or active.
export function state(t) {
  if (t.disabled) return 'disabled';
  if (t.admin_paused || t.admin_paused_until || t.paused_until) return 'paused';
  if (t.backlog > 0 && !t.draining) return 'behind';
  return 'active';
}

export const badge = (t) => h('span', { class: `badge ${state(t)}`, 'data-state': state(t) }, state(t));

export const tenantLink = (id) => h('a', { href: `#/tenant/${encodeURIComponent(id)}` }, id);

// table builds a table: cols are [header, cell(row) → node|string, numeric?].
export function table(id, cols, rows, rowAttrs = () => ({})) {
  return h('table', { id },
    h('thead', {}, h('tr', {}, cols.map(([name, , num]) => h('th', { class: num ? 'num' : null }, name)))),
    h('tbody', {}, rows.map((r) => h('tr', rowAttrs(r),
      cols.map(([, cell, num]) => h('td', { class: num ? 'num' : null }, cell(r)))))));
}

export function errorText(el, err) {
  el.textContent = err ? `${err.status ? `${err.status} ` : ''}${err.message}` : '';
}

// card is one number of a page's cards: value v over its label k.
export function card(id, k, v) {
  return h('div', { class: 'card', id }, h('div', { class: 'v' }, v), h('div', { class: 'k' }, k));
}

// tenantColumns are the tenant tables' first columns (name, state, backlog,
// oldest job, drain ETA), for table().
export const tenantColumns = [
  ['tenant', (t) => tenantLink(t.tenant)],
  ['state', badge],
  ['backlog', (t) => fmtNum(t.backlog), true],
  ['oldest job', (t) => fmtSecs(t.oldest_job_age_s), true],
  ['drain ETA', (t) => fmtSecs(t.drain_eta_s), true],
];

// fmtQuota shows the quota an upstream last reported (pacing by quota
// headers, on a tenant or an upstream): what is left of it, its unit, its
// header and its reset.
export function fmtQuota(q) {
  if (!q) return '–';
  const of = q.limit == null ? '' : ` / ${fmtNum(q.limit)}`;
  return `${fmtNum(q.remaining)}${of} ${q.unit} (${q.source_header}), reset ${new Date(q.reset_at).toISOString()}`;
}
