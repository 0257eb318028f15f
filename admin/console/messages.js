// The message browser of an entity page: tabs for the active, dead-letter,
// scheduled, deferred and transfer dead-letter messages, pages by
// SequenceNumber, rows that open to every part of a message and its audit
// trail, and the actions: re-drive, purge, cancel.

import { h, replace, bytes, when, show, fromBase64, utf8, hexDump, prettyJSON, table } from './dom.js';
import { encodePath, getJSON, postJSON } from './api.js';
import { report, confirm, status } from './ui.js';
import { entityHash } from './routes.js';

// tabsOf lists the message tabs of entity e: each names the link address
// to browse, the state to ask for and the count that goes with it.
function tabsOf(e) {
  const all = [
    { id: 'active', title: 'Active', path: e.path, state: 'active', count: 'active' },
    { id: 'deadletter', title: 'Dead-letter', path: e.path + '/$DeadLetterQueue', state: 'all', count: 'deadLetter' },
    { id: 'scheduled', title: 'Scheduled', path: e.path, state: 'scheduled', count: 'scheduled' },
    { id: 'deferred', title: 'Deferred', path: e.path, state: 'deferred', count: 'deferred' },
    { id: 'transferdeadletter', title: 'Transfer dead-letter', path: e.path + '/$Transfer/$DeadLetterQueue', state: 'all',
      count: 'transferDeadLetter', onlyWhenNonZero: true },
  ];
  return e.kind === 'topic' ? all.filter(t => t.id === 'scheduled' || t.id === 'transferdeadletter') : all;
}

const pageSizes = [10, 25, 50, 100, 200];

