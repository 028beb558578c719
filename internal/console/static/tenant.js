// tenant.js — one tenant: its live chart and numbers (a 1 s poll of
// GET /v1/tenants/{t}/live), its recent attempts (from the same poll), policy (edit with If-Match: a conflict is
// shown, never overwritten), pause/resume, its jobs by state, dead letters, secrets.
import { call, get, enc } from './api.js';
import { h, fmtNum, fmtSecs, fmtRate, fmtQuota, badge, table, errorText, card } from './ui.js';
import { newChart, draw, WINDOW_MS } from './chart.js';

export function tenant(main, { me, arg: id }) {
  const base = `/v1/tenants/${enc(id)}`;
  const ctx = { me, id, base, points: [], view: null, dead: -1 };
  ctx.status = h('p', { class: 'error', id: 'tenant-error' });
  ctx.head = h('div', { class: 'toolbar' });
  ctx.cards = h('div', { class: 'cards', id: 'tenant-stats' });
  ctx.chart = newChart();
  ctx.recent = h('div', { id: 'recent-box' });
  ctx.circuits = h('div', { id: 'circuits-box' });
  ctx.policy = h('div', { id: 'policy' });
  ctx.jobsBox = h('div', { id: 'jobs-box' });
  ctx.deadBox = h('div', { id: 'dead-box' });
  ctx.secrets = h('div', { id: 'secrets-box' });
  main.append(h('h1', { id: 'tenant-title' }, `Tenant ${id}`), ctx.status, ctx.head, ctx.cards,
    h('h2', {}, 'Deliveries per second (up to the last 15 minutes)'), ctx.chart,
    h('p', { class: 'muted' }, 'Jobs that left the backlog each second (delivered, dead-lettered or canceled), as this throttler sampled them once a second since the tenant was first opened on it.'),
    h('h2', {}, 'Open destinations'), ctx.circuits,
    h('h2', {}, 'Recent attempts'), ctx.recent, h('h2', {}, 'Policy'), ctx.policy, h('h2', {}, 'Jobs'), ctx.jobsBox, h('h2', {}, 'Dead letters'), ctx.deadBox,
    h('h2', {}, 'Webhook secrets'), ctx.secrets);
  let alive = true, timer = 0;
  const tick = async () => {
    await poll(ctx);
    if (alive) timer = setTimeout(tick, 1000);
  };
  tick();
  loadJobs(ctx, 'queued');
  loadSecrets(ctx);
  return () => { alive = false; clearTimeout(timer); };
}

async function poll(ctx) {
  const since = ctx.points.length ? ctx.points[ctx.points.length - 1].t : 0;
  try {
    const live = await get(`${ctx.base}/live${since ? `?since=${since}` : ''}`);
    ctx.points.push(...live.points);
    const cut = (ctx.points.length ? ctx.points[ctx.points.length - 1].t : 0) - WINDOW_MS;
    while (ctx.points.length && ctx.points[0].t < cut) ctx.points.shift();
    draw(ctx.chart, ctx.points);
    showView(ctx, live.tenant);
    showRecent(ctx, live.recent_attempts || []);
    errorText(ctx.status, null);
  } catch (err) { errorText(ctx.status, err); }
}

function showView(ctx, t) {
  const first = !ctx.view;
  ctx.view = t;
  const writes = ctx.me.admin ? [
    h('button', { type: 'button', id: 'pause', class: 'danger', onclick: () => act(ctx, 'pause') }, 'Pause'),
    h('button', { type: 'button', id: 'resume', onclick: () => act(ctx, 'resume') }, 'Resume')] : [];
  ctx.head.replaceChildren(h('span', {}, 'state: '), h('span', { id: 'tenant-state' }, badge(t)), ...writes);
  ctx.cards.replaceChildren(
    card('stat-backlog', 'backlog', fmtNum(t.backlog)),
    card('stat-running', 'running / concurrency', `${fmtNum(t.running)} / ${fmtNum(t.policy.concurrency)}`),
    card('stat-released', 'released', fmtNum(t.released)),
    card('stat-oldest', 'oldest job waiting', fmtSecs(t.oldest_job_age_s)),
    card('stat-eta', 'drain ETA', fmtSecs(t.drain_eta_s)),
    card('stat-inflow', 'inflow (last minute)', fmtRate(t.inflow_per_s)),
    card('stat-rate', 'configured / effective rate', `${t.policy.rate} / ${fmtRate(t.effective_rate)}`),
    card('stat-quota', 'upstream quota left', fmtQuota(t.quota)),
    card('stat-paced', 'paced rate', t.paced_rate == null ? '–' : `${fmtRate(t.paced_rate)} ${t.quota ? t.quota.unit : ''}`),
    card('stat-draining', 'draining', t.draining ? 'yes' : 'no'),
    card('stat-dead', 'dead letters', fmtNum(t.dead_letters)));
  showCircuits(ctx, t.open_destinations || []);
  if (first) showPolicy(ctx);
  if (t.dead_letters !== ctx.dead) { ctx.dead = t.dead_letters; loadDead(ctx); }
}

