// Sign in: the console reached by a host name that is not loopback
// (chromium maps walbus.test to 127.0.0.1) gets 401 until it sends a
// token; a wrong key is refused, the right one lets the page load.
//
//	node signin.mjs <baseURL> <shots> <key name> <key>

import { step, entityURL, expect } from './lib.mjs';

step('signin', async (page, { base, args, shot, log }) => {
  const [keyName, key] = args;
  const url = new URL(base);
  url.hostname = 'walbus.test';
  const remote = url.toString().replace(/\/$/, '');
  await page.goto(remote + '/');
  const form = page.locator('[data-testid="signin-form"]');
  await form.waitFor();
  log('asked: ' + (await form.locator('[data-testid="signin-reason"]').innerText()));
  await shot('asked');

  await form.locator('[data-testid="signin-keyname"]').fill(keyName);
  await form.locator('[data-testid="signin-key"]').fill(key + '-wrong');
  await form.locator('[data-testid="signin-submit"]').click();
  await page.waitForFunction(() => /failed/.test(document.querySelector('[data-testid="signin-reason"]').textContent));
  log('wrong key: ' + (await form.locator('[data-testid="signin-reason"]').innerText()));

  await form.locator('[data-testid="signin-key"]').fill(key);
  await form.locator('[data-testid="signin-submit"]').click();
  await form.waitFor({ state: 'hidden' });
  await page.locator('[data-testid="entity-row"]').first().waitFor();
  const token = await page.evaluate(() => sessionStorage.getItem('walbus.token'));
  expect(token && token.startsWith('SharedAccessSignature '), `the token kept is ${token}`);
  await shot('signed-in');

  // The token serves the Atom API too, and survives a reload.
  const first = await page.locator('[data-testid="entity-row"]').first().getAttribute('data-path');
  await page.goto(entityURL(remote, first, { view: 'properties' }));
  await page.locator('[data-testid="props-form"]').waitFor();
  expect(await form.isHidden(), 'the sign-in form came back after a reload');
  log('signed in as ' + keyName);
}, {
  browserArgs: ['--host-resolver-rules=MAP walbus.test 127.0.0.1'],
  allowErrors: [/401/],
});