export function messageBrowser(ctx, e, params) {
  const tabs = tabsOf(e);
  const tab = tabs.find(t => t.id === params.get('queue')) || tabs[0];
  const page = { from: 1, before: [], next: 0, size: Number(params.get('max')) || 25 };
  const selected = new Set(); // sequence numbers ticked
  const open = new Set(); // sequence numbers whose details are shown
  let messages = [];

  const tabBar = h('nav', { class: 'tabs small', 'data-testid': 'message-tabs' });
  const tbody = h('tbody', { 'data-testid': 'messages' });
  const info = h('span', { class: 'muted', 'data-testid': 'page-info' });
  const prev = h('button', { 'data-testid': 'page-prev', onclick: () => go(page.before.pop() ?? 1, false) }, '‹ Previous');
  const next = h('button', { 'data-testid': 'page-next', onclick: () => go(page.next, true) }, 'Next ›');
  const size = h('select', {
    'data-testid': 'page-size', 'aria-label': 'messages a page',
    onchange: () => { page.size = Number(size.value); go(page.from, false); },
  }, pageSizes.map(n => h('option', { value: n, '.selected': n === page.size }, `${n} a page`)));
  const selectAll = h('input', {
    type: 'checkbox', 'data-testid': 'select-all', title: 'select the page',
    onchange: () => {
      for (const m of messages) tick(m.sequenceNumber, selectAll.checked);
      render();
    },
  });
  const headers = columnsOf(tab).map(c => h('th', { class: c.num ? 'num' : '' }, c.title));
  const el = h('div', { class: 'panel', 'data-testid': 'message-browser', 'data-queue': tab.id },
    tabBar,
    h('div', { class: 'toolbar' },
      h('button', { 'data-testid': 'refresh', onclick: () => load() }, 'Refresh'), size, prev, next, info,
      h('span', { class: 'grow' }), actions()),
    h('table', { class: 'messages' }, h('thead', null, h('tr', null, h('th', null, selectAll), headers, h('th', null, ''))), tbody));

  // tick adds seq to the selection, or with on false takes it out.
  function tick(seq, on) {
    if (on) selected.add(seq);
    else selected.delete(seq);
  }

  // actions are the buttons that act on the tab's messages.
  function actions() {
    const out = [];
    if (tab.id === 'deadletter') {
      out.push(h('button', { 'data-testid': 'redrive-selected', onclick: () => redrive([...selected]) }, 'Re-drive selected'));
      out.push(h('button', { 'data-testid': 'redrive-all', onclick: () => redrive(null) }, 'Re-drive all'));
    }
    if (tab.id === 'scheduled') {
      out.push(h('button', { 'data-testid': 'cancel-selected', onclick: () => cancel([...selected]) }, 'Cancel selected'));
    }
    if (tab.id === 'active' || tab.id === 'deadletter') {
      out.push(h('button', { class: 'danger', 'data-testid': 'purge', onclick: purge },
        tab.id === 'active' ? 'Purge active' : 'Purge dead-letter'));
    }
    return out;
  }

  // go shows the page from seq; forward remembers the page left behind.
  function go(seq, forward) {
    if (forward) page.before.push(page.from);
    page.from = seq || 1;
    load();
  }

  async function load() {
    const q = `?state=${tab.state}&from=${page.from}&max=${page.size}`;
    try {
      const r = await getJSON('messages/' + encodePath(tab.path) + q);
      messages = r.messages || [];
      page.next = r.next || 0;
    } catch (err) {
      messages = [];
      page.next = 0;
      replace(tbody, h('tr', null, h('td', { colspan: headers.length + 2, class: 'error', 'data-testid': 'messages-error' }, err.message)));
      return;
    }
    const present = new Set(messages.map(m => m.sequenceNumber));
    for (const s of [...selected]) if (!present.has(s)) selected.delete(s);
    render();
  }

  function render() {
    const rows = [];
    for (const m of messages) {
      rows.push(messageRow(m));
      if (open.has(m.sequenceNumber)) rows.push(detailRow(m, headers.length + 2, e.path));
    }
    if (messages.length === 0) rows.push(h('tr', null, h('td', { colspan: headers.length + 2, class: 'muted', 'data-testid': 'no-messages' },
      page.from > 1 ? `No messages from SequenceNumber ${page.from}.` : 'No messages.')));
    replace(tbody, rows);
    prev.disabled = page.before.length === 0 && page.from <= 1;
    next.disabled = page.next === 0;
    info.textContent = messages.length
      ? `SequenceNumber ${messages[0].sequenceNumber}–${messages[messages.length - 1].sequenceNumber}` +
        (selected.size ? `, ${selected.size} selected` : '')
      : '';
    selectAll.checked = messages.length > 0 && messages.every(m => selected.has(m.sequenceNumber));
  }

  function messageRow(m) {
    const seq = m.sequenceNumber;
    const box = h('input', {
      type: 'checkbox', 'data-testid': 'message-select', '.checked': selected.has(seq), 'aria-label': 'select ' + seq,
      onchange: ev => {
        tick(seq, ev.target.checked);
        render();
      },
    });
    const toggle = h('button', {
      class: 'small', 'data-testid': 'message-expand', 'aria-expanded': String(open.has(seq)),
      onclick: () => {
        if (!open.delete(seq)) open.add(seq);
        render();
      },
    }, open.has(seq) ? '▾' : '▸');
    const rowActions = [];
    if (tab.id === 'deadletter') rowActions.push(h('button', { class: 'small', 'data-testid': 'message-redrive', onclick: () => redrive([seq]) }, 'Re-drive'));
    if (tab.id === 'scheduled') rowActions.push(h('button', { class: 'small', 'data-testid': 'message-cancel', onclick: () => cancel([seq]) }, 'Cancel'));
    return h('tr', { 'data-testid': 'message-row', 'data-seq': seq, class: open.has(seq) ? 'open' : '' },
      h('td', null, box),
      columnsOf(tab).map(c => h('td', { class: c.num ? 'num' : c.time ? 'time' : '', 'data-testid': 'col-' + c.id }, c.value(m))),
      h('td', { class: 'row-actions' }, toggle, rowActions));
  }

  async function redrive(seqs) {
    if (seqs && seqs.length === 0) return status('Select messages to re-drive first', 'error');
    if (!seqs && !(await confirm(`Re-drive every dead-lettered message of ${e.path} back to it?`, 'Re-drive all'))) return;
    const r = await report(() => postJSON('redrive/' + encodePath(e.path), seqs ? { sequenceNumbers: seqs } : undefined),
      r => `Re-drove ${r.redriven} message${r.redriven === 1 ? '' : 's'} to ${e.path}`);
    if (r) after();
  }

  async function cancel(seqs) {
    if (seqs.length === 0) return status('Select scheduled messages to cancel first', 'error');
    const r = await report(() => postJSON('cancel/' + encodePath(e.path), { sequenceNumbers: seqs }),
      r => `Cancelled ${r.cancelled} scheduled message${r.cancelled === 1 ? '' : 's'}`);
    if (r) after();
  }

  async function purge() {
    const what = tab.id === 'active' ? 'active' : 'dead-lettered';
    if (!(await confirm(`Delete every ${what} message of ${e.path}? Messages a receiver holds locked stay.`, 'Purge'))) return;
    const r = await report(() => postJSON('purge/' + encodePath(tab.path)),
      r => `Purged ${r.purged} ${what} message${r.purged === 1 ? '' : 's'} of ${e.path}`);
    if (r) after();
  }

  // after reloads the page and the counts once an action changed them.
  function after() {
    selected.clear();
    ctx.pollNow();
    load();
  }

  // update redraws the tab bar with the live counts.
  function update(x) {
    replace(tabBar, tabs.filter(t => t === tab || !t.onlyWhenNonZero || (x.counts?.[t.count] || 0) > 0).map(t => h('a', {
      href: entityHash(e.path, { view: 'messages', queue: t.id }), class: t === tab ? 'current' : '', 'data-testid': 'tab-' + t.id,
    }, t.title, ' ', h('span', { class: 'count', 'data-testid': 'tab-count' }, String(x.counts?.[t.count] || 0)))));
  }

  update(e);
  load();
  return { el, update };
}

