// The namespace overview: every queue, topic and subscription with its
// live counts, size on disk and send/receive rates, a name filter, and
// the form that creates entities.

import { h, replace, bytes, rate, field } from './dom.js';
import { sparkline } from './spark.js';
import { newEntity, put } from './atom.js';
import { report, status } from './ui.js';

// countColumns are the overview's count columns: the key in counts and
// whether a topic has it (a topic holds only scheduled messages and,
// after forwarding failures, transfer dead letters).
const countColumns = [
  { key: 'active', title: 'Active', topic: false },
  { key: 'locked', title: 'Locked', topic: false },
  { key: 'deferred', title: 'Deferred', topic: false },
  { key: 'scheduled', title: 'Scheduled', topic: true },
  { key: 'deadLetter', title: 'Dead-letter', topic: false },
  { key: 'transferDeadLetter', title: 'Transfer DL', topic: true },
];

export function overviewView(ctx) {
  let filterText = '';
  const filter = h('input', {
    type: 'search', placeholder: 'Filter by name', 'data-testid': 'filter', 'aria-label': 'filter by name',
    oninput: ev => { filterText = ev.target.value.trim().toLowerCase(); update(ctx.state.overview); },
  });
  const summary = h('span', { class: 'muted', 'data-testid': 'overview-summary' });
  const tbody = h('tbody', { 'data-testid': 'entities' });
  const create = createForm(ctx);
  const el = h('section', { 'data-testid': 'overview' },
    h('div', { class: 'toolbar' }, h('h1', null, 'Namespace'), summary, h('span', { class: 'grow' }), filter,
      h('button', { 'data-testid': 'create-open', onclick: () => create.toggle() }, 'New entity…')),
    create.el,
    h('table', { class: 'entities' },
      h('thead', null, h('tr', null,
        h('th', null, 'Name'), h('th', null, 'Kind'), h('th', null, 'Status'),
        countColumns.map(c => h('th', { class: 'num' }, c.title)),
        h('th', { class: 'num' }, 'On disk'), h('th', null, 'Sent /s'), h('th', null, 'Received /s'))),
      tbody));

  function update(ov) {
    if (!ov) return;
    const rows = ordered(ov.entities).filter(e => matches(e, filterText, ov.entities));
    replace(tbody, rows.map(e => row(ctx, e)),
      rows.length === 0 ? h('tr', null, h('td', { colspan: 14, class: 'muted' },
        ov.entities.length === 0 ? 'No entities yet: create one with New entity.' : 'Nothing matches the filter.')) : null);
    const n = kind => {
      const count = ov.entities.filter(e => e.kind === kind).length;
      return `${count} ${kind}${count === 1 ? '' : 's'}`;
    };
    summary.textContent = `${n('queue')}, ${n('topic')}, ${n('subscription')}`;
    create.topics(ov.entities.filter(e => e.kind === 'topic').map(e => e.path));
  }
  return { el, update };
}

// ordered sorts entities by path with each topic's subscriptions right
// after it.
function ordered(entities) {
  const key = e => (e.kind === 'subscription' ? e.topic + '\u0000' + e.name : e.path);
  return [...entities].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}

// matches keeps an entity whose path has the filter's text, and a topic
// any of whose subscriptions does.
function matches(e, text, all) {
  if (!text || e.path.toLowerCase().includes(text)) return true;
  return e.kind === 'topic' && all.some(s => s.kind === 'subscription' && s.topic === e.path &&
    s.path.toLowerCase().includes(text));
}

