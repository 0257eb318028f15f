// DOM building and formatting helpers. Everything the console shows is
// built with h(), never with innerHTML: message bodies, names and error
// texts come from the network and are set as text.

// h makes an element: attrs sets attributes ("class", "data-testid", ...),
// properties for names starting with "." (".value", ".checked") and event
// listeners for names starting with "on" (onclick). Children are nodes,
// strings, numbers, arrays of them, or null/false (skipped).
export function h(tag, attrs, ...children) {
  const el = svgTags.has(tag)
    ? document.createElementNS('http://www.w3.org/2000/svg', tag)
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('.')) el[name.slice(1)] = value;
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

// svgTags are the elements h makes in the SVG namespace (the sparklines).
const svgTags = new Set(['svg', 'polyline', 'polygon', 'path', 'line', 'g', 'title']);

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// table makes a <table> with a header row and rows (arrays of cells, or
// <tr> elements as they are).
export function table(attrs, headers, rows) {
  return h('table', attrs,
    h('thead', null, h('tr', null, headers.map(th => h('th', null, th)))),
    h('tbody', null, rows.map(r => (r instanceof Node ? r : h('tr', null, r.map(c => h('td', null, c)))))));
}

// field is a labelled form control.
export function field(label, control, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'field-label' }, label), control,
    hint ? h('span', { class: 'hint' }, hint) : null);
}

const byteUnits = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

// bytes formats a size: 1536 is "1.5 KiB".
export function bytes(n) {
  if (n === undefined || n === null) return '';
  let i = 0;
  while (n >= 1024 && i < byteUnits.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + byteUnits[i];
}

// rate formats a per-second figure: 0, 0.5, 12, 1.2k.
export function rate(r) {
  if (!r) return '0';
  if (r >= 1000) return (r / 1000).toFixed(1) + 'k';
  return r >= 10 ? r.toFixed(0) : r.toFixed(1);
}

// when formats an RFC 3339 time for people: the date and the time in UTC,
// which is how the broker and its logs write it.
export function when(text) {
  if (!text) return '';
  const t = new Date(text);
  if (isNaN(t)) return text;
  return t.toISOString().replace('T', ' ').replace(/\.\d+Z$|Z$/, ' UTC');
}

// fromBase64 decodes base64 into bytes.
export function fromBase64(text) {
  const bin = atob(text || '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// utf8 decodes bytes as UTF-8, replacing what is not.
export function utf8(b) {
  return new TextDecoder('utf-8').decode(b);
}

// hexDump shows bytes 16 a line: offset, hex, and the printable ASCII.
export function hexDump(b) {
  const lines = [];
  for (let off = 0; off < b.length; off += 16) {
    const row = b.subarray(off, off + 16);
    const hex = Array.from(row, x => x.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, x => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    lines.push(off.toString(16).padStart(8, '0') + '  ' + hex.padEnd(48) + ' ' + ascii);
  }
  return lines.join('\n');
}

// prettyJSON is text indented as JSON, or null if it does not parse.
export function prettyJSON(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

// show renders a JSON value of a property list as text.
export function show(v) {
  if (v === null || v === undefined) return '';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}