// columnsOf are a tab's columns: id, title and the cell of a message.
function columnsOf(tab) {
  const cols = [
    { id: 'seq', title: 'Seq', num: true, value: m => String(m.sequenceNumber) },
    { id: 'message-id', title: 'Message ID', value: m => m.messageId || '' },
    { id: 'enqueued', title: 'Enqueued', time: true, value: m => when(m.enqueuedTime) },
  ];
  if (tab.id === 'active') cols.push({ id: 'state', title: 'State', value: m => (m.state === 'locked' ? `locked until ${when(m.lockedUntil)}` : m.state) });
  if (tab.id === 'scheduled') cols.push({ id: 'scheduled', title: 'Scheduled for', time: true, value: m => when(m.scheduledEnqueueTime) });
  cols.push(
    { id: 'session', title: 'Session', value: m => m.sessionId || '' },
    { id: 'subject', title: 'Subject', value: m => m.properties?.subject || '' },
    { id: 'size', title: 'Size', num: true, value: m => bytes(m.size) },
    { id: 'deliveries', title: 'Deliveries', num: true, value: m => String(m.deliveryCount || 0) });
  if (tab.id === 'deadletter' || tab.id === 'transferdeadletter') {
    cols.push({ id: 'reason', title: 'Dead-letter reason', value: m => m.deadLetterReason || '' });
  }
  return cols;
}

// detailRow shows all of a message of entity (a queue's or
// subscription's path): its properties, dead-letter reason, body, and
// audit trail.
function detailRow(m, span, entity) {
  const dead = m.deadLetterReason || m.deadLetterErrorDescription || m.deadLetterSource;
  return h('tr', { class: 'detail', 'data-testid': 'message-detail', 'data-seq': m.sequenceNumber },
    h('td', { colspan: span },
      dead ? h('div', { class: 'deadletter', 'data-testid': 'dead-letter' },
        h('strong', null, 'Dead-lettered: '), h('span', { 'data-testid': 'dl-reason' }, m.deadLetterReason || '(no reason)'),
        m.deadLetterErrorDescription ? [' — ', h('span', { 'data-testid': 'dl-description' }, m.deadLetterErrorDescription)] : null,
        m.deadLetterSource ? [' (from ', m.deadLetterSource, ')'] : null) : null,
      h('div', { class: 'detail-grid' },
        propertyTable('System properties', 'system-properties', systemProperties(m)),
        propertyTable('Header', 'header', Object.entries(m.header || {})),
        propertyTable('Application properties', 'application-properties', Object.entries(m.applicationProperties || {})),
        m.messageAnnotations ? propertyTable('Message annotations', 'annotations', Object.entries(m.messageAnnotations)) : null),
      bodyView(m),
      auditView(m, entity)));
}

