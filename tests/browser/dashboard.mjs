// Drives hitcount's dashboard in Debian's headless chromium through
// playwright-core, for tests/e2e/dashboard.rs, which starts Redis, a worker and
// `hitcount serve`, and asserts on the JSON this prints on its last line.
//
// Usage: node dashboard.mjs '<plan as JSON>'
//   plan.base        the dashboard's address, http://127.0.0.1:PORT
//   plan.name        the counter to open (its hits carry values, so its
//                    statistics show too); plan.precision its precision
//   plan.prefix      a prefix to type in the filter
//   plan.hit         argv of a command that sends one hit to plan.name
//   plan.hitCount    the count that hit carries
//   plan.plainName   a counter whose hits carry no value (optional)
//   plan.screenshot  a PNG path to write the view to (optional)
// Env CHROMIUM overrides /usr/bin/chromium. Progress goes to stderr.
import { launch } from './launch.mjs';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const plan = JSON.parse(process.argv[2] || '{}');
const origin = new URL(plan.base).origin;
const t0 = Date.now();
const log = (m) => process.stderr.write(`[dashboard.mjs ${Date.now() - t0} ms] ${m}\n`);
const out = { errors: [], foreign: [], failed: [], aborted: [] };
/** The browser's local time zone (+09:00, no summer time): not UTC, so the switch shows. */
const LOCAL_TZ = 'Asia/Tokyo';

