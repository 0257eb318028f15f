// Delete an entity from its page, confirming in the dialog.
//
//	node delete.mjs <baseURL> <shots> <entity path>

import { step, entityURL, entityRow, lastStatus } from './lib.mjs';

step('delete', async (page, { base, args, shot, log }) => {
  const [entity] = args;
  await page.goto(entityURL(base, entity));
  await page.locator('[data-testid="entity-delete"]').click();
  await page.locator('[data-testid="confirm-dialog"]').waitFor();
  await shot('confirm');
  await page.locator('[data-testid="confirm-ok"]').click();
  log(await lastStatus(page, /Deleted/));
  // Back on the namespace (or the topic) without it.
  await page.locator('[data-testid="overview"], [data-testid="entity-page"]').first().waitFor();
  await entityRow(page, entity).waitFor({ state: 'detached' });
  await shot('deleted');
});
