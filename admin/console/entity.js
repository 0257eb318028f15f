// One queue, topic or subscription: live counts, then sections (the
// hash's view=): its messages, its properties (editable), a
// subscription's rules, a session-enabled entity's sessions, a topic's
// subscriptions, and the send form.

import { h, replace, bytes, rate, field, table, when, fromBase64, utf8 } from './dom.js';
import { encodePath, getJSON, postJSON } from './api.js';
import { getDescription, put, remove, listRules, putRule, removeRule, correlationFields, statuses, durationText } from './atom.js';
import { sparkline } from './spark.js';
import { report, confirm } from './ui.js';
import { messageBrowser } from './messages.js';
import { entityHash } from './routes.js';

export function entityView(ctx, path, params) {
  const el = h('section', { class: 'entity', 'data-testid': 'entity-page', 'data-path': path }, h('p', { class: 'muted' }, 'Loading…'));
  let live = null; // the counts strip, once the entity is known
  let section = null; // the section shown, {update?, destroy?}

  ctx.overviewReady().then(() => {
    const e = ctx.entity(path);
    if (!e) {
      replace(el, h('h1', null, path), h('p', { 'data-testid': 'entity-missing' }, 'There is no entity ', h('code', null, path),
        '. ', h('a', { href: '#/' }, 'Back to the namespace')));
      return;
    }
    const views = sectionsOf(e);
    const current = views.find(v => v.id === params.get('view')) || views[0];
    live = countsStrip(ctx, e);
    section = current.make(ctx, e, params);
    replace(el,
      breadcrumb(ctx, e),
      h('div', { class: 'toolbar' },
        h('h1', { 'data-testid': 'entity-title' }, e.kind === 'subscription' ? e.name : e.path),
        h('span', { class: 'badge kind' }, e.kind),
        e.requiresSession ? h('span', { class: 'badge' }, 'sessions') : null,
        h('span', { class: 'grow' }),
        h('button', { class: 'danger', 'data-testid': 'entity-delete', onclick: () => deleteEntity(ctx, e) }, 'Delete ' + e.kind)),
      live.el,
      h('nav', { class: 'tabs', 'data-testid': 'sections' }, views.map(v => h('a', {
        href: entityHash(path, { view: v.id }), class: v === current ? 'current' : '', 'data-testid': 'section-' + v.id,
      }, v.title))),
      section.el);
    if (ctx.state.overview) update(ctx.state.overview);
  });

  function update(ov) {
    const e = ov.entities.find(x => x.path === path);
    if (!e || !live) return;
    live.update(e);
    section?.update?.(e);
  }
  return { el, update, destroy: () => section?.destroy?.() };
}

// sectionsOf lists the sections an entity has.
function sectionsOf(e) {
  const list = [];
  if (e.kind !== 'topic') list.push({ id: 'messages', title: 'Messages', make: messageBrowser });
  if (e.kind === 'topic') {
    list.push({ id: 'subscriptions', title: 'Subscriptions', make: subscriptionsSection });
    list.push({ id: 'messages', title: 'Scheduled messages', make: messageBrowser });
  }
  if (e.kind !== 'subscription') list.push({ id: 'send', title: 'Send', make: sendSection });
  list.push({ id: 'properties', title: 'Properties', make: propertiesSection });
  if (e.kind === 'subscription') list.push({ id: 'rules', title: 'Rules', make: rulesSection });
  if (e.requiresSession) list.push({ id: 'sessions', title: 'Sessions', make: sessionsSection });
  return list;
}

function breadcrumb(ctx, e) {
  const parts = [h('a', { href: '#/' }, 'Namespace')];
  if (e.kind === 'subscription') parts.push(' › ', h('a', { href: ctx.entityHash(e.topic) }, e.topic), ' › ', e.name);
  else parts.push(' › ', e.path);
  return h('div', { class: 'breadcrumb' }, parts);
}

