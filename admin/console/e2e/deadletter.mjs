// An entity's dead-letter queue shows its messages with their reason;
// a row opens to its properties, body and audit trail.
//
//	node deadletter.mjs <baseURL> <shots> <entity path> <count> <reason> [property=value]

import { step, entityURL, expect } from './lib.mjs';

step('deadletter', async (page, { base, args, shot, log }) => {
  const [entity, count, reason, property] = args;
  await page.goto(entityURL(base, entity, { view: 'messages', queue: 'deadletter' }));
  const rows = page.locator('[data-testid="message-row"]');
  await page.waitForFunction(n => document.querySelectorAll('[data-testid="message-row"]').length === n, Number(count));
  const reasons = await rows.locator('[data-testid="col-reason"]').allInnerTexts();
  expect(reasons.every(r => r === reason), `dead-letter reasons ${JSON.stringify(reasons)}, want ${reason}`);
  log(`${count} dead-lettered messages, reason ${reason}`);
  await shot('list');

  // The first row opens to the message: reason, properties, body, audit.
  await rows.first().locator('[data-testid="message-expand"]').click();
  const detail = page.locator('[data-testid="message-detail"]').first();
  expect((await detail.locator('[data-testid="dl-reason"]').innerText()) === reason, 'the detail lacks the reason');
  if (property) {
    const [key, value] = property.split('=');
    const cell = detail.locator(`[data-testid="application-properties"] tr[data-key="${key}"] [data-testid="value"]`);
    expect((await cell.innerText()) === value, `application property ${key} is ${await cell.innerText()}, want ${value}`);
  }
  const body = detail.locator('[data-testid="body-view"]');
  const text = await body.innerText();
  await detail.locator('[data-testid="body-mode-hex"]').click();
  const hex = await body.innerText();
  expect(/^00000000 {2}[0-9a-f]{2}/.test(hex), `the hex view shows ${hex}`);
  await detail.locator('[data-testid="body-mode-text"]').click();
  expect((await body.innerText()) === text, 'the text view changed');
  await detail.locator('[data-testid="audit-step"]').first().waitFor();
  const steps = await detail.locator('[data-testid="audit-step"]').count();
  log(`body ${JSON.stringify(text)}, ${steps} audit steps`);
  await shot('detail');
});
