// upstreams.js — the shared upstream quotas (issue #15): the list (GET
// /v1/upstreams: rate, burst, pause, waiting jobs) and one upstream's page
// (GET /v1/upstreams/{name}, polled every 2 s: its configuration, pause,
// jobs running under its concurrency and waiting jobs by tenant; pause,
// resume and delete for an admin key). Waiting and running jobs come from
// the upstream's runtime state, "–" when the server has none.
import { call, get, enc } from './api.js';
import { h, fmtNum, fmtRate, fmtQuota, table, errorText, card, tenantLink } from './ui.js';

// pauseText is an upstream view's pause state in words.
function pauseText(u) {
  if (!u.paused) return 'active';
  return u.paused_until ? `paused until ${u.paused_until} (${u.pause_reason})` : `paused until resumed (${u.pause_reason})`;
}

const pauseBadge = (u) => h('span', { class: `badge ${u.paused ? 'paused' : 'active'}`, 'data-state': u.paused ? 'paused' : 'active' },
  u.paused ? 'paused' : 'active');

// waiting is the jobs waiting on u, summed over tenants; null when unknown.
function waiting(u) {
  if (!u.runtime || !u.runtime.waiting_by_tenant) return null;
  return Object.values(u.runtime.waiting_by_tenant).reduce((a, b) => a + b, 0);
}

const upstreamLink = (name) => h('a', { href: `#/upstream/${encodeURIComponent(name)}` }, name);

const cols = [
  ['upstream', (u) => upstreamLink(u.name)],
  ['state', pauseBadge],
  ['rate', (u) => u.config.rate, true],
  ['burst', (u) => fmtNum(u.config.burst), true],
  ['concurrency', (u) => (u.config.concurrency ? fmtNum(u.config.concurrency) : 'none'), true],
  ['pause scope', (u) => u.config.pause_scope],
  ['waiting', (u) => fmtNum(waiting(u)), true],
];

export function upstreams(main) {
  const prev = h('button', { type: 'button', id: 'upstreams-prev' }, '← previous');
  const next = h('button', { type: 'button', id: 'upstreams-next' }, 'next →');
  const status = h('p', { class: 'error' });
  const out = h('div', {});
  let cursors = [''], nextCursor = null;
  const load = async () => {
    const cur = cursors[cursors.length - 1];
    try {
      const p = await get(`/v1/upstreams?limit=50${cur ? `&cursor=${enc(cur)}` : ''}`);
      nextCursor = p.cursor;
      out.replaceChildren(p.upstreams.length
        ? table('upstreams', cols, p.upstreams, (u) => ({ 'data-upstream': u.name }))
        : h('p', { class: 'muted', id: 'upstreams' }, 'No upstream. Declare them in the configuration (upstreams:) or with PUT /v1/upstreams/{name}.'));
      errorText(status, null);
    } catch (err) { errorText(status, err); }
    prev.disabled = cursors.length < 2;
    next.disabled = !nextCursor;
  };
  prev.addEventListener('click', () => { cursors.pop(); load(); });
  next.addEventListener('click', () => { if (nextCursor) { cursors.push(nextCursor); load(); } });
  main.append(h('h1', {}, 'Upstreams'),
    h('div', { class: 'toolbar' }, prev, next, h('button', { type: 'button', onclick: load }, 'refresh')),
    h('p', { class: 'muted' }, 'Shared quotas of third-party accounts: every tenant\'s jobs naming one leave at its rate together.'),
    status, out);
  load();
  return () => {};
}

export function upstream(main, { me, arg }) {
  const path = `/v1/upstreams/${enc(arg)}`;
  const cards = h('div', { class: 'cards' });
  const controls = h('div', { class: 'toolbar', id: 'upstream-controls' });
  const msg = h('p', { class: 'error', id: 'upstream-error' });
  const cfg = h('pre', { id: 'upstream-config' });
  const byTenant = h('div', { id: 'upstream-waiting' });
  main.append(h('h1', {}, 'Upstream ', h('span', { id: 'upstream-name' }, arg)), cards, controls, msg,
    h('h2', {}, 'Waiting jobs by tenant'), byTenant, h('h2', {}, 'Configuration'), cfg);
  let timer = null, stopped = false;
  const render = (u) => {
    cards.replaceChildren(
      card('upstream-state', 'state', h('span', { id: 'upstream-pause' }, pauseText(u))),
      card('upstream-rate', 'rate / burst', `${u.config.rate} / ${fmtNum(u.config.burst)}`),
      card('upstream-effective', 'effective rate', u.runtime ? `${fmtNum(u.runtime.effective_rate)}/s` : '–'),
      card('upstream-waiting-total', 'waiting jobs', fmtNum(waiting(u))),
      card('upstream-running', 'running / concurrency', `${u.runtime ? fmtNum(u.runtime.running) : '–'} / ${u.config.concurrency ? fmtNum(u.config.concurrency) : 'none'}`),
      card('upstream-quota', 'reported quota left', fmtQuota(u.runtime && u.runtime.quota)),
      card('upstream-paced', 'paced rate', u.runtime && u.runtime.paced_rate != null ? `${fmtRate(u.runtime.paced_rate)} ${u.runtime.quota ? u.runtime.quota.unit : ''}` : '–'),
      card('upstream-version', 'version', `${u.version} (${u.source})`));
    cfg.textContent = JSON.stringify(u.config, null, 2);
    const rows = u.runtime && u.runtime.waiting_by_tenant ? Object.entries(u.runtime.waiting_by_tenant).sort((a, b) => b[1] - a[1]) : [];
    byTenant.replaceChildren(rows.length
      ? table('upstream-tenants', [['tenant', (r) => tenantLink(r[0])], ['waiting', (r) => fmtNum(r[1]), true]], rows)
      : h('p', { class: 'muted' }, u.runtime ? 'None.' : 'Not available from this server.'));
    if (!me.admin) { controls.replaceChildren(); return; }
    const dur = h('input', { id: 'upstream-pause-for', placeholder: 'for (e.g. 30s; empty: until resumed)', size: 32 });
    controls.replaceChildren(
      dur, h('button', { type: 'button', id: 'upstream-pause-btn', class: 'danger', onclick: () => act('pause', dur.value.trim()) }, 'Pause'),
      h('button', { type: 'button', id: 'upstream-resume-btn', disabled: !u.paused, onclick: () => act('resume') }, 'Resume'),
      h('button', { type: 'button', id: 'upstream-delete-btn', class: 'danger', onclick: () => remove(u.version) }, 'Delete'));
  };
  const load = async () => {
    try { render(await get(path)); errorText(msg, null); } catch (err) { errorText(msg, err); }
    if (!stopped) timer = setTimeout(load, 2000);
  };
  const act = async (what, forText) => {
    try {
      const opts = what === 'pause' && forText ? { body: { for: forText } } : {};
      render((await call('POST', `${path}/${what}`, opts)).body);
      errorText(msg, null);
    } catch (err) { errorText(msg, err); }
  };
  // remove deletes the upstream at the version shown (a change since: 412,
  // shown; jobs waiting or running: 409 upstream_in_use, shown), then goes
  // back to the list.
  const remove = async (version) => {
    if (!confirm(`Delete upstream ${arg}? Jobs naming it are refused from then on.`)) return;
    try {
      await call('DELETE', path, { ifMatch: `u${version}` });
      stopped = true; clearTimeout(timer);
      location.hash = '#/upstreams';
    } catch (err) { errorText(msg, err); }
  };
  load();
  return () => { stopped = true; clearTimeout(timer); };
}
