// walbus console: the page's shell. It polls /$walbus/overview, keeps
// the rates' history, shows the broker's clock, and routes the hash to a
// view:
//
//	#/                                   the namespace overview
//	#/entity/<path>?view=..&queue=..     one queue, topic or subscription
//
// A view is {el, update(overview)}: el goes into <main>, update runs after
// every poll. Views live in overview.js and entity.js.

import { replace, when } from './dom.js';
import { request, getJSON, setupSignIn, signOut, signedIn } from './api.js';
import { entityHash } from './routes.js';
import { History } from './spark.js';
import { status, report } from './ui.js';
import { overviewView } from './overview.js';
import { entityView } from './entity.js';

// pollEvery is the overview's poll interval in ms: 2 s, or ?poll=ms in
// the page's address (the screenshot test polls faster to fill charts).
const pollEvery = Math.max(200, Number(new URLSearchParams(location.search).get('poll')) || 2000);

// The console's state, one owner: this module. Views read it through ctx.
const state = {
  overview: null, // the last /$walbus/overview answer
  history: new History(60),
  pollError: '', // the last poll's failure, '' after a success
};

let view = null; // the view shown
let pollTimer = 0;
let pollsStarted = 0; // numbers each poll, so that a late answer never replaces a newer one
let pollShown = 0; // the number of the poll whose answer is shown
let sampledAt = 0; // when the rates' history last took a sample (ms)
let resolveFirst;
const firstOverview = new Promise(resolve => (resolveFirst = resolve)); // the first overview

const ctx = {
  state,
  navigate: hash => { location.hash = hash; },
  pollNow,
  // entity finds an entity of the last overview by path.
  entity: path => state.overview?.entities.find(e => e.path === path),
  overviewReady: () => firstOverview,
  entityHash,
};

// poll fetches the overview, records it and updates the view; it runs
// again pollEvery ms after the last poll ends. A poll may start while
// another waits for its answer (pollNow after an action): the newer
// answer wins, and only one timer is ever pending.
async function poll() {
  const number = ++pollsStarted;
  clearTimeout(pollTimer);
  try {
    const ov = await getJSON('overview');
    if (number < pollShown) return;
    pollShown = number;
    state.overview = ov;
    // Samples closer together than half a poll would make the rates
    // jumpy: the counts update, the history waits.
    const now = Date.now();
    if (now - sampledAt >= pollEvery / 2) {
      state.history.add(ov.entities, now);
      sampledAt = now;
    }
    if (state.pollError) status('Connected again', 'ok');
    state.pollError = '';
    resolveFirst(ov);
    showClock(ov);
    view?.update(ov);
  } catch (err) {
    if (state.pollError !== err.message) status('Overview: ' + err.message, 'error');
    state.pollError = err.message;
    document.getElementById('clock').textContent = 'not connected';
  }
  clearTimeout(pollTimer);
  pollTimer = setTimeout(poll, pollEvery);
}

// pollNow polls at once (after an action changed counts).
function pollNow() {
  return poll();
}

// showClock shows the broker's clock, and the test clock's control when
// the broker runs one.
function showClock(ov) {
  document.getElementById('clock').textContent = when(ov.now);
  document.getElementById('clock').dataset.now = ov.now;
  document.getElementById('test-clock').hidden = !ov.testClock;
}

function setupClock() {
  document.getElementById('test-clock').addEventListener('submit', async ev => {
    ev.preventDefault();
    const by = document.querySelector('[data-testid="clock-advance-by"]').value.trim();
    await report(async () => (await request('POST', '/$test/clock?advance=' + encodeURIComponent(by))).json(),
      r => `Test clock advanced by ${by}` + (r.now ? `: now ${when(r.now)}` : ''));
    pollNow();
  });
}

// route shows the view the hash names.
function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [where, query = ''] = hash.split('?');
  const params = new URLSearchParams(query);
  const main = document.getElementById('main');
  let next;
  if (where.startsWith('entity/')) {
    const path = where.slice('entity/'.length).split('/').map(decodeSegment).join('/');
    next = entityView(ctx, path, params);
  } else {
    next = overviewView(ctx);
  }
  view?.destroy?.();
  view = next;
  replace(main, view.el);
  document.querySelector('[data-testid="nav-overview"]').classList.toggle('current', !where);
  if (state.overview) view.update(state.overview);
}

// decodeSegment decodes a path segment of the hash, or leaves one that
// is not well formed (a hand-typed %) as it is.
function decodeSegment(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function setupSignOut() {
  const button = document.querySelector('[data-testid="signout"]');
  const sync = () => { button.hidden = !signedIn(); };
  button.addEventListener('click', () => {
    signOut();
    status('Signed out', 'info');
    sync();
  });
  window.addEventListener('walbus-token', sync);
  sync();
}

function start() {
  setupSignIn();
  setupSignOut();
  setupClock();
  window.addEventListener('hashchange', route);
  route();
  poll();
}

start();
