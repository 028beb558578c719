// api.js — every call the console makes: the public /v1 API with the key
// the operator signed in with (sessionStorage: this tab only, gone when it
// closes; sent as Authorization: Bearer, never as a cookie).

const KEY = 'sluice.apiKey';

export function apiKey() { return sessionStorage.getItem(KEY) || ''; }
export function setApiKey(k) { sessionStorage.setItem(KEY, k); }
export function clearApiKey() { sessionStorage.removeItem(KEY); }

// ApiError carries the API's JSON error (status, code, message) and its
// Retry-After in seconds (0: none).
export class ApiError extends Error {
  constructor(status, body, retryAfter = 0) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || '';
    this.retryAfter = retryAfter;
  }
}

// call sends one request; it resolves to {status, body, etag} for a 2xx
// and rejects with an ApiError otherwise. opts: body (JSON), ifMatch.
export async function call(method, path, opts = {}) {
  const headers = { Authorization: `Bearer ${apiKey()}` };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.ifMatch !== undefined) headers['If-Match'] = `"${opts.ifMatch}"`;
  const resp = await fetch(path, {
    method, headers, cache: 'no-store', credentials: 'omit',
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  let body = null;
  const text = await resp.text();
  if (text) { try { body = JSON.parse(text); } catch { body = null; } }
  if (!resp.ok) {
    const ra = Number.parseInt(resp.headers.get('Retry-After') || '', 10);
    throw new ApiError(resp.status, body, Number.isFinite(ra) && ra > 0 ? ra : 0);
  }
  return { status: resp.status, body, etag: resp.headers.get('ETag') };
}

export const get = (path) => call('GET', path).then((r) => r.body);
export const enc = encodeURIComponent;