// showCircuits shows the destinations the tenant's jobs wait for, their
// circuits open (docs/design.md §4.5): those jobs use no attempt meanwhile.
function showCircuits(ctx, ds) {
  const key = ds.map((d) => `${d.destination}:${d.state}:${d.until}:${d.jobs_until}`).join(',');
  if (key === ctx.circuitsKey) return;
  ctx.circuitsKey = key;
  ctx.circuits.replaceChildren(ds.length ? table('open-destinations', [
    ['destination', (d) => d.destination],
    ['circuit', (d) => h('span', { class: `outcome ${d.state}`, 'data-state': d.state }, d.state.replace('_', '-'))],
    ['until', (d) => (d.until ? new Date(d.until).toISOString() : '–')],
    ['jobs come back', (d) => new Date(d.jobs_until).toISOString()]], ds, (d) => ({ 'data-destination': d.destination }))
    : h('p', { class: 'muted', id: 'open-destinations' }, 'None: every destination of this tenant is taking its jobs.'));
}

// showRecent shows the tenant's last attempts, newest first; the table is
// rebuilt only when they changed.
function showRecent(ctx, rs) {
  const key = rs.length ? `${rs.length}:${rs[0].at}:${rs[0].job_id}` : '0';
  if (key === ctx.recentKey) return;
  ctx.recentKey = key;
  ctx.recent.replaceChildren(rs.length ? table('recent-attempts', [
    ['finished', (a) => new Date(a.at).toISOString()],
    ['job', (a) => h('a', { href: `#/job/${enc(a.job_id)}` }, a.job_id)],
    ['outcome', (a) => h('span', { class: `outcome ${a.outcome}` }, a.outcome)],
    ['status', (a) => (a.status ? String(a.status) : '–'), true],
    ['latency', (a) => `${fmtNum(a.latency_ms)} ms`, true]], rs)
    : h('p', { class: 'muted', id: 'recent-attempts' }, 'None yet.'));
}

async function act(ctx, what) {
  try {
    showView(ctx, (await call('POST', `${ctx.base}/${what}`)).body);
    errorText(ctx.status, null);
  } catch (err) { errorText(ctx.status, err); }
}

// showPolicy shows the effective policy and, for an admin key, an editor
// whose If-Match is the version shown when editing began.
function showPolicy(ctx) {
  const t = ctx.view;
  const pre = h('pre', { id: 'policy-view' }, JSON.stringify(t.policy, null, 2));
  const ver = h('p', { class: 'muted', id: 'policy-version' }, `version ${t.version}`);
  if (!ctx.me.admin) { ctx.policy.replaceChildren(ver, pre); return; }
  const edit = h('button', { type: 'button', id: 'policy-edit', onclick: () => editPolicy(ctx, t) }, 'Edit');
  ctx.policy.replaceChildren(ver, pre, edit);
}

function editPolicy(ctx, t) {
  const version = t.version;
  const area = h('textarea', { id: 'policy-body', spellcheck: 'false' });
  area.value = JSON.stringify(t.policy, null, 2);
  const msg = h('p', { class: 'error', id: 'policy-error' });
  const save = async () => {
    let body;
    try { body = JSON.parse(area.value); } catch (e) { msg.textContent = `Not JSON: ${e.message}`; return; }
    try {
      const r = await call('PUT', `${ctx.base}/policy`, { body, ifMatch: version });
      ctx.view = { ...ctx.view, policy: r.body.policy, version: r.body.version };
      showPolicy(ctx);
      ctx.policy.append(h('p', { id: 'policy-saved' }, `Saved: version ${r.body.version}.`));
    } catch (err) {
      msg.textContent = err.status === 409 || err.status === 412
        ? `Conflict — not saved: ${err.message}. Someone changed the policy since you opened it; reload the page to see theirs.`
        : `${err.status || ''} ${err.message}`;
    }
  };
  ctx.policy.replaceChildren(h('p', { class: 'muted' }, `Editing version ${version}. The body replaces the tenant's overrides (PUT with If-Match: "${version}").`),
    area, h('div', { class: 'toolbar' },
      h('button', { type: 'button', id: 'policy-save', class: 'primary', onclick: save }, 'Save'),
      h('button', { type: 'button', onclick: () => showPolicy(ctx) }, 'Cancel')), msg);
}

