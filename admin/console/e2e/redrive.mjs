// Re-drive dead-lettered messages: one from its row, several ticked and
// re-driven together (--select), or all of them ("all", confirmed).
//
//	node redrive.mjs <baseURL> <shots> <entity path> <sequence number|all> [sequence number...] [--select]

import { step, entityURL, lastStatus } from './lib.mjs';

step('redrive', async (page, { base, args, shot, log }) => {
  const [entity, ...rest] = args.filter(a => !a.startsWith('--'));
  const select = args.includes('--select');
  await page.goto(entityURL(base, entity, { view: 'messages', queue: 'deadletter' }));
  const row = seq => page.locator(`[data-testid="message-row"][data-seq="${seq}"]`);
  await page.locator('[data-testid="message-row"]').first().waitFor();

  if (rest[0] === 'all') {
    await page.locator('[data-testid="redrive-all"]').click();
    await page.locator('[data-testid="confirm-ok"]').click();
    log(await lastStatus(page, /Re-drove \d+ message/));
    await page.locator('[data-testid="no-messages"]').waitFor();
  } else if (select) {
    for (const seq of rest) await row(seq).locator('[data-testid="message-select"]').check();
    await shot('selected');
    await page.locator('[data-testid="redrive-selected"]').click();
    log(await lastStatus(page, new RegExp(`Re-drove ${rest.length} message`)));
  } else {
    await row(rest[0]).waitFor();
    await shot('before');
    await row(rest[0]).locator('[data-testid="message-redrive"]').click();
    log(await lastStatus(page, /Re-drove 1 message/));
  }
  for (const seq of rest.filter(s => s !== 'all')) await row(seq).waitFor({ state: 'detached' });
  await shot('after');
});
