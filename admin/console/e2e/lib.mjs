// Shared by the console's browser steps: each step is a script run as
//
//	node <step>.mjs <baseURL> <screenshotDir> [arguments...]
//
// by cmd/walbus/console_browser_test.go. It drives Debian's chromium
// through playwright-core (no browser download), saves a screenshot of
// what it checked, prints what it saw, and exits non-zero on a failure
// with the reason on stderr.

import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

// chromiumPath is the browser: $CHROMIUM, else Debian's package.
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

// timeout bounds each wait for the page: the broker answers in
// milliseconds, the console polls every 2 s.
export const timeout = 20_000;

// step runs fn(page, ctx) in a fresh headless chromium at baseURL and
// reports its outcome. ctx has base, args (the arguments after the
// screenshot directory), shot(name) and log(text). options.browserArgs
// adds chromium flags (the sign-in step maps a host name).
export async function step(name, fn, options = {}) {
  const [base, shots, ...args] = process.argv.slice(2);
  if (!base || !shots) {
    console.error(`usage: node ${name}.mjs <baseURL> <screenshotDir> [arguments...]`);
    process.exit(2);
  }
  mkdirSync(shots, { recursive: true });
  // launch() starts chromium with a fresh profile of its own, removed on
  // close.
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      ...(options.browserArgs || [])],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(timeout);
  const problems = [];
  page.on('pageerror', err => problems.push('page error: ' + err.message));
  page.on('console', msg => {
    if (msg.type() === 'error') problems.push(`console error: ${msg.text()} (${msg.location().url})`);
  });
  // A confirm() the console did not expect would hang a step: refuse it.
  page.on('dialog', d => d.dismiss());
  let n = 0;
  const ctx = {
    base: base.replace(/\/$/, ''),
    args,
    log: text => console.log(`${name}: ${text}`),
    shot: async label => {
      const file = join(shots, `${name}-${String(++n).padStart(2, '0')}-${label}.png`);
      await page.screenshot({ path: file, fullPage: true });
      return file;
    },
  };
  let code = 0;
  try {
    await fn(page, ctx);
    // Errors the page logged fail the step too, except the ones a step
    // provokes on purpose (a 401 before signing in).
    const unexpected = problems.filter(p => !(options.allowErrors || []).some(re => re.test(p)));
    if (unexpected.length) throw new Error(unexpected.join('\n'));
  } catch (err) {
    code = 1;
    console.error(`${name}: FAILED: ${err.message}`);
    for (const p of problems) if (!err.message.includes(p)) console.error(`${name}: also ${p}`);
    try {
      console.error(`${name}: screenshot of the failure: ${await ctx.shot('failure')}`);
      const statusText = await page.locator('[data-testid="status"]').innerText({ timeout: 1000 });
      if (statusText) console.error(`${name}: status area:\n${statusText}`);
    } catch { /* the page may be gone */ }
  } finally {
    await browser.close();
  }
  process.exit(code);
}

// row is the overview's row of an entity.
export function entityRow(page, path) {
  return page.locator(`[data-testid="entity-row"][data-path="${path}"]`);
}

// count reads a count cell of path's overview row.
export async function count(page, path, key) {
  return Number(await entityRow(page, path).locator(`[data-testid="count-${key}"]`).innerText());
}

// waitForCount waits until path's overview count key is want.
export async function waitForCount(page, path, key, want) {
  await page.waitForFunction(([p, k, w]) => {
    const cell = document.querySelector(`[data-testid="entity-row"][data-path="${p}"] [data-testid="count-${k}"]`);
    return cell && Number(cell.textContent) === w;
  }, [path, key, want], { timeout });
}

// lastStatus waits for a status line matching want and returns its text.
// An error line fails the step, unless kind is "error": then it waits for
// an error line matching want.
export async function lastStatus(page, want = /./, kind = 'ok') {
  const line = page.locator('[data-testid="status-message"]');
  const error = line.and(page.locator('[data-kind="error"]'));
  await (kind === 'error' ? error.filter({ hasText: want }) : line.filter({ hasText: want }).or(error)).first().waitFor();
  const text = await line.innerText();
  if (kind !== 'error' && (await line.getAttribute('data-kind')) === 'error') {
    throw new Error('the console reported an error: ' + text);
  }
  return text;
}

// expect fails the step with message unless ok.
export function expect(ok, message) {
  if (!ok) throw new Error(message);
}

// entityURL is the address of path's page in the console.
export function entityURL(base, path, params = {}) {
  const q = new URLSearchParams(params).toString();
  const hash = '#/entity/' + path.split('/').map(s => encodeURIComponent(s).replace(/%24/g, '$')).join('/');
  return base + '/' + hash + (q ? '?' + q : '');
}