const browser = await launch();
try {
  out.chromium = browser.version();
  const context = await browser.newContext({
    viewport: { width: 1200, height: 560 },
    timezoneId: LOCAL_TZ,
    colorScheme: 'light',
    acceptDownloads: true,
  });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on('pageerror', (e) => out.errors.push(`pageerror: ${e}`));
  page.on('console', (m) => { if (m.type() === 'error') out.errors.push(`console: ${m.text()}`); });
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith('blob:') && !u.startsWith('data:') && new URL(u).origin !== origin) out.foreign.push(u);
  });
  // A request the browser cancels because this script navigates away (the
  // favicon, a refresh in flight) is not the page's failure: kept apart.
  page.on('requestfailed', (r) => {
    const why = r.failure()?.errorText;
    (why === 'net::ERR_ABORTED' ? out.aborted : out.failed).push(`${r.url()}: ${why}`);
  });
  const names = () => page.$$eval('#names li a', (as) => as.map((a) => a.dataset.name));

  // 1. The list, then the filter narrows it.
  await page.goto(`${plan.base}/`, { waitUntil: 'load' });
  await page.waitForFunction(() => document.querySelectorAll('#names li').length > 0);
  out.all = await names();
  out.moreShown = await page.isVisible('#more');
  if (out.moreShown) {
    // The next page of names, asked of the API with the last one as `after`.
    await page.click('#more');
    await page.waitForFunction((n) => document.querySelectorAll('#names li').length > n, out.all.length);
    out.allPaged = await names();
  }
  log(`list: ${out.all.length} names, ${out.allPaged?.length} after "more names"`);
  await page.fill('#filter', plan.prefix);
  await page.waitForFunction((p) => {
    const as = [...document.querySelectorAll('#names li a')];
    return as.length > 0 && as.every((a) => a.dataset.name.startsWith(p));
  }, plan.prefix);
  out.filtered = await names();
  out.filterUrl = page.url();
  log(`filtered by ${plan.prefix}: ${out.filtered.length} names`);

  // 2. A shared link opens the counter's chart directly.
  const link = `${plan.base}/?name=${encodeURIComponent(plan.name)}&precision=${plan.precision}`;
  await page.goto(link, { waitUntil: 'load' });
  await page.waitForFunction(() => window.__hitcount.draws > 0);
  const chart = () => page.evaluate(() => {
    const u = window.__hitcount.chart;
    const c = document.querySelector('#chart canvas');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    // The series colour (--series: #d6336c in light mode), and anything drawn.
    let painted = 0, series = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] !== 0) painted++;
      if (d[i] > 180 && d[i + 1] < 90 && d[i + 2] > 70 && d[i + 2] < 150 && d[i + 3] > 100) series++;
    }
    return {
      xs: [...u.data[0]], ys: [...u.data[1]], painted, series,
      draws: window.__hitcount.draws, title: document.querySelector('#title').textContent,
      axis: u.axes[0].label,
      status: document.querySelector('#chart-status').textContent,
    };
  });
  out.chart = await chart();
  out.chartUrl = page.url();
  // The statistics of its values, under the chart.
  await page.waitForFunction(() => window.__hitcount.statsDraws > 0);
  out.stats = {
    visible: await page.isVisible('#stats'),
    rows: await page.$$eval('#stats-rows tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent))),
  };
  log(`chart: ${out.chart.xs.length} samples, ${out.chart.painted} painted px, ${out.chart.series} series px`);

  // 3. CSV export of what the chart shows.
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#csv')]);
  out.csvName = download.suggestedFilename();
  out.csv = readFileSync(await download.path(), 'utf8');

  // 4. Live: a hit sent now shows without a reload.
  await page.evaluate(() => { window.__notReloaded = true; });
  const before = out.chart.ys.reduce((a, b) => a + b, 0);
  const drawsBefore = out.chart.draws;
  execFileSync(plan.hit[0], plan.hit.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  const sent = Date.now();
  await page.waitForFunction(
    (want) => window.__hitcount.chart && window.__hitcount.chart.data[1].reduce((a, b) => a + b, 0) >= want,
    before + plan.hitCount, { timeout: 30_000, polling: 100 });
  const after = await chart();
  out.live = {
    before, after: after.ys.reduce((a, b) => a + b, 0), seconds: (Date.now() - sent) / 1000,
    notReloaded: await page.evaluate(() => window.__notReloaded === true),
    redraws: after.draws - drawsBefore, url: page.url(),
  };
  log(`live: ${before} -> ${out.live.after} in ${out.live.seconds} s`);

  // 5. The hottest names.
  await page.click('#tab-top');
  await page.waitForFunction(() => window.__hitcount.topDraws > 0
    || document.querySelector('#top-status').classList.contains('error'));
  out.topStatus = await page.textContent('#top-status');
  out.top = await page.$$eval('#top-names li a', (as) => as.map((a) => ({
    name: a.dataset.name, count: Number(a.querySelector('.count').textContent),
  })));
  out.topBody = await page.evaluate(() => window.__hitcount.top);
  out.topUrl = page.url();
  await page.click('#tab-all');

  // 6. Local time on the switch: the axis, the address and the CSV say so.
  await page.selectOption('#tz', 'local');
  await page.waitForFunction((tz) => window.__hitcount.chart &&
    window.__hitcount.chart.axes[0].label.includes(tz), LOCAL_TZ);
  out.localAxis = (await chart()).axis;
  out.localUrl = page.url();
  const [local] = await Promise.all([page.waitForEvent('download'), page.click('#csv')]);
  out.localCsv = readFileSync(await local.path(), 'utf8');
  await page.selectOption('#tz', 'utc');

  // 7. Dark mode: the page and the chart follow the system's scheme.
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForFunction((n) => window.__hitcount.draws > n, (await chart()).draws);
  out.dark = await page.evaluate(() => ({
    background: getComputedStyle(document.body).backgroundColor,
    color: getComputedStyle(document.body).color,
  }));
  await page.emulateMedia({ colorScheme: 'light' });
  await page.waitForFunction((n) => window.__hitcount.draws > n, (await chart()).draws);
  // Redrawing the chart (new colours) keeps the statistics shown.
  out.statsAfterRedraw = await page.isVisible('#stats');

  if (plan.screenshot) {
    // Tall enough for the statistics under the chart.
    await page.setViewportSize({ width: 1200, height: 700 });
    await page.waitForTimeout(400);
    await page.screenshot({ path: plan.screenshot });
    log(`screenshot ${plan.screenshot}`);
  }
  // 7b. A counter whose hits carry no value: its chart refreshes without
  // asking for statistics it has not, so without a 404 in the console.
  if (plan.plainName) {
    await page.goto(`${plan.base}/?name=${encodeURIComponent(plan.plainName)}&precision=${plan.precision}`);
    // The first draw, then one live refresh after it.
    await page.waitForFunction(() => window.__hitcount.statsDraws > 0);
    const drawn = await page.evaluate(() => window.__hitcount.statsDraws);
    await page.waitForFunction((n) => window.__hitcount.statsDraws > n, drawn, { timeout: 20_000 });
    out.plain = {
      statsHidden: await page.isHidden('#stats'),
      samples: await page.evaluate(() => window.__hitcount.chart.data[0].length),
    };
  }
  out.errorsBeforeRefusals = [...out.errors];

  // 8. Wrong input: a 404 page for a bad path, a message for an unknown name.
  const missing = await page.goto(`${plan.base}/no/such/page`);
  out.notFound = { status: missing.status(), title: await page.title() };
  await page.goto(`${plan.base}/?name=${encodeURIComponent('no such counter')}&precision=60`);
  await page.waitForFunction(() => document.querySelector('#chart-status').textContent !== '');
  out.unknown = {
    status: await page.textContent('#chart-status'),
    error: await page.evaluate(() => document.querySelector('#chart-status').classList.contains('error')),
    statsHidden: await page.isHidden('#stats'),
  };
  await context.close();
} catch (e) {
  // Reported with what was seen so far, for the test's message.
  out.failure = String(e && e.stack || e);
  process.exitCode = 1;
} finally {
  await browser.close();
}
log('done');
console.log(JSON.stringify(out));
