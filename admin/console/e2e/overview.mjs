// The overview lists every entity with its counts, filters by name and
// shows the broker clock.
//
//	node overview.mjs <baseURL> <shots> [path:count=n ...] [--docs=file.png] [--points=n]
//
// Each path:count=n waits until that row shows that count (count is a
// key of the overview's counts: active, deadLetter, scheduled...). With
// --docs the page polls every second and, once the sparklines hold
// --points polls (default 30), a picture of it is saved to file.png for
// the README.

import { step, entityRow, waitForCount, expect } from './lib.mjs';

step('overview', async (page, { base, args, shot, log }) => {
  const docs = args.find(a => a.startsWith('--docs='))?.slice('--docs='.length);
  const poll = docs ? 1000 : 0; // a poll a second fills the charts in --points seconds
  const points = Number(args.find(a => a.startsWith('--points='))?.slice('--points='.length) || 30);
  const wants = args.filter(a => !a.startsWith('--')).map(a => {
    const m = /^(.+):(\w+)=(\d+)$/.exec(a);
    if (!m) throw new Error(`want path:count=n, not ${a}`);
    return { path: m[1], key: m[2], n: Number(m[3]) };
  });

  await page.goto(base + '/' + (poll ? '?poll=' + poll : ''));
  await page.locator('[data-testid="overview"]').waitFor();
  for (const w of wants) {
    await entityRow(page, w.path).waitFor();
    await waitForCount(page, w.path, w.key, w.n);
    log(`${w.path} ${w.key} = ${w.n}`);
  }
  const clock = await page.locator('[data-testid="clock"]').getAttribute('data-now');
  expect(clock && !isNaN(new Date(clock)), `the broker clock shows ${clock}`);
  log(`broker clock ${clock}`);
  await shot('entities');

  // The filter keeps the rows whose path has the text.
  if (wants.length > 1) {
    const first = wants[0].path;
    await page.locator('[data-testid="filter"]').fill(first);
    const shown = await page.locator('[data-testid="entity-row"]').evaluateAll(rows => rows.map(r => r.dataset.path));
    expect(shown.includes(first), `filtering by ${first} hides it: ${shown}`);
    expect(shown.every(p => p.toLowerCase().includes(first.toLowerCase()) || shown.some(s => s !== p && s.startsWith(p + '/'))),
      `filtering by ${first} shows ${shown}`);
    await shot('filtered');
    await page.locator('[data-testid="filter"]').fill('');
  }

  if (docs) {
    await page.waitForFunction(n => {
      const charts = [...document.querySelectorAll('[data-testid="spark-sent"]')];
      return charts.length > 0 && charts.every(c => Number(c.dataset.points) >= n);
    }, points, { timeout: points * poll + 30_000 });
    await page.evaluate(() => document.activeElement?.blur());
    await page.setViewportSize({ width: 1280, height: 560 });
    await page.screenshot({ path: docs });
    log(`saved ${docs}`);
  }
});
