// A subscription's rules: add a SQL rule and a correlation rule, see
// them listed, delete the SQL one.
//
//	node rules.mjs <baseURL> <shots> <subscription path>

import { step, entityURL, lastStatus, expect } from './lib.mjs';

step('rules', async (page, { base, args, shot, log }) => {
  const [sub] = args;
  await page.goto(entityURL(base, sub, { view: 'rules' }));
  const rule = name => page.locator(`[data-testid="rule-row"][data-rule="${name}"]`);
  await rule('$Default').waitFor();
  const form = page.locator('[data-testid="rule-form"]');

  await form.locator('[data-testid="rule-name"]').fill('big');
  await form.locator('[data-testid="rule-sql"]').fill('amount > 100');
  await form.locator('[data-testid="rule-action"]').fill("SET size = 'big'");
  await form.locator('[data-testid="rule-add"]').click();
  log(await lastStatus(page, /Added rule big/));
  await rule('big').waitFor();
  expect((await rule('big').innerText()).includes('amount > 100'), 'the big rule lacks its expression');

  await form.locator('[data-testid="rule-name"]').fill('vip');
  await form.locator('[data-testid="rule-type"]').selectOption('CorrelationFilter');
  await form.locator('[data-testid="rule-corr-Label"]').fill('vip');
  await form.locator('[data-testid="rule-prop-add"]').click();
  await form.locator('[data-testid="rule-prop-key"]').fill('tier');
  await form.locator('[data-testid="rule-prop-value"]').fill('gold');
  await form.locator('[data-testid="rule-add"]').click();
  log(await lastStatus(page, /Added rule vip/));
  await rule('vip').waitFor();
  const vip = await rule('vip').innerText();
  expect(vip.includes("Label = 'vip'") && vip.includes("tier = 'gold'"), `the vip rule reads ${vip}`);
  await shot('added');

  await rule('big').locator('[data-testid="rule-delete"]').click();
  await page.locator('[data-testid="confirm-ok"]').click();
  log(await lastStatus(page, /Deleted rule big/));
  await rule('big').waitFor({ state: 'detached' });
  await shot('deleted');
});
