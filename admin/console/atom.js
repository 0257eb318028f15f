// The Service Bus administration API's documents: Atom entries holding a
// QueueDescription, TopicDescription, SubscriptionDescription or
// RuleDescription (admin/atom reads and writes them on the server side).

import { request, encodePath } from './api.js';

const nsAtom = 'http://www.w3.org/2005/Atom';
const nsConnect = 'http://schemas.microsoft.com/netservices/2010/10/servicebus/connect';
const nsInstance = 'http://www.w3.org/2001/XMLSchema-instance';
const nsSchema = 'http://www.w3.org/2001/XMLSchema';

const entryType = 'application/atom+xml;type=entry;charset=utf-8';

// The settings an update may change, by kind: the elements the server
// applies (admin/atom/parse.go) less those fixed at creation
// (RequiresSession, EnablePartitioning, RequiresDuplicateDetection) and
// AuthorizationRules, which is sent back as it was read.
const editable = {
  queue: ['LockDuration', 'MaxSizeInMegabytes', 'DefaultMessageTimeToLive', 'DeadLetteringOnMessageExpiration',
    'DuplicateDetectionHistoryTimeWindow', 'MaxDeliveryCount', 'EnableBatchedOperations', 'Status',
    'SupportOrdering', 'AutoDeleteOnIdle', 'ForwardTo', 'ForwardDeadLetteredMessagesTo', 'UserMetadata',
    'MaxMessageSizeInKilobytes'],
  topic: ['DefaultMessageTimeToLive', 'MaxSizeInMegabytes', 'DuplicateDetectionHistoryTimeWindow',
    'EnableBatchedOperations', 'Status', 'UserMetadata', 'SupportOrdering', 'AutoDeleteOnIdle',
    'MaxMessageSizeInKilobytes'],
  subscription: ['LockDuration', 'DefaultMessageTimeToLive', 'DeadLetteringOnMessageExpiration',
    'DeadLetteringOnFilterEvaluationExceptions', 'MaxDeliveryCount', 'EnableBatchedOperations', 'Status',
    'ForwardTo', 'UserMetadata', 'ForwardDeadLetteredMessagesTo', 'AutoDeleteOnIdle'],
};

// optional are settings the server leaves out of a description when they
// are unset: the form offers them anyway.
const optional = ['ForwardTo', 'ForwardDeadLetteredMessagesTo', 'UserMetadata'];

const durations = new Set(['LockDuration', 'DefaultMessageTimeToLive', 'DuplicateDetectionHistoryTimeWindow',
  'AutoDeleteOnIdle']);
const integers = new Set(['MaxSizeInMegabytes', 'MaxDeliveryCount', 'MaxMessageSizeInKilobytes']);
export const statuses = ['Active', 'Disabled', 'SendDisabled', 'ReceiveDisabled'];

// Description is one entity's description as read: the entry's document,
// kept whole so that Save sends back every setting.
export class Description {
  constructor(doc, kind) {
    this.doc = doc;
    this.kind = kind;
    this.el = descriptionOf(doc);
  }

  // fields are the description's simple settings (elements without
  // element children), each {name, value, editable, type} with type one
  // of bool, int, duration, status, text; then the optional settings it
  // lacks, as empty.
  fields() {
    const out = [];
    const can = new Set(editable[this.kind] || []);
    for (const el of this.el.children) {
      if (el.children.length > 0 || el.localName === 'AuthorizationRules') continue;
      out.push({ name: el.localName, value: el.textContent, editable: can.has(el.localName), type: typeOf(el) });
    }
    for (const name of optional) {
      if (can.has(name) && !out.some(f => f.name === name)) {
        out.push({ name, value: '', editable: true, type: 'text' });
      }
    }
    return out;
  }

  // counts are the CountDetails, by name without its prefix.
  counts() {
    const cd = child(this.el, 'CountDetails');
    return cd ? Array.from(cd.children, c => ({ name: c.localName, value: c.textContent })) : [];
  }

