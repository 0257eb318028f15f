// Edit an entity's properties: a good value is saved, a bad one shows
// the server's reason and changes nothing.
//
//	node properties.mjs <baseURL> <shots> <entity path> <Name=good value> <Name=bad value>

import { step, entityURL, lastStatus, expect } from './lib.mjs';

step('properties', async (page, { base, args, shot, log }) => {
  const [entity, good, bad] = args;
  await page.goto(entityURL(base, entity, { view: 'properties' }));
  const form = page.locator('[data-testid="props-form"]');
  await form.waitFor();
  await shot('read');

  const [name, value] = good.split('=');
  await form.locator(`[data-testid="prop-${name}"]`).fill(value);
  await form.locator('[data-testid="props-save"]').click();
  log(await lastStatus(page, /Saved/));
  // The form reloads from the server.
  await page.waitForFunction(([n, v]) => document.querySelector(`[data-testid="prop-${n}"]`)?.value === v, [name, value]);

  const [badName, badValue] = bad.split('=');
  await form.locator(`[data-testid="prop-${badName}"]`).fill(badValue);
  await form.locator('[data-testid="props-save"]').click();
  const text = await lastStatus(page, new RegExp(badName), 'error');
  expect(/400/.test(text), `the refusal reads ${text}`);
  log('refused: ' + text);
  await shot('refused');
}, { allowErrors: [/status of 400/] });
