// Page through an entity's active messages by SequenceNumber: pages of
// the size chosen, Next until the end, Previous back to the start.
//
//	node paging.mjs <baseURL> <shots> <entity path> <messages> <page size>

import { step, entityURL, expect } from './lib.mjs';

step('paging', async (page, { base, args, shot, log }) => {
  const [entity, total, size] = args.map((a, i) => (i === 0 ? a : Number(a)));
  await page.goto(entityURL(base, entity, { view: 'messages', queue: 'active' }));
  await page.locator('[data-testid="message-row"]').first().waitFor();
  await page.locator('[data-testid="page-size"]').selectOption(String(size));
  await page.waitForFunction(n => document.querySelectorAll('[data-testid="message-row"]').length === n, size);

  // seqs waits for a page other than the one before and reads it.
  let shown = '';
  const seqs = async () => {
    await page.waitForFunction(prev => {
      const rows = [...document.querySelectorAll('[data-testid="message-row"]')].map(r => r.dataset.seq).join(',');
      return rows !== '' && rows !== prev;
    }, shown);
    const list = await page.locator('[data-testid="message-row"]').evaluateAll(rows => rows.map(r => Number(r.dataset.seq)));
    shown = list.join(',');
    return list;
  };
  const pages = [await seqs()];
  const next = page.locator('[data-testid="page-next"]');
  while (await next.isEnabled()) {
    await next.click();
    pages.push(await seqs());
  }
  await shot('last-page');
  const all = pages.flat();
  expect(all.length === total, `paged through ${all.length} messages, want ${total}: ${JSON.stringify(pages)}`);
  expect(all.every((s, i) => i === 0 || s > all[i - 1]), `SequenceNumbers out of order: ${all}`);
  expect(pages.slice(0, -1).every(p => p.length === size), `page sizes ${pages.map(p => p.length)}, want ${size}`);
  log(`${pages.length} pages: ${pages.map(p => p.length).join(' + ')}`);

  await page.locator('[data-testid="page-prev"]').click();
  expect((await seqs()).join(',') === pages[pages.length - 2].join(','), 'Previous did not go back a page');
  while (await page.locator('[data-testid="page-prev"]').isEnabled()) {
    await page.locator('[data-testid="page-prev"]').click();
    await seqs();
  }
  expect(shown === pages[0].join(','), 'Previous did not go back to the first page');
});