  // accessRules names the entity's own SAS rules: "name (Listen, Send)".
  accessRules() {
    const rules = child(this.el, 'AuthorizationRules');
    if (!rules) return [];
    return Array.from(rules.children, r => {
      const name = child(r, 'KeyName')?.textContent || '?';
      const rights = Array.from(child(r, 'Rights')?.children || [], x => x.textContent);
      return `${name} (${rights.join(', ')})`;
    });
  }

  // updated is the entry with values ({name: text}) applied to the
  // editable settings, as XML text: an optional setting given as ""
  // is left out, one not in the description is added.
  updated(values) {
    const doc = this.doc.cloneNode(true);
    const el = descriptionOf(doc);
    const can = new Set(editable[this.kind] || []);
    for (const [name, value] of Object.entries(values)) {
      if (!can.has(name)) continue;
      let node = child(el, name);
      if (optional.includes(name) && value === '') {
        node?.remove();
        continue;
      }
      if (!node) {
        node = doc.createElementNS(nsConnect, name);
        el.append(node);
      }
      node.textContent = value;
    }
    return new XMLSerializer().serializeToString(doc);
  }
}

function typeOf(el) {
  const name = el.localName;
  if (name === 'Status') return 'status';
  if (durations.has(name)) return 'duration';
  if (integers.has(name)) return 'int';
  if (el.textContent === 'true' || el.textContent === 'false') return 'bool';
  return 'text';
}

function descriptionOf(doc) {
  const content = doc.getElementsByTagNameNS(nsAtom, 'content')[0];
  const el = content && content.firstElementChild;
  if (!el) throw new Error('the entry has no description');
  return el;
}

// child is el's first child element named name (any namespace).
function child(el, name) {
  for (const c of el.children) if (c.localName === name) return c;
  return null;
}

function parseXML(text) {
  const doc = new DOMParser().parseFromString(text, 'application/xml');
  if (doc.getElementsByTagName('parsererror').length > 0) throw new Error('the server sent XML that does not parse');
  return doc;
}

// atomURL is an entity's address in the administration API: its path,
// as a queue's, topic's or subscription's link address is.
function atomURL(path) {
  return '/' + encodePath(path);
}

// getDescription reads the description of the entity at path.
export async function getDescription(path, kind) {
  const resp = await request('GET', atomURL(path));
  return new Description(parseXML(await resp.text()), kind);
}

// put sends an entry: a create, or with update an update (If-Match: *).
export async function put(path, xml, update) {
  const headers = { 'Content-Type': entryType };
  if (update) headers['If-Match'] = '*';
  await request('PUT', atomURL(path), { body: xml, headers });
}

export async function remove(path) {
  await request('DELETE', atomURL(path));
}

// escape makes text safe inside an XML element or attribute.
function escape(text) {
  return String(text).replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]);
}

function entry(description) {
  return `<entry xmlns="${nsAtom}"><content type="application/xml">${description}</content></entry>`;
}

// newEntity is the entry that creates a queue, topic or subscription:
// requiresSession for a queue or subscription, sql an optional filter for
// a subscription's $Default rule.
export function newEntity(kind, { requiresSession = false, sql = '' } = {}) {
  const tag = { queue: 'QueueDescription', topic: 'TopicDescription', subscription: 'SubscriptionDescription' }[kind];
  let body = '';
  if (requiresSession && kind !== 'topic') body += '<RequiresSession>true</RequiresSession>';
  if (sql && kind === 'subscription') {
    body += `<DefaultRuleDescription><Filter i:type="SqlFilter"><SqlExpression>${escape(sql)}</SqlExpression></Filter>` +
      '<Name>$Default</Name></DefaultRuleDescription>';
  }
  return entry(`<${tag} xmlns="${nsConnect}" xmlns:i="${nsInstance}">${body}</${tag}>`);
}

// The correlation filter's system properties, as the XML names them
// (Label is the message's subject).
export const correlationFields = ['CorrelationId', 'MessageId', 'To', 'ReplyTo', 'Label', 'SessionId',
  'ReplyToSessionId', 'ContentType'];