// countsStrip shows the entity's counts and rates, updated every poll.
function countsStrip(ctx, e) {
  const cells = {};
  const items = [['active', 'Active'], ['locked', 'Locked'], ['deferred', 'Deferred'], ['scheduled', 'Scheduled'],
    ['deadLetter', 'Dead-letter'], ['transferDeadLetter', 'Transfer DL']];
  const stat = (key, label) => {
    cells[key] = h('span', { class: 'stat-value', 'data-testid': 'stat-' + key }, '');
    return h('div', { class: 'stat' }, cells[key], h('span', { class: 'stat-label' }, label));
  };
  const sentChart = h('span');
  const receivedChart = h('span');
  const el = h('div', { class: 'stats', 'data-testid': 'entity-stats' },
    items.filter(([key]) => e.kind !== 'topic' || key === 'scheduled' || key === 'transferDeadLetter').map(([k, l]) => stat(k, l)),
    e.diskBytes === undefined ? null : stat('diskBytes', 'On disk'),
    h('div', { class: 'stat wide' }, sentChart, h('span', { class: 'stat-label' }, 'sent /s')),
    h('div', { class: 'stat wide' }, receivedChart, h('span', { class: 'stat-label' }, 'received /s')));
  function update(x) {
    for (const [key] of items) if (cells[key]) cells[key].textContent = String(x.counts?.[key] || 0);
    if (cells.diskBytes) cells.diskBytes.textContent = bytes(x.diskBytes);
    cells.deadLetter?.classList.toggle('bad', (x.counts?.deadLetter || 0) > 0);
    for (const [chart, counter] of [[sentChart, 'sent'], [receivedChart, 'received']]) {
      const rates = ctx.state.history.rates(x.path, counter);
      replace(chart, sparkline(rates, { width: 180, height: 32, testid: 'stat-spark-' + counter }),
        ' ', h('span', { class: 'rate-now' }, rate(rates[rates.length - 1] || 0)));
    }
  }
  return { el, update };
}

async function deleteEntity(ctx, e) {
  if (!(await confirm(`Delete ${e.kind} ${e.path} and every message in it?`, 'Delete'))) return;
  const ok = await report(() => remove(e.path).then(() => true), () => `Deleted ${e.kind} ${e.path}`);
  if (ok) {
    await ctx.pollNow();
    ctx.navigate(e.kind === 'subscription' ? ctx.entityHash(e.topic) : '#/');
  }
}

// subscriptionsSection lists a topic's subscriptions.
function subscriptionsSection(ctx, topic) {
  const body = h('div');
  const el = h('div', { class: 'panel', 'data-testid': 'subscriptions' }, body);
  function update() {
    const subs = (ctx.state.overview?.entities || []).filter(x => x.kind === 'subscription' && x.topic === topic.path);
    replace(body, subs.length === 0 ? h('p', { class: 'muted' }, 'No subscriptions. Create one from the namespace page.')
      : table({ class: 'compact' }, ['Subscription', 'Active', 'Deferred', 'Scheduled', 'Dead-letter', 'Sessions'],
        subs.map(s => [h('a', { href: ctx.entityHash(s.path), 'data-testid': 'subscription-link' }, s.name),
          String(s.counts?.active || 0), String(s.counts?.deferred || 0), String(s.counts?.scheduled || 0),
          String(s.counts?.deadLetter || 0), s.requiresSession ? 'yes' : ''])));
  }
  update();
  return { el, update };
}

