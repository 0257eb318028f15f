// Send a message with a session ID to a session-enabled queue and see
// its session listed.
//
//	node sessions.mjs <baseURL> <shots> <entity path> <session id>

import { step, entityURL, lastStatus } from './lib.mjs';

step('sessions', async (page, { base, args, shot, log }) => {
  const [entity, session] = args;
  await page.goto(entityURL(base, entity, { view: 'send' }));
  const form = page.locator('[data-testid="send-form"]');
  await form.locator('[data-testid="send-body"]').fill('hello room');
  await form.locator('[data-testid="send-session-id"]').fill(session);
  await form.locator('[data-testid="send-submit"]').click();
  log(await lastStatus(page, /Sent a message/));
  await page.locator('[data-testid="section-sessions"]').click();
  const row = page.locator(`[data-testid="session-row"][data-session="${session}"]`);
  await row.waitFor();
  log('session row: ' + (await row.innerText()).replace(/\s+/g, ' '));
  await shot('sessions');
});