function systemProperties(m) {
  const rows = [['SequenceNumber', m.sequenceNumber], ['State', m.state], ['EnqueuedTime', when(m.enqueuedTime)]];
  if (m.expiresAt) rows.push(['ExpiresAt', when(m.expiresAt)]);
  if (m.scheduledEnqueueTime) rows.push(['ScheduledEnqueueTime', when(m.scheduledEnqueueTime)]);
  if (m.lockedUntil) rows.push(['LockedUntil', when(m.lockedUntil)]);
  rows.push(['DeliveryCount', m.deliveryCount || 0], ['Size', bytes(m.size)]);
  if (m.sessionId) rows.push(['SessionId', m.sessionId]);
  for (const [k, v] of Object.entries(m.properties || {})) rows.push([k, v]);
  return rows;
}

function propertyTable(title, testid, rows) {
  return h('div', { class: 'props-box', 'data-testid': testid },
    h('h4', null, title),
    rows.length === 0 ? h('p', { class: 'muted' }, 'none')
      : table({ class: 'kv' }, ['Name', 'Value'], rows.map(([k, v]) => h('tr', { 'data-key': k },
        h('th', null, k), h('td', { 'data-testid': 'value' }, show(v))))));
}

// bodyView shows the body as text, pretty JSON (when it parses) or hex,
// with a toggle; the mode it opens in is JSON when it parses, else text
// when the bytes are UTF-8, else hex.
function bodyView(m) {
  const raw = fromBase64(m.body || '');
  const text = utf8(raw);
  const json = prettyJSON(text);
  const modes = { text: () => text, json: () => json, hex: () => hexDump(raw) };
  let mode = json !== null ? 'json' : text.includes('\uFFFD') ? 'hex' : 'text';
  const pre = h('pre', { class: 'body', 'data-testid': 'body-view' });
  const buttons = {};
  function show(next) {
    mode = next;
    pre.textContent = modes[mode]();
    pre.dataset.mode = mode;
    for (const [k, b] of Object.entries(buttons)) b.classList.toggle('current', k === mode);
  }
  for (const k of ['text', 'json', 'hex']) {
    buttons[k] = h('button', { class: 'small', 'data-testid': 'body-mode-' + k, disabled: k === 'json' && json === null, onclick: () => show(k) },
      { text: 'Text', json: 'JSON', hex: 'Hex' }[k]);
  }
  show(mode);
  return h('div', { class: 'body-box' },
    h('h4', null, 'Body ', h('span', { class: 'muted' }, `(${m.bodyType || 'data'}, ${bytes(raw.length)})`), ' ',
      h('span', { class: 'segmented' }, Object.values(buttons))),
    m.bodyType === 'none' ? h('p', { class: 'muted' }, 'no body') : pre);
}

// auditView loads the message's history from entity's log: every event
// that touched it, as `walbus audit` prints it. A subscription's message
// is asked for by the subscription's path; walbus finds its topic's log.
function auditView(m, entity) {
  const box = h('div', { class: 'audit', 'data-testid': 'audit' }, h('h4', null, 'Audit trail'), h('p', { class: 'muted' }, 'Loading…'));
  getJSON(`audit/${encodePath(entity)}?seq=${m.sequenceNumber}`).then(r => {
    const lives = r.lives || [];
    replace(box, h('h4', null, 'Audit trail'), lives.length === 0 ? h('p', { class: 'muted' }, 'No history recorded.')
      : lives.map(life => h('div', { class: 'life' },
        h('p', null, `${life.entity}: ${life.outcome}`, life.state ? ` (${life.state})` : '',
          `, ${life.deliveries || 0} deliveries`, life.incomplete ? ', incomplete' : ''),
        table({ class: 'compact' }, ['Time', 'Since start', 'Event', 'Queue', 'What'], (life.steps || []).map(s => h('tr', { 'data-testid': 'audit-step' },
          h('td', { class: 'time' }, when(s.time)), h('td', null, s.since_start || ''), h('td', null, s.type), h('td', null, s.queue || ''),
          h('td', null, s.what || '')))),
        (life.notes || []).map(n => h('p', { class: 'muted' }, n)))));
  }).catch(err => replace(box, h('h4', null, 'Audit trail'), h('p', { class: 'error' }, err.message)));
  return box;
}
