// job.js — look a job up by id (GET /v1/jobs/{id}): state, attempts,
// result; cancel (DELETE) for an admin key.
import { call, get, enc } from './api.js';
import { h, fmtNum, table, errorText, tenantLink } from './ui.js';

export function job(main, { me, arg }) {
  const input = h('input', { id: 'job-id', placeholder: 'job id', size: 40, value: arg || '' });
  const out = h('div', { id: 'job-out' });
  const msg = h('p', { class: 'error', id: 'job-error' });
  const form = h('form', { class: 'toolbar', onsubmit: (e) => {
    e.preventDefault();
    const id = input.value.trim();
    if (id) location.hash = `#/job/${enc(id)}`;
  } }, input, h('button', { type: 'submit', id: 'job-find', class: 'primary' }, 'Look up'));
  main.append(h('h1', {}, 'Job lookup'), form, msg, out);
  if (arg) show(me, arg, out, msg);
  return () => {};
}

async function show(me, id, out, msg) {
  try {
    render(me, await get(`/v1/jobs/${enc(id)}`), out, msg);
    errorText(msg, null);
  } catch (err) { errorText(msg, err); out.replaceChildren(); }
}

function render(me, j, out, msg) {
  const cancel = me.admin && !['succeeded', 'dead', 'canceled'].includes(j.state)
    ? h('button', { type: 'button', id: 'job-cancel', class: 'danger', onclick: async () => {
      try { await call('DELETE', `/v1/jobs/${enc(j.id)}`); show(me, j.id, out, msg); } catch (err) { errorText(msg, err); }
    } }, 'Cancel') : null;
  const attempts = table('job-attempts', [
    ['at', (a) => a.at || '–'], ['status', (a) => (a.status ? String(a.status) : '–'), true],
    ['latency', (a) => `${fmtNum(a.latency_ms)} ms`, true], ['error', (a) => a.error || '']], j.attempts);
  out.replaceChildren(
    h('p', {}, 'tenant ', tenantLink(j.tenant), ` · type ${j.type} · state `, h('b', { id: 'job-state' }, j.state),
      j.dead_reason ? ` (${j.dead_reason})` : '', j.canceled_from ? ` (canceled from ${j.canceled_from})` : ''),
    h('p', { class: 'muted' }, `created ${j.created || '–'} · eta ${j.eta || '–'} · ended ${j.ended || '–'} · ${j.attempt_count} attempt(s)`),
    cancel, h('h2', {}, 'Attempts'), attempts, h('h2', {}, 'Job'), h('pre', {}, JSON.stringify(j.job, null, 2)));
}
