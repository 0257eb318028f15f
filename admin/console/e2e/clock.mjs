// Advance the test clock from the header and see the broker clock move.
//
//	node clock.mjs <baseURL> <shots> <duration, e.g. 2h>

import { step, lastStatus, expect } from './lib.mjs';

const hours = { s: 1 / 3600, m: 1 / 60, h: 1 };

step('clock', async (page, { base, args, shot, log }) => {
  const [by] = args;
  const m = /^(\d+)([smh])$/.exec(by);
  expect(m, `give the advance as 30s, 5m or 2h, not ${by}`);
  const ms = Number(m[1]) * hours[m[2]] * 3600 * 1000;
  await page.goto(base + '/');
  await page.locator('[data-testid="test-clock"]').waitFor();
  const before = new Date(await page.locator('[data-testid="clock"]').getAttribute('data-now'));
  await page.locator('[data-testid="clock-advance-by"]').fill(by);
  await page.locator('[data-testid="clock-advance"]').click();
  log(await lastStatus(page, /Test clock advanced/));
  await page.waitForFunction(([b, d]) => new Date(document.querySelector('[data-testid="clock"]').dataset.now) - b >= d,
    [before.getTime(), ms]);
  log(`clock ${before.toISOString()} -> ${await page.locator('[data-testid="clock"]').getAttribute('data-now')}`);
  await shot('advanced');
});
