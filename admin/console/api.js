// Requests to walbus: the JSON API under /$walbus and the Service Bus
// administration API (Atom XML), with the console's sign-in.
//
// Every request carries X-Walbus-Console: 1, which from loopback is all
// walbus asks. Elsewhere it answers 401 until the console sends a SAS
// token: then the sign-in form asks for a key name and key, trades them
// for a token at POST /$walbus/token, and every waiting request is sent
// again with it. The token lives in sessionStorage, so it goes with the tab.

const tokenKey = 'walbus.token';

// setToken keeps token (null forgets it) and tells the page with a
// "walbus-token" event on window.
function setToken(token) {
  if (token === null) sessionStorage.removeItem(tokenKey);
  else sessionStorage.setItem(tokenKey, token);
  window.dispatchEvent(new Event('walbus-token'));
}

// encodePath encodes each segment of a link address for a URL, keeping
// "/" and "$" as they are: "orders/$DeadLetterQueue".
export function encodePath(path) {
  return path.split('/').map(s => encodeURIComponent(s).replace(/%24/g, '$')).join('/');
}

// HTTPError is an answer other than 2xx: status and the server's text.
class HTTPError extends Error {
  constructor(status, text) {
    super(text);
    this.status = status;
  }
}

// request sends method to url (a path on walbus) and returns the Response
// when it is 2xx. A 401 waits for a sign-in and sends it again; any other
// failure throws HTTPError with the server's error text.
export async function request(method, url, { body, json, headers = {} } = {}) {
  for (;;) {
    const h = { 'X-Walbus-Console': '1', ...headers };
    const token = sessionStorage.getItem(tokenKey);
    if (token) h.Authorization = token;
    if (json !== undefined) {
      h['Content-Type'] = 'application/json';
      body = JSON.stringify(json);
    }
    const resp = await fetch(url, { method, headers: h, body, cache: 'no-store' });
    if (resp.status === 401) {
      const why = await errorText(resp);
      if (token) setToken(null);
      await signIn(token ? 'The token was refused: ' + why : why);
      continue;
    }
    if (!resp.ok) {
      throw new HTTPError(resp.status, `${method} ${decodeURI(url)}: ${resp.status} ${await errorText(resp)}`);
    }
    return resp;
  }
}

// getJSON and postJSON call the JSON API; path is below /$walbus.
export async function getJSON(path) {
  return (await request('GET', '/$walbus/' + path)).json();
}

export async function postJSON(path, body) {
  const resp = await request('POST', '/$walbus/' + path, body === undefined ? {} : { json: body });
  const text = await resp.text();
  return text ? JSON.parse(text) : {};
}

// errorText is what a failed response says: the "error" of a JSON body,
// the <Detail> of an Atom error, or the text as it is.
async function errorText(resp) {
  const text = await resp.text();
  const type = resp.headers.get('Content-Type') || '';
  if (type.includes('json')) {
    try {
      return JSON.parse(text).error || text;
    } catch {
      return text;
    }
  }
  if (type.includes('xml')) {
    const doc = new DOMParser().parseFromString(text, 'application/xml');
    const detail = doc.getElementsByTagName('Detail')[0];
    if (detail) return detail.textContent;
  }
  return text.trim() || resp.statusText;
}

// The sign-in: one form for every request that waits on it.
let pending = null; // {promise, resolve} while the form is shown

// signIn shows the sign-in form with why, and resolves once a token is
// stored.
function signIn(why) {
  const form = document.getElementById('signin');
  form.querySelector('[data-testid="signin-reason"]').textContent = why;
  if (!pending) {
    let resolve;
    const promise = new Promise(r => (resolve = r));
    pending = { promise, resolve };
    form.hidden = false;
    form.querySelector('[data-testid="signin-keyname"]').focus();
  }
  return pending.promise;
}

// setupSignIn wires the form: a submit trades the key for a token.
export function setupSignIn() {
  const form = document.getElementById('signin');
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const keyName = form.querySelector('[data-testid="signin-keyname"]').value.trim();
    const key = form.querySelector('[data-testid="signin-key"]').value;
    const reason = form.querySelector('[data-testid="signin-reason"]');
    try {
      const resp = await fetch('/$walbus/token', {
        method: 'POST',
        headers: { 'X-Walbus-Console': '1', 'Content-Type': 'application/json' },
        body: JSON.stringify({ keyName, key }),
        cache: 'no-store',
      });
      if (!resp.ok) throw new Error(`${resp.status} ${await errorText(resp)}`);
      const { token } = await resp.json();
      setToken(token);
    } catch (err) {
      reason.textContent = 'Sign-in failed: ' + err.message;
      return;
    }
    form.hidden = true;
    form.querySelector('[data-testid="signin-key"]').value = '';
    const p = pending;
    pending = null;
    p?.resolve();
  });
}

// signOut forgets the token.
export function signOut() {
  setToken(null);
}

export function signedIn() {
  return sessionStorage.getItem(tokenKey) !== null;
}
