// overview.js — totals, throttlers and the tenants that need attention,
// from one poll of GET /v1/summary a second (the server reads once a
// second per key however many pages poll).
import { get } from './api.js';
import { h, fmtNum, fmtRate, table, errorText, card, tenantColumns } from './ui.js';

const tenantCols = [
  ...tenantColumns,
  ['inflow', (t) => fmtRate(t.inflow_per_s), true],
  ['effective rate', (t) => fmtRate(t.effective_rate), true],
];

export function overview(main) {
  const status = h('p', { class: 'error', id: 'overview-error' });
  const body = h('div', { id: 'overview' }, h('p', { class: 'muted' }, 'Loading…'));
  main.append(h('h1', {}, 'Overview'), status, body);
  let alive = true, timer = 0;
  const tick = async () => {
    try {
      render(body, await get('/v1/summary'));
      errorText(status, null);
    } catch (err) { errorText(status, err); }
    if (alive) timer = setTimeout(tick, 1000);
  };
  tick();
  return () => { alive = false; clearTimeout(timer); };
}

function render(body, s) {
  const row = (t) => ({ 'data-tenant': t.tenant });
  body.replaceChildren(
    h('div', { class: 'cards', id: 'totals' },
      card('total-tenants', 'tenants', fmtNum(s.tenants)),
      card('total-backlog', 'backlog', fmtNum(s.backlog)),
      card('total-inflight', 'in flight (released + running)', fmtNum(s.in_flight)),
      card('total-deliveries', 'deliveries/s (last 10 s)', fmtNum(s.deliveries_per_s)),
      card('total-dead', 'dead letters', fmtNum(s.dead_letters)),
      card('total-paused', 'paused / disabled', `${fmtNum(s.paused)} / ${fmtNum(s.disabled)}`),
      card('total-workers', 'workers (capacity)', `${fmtNum(s.workers)} (${fmtNum(s.worker_capacity)})`),
      card('total-throttlers', 'throttlers (shards unheld)', `${s.throttlers.length} (${s.unowned_shards.length})`)),
    h('h2', {}, 'Needs attention'),
    s.attention.length
      ? table('attention', tenantCols, s.attention, row)
      : h('p', { class: 'muted', id: 'attention' }, 'No tenant is disabled, paused or falling behind.'),
    h('h2', {}, 'Largest backlogs'),
    s.busiest.length ? table('busiest', tenantCols, s.busiest, row) : h('p', { class: 'muted', id: 'busiest' }, 'No backlog.'),
    h('h2', {}, 'Throttlers'),
    table('throttlers', [['dispatcher', (d) => d.id], ['shards held', (d) => d.shards.join(', ')]], s.throttlers),
    h('p', { class: 'muted' }, `As of ${s.at}. Deliveries/s: jobs of every tenant delivered or dead-lettered by an attempt, ` +
      "per second over the 10 s before the read, all throttlers and workers; each tenant's page charts its own."));
}