function row(ctx, e) {
  const counts = e.counts || {};
  const sent = ctx.state.history.rates(e.path, 'sent');
  const received = ctx.state.history.rates(e.path, 'received');
  const name = e.kind === 'subscription' ? e.name : e.path;
  return h('tr', { 'data-testid': 'entity-row', 'data-path': e.path, 'data-kind': e.kind, class: 'kind-' + e.kind },
    h('td', { class: 'name' }, h('a', { href: ctx.entityHash(e.path), 'data-testid': 'entity-link' }, name),
      e.requiresSession ? h('span', { class: 'badge', title: 'requires sessions' }, 'sessions') : null),
    h('td', null, e.kind),
    h('td', { class: e.status && e.status !== 'Active' ? 'warn' : '' }, e.status || 'Active'),
    countColumns.map(c => countCell(c, counts[c.key], e.kind === 'topic')),
    h('td', { class: e.diskBytes === undefined ? 'num muted' : 'num', 'data-testid': 'disk-bytes' },
      e.diskBytes === undefined ? '·' : bytes(e.diskBytes)),
    h('td', null, rateCell(sent, 'spark-sent', 'sent')),
    h('td', null, rateCell(received, 'spark-received', 'received')));
}

function countCell(column, n, topic) {
  if (topic && !column.topic) return h('td', { class: 'num muted' }, '·');
  const cls = ['num'];
  if (n > 0 && (column.key === 'deadLetter' || column.key === 'transferDeadLetter')) cls.push('bad');
  else if (!n) cls.push('zero');
  return h('td', { class: cls.join(' '), 'data-testid': 'count-' + column.key }, String(n || 0));
}

function rateCell(rates, testid, what) {
  const last = rates.length ? rates[rates.length - 1] : 0;
  return h('span', { class: 'rate' }, sparkline(rates, { testid, label: `${what} per second, last ${rates.length} polls` }),
    h('span', { class: 'rate-now', 'data-testid': testid + '-now' }, rate(last)));
}

// createForm makes queues, topics and subscriptions with minimal
// descriptions (the Atom API fills in the defaults).
function createForm(ctx) {
  const kind = h('select', { 'data-testid': 'create-kind', onchange: () => sync() },
    h('option', { value: 'queue' }, 'queue'), h('option', { value: 'topic' }, 'topic'),
    h('option', { value: 'subscription' }, 'subscription'));
  const topic = h('select', { 'data-testid': 'create-topic' });
  const name = h('input', { 'data-testid': 'create-name', required: true, placeholder: 'name' });
  const session = h('input', { type: 'checkbox', 'data-testid': 'create-session' });
  const sql = h('input', { 'data-testid': 'create-sql', placeholder: "e.g. color = 'red' (empty: every message)", size: 36 });
  const topicField = field('Topic', topic);
  const sessionField = field('Requires sessions', session);
  const sqlField = field('Filter (SQL)', sql);
  const form = h('form', { class: 'panel', 'data-testid': 'create-form', hidden: true, onsubmit: submit },
    h('h2', null, 'New entity'),
    h('div', { class: 'row' }, field('Kind', kind), topicField, field('Name', name), sessionField, sqlField,
      h('button', { class: 'primary', 'data-testid': 'create-submit' }, 'Create')));

  function sync() {
    const sub = kind.value === 'subscription';
    topicField.hidden = !sub;
    sqlField.hidden = !sub;
    sessionField.hidden = kind.value === 'topic';
  }
  sync();

  async function submit(ev) {
    ev.preventDefault();
    const k = kind.value;
    const path = k === 'subscription' ? `${topic.value}/Subscriptions/${name.value.trim()}` : name.value.trim();
    if (k === 'subscription' && !topic.value) {
      status('Create a topic first', 'error');
      return;
    }
    const xml = newEntity(k, { requiresSession: session.checked, sql: sql.value.trim() });
    const ok = await report(() => put(path, xml, false).then(() => true), () => `Created ${k} ${path}`);
    if (ok) {
      name.value = '';
      sql.value = '';
      ctx.pollNow();
    }
  }

  return {
    el: form,
    toggle() {
      form.hidden = !form.hidden;
      if (!form.hidden) name.focus();
    },
    // topics refreshes the topic choices, keeping the one chosen.
    topics(paths) {
      const chosen = topic.value;
      if (paths.join('\n') === Array.from(topic.options, o => o.value).join('\n')) return;
      replace(topic, paths.map(p => h('option', { value: p, '.selected': p === chosen }, p)));
    },
  };
}
