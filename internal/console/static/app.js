// app.js — sign-in and the router. Pages render into <main> and return a
// stop function that ends their polling when the operator leaves them.
import { apiKey, setApiKey, clearApiKey, get, ApiError } from './api.js';
import { h, errorText } from './ui.js';
import { overview } from './overview.js';
import { tenants } from './tenants.js';
import { tenant } from './tenant.js';
import { job } from './job.js';
import { upstreams, upstream } from './upstreams.js';

const main = document.getElementById('main');
let stop = () => {};
// me is the signed-in key as GET /v1/summary describes it: {name, admin, tenants}.
let me = null;

const routes = [
  [/^#\/tenants$/, () => tenants],
  [/^#\/tenant\/(.+)$/, () => tenant],
  [/^#\/job(?:\/(.*))?$/, () => job],
  [/^#\/upstreams$/, () => upstreams],
  [/^#\/upstream\/(.+)$/, () => upstream],
  [/^(#\/?)?$/, () => overview],
];

async function route() {
  stop();
  stop = () => {};
  main.replaceChildren();
  if (!apiKey()) { signIn(); return; }
  if (!me) {
    try {
      me = (await get('/v1/summary')).key;
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) { signIn(err); return; }
      const msg = h('p', { class: 'error', id: 'signin-error' });
      errorText(msg, err); // the key may be fine: Redis or the network failing
      main.replaceChildren(msg, h('button', { type: 'button', onclick: route }, 'Try again'));
      if (err instanceof ApiError && err.status === 503 && err.retryAfter > 0) {
        // The server is busy (the summary's first read over many tenants
        // outlasts a request): ask again when it says, unless the operator
        // moves on first.
        main.insertBefore(h('p', { class: 'muted', id: 'signin-retry' },
          `Asking again in ${err.retryAfter} s…`), msg.nextSibling);
        const timer = setTimeout(route, err.retryAfter * 1000);
        stop = () => clearTimeout(timer);
      }
      return;
    }
  }
  showNav(true);
  const hash = location.hash;
  for (const [re, page] of routes) {
    const m = hash.match(re);
    if (m) {
      const arg = m[1] === undefined ? '' : decodeURIComponent(m[1]);
      stop = page()(main, { me, arg }) || (() => {});
      return;
    }
  }
  main.append(h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Overview')));
}

function showNav(on) {
  document.getElementById('nav').hidden = !on;
  document.getElementById('signout').hidden = !on;
  document.getElementById('who').textContent = on && me ? `${me.name}${me.admin ? ' (admin)' : ' (read-only)'}` : '';
}

function signIn(err) {
  clearApiKey();
  me = null;
  showNav(false);
  const input = h('input', { id: 'signin-key', type: 'password', autocomplete: 'off', placeholder: 'API key' });
  const msg = h('p', { id: 'signin-error', class: 'error' });
  if (err) errorText(msg, err instanceof ApiError && err.status === 401 ? new Error('Unknown API key') : err);
  const form = h('form', { class: 'signin', id: 'signin', onsubmit: (e) => {
    e.preventDefault();
    if (!input.value.trim()) return;
    setApiKey(input.value.trim());
    route();
  } },
  h('h1', {}, 'Sign in'),
  h('p', { class: 'muted' }, 'With a Sluice API key. It stays in this tab (sessionStorage) and goes only to this server, as Authorization: Bearer.'),
  input, h('button', { id: 'signin-submit', class: 'primary', type: 'submit' }, 'Sign in'), msg);
  main.replaceChildren(form);
  input.focus();
}

document.getElementById('signout').addEventListener('click', () => {
  clearApiKey();
  me = null;
  location.hash = '#/';
  route();
});
// The new secret leaves the page when its dialog closes: at once by the
// button, and by the close event (which the browser fires a task later) for
// Escape.
function clearSecret() {
  document.getElementById('secret-value').textContent = '';
  document.getElementById('secret-id').textContent = '';
}
document.getElementById('secret-close').addEventListener('click', () => {
  clearSecret();
  document.getElementById('secret-dialog').close();
});
document.getElementById('secret-dialog').addEventListener('close', clearSecret);
window.addEventListener('hashchange', route);
route();
