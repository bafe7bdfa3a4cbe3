// web/api.js — the API as the page calls it: fetch with the token (when the
// server asked for one) as "Authorization: Bearer", and the token prompt.
// The token lives in sessionStorage: this tab only, gone when it closes.
const KEY = 'opsrun.token';
let token = sessionStorage.getItem(KEY) || '';
let asking = null; // the pending prompt, shared by every caller that got a 401

export function getToken() {
  return token;
}

export function forgetToken() {
  token = '';
  sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

async function send(path, opts) {
  const headers = { Accept: 'application/json', ...(opts.headers || {}) };
  if (token) headers.Authorization = 'Bearer ' + token;
  return fetch(path, { ...opts, headers, cache: 'no-store' });
}

// Shows the token form until a token the server accepts is given.
function askToken(message) {
  if (asking) return asking;
  const dlg = document.getElementById('login');
  const form = document.getElementById('l-form');
  const input = document.getElementById('l-token');
  const err = document.getElementById('l-error');
  err.textContent = message || '';
  asking = new Promise((resolve) => {
    const submit = async (ev) => {
      ev.preventDefault();
      const t = input.value.trim();
      if (!t) return;
      const r = await fetch('/runs?limit=1', { headers: { Authorization: 'Bearer ' + t }, cache: 'no-store' });
      if (r.status === 401) {
        err.textContent = 'The server does not know this token.';
        input.select();
        return;
      }
      token = t;
      sessionStorage.setItem(KEY, t);
      input.value = '';
      form.removeEventListener('submit', submit);
      dlg.removeEventListener('close', keep);
      dlg.close();
      asking = null;
      document.getElementById('forget').hidden = false;
      resolve();
    };
    // Without a token there is nothing to show: Escape does not close it.
    // A browser may close it all the same (Chrome lets a second Escape
    // through a refused cancel unless the user did something in between),
    // so a form closed without a token opens again.
    const keep = () => {
      if (dlg.open) return;
      dlg.showModal();
      input.focus();
    };
    form.addEventListener('submit', submit);
    dlg.addEventListener('cancel', (ev) => ev.preventDefault());
    dlg.addEventListener('close', keep);
    dlg.showModal();
    input.focus();
  });
  return asking;
}

// A 401 asks for a token, then the request is sent again. Other errors
// throw an ApiError with the problem object.
export async function api(path, opts = {}) {
  let r = await send(path, opts);
  while (r.status === 401) {
    await askToken(token ? 'The token was refused; enter another.' : '');
    r = await send(path, opts);
  }
  const type = r.headers.get('Content-Type') || '';
  const body = r.status === 204 ? null : type.includes('json') ? await r.json() : await r.text();
  if (!r.ok) throw new ApiError(r.status, body);
  return { status: r.status, body, headers: r.headers };
}

// Whether the server wants a token: asks for one now if so (before the
// stream opens, which cannot tell a 401 from a network error).
export async function ensureToken() {
  await api('/runs?limit=1');
  if (token) document.getElementById('forget').hidden = false;
}

export { askToken };
