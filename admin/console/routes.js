// The console's addresses: #/ is the namespace, #/entity/<path>?view=..
// an entity's page (app.js routes them).

import { encodePath } from './api.js';

// entityHash is the address of path's page with params (empty ones left
// out): entityHash('orders', {view: 'messages', queue: 'deadletter'}).
export function entityHash(path, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v)).toString();
  return '#/entity/' + encodePath(path) + (q ? '?' + q : '');
}
