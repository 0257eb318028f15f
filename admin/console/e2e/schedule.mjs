// Schedule a message from the send form for tomorrow, see it in the
// Scheduled tab, cancel it from its row.
//
//	node schedule.mjs <baseURL> <shots> <entity path>

import { step, entityURL, lastStatus } from './lib.mjs';

step('schedule', async (page, { base, args, shot, log }) => {
  const [entity] = args;
  await page.goto(entityURL(base, entity, { view: 'send' }));
  const form = page.locator('[data-testid="send-form"]');
  await form.locator('[data-testid="send-body"]').fill('see you tomorrow');
  // datetime-local takes local time as YYYY-MM-DDTHH:MM:SS.
  const t = new Date(Date.now() + 24 * 3600 * 1000);
  const local = new Date(t.getTime() - t.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  await form.locator('[data-testid="send-schedule"]').fill(local);
  await form.locator('[data-testid="send-submit"]').click();
  const text = await lastStatus(page, /Scheduled message \d+/);
  const seq = /Scheduled message (\d+)/.exec(text)[1];
  log(text);

  await page.goto(entityURL(base, entity, { view: 'messages', queue: 'scheduled' }));
  const row = page.locator(`[data-testid="message-row"][data-seq="${seq}"]`);
  await row.waitFor();
  await shot('scheduled');
  await row.locator('[data-testid="message-cancel"]').click();
  log(await lastStatus(page, /Cancelled 1 scheduled message/));
  await row.waitFor({ state: 'detached' });
});