// loadJobs shows the first 50 of the tenant's jobs in state (GET
// /v1/tenants/{t}/jobs), the next to leave first, with a state picker.
async function loadJobs(ctx, state) {
  const msg = h('p', { class: 'error', id: 'jobs-error' });
  const pick = h('select', { id: 'jobs-state', onchange: (e) => loadJobs(ctx, e.target.value) },
    ['queued', 'delayed', 'running'].map((s) => h('option', { value: s, selected: s === state }, s)));
  const reload = h('button', { type: 'button', id: 'jobs-reload', onclick: () => loadJobs(ctx, state) }, 'Reload');
  try {
    const page = await get(`${ctx.base}/jobs?state=${enc(state)}&limit=50`);
    const cols = [
      ['job', (j) => h('a', { href: `#/job/${enc(j.id)}` }, j.id)],
      ['state', (j) => j.state],
      ['created', (j) => j.created || '–'],
      ['due', (j) => j.run_at || j.eta || '–'],
      ['attempts', (j) => fmtNum(j.attempt_count), true]];
    const more = page.cursor ? h('p', { class: 'muted' }, 'The first 50 shown.') : null;
    ctx.jobsBox.replaceChildren(h('div', { class: 'toolbar' }, pick, reload),
      page.jobs.length ? table('jobs', cols, page.jobs, (j) => ({ 'data-job': j.id })) : h('p', { class: 'muted', id: 'jobs' }, 'None.'), more);
  } catch (err) { errorText(msg, err); ctx.jobsBox.replaceChildren(h('div', { class: 'toolbar' }, pick, reload), msg); }
}

async function loadDead(ctx) {
  const msg = h('p', { class: 'error', id: 'dead-error' });
  try {
    const page = await get(`${ctx.base}/dead?limit=50`);
    const cols = [
      ['job', (j) => h('a', { href: `#/job/${enc(j.id)}` }, j.id)],
      ['died', (j) => j.ended || '–'],
      ['reason', (j) => j.dead_reason || lastAttempt(j)],
      ['attempts', (j) => fmtNum(j.attempt_count), true]];
    if (ctx.me.admin) cols.push(['', (j) => h('button', { type: 'button', class: 'replay', onclick: () => replay(ctx, msg, j.id) }, 'Replay')]);
    const all = ctx.me.admin && page.jobs.length
      ? h('button', { type: 'button', id: 'replay-all', onclick: () => replayAll(ctx, msg) }, 'Replay all') : null;
    ctx.deadBox.replaceChildren(h('div', {}, page.jobs.length ? table('dead', cols, page.jobs, (j) => ({ 'data-job': j.id }))
      : h('p', { class: 'muted', id: 'dead' }, 'None.'), all, msg));
  } catch (err) { errorText(msg, err); ctx.deadBox.replaceChildren(msg); }
}

function lastAttempt(j) {
  const a = j.attempts[j.attempts.length - 1];
  return a ? `${a.status || ''} ${a.error || ''}`.trim() || '–' : '–';
}

async function replay(ctx, msg, id) {
  try { await call('POST', `/v1/jobs/${enc(id)}/replay`); ctx.dead = -1; } catch (err) { errorText(msg, err); }
}

async function replayAll(ctx, msg) {
  try {
    let cursor = '';
    do {
      const r = await call('POST', `${ctx.base}/dead:replay`, { body: cursor ? { cursor } : {} });
      cursor = r.body.cursor;
    } while (cursor);
    ctx.dead = -1;
  } catch (err) { errorText(msg, err); }
}

async function loadSecrets(ctx) {
  const msg = h('p', { class: 'error', id: 'secrets-error' });
  if (!ctx.me.admin) {
    ctx.secrets.replaceChildren(h('p', { class: 'muted' }, 'Secrets are listed to admin keys only.'));
    return;
  }
  try {
    const list = await get(`${ctx.base}/secrets`);
    const cols = [['id', (s) => s.id], ['created', (s) => s.created_at || '–'], ['expires', (s) => s.expires_at || 'no expiry'],
      ['', (s) => h('button', { type: 'button', class: 'danger secret-delete', onclick: () => delSecret(ctx, msg, s.id) }, 'Delete')]];
    ctx.secrets.replaceChildren(
      list.length ? table('secrets', cols, list, (s) => ({ 'data-secret': s.id })) : h('p', { class: 'muted', id: 'secrets' }, 'No secret by API.'),
      h('button', { type: 'button', id: 'secret-rotate', onclick: () => rotate(ctx, msg) },
        list.length ? 'Rotate (new secret; the others expire in 24 h)' : 'Create a secret'), msg);
  } catch (err) {
    if (err.code === 'secrets_disabled') msg.className = 'muted';
    errorText(msg, err);
    ctx.secrets.replaceChildren(msg);
  }
}

async function rotate(ctx, msg) {
  try {
    const r = (await call('POST', `${ctx.base}/secrets`, { body: {} })).body;
    document.getElementById('secret-value').textContent = r.secret;
    document.getElementById('secret-id').textContent = `id ${r.id}`;
    document.getElementById('secret-dialog').showModal();
    loadSecrets(ctx);
  } catch (err) { errorText(msg, err); }
}

async function delSecret(ctx, msg, id) {
  if (!confirm(`Delete secret ${id}? Webhooks stop being signed with it at once.`)) return;
  try { await call('DELETE', `${ctx.base}/secrets/${enc(id)}`); loadSecrets(ctx); } catch (err) { errorText(msg, err); }
}
