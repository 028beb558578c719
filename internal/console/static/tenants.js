// tenants.js — the paged, sortable tenant table (GET /v1/tenants). The
// search box is the API's prefix= (tenant ids that begin with it, over every
// tenant, not only the page loaded): typing restarts the listing after a
// short pause.
import { get, enc } from './api.js';
import { h, fmtNum, fmtRate, table, errorText, tenantColumns } from './ui.js';

const cols = [
  ...tenantColumns,
  ['rate (configured)', (t) => String(t.policy.rate), true],
  ['effective', (t) => fmtRate(t.effective_rate), true],
  ['running / concurrency', (t) => `${fmtNum(t.running)} / ${fmtNum(t.policy.concurrency)}`, true],
  ['dead', (t) => fmtNum(t.dead_letters), true],
];

export function tenants(main) {
  const sort = h('select', { id: 'tenants-sort' }, ['name', 'backlog', 'oldest'].map((s) => h('option', { value: s }, `sort: ${s}`)));
  const stateSel = h('select', { id: 'tenants-state' }, ['', 'active', 'paused', 'disabled'].map((s) => h('option', { value: s }, s || 'any state')));
  const search = h('input', { id: 'tenants-search', type: 'search', placeholder: 'tenant id starts with…' });
  const prev = h('button', { type: 'button', id: 'tenants-prev' }, '← previous');
  const next = h('button', { type: 'button', id: 'tenants-next' }, 'next →');
  const status = h('p', { class: 'error' });
  const out = h('div', {});
  let cursors = [''], page = [], nextCursor = null, typing = 0, seq = 0;
  const show = () => {
    out.replaceChildren(table('tenants', cols, page, (t) => ({ 'data-tenant': t.tenant })));
    prev.disabled = cursors.length < 2;
    next.disabled = !nextCursor;
  };
  const load = async () => {
    const cur = cursors[cursors.length - 1], mine = ++seq;
    const prefix = search.value.trim();
    try {
      const p = await get(`/v1/tenants?limit=50&sort=${enc(sort.value)}&state=${enc(stateSel.value)}` +
        `${prefix ? `&prefix=${enc(prefix)}` : ''}${cur ? `&cursor=${enc(cur)}` : ''}`);
      if (mine !== seq) return; // a later load answers for what is shown now
      page = p.tenants; nextCursor = p.cursor;
      errorText(status, null);
    } catch (err) {
      if (mine !== seq) return;
      page = []; nextCursor = null;
      errorText(status, err);
    }
    show();
  };
  const restart = () => { cursors = ['']; load(); };
  sort.addEventListener('change', restart);
  stateSel.addEventListener('change', restart);
  search.addEventListener('input', () => { clearTimeout(typing); typing = setTimeout(restart, 250); });
  prev.addEventListener('click', () => { cursors.pop(); load(); });
  next.addEventListener('click', () => { if (nextCursor) { cursors.push(nextCursor); load(); } });
  main.append(h('h1', {}, 'Tenants'),
    h('div', { class: 'toolbar' }, sort, stateSel, search, prev, next,
      h('button', { type: 'button', onclick: load }, 'refresh')),
    h('p', { class: 'muted' }, '50 a page; the search lists the tenants whose id begins with it (case-sensitive), over all pages.'),
    status, out);
  load();
  return () => { clearTimeout(typing); };
}