// propertiesSection reads the entity's description and edits its
// settings. Save sends the whole description back (an update replaces
// it all), with the edited values in place.
function propertiesSection(ctx, e) {
  const el = h('div', { class: 'panel', 'data-testid': 'properties' }, h('p', { class: 'muted' }, 'Loading…'));
  load();

  async function load() {
    let desc;
    try {
      desc = await getDescription(e.path, e.kind);
    } catch (err) {
      replace(el, h('p', { class: 'error' }, err.message));
      return;
    }
    const inputs = new Map();
    const rows = desc.fields().map(f => {
      const control = f.editable ? editor(f) : h('span', { class: 'readonly', 'data-testid': 'prop-' + f.name }, f.value);
      if (f.editable) inputs.set(f.name, control);
      const hint = f.type === 'duration' ? durationText(f.value) : '';
      return h('tr', { class: f.editable ? '' : 'readonly-row' },
        h('th', null, f.name), h('td', null, control), h('td', { class: 'muted' }, hint));
    });
    const counts = desc.counts();
    const rules = desc.accessRules();
    replace(el,
      h('form', { 'data-testid': 'props-form', onsubmit: ev => { ev.preventDefault(); save(desc, inputs); } },
        h('table', { class: 'props' }, h('tbody', null, rows)),
        rules.length ? h('p', null, 'Access rules (kept as they are): ', rules.join('; ')) : null,
        counts.length ? h('p', { class: 'muted' }, counts.map(c => `${c.name} ${c.value}`).join(' · ')) : null,
        h('div', { class: 'buttons' },
          h('button', { class: 'primary', 'data-testid': 'props-save' }, 'Save'),
          h('button', { type: 'button', 'data-testid': 'props-reload', onclick: load }, 'Reload'))));
  }

  async function save(desc, inputs) {
    const values = {};
    for (const [name, input] of inputs) values[name] = input.type === 'checkbox' ? String(input.checked) : input.value.trim();
    const ok = await report(() => put(e.path, desc.updated(values), true).then(() => true), () => `Saved ${e.path}`);
    if (ok) {
      load();
      ctx.pollNow();
    }
  }
  return { el };
}

// editor is the form control for a setting.
function editor(f) {
  const id = 'prop-' + f.name;
  switch (f.type) {
    case 'bool':
      return h('input', { type: 'checkbox', 'data-testid': id, '.checked': f.value === 'true' });
    case 'int':
      return h('input', { type: 'number', min: 1, 'data-testid': id, value: f.value });
    case 'status':
      return h('select', { 'data-testid': id }, statuses.map(s => h('option', { value: s, '.selected': s === f.value }, s)));
    case 'duration':
      return h('input', { 'data-testid': id, value: f.value, size: 30, title: 'ISO 8601: PT30S, PT5M, P14D' });
    default:
      return h('input', { 'data-testid': id, value: f.value, size: 40 });
  }
}

// rulesSection lists a subscription's rules and adds and deletes them.
function rulesSection(ctx, e) {
  const list = h('div', { 'data-testid': 'rules' }, h('p', { class: 'muted' }, 'Loading…'));
  const el = h('div', { class: 'panel' }, list, ruleForm(e, () => load()));
  load();

  async function load() {
    let rules;
    try {
      rules = await listRules(e.path);
    } catch (err) {
      replace(list, h('p', { class: 'error' }, err.message));
      return;
    }
    replace(list, rules.length === 0 ? h('p', { class: 'muted' }, 'No rules: the subscription takes no messages.')
      : table({ class: 'compact' }, ['Rule', 'Filter', 'Expression', 'Action', ''], rules.map(r => h('tr', {
        'data-testid': 'rule-row', 'data-rule': r.name,
      }, h('td', null, r.name), h('td', null, r.filter), h('td', null, h('code', null, filterText(r))),
      h('td', null, r.action ? h('code', null, r.action) : ''),
      h('td', null, h('button', { class: 'small danger', 'data-testid': 'rule-delete', onclick: () => drop(r.name) }, 'Delete'))))));
  }

  async function drop(name) {
    if (!(await confirm(`Delete rule ${name} of ${e.path}?`, 'Delete'))) return;
    if (await report(() => removeRule(e.path, name).then(() => true), () => `Deleted rule ${name}`)) load();
  }
  return { el };
}

function filterText(r) {
  if (r.filter === 'CorrelationFilter') {
    const parts = Object.entries(r.correlation).map(([k, v]) => `${k} = '${v}'`);
    for (const p of r.properties) parts.push(`${p.key} = ${p.type === 'string' ? `'${p.value}'` : p.value}`);
    return parts.join(' AND ') || '(matches every message)';
  }
  return r.sql;
}

