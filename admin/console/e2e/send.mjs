// Send a message from the console.
//
//	node send.mjs <baseURL> <shots> <entity path> <body> [key=value|key:number=n ...] [--message-id=x] [--subject=x] [--content-type=x] [--session-id=x]

import { step, entityURL, lastStatus } from './lib.mjs';

step('send', async (page, { base, args, shot, log }) => {
  const [entity, body, ...rest] = args;
  await page.goto(entityURL(base, entity, { view: 'send' }));
  const form = page.locator('[data-testid="send-form"]');
  await form.waitFor();
  await form.locator('[data-testid="send-body"]').fill(body);
  for (const a of rest) {
    const option = /^--([\w-]+)=(.*)$/.exec(a);
    if (option) {
      await form.locator(`[data-testid="send-${option[1]}"]`).fill(option[2]);
      continue;
    }
    const [, key, type = 'string', value] = /^([^:=]+)(?::(\w+))?=(.*)$/.exec(a);
    await form.locator('[data-testid="send-prop-add"]').click();
    const row = form.locator('[data-testid="send-prop-row"]').last();
    await row.locator('[data-testid="send-prop-key"]').fill(key);
    await row.locator('[data-testid="send-prop-value"]').fill(value);
    await row.locator('[data-testid="send-prop-type"]').selectOption(type);
  }
  await shot('form');
  await form.locator('[data-testid="send-submit"]').click();
  log(await lastStatus(page, /Sent a message|Scheduled message/));
  await shot('sent');
});
