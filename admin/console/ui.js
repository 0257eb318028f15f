// The status area and the confirm dialog, both in index.html.

import { h, replace } from './dom.js';

const keep = 6; // status lines kept on screen

// status shows the outcome of an action at the top of the status list:
// kind is "ok", "error" or "info". The newest line carries
// data-testid="status-message" (and data-kind) for tests.
export function status(text, kind = 'info') {
  const list = document.getElementById('status');
  for (const old of list.querySelectorAll('[data-testid="status-message"]')) {
    old.removeAttribute('data-testid');
  }
  const time = new Date().toISOString().slice(11, 19);
  const line = h('li', { class: 'status-' + kind, 'data-testid': 'status-message', 'data-kind': kind },
    h('span', { class: 'status-time' }, time), ' ', text);
  list.prepend(line);
  while (list.children.length > keep) list.lastElementChild.remove();
}

// report runs an action and shows what came of it: done(result) gives
// the text of a success; a failure shows the error's text. It returns the
// result, or undefined after a failure.
export async function report(action, done) {
  try {
    const result = await action();
    status(done(result), 'ok');
    return result;
  } catch (err) {
    status(err.message || String(err), 'error');
    return undefined;
  }
}

// confirm asks a yes-or-no question in the page's modal dialog (not
// window.confirm, which a test cannot see in a screenshot) and resolves
// to true for yes.
export function confirm(question, yes = 'Confirm') {
  const dialog = document.getElementById('confirm');
  replace(dialog.querySelector('.confirm-text'), question);
  dialog.querySelector('[data-testid="confirm-ok"]').textContent = yes;
  dialog.returnValue = ''; // Escape closes it with the last value otherwise
  dialog.showModal();
  return new Promise(resolve => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}