// listRules reads a subscription's rules as
// {name, filter: "SqlFilter"|"CorrelationFilter"|"TrueFilter"|"FalseFilter",
//  sql, correlation: {field: value}, properties: [{key, value, type}], action}.
export async function listRules(subscriptionPath) {
  const resp = await request('GET', atomURL(subscriptionPath) + '/Rules');
  const doc = parseXML(await resp.text());
  return Array.from(doc.getElementsByTagNameNS(nsAtom, 'entry'), e => parseRule(descriptionOf(e)));
}

function parseRule(d) {
  const rule = { name: child(d, 'Name')?.textContent || '', filter: 'TrueFilter', sql: '', correlation: {},
    properties: [], action: '' };
  const f = child(d, 'Filter');
  if (f) {
    rule.filter = localType(f) || 'SqlFilter';
    rule.sql = child(f, 'SqlExpression')?.textContent || '';
    for (const name of correlationFields) {
      const c = child(f, name);
      if (c) rule.correlation[name] = c.textContent;
    }
    const props = child(f, 'Properties') || child(f, 'Parameters');
    for (const kv of props?.children || []) {
      const v = child(kv, 'Value');
      rule.properties.push({ key: child(kv, 'Key')?.textContent || '', value: v?.textContent || '',
        type: v ? localType(v) : '' });
    }
  }
  const a = child(d, 'Action');
  if (a && localType(a) === 'SqlRuleAction') rule.action = child(a, 'SqlExpression')?.textContent || '';
  return rule;
}

// localType is an element's xsi:type without its prefix.
function localType(el) {
  const t = el.getAttributeNS(nsInstance, 'type') || '';
  return t.slice(t.indexOf(':') + 1);
}

// putRule creates rule (as listRules gives it; properties' types are
// string, int, double or boolean) on the subscription.
export async function putRule(subscriptionPath, rule) {
  let filter;
  if (rule.filter === 'CorrelationFilter') {
    let fields = '';
    for (const name of correlationFields) {
      if (rule.correlation[name]) fields += `<${name}>${escape(rule.correlation[name])}</${name}>`;
    }
    if (rule.properties.length > 0) {
      fields += '<Properties>' + rule.properties.map(p => '<KeyValueOfstringanyType>' +
        `<Key>${escape(p.key)}</Key><Value i:type="d6p1:${p.type || 'string'}" xmlns:d6p1="${nsSchema}">` +
        `${escape(p.value)}</Value></KeyValueOfstringanyType>`).join('') + '</Properties>';
    }
    filter = `<Filter i:type="CorrelationFilter">${fields}</Filter>`;
  } else {
    filter = `<Filter i:type="SqlFilter"><SqlExpression>${escape(rule.sql)}</SqlExpression></Filter>`;
  }
  const action = rule.action
    ? `<Action i:type="SqlRuleAction"><SqlExpression>${escape(rule.action)}</SqlExpression></Action>` : '';
  const xml = entry(`<RuleDescription xmlns="${nsConnect}" xmlns:i="${nsInstance}">${filter}${action}` +
    `<Name>${escape(rule.name)}</Name></RuleDescription>`);
  await put(subscriptionPath + '/Rules/' + rule.name, xml, false);
}

export async function removeRule(subscriptionPath, name) {
  await remove(subscriptionPath + '/Rules/' + name);
}

// durationText reads an ISO 8601 duration for people: "PT1M" is "1m",
// TimeSpan.MaxValue is "never".
export function durationText(iso) {
  if (iso.startsWith('P10675199D')) return 'never';
  const m = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?$/.exec(iso);
  if (!m) return '';
  const parts = [];
  if (m[1]) parts.push(m[1] + 'd');
  if (m[2]) parts.push(m[2] + 'h');
  if (m[3]) parts.push(m[3] + 'm');
  if (m[4]) parts.push(m[4] + 's');
  return parts.join(' ') || '0s';
}
