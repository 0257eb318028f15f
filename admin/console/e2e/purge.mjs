// Purge an entity's active or dead-lettered messages, confirming in the
// dialog.
//
//	node purge.mjs <baseURL> <shots> <entity path> <count> [deadletter|active]

import { step, entityURL, lastStatus, expect } from './lib.mjs';

step('purge', async (page, { base, args, shot, log }) => {
  const [entity, count, queue = 'deadletter'] = args;
  await page.goto(entityURL(base, entity, { view: 'messages', queue }));
  await page.locator('[data-testid="message-row"]').first().waitFor();
  await page.locator('[data-testid="purge"]').click();
  const dialog = page.locator('[data-testid="confirm-dialog"]');
  await dialog.waitFor();
  await shot('confirm');
  await dialog.locator('[data-testid="confirm-ok"]').click();
  const text = await lastStatus(page, /Purged/);
  expect(text.includes(`Purged ${count} `), `status ${text}, want ${count} purged`);
  log(text);
  await page.locator('[data-testid="no-messages"]').waitFor();
  const stat = queue === 'active' ? 'stat-active' : 'stat-deadLetter';
  await page.waitForFunction(s => document.querySelector(`[data-testid="${s}"]`)?.textContent === '0', stat);
  await shot('after');
});
