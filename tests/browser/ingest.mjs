// Loads pages carrying hitcount ingest's script tag in Debian's headless
// chromium through playwright-core, for tests/e2e/ingest_browser.rs, which
// serves the pages and starts Redis, ingest and a worker, and asserts on
// the JSON this prints on its last line.
//
// Usage: node ingest.mjs '<plan as JSON>'
//   plan.pages    the pages to load, each in a fresh context (no cookies)
//   plan.ingest   ingest's origin, http://127.0.0.1:PORT
// For each page: the first beacon sent to ingest and its status, how
// many were sent, requests to
// any third origin, console errors (a CSP violation is one), the cookies
// left. Env CHROMIUM overrides /usr/bin/chromium. Progress goes to stderr.
import { launch } from './launch.mjs';

const plan = JSON.parse(process.argv[2] || '{}');
const t0 = Date.now();
const log = (m) => process.stderr.write(`[ingest.mjs ${Date.now() - t0} ms] ${m}\n`);
const out = { pages: [] };

const browser = await launch();
try {
  out.chromium = browser.version();
  for (const url of plan.pages) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const origin = new URL(url).origin;
    const seen = { url, beacons: [], foreign: [], errors: [], sent: 0 };
    page.on('console', (m) => { if (m.type() === 'error') seen.errors.push(m.text()); });
    page.on('pageerror', (e) => seen.errors.push(`pageerror: ${e}`));
    page.on('request', (r) => {
      if (r.url() === `${plan.ingest}/api/v1/hits`) seen.sent += 1;
      const o = new URL(r.url()).origin;
      if (o !== origin && o !== plan.ingest) seen.foreign.push(r.url());
    });
    const beacon = page.waitForRequest((r) => r.url() === `${plan.ingest}/api/v1/hits`, { timeout: 30_000 });
    await page.goto(url, { waitUntil: 'load' });
    const sent = await beacon;
    const response = await sent.response().catch(() => null);
    seen.beacons.push({
      body: sent.postData(),
      contentType: (await sent.allHeaders())['content-type'],
      status: response ? response.status() : null,
    });
    // Anything sent later would be a second page view.
    await page.waitForTimeout(1500);
    seen.cookies = (await context.cookies()).length;
    log(`${url}: ${JSON.stringify(seen)}`);
    out.pages.push(seen);
    await context.close();
  }
} catch (e) {
  out.failure = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
