// The dashboard in headless Chromium, driven by Playwright: sign in with
// the cluster token, open a running job, see its vertices and a non-zero
// rate, open its checkpoints after two completed, cancel it from the page.
// Screenshots go to OUT_DIR.
//
// node dashboard.mjs URL TOKEN JOB_ID OUT_DIR
// env: WEIR_TEST_PLAYWRIGHT (the playwright-core package folder),
//      WEIR_TEST_CHROMIUM (default /usr/bin/chromium)
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [url, token, jobId, outDir] = process.argv.slice(2);
const { chromium } = await import(pathToFileURL(join(process.env.WEIR_TEST_PLAYWRIGHT, 'index.mjs')).href);

const browser = await chromium.launch({
  executablePath: process.env.WEIR_TEST_CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});
const report = {};
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  // The page's confirmations (cancel) are accepted; its errors reported.
  page.on('dialog', (d) => d.accept());
  // (401s before signing in are the page asking; a script error is not.)
  report.pageErrors = [];
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  globalThis.failureShot = () => shot('failure');
  const shot = (name) => page.screenshot({ path: join(outDir, `${name}.png`), fullPage: true });

  await page.goto(`${url}/`);
  // The API wants the token: the page asks for it.
  await page.locator('#login').waitFor({ state: 'visible', timeout: 10000 });
  await shot('login');
  await page.fill('#token', 'not-the-token');
  await page.click('#login-form button');
  await page.locator('#login-error', { hasText: 'refused' }).waitFor({ timeout: 10000 });
  await page.fill('#token', token);
  await page.click('#login-form button');

  // Overview: the job is listed.
  const link = page.locator(`a[href="#/jobs/${jobId}"]`);
  await link.waitFor({ timeout: 10000 });
  await shot('overview');
  await link.click();

  // The job graph: its vertices, and a non-zero rate once samples came in.
  await page.locator('[data-test=vertex]').first().waitFor({ timeout: 10000 });
  report.vertices = await page.locator('[data-test=vertex]').count();
  await page.waitForFunction(
    () => [...document.querySelectorAll('[data-test=vertex]')].some((v) => Number(v.dataset.rateOut) > 0),
    null,
    { timeout: 30000 },
  );
  report.rateOut = await page.evaluate(
    () => Math.max(...[...document.querySelectorAll('[data-test=vertex]')].map((v) => Number(v.dataset.rateOut))),
  );
  await shot('job-graph');

  // Checkpoints, after two completed.
  await page.click('[data-test=tab-checkpoints]');
  await page.waitForFunction(
    () => Number(document.querySelector('[data-test=checkpoints-completed] b')?.textContent) >= 2,
    null,
    { timeout: 30000 },
  );
  report.checkpointRows = await page.locator('[data-test=checkpoint-row][data-status=COMPLETED]').count();
  await page.locator('[data-test=checkpoint-row] details').first().click();
  await shot('checkpoints');

  // Cancel from the page.
  await page.click('[data-test=cancel]');
  await page.waitForFunction(
    () => ['CANCELLING', 'CANCELED'].includes(document.querySelector('[data-test=job-status]')?.textContent),
    null,
    { timeout: 20000 },
  );
  report.status = await page.locator('[data-test=job-status]').first().textContent();
  await shot('canceled');
  console.log(JSON.stringify(report));
} catch (e) {
  await globalThis.failureShot?.().catch(() => {});
  console.error(`dashboard test failed: ${e.message}\nso far: ${JSON.stringify(report)}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