// ruleForm adds a SQL or correlation rule; added runs after a success.
function ruleForm(e, added) {
  const name = h('input', { 'data-testid': 'rule-name', required: true, placeholder: 'name' });
  const type = h('select', { 'data-testid': 'rule-type', onchange: () => sync() },
    h('option', { value: 'SqlFilter' }, 'SQL filter'), h('option', { value: 'CorrelationFilter' }, 'Correlation filter'));
  const sql = h('textarea', { 'data-testid': 'rule-sql', rows: 2, cols: 50, placeholder: "color = 'red' AND quantity > 10" });
  const corr = new Map(correlationFields.map(f => [f, h('input', { 'data-testid': 'rule-corr-' + f, size: 16 })]));
  const props = keyValueRows('rule-prop');
  const action = h('input', { 'data-testid': 'rule-action', size: 50, placeholder: "optional: SET priority = 'high'" });
  const sqlPart = field('SQL expression', sql);
  const corrPart = h('div', null, h('div', { class: 'row' }, [...corr].map(([f, input]) => field(f === 'Label' ? 'Label (subject)' : f, input))),
    h('div', null, h('span', { class: 'field-label' }, 'Application properties'), props.el));
  function sync() {
    sqlPart.hidden = type.value !== 'SqlFilter';
    corrPart.hidden = type.value !== 'CorrelationFilter';
  }
  sync();
  async function submit(ev) {
    ev.preventDefault();
    const rule = { name: name.value.trim(), filter: type.value, sql: sql.value.trim(), action: action.value.trim(),
      correlation: {}, properties: props.values().map(p => ({ key: p.key, value: String(p.value), type: xsdType(p.value) })) };
    for (const [f, input] of corr) if (input.value.trim()) rule.correlation[f] = input.value.trim();
    if (await report(() => putRule(e.path, rule).then(() => true), () => `Added rule ${rule.name} to ${e.path}`)) {
      form.reset();
      props.clear();
      sync();
      added();
    }
  }
  const form = h('form', { class: 'subpanel', 'data-testid': 'rule-form', onsubmit: submit },
    h('h3', null, 'Add a rule'),
    h('div', { class: 'row' }, field('Name', name), field('Type', type)),
    sqlPart, corrPart, field('Action (SQL, optional)', action),
    h('div', { class: 'buttons' }, h('button', { class: 'primary', 'data-testid': 'rule-add' }, 'Add rule')));
  return form;
}

function xsdType(v) {
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'number') return Number.isInteger(v) ? 'long' : 'double';
  return 'string';
}

// keyValueRows edits a list of application properties, each a key, a
// value and its type (string, number or boolean); values() reads them
// with the values typed.
function keyValueRows(prefix) {
  const rows = h('div', { class: 'kv-rows', 'data-testid': prefix + 's' });
  function add() {
    const key = h('input', { 'data-testid': prefix + '-key', placeholder: 'key', size: 16 });
    const value = h('input', { 'data-testid': prefix + '-value', placeholder: 'value', size: 24 });
    const type = h('select', { 'data-testid': prefix + '-type' },
      ['string', 'number', 'boolean'].map(t => h('option', { value: t }, t)));
    const row = h('div', { class: 'kv-row', 'data-testid': prefix + '-row' }, key, value, type,
      h('button', { type: 'button', class: 'small', title: 'remove', onclick: () => row.remove() }, '×'));
    rows.append(row);
    return row;
  }
  const el = h('div', null, rows,
    h('button', { type: 'button', class: 'small', 'data-testid': prefix + '-add', onclick: add }, '+ property'));
  return {
    el,
    clear() {
      rows.replaceChildren();
    },
    values() {
      const out = [];
      for (const row of rows.children) {
        const [key, value, type] = row.querySelectorAll('input, select');
        if (!key.value.trim()) continue;
        let v = value.value;
        if (type.value === 'number') v = Number(v);
        if (type.value === 'boolean') v = v.trim().toLowerCase() === 'true';
        out.push({ key: key.value.trim(), value: v });
      }
      return out;
    },
  };
}

