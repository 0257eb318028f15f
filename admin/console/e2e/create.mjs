// Create a queue, topic or subscription from the overview.
//
//	node create.mjs <baseURL> <shots> <queue|topic|subscription> <name> [topic] [--session]

import { step, entityRow, lastStatus } from './lib.mjs';

step('create', async (page, { base, args, shot, log }) => {
  const [kind, name, topic] = args.filter(a => !a.startsWith('--'));
  await page.goto(base + '/');
  await page.locator('[data-testid="create-open"]').click();
  const form = page.locator('[data-testid="create-form"]');
  await form.locator('[data-testid="create-kind"]').selectOption(kind);
  if (kind === 'subscription') {
    await page.waitForFunction(t => [...document.querySelectorAll('[data-testid="create-topic"] option')].some(o => o.value === t), topic);
    await form.locator('[data-testid="create-topic"]').selectOption(topic);
  }
  await form.locator('[data-testid="create-name"]').fill(name);
  if (args.includes('--session')) await form.locator('[data-testid="create-session"]').check();
  await shot('form');
  await form.locator('[data-testid="create-submit"]').click();
  log(await lastStatus(page, /Created/));
  await entityRow(page, kind === 'subscription' ? `${topic}/Subscriptions/${name}` : name).waitFor();
  await shot('created');
});