// sendSection sends one message to a queue or topic through walbus.
function sendSection(ctx, e) {
  const body = h('textarea', { 'data-testid': 'send-body', rows: 6, cols: 70, placeholder: '{"orderId": 17}' });
  const input = (id, placeholder) => h('input', { 'data-testid': 'send-' + id, placeholder, size: 24 });
  const contentType = input('content-type', 'application/json');
  const messageId = input('message-id', 'generated when empty');
  const sessionId = input('session-id', e.requiresSession ? 'required' : '');
  const subject = input('subject', '');
  const correlationId = input('correlation-id', '');
  const ttl = input('ttl', '1h or PT1H');
  const schedule = h('input', { type: 'datetime-local', step: 1, 'data-testid': 'send-schedule' });
  const props = keyValueRows('send-prop');
  async function submit(ev) {
    ev.preventDefault();
    const msg = { body: body.value };
    const set = (k, el) => { if (el.value.trim()) msg[k] = el.value.trim(); };
    set('contentType', contentType);
    set('messageId', messageId);
    set('sessionId', sessionId);
    set('subject', subject);
    set('correlationId', correlationId);
    set('timeToLive', ttl);
    if (schedule.value) msg.scheduledEnqueueTime = new Date(schedule.value).toISOString();
    const ap = props.values();
    if (ap.length) msg.applicationProperties = Object.fromEntries(ap.map(p => [p.key, p.value]));
    const r = await report(() => postJSON('send/' + encodePath(e.path), msg),
      r => (r.sequenceNumber ? `Scheduled message ${r.sequenceNumber} on ${e.path}` : `Sent a message to ${e.path}`));
    if (r) ctx.pollNow();
  }
  const el = h('form', { class: 'panel', 'data-testid': 'send-form', onsubmit: submit },
    field('Body (text)', body),
    h('div', { class: 'row' }, field('Content type', contentType), field('Message ID', messageId),
      field('Session ID', sessionId), field('Subject', subject), field('Correlation ID', correlationId)),
    h('div', null, h('span', { class: 'field-label' }, 'Application properties'), props.el),
    h('div', { class: 'row' }, field('Time to live', ttl), field('Schedule for (local time)', schedule)),
    h('div', { class: 'buttons' }, h('button', { class: 'primary', 'data-testid': 'send-submit' }, 'Send')));
  return { el };
}

// sessionsSection lists the sessions of a session-enabled entity.
function sessionsSection(ctx, e) {
  const body = h('div', { 'data-testid': 'sessions' }, h('p', { class: 'muted' }, 'Loading…'));
  const el = h('div', { class: 'panel' },
    h('div', { class: 'toolbar' }, h('button', { 'data-testid': 'sessions-refresh', onclick: load }, 'Refresh')), body);
  load();
  async function load() {
    let r;
    try {
      r = await getJSON('sessions/' + encodePath(e.path));
    } catch (err) {
      replace(body, h('p', { class: 'error' }, err.message));
      return;
    }
    const sessions = r.sessions || [];
    replace(body, sessions.length === 0 ? h('p', { class: 'muted' }, 'No sessions hold messages or state.')
      : table({ class: 'compact' }, ['Session', 'Messages', 'Locked', 'Locked until', 'State'], sessions.map(s => h('tr', {
        'data-testid': 'session-row', 'data-session': s.id,
      }, h('td', null, s.id), h('td', { class: 'num' }, String(s.messages)), h('td', null, s.locked ? 'yes' : 'no'),
      h('td', null, when(s.lockedUntil)), h('td', null, s.state ? h('code', null, utf8(fromBase64(s.state))) : '')))));
  }
  return { el };
}
