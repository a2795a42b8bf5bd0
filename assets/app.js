// hitcount's dashboard, on the read-only JSON API of `hitcount serve` only:
// a paged list of counter names with a prefix filter, one counter charted
// at a chosen precision (uPlot, vendored), refreshed live; the hottest names
// of a bucket; times in UTC or local time; CSV export of what the chart
// shows; the statistics of the hits' values, where they carry one. The
// address bar always holds the current view, so a link to it
// can be shared: /?name=NAME&precision=P[&tz=local][&view=top][&prefix=…].
'use strict';
(() => {
  /** How often the open chart and the hottest names are read again. */
  const REFRESH_MS = 5000;
  /** Names per list page (the API's default page). */
  const PAGE = 100;
  /** Names shown in the hottest view. */
  const TOP_LIMIT = 20;
  /** Buckets shown at least, back from now (the cleaner keeps about 120). */
  const SPAN_BUCKETS = 120;
  /** Buckets of statistics shown, newest first. */
  const STATS_ROWS = 5;
  /** Finest precision the API ranks. */
  const TOP_MIN_PRECISION = 60;

  const $ = (id) => document.getElementById(id);
  const state = {
    name: null, precision: null, precisions: [], tz: 'utc', view: 'all',
    prefix: '', after: null, known: new Map(), samples: [],
    chart: null, chartKey: '', listSeq: 0, chartSeq: 0, topSeq: 0,
  };
  // Read by the browser tests: the chart, and how often it was redrawn.
  const probe = { chart: null, draws: 0, top: null, topDraws: 0, stats: null, statsDraws: 0 };
  window.__hitcount = probe;

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  /** Times a request refused with 429 (too many rankings asked) is tried again. */
  const BUSY_RETRIES = 5;
  /** Longest wait before trying again, whatever Retry-After says. */
  const BUSY_WAIT_MAX_MS = 10000;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function api(path) {
    for (let attempt = 0; ; attempt++) {
      const resp = await fetch(path, { cache: 'no-store', headers: { accept: 'application/json' } });
      let body = null;
      try { body = await resp.json(); } catch { /* not JSON: reported below */ }
      // The server bounds its ranking scans: wait as it asks, then again.
      if (resp.status === 429 && attempt < BUSY_RETRIES) {
        const secs = Number(resp.headers.get('retry-after')) || 1;
        await sleep(Math.min(BUSY_WAIT_MAX_MS, Math.max(1, secs) * 1000));
        continue;
      }
      if (!resp.ok || body === null) {
        throw new ApiError(resp.status, (body && body.error) || `HTTP ${resp.status}`);
      }
      return body;
    }
  }

  // ---- time: UTC by default, local on the switch ----

  function tzName() {
    return state.tz === 'utc' ? 'UTC' : (Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time');
  }

  const pad = (n, w = 2) => String(n).padStart(w, '0');

  /** `t` (unix seconds) as ISO 8601 in the chosen zone, with its offset. */
  function isoTime(t) {
    const d = new Date(t * 1000);
    if (state.tz === 'utc') return d.toISOString().replace('.000Z', 'Z');
    const off = -d.getTimezoneOffset();
    const sign = off < 0 ? '-' : '+';
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}` +
      `${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  }

  /** `t` for people: `2026-11-22 10:03:00` in the chosen zone. */
  function shortTime(t) {
    return isoTime(t).slice(0, 19).replace('T', ' ');
  }

  function precisionLabel(p) {
    if (p % 86400 === 0) return p === 86400 ? '1 day' : `${p / 86400} days`;
    if (p % 3600 === 0) return `${p / 3600} h`;
    if (p % 60 === 0) return `${p / 60} min`;
    return `${p} s`;
  }

  // ---- the address bar holds the view ----

  function writeUrl() {
    const q = new URLSearchParams();
    if (state.name !== null) q.set('name', state.name);
    if (state.precision !== null) q.set('precision', state.precision);
    if (state.tz !== 'utc') q.set('tz', state.tz);
    if (state.view !== 'all') q.set('view', state.view);
    if (state.prefix) q.set('prefix', state.prefix);
    const s = q.toString();
    history.replaceState(null, '', s ? `/?${s}` : '/');
  }

  function setStatus(id, text, isError = false) {
    const el = $(id);
    el.textContent = text;
    el.classList.toggle('error', isError);
  }

  // ---- the list of names ----

  function nameLink(name, precision, extra) {
    const a = document.createElement('a');
    a.href = `/?name=${encodeURIComponent(name)}${precision ? `&precision=${precision}` : ''}`;
    a.dataset.name = name;
    const label = document.createElement('span');
    label.textContent = name;
    a.append(label);
    if (extra !== undefined) {
      const c = document.createElement('span');
      c.className = 'count';
      c.textContent = extra;
      a.append(c);
    }
    a.addEventListener('click', (ev) => {
      ev.preventDefault();
      open(name, precision || state.precision);
    });
    if (name === state.name) a.classList.add('current');
    const li = document.createElement('li');
    li.append(a);
    return li;
  }

  async function loadNames(reset) {
    const seq = ++state.listSeq;
    if (reset) state.after = null;
    const q = new URLSearchParams({ prefix: state.prefix, limit: PAGE });
    if (state.after !== null) q.set('after', state.after);
    setStatus('list-status', 'loading…');
    try {
      const page = await api(`/api/v1/counters?${q}`);
      if (seq !== state.listSeq) return;
      if (reset) $('names').replaceChildren();
      for (const c of page.counters) {
        state.known.set(c.name, c.precisions);
        $('names').append(nameLink(c.name));
      }
      state.after = page.next;
      $('more').hidden = page.next === null;
      const n = $('names').children.length;
      setStatus('list-status', n === 0
        ? (state.prefix ? `no counter starts with “${state.prefix}”` : 'no counters yet')
        : `${n} name${n === 1 ? '' : 's'}${page.next === null ? '' : ', more below'}`);
      fillTopPrecisions();
    } catch (e) {
      if (seq === state.listSeq) setStatus('list-status', e.message, true);
    }
  }

  function markCurrent() {
    for (const a of document.querySelectorAll('.names a')) {
      a.classList.toggle('current', a.dataset.name === state.name);
    }
  }

  // ---- one counter's chart ----

  /** The precisions of `name`, from the list or one small list request. */
  async function precisionsOf(name) {
    if (state.known.has(name)) return state.known.get(name);
    const q = new URLSearchParams({ prefix: name, limit: 1 });
    const page = await api(`/api/v1/counters?${q}`);
    const found = page.counters.find((c) => c.name === name);
    const precisions = found ? found.precisions : [];
    state.known.set(name, precisions);
    return precisions;
  }

  async function open(name, wanted) {
    state.name = name;
    state.samples = [];
    $('stats').hidden = true;
    ++state.chartSeq;
    $('title').textContent = name;
    markCurrent();
    let precisions;
    try {
      precisions = await precisionsOf(name);
    } catch (e) {
      setStatus('chart-status', e.message, true);
      return;
    }
    if (name !== state.name) return;
    const asked = Number(wanted);
    let note = '';
    if (precisions.length === 0) {
      state.precision = Number.isInteger(asked) && asked > 0 ? asked : null;
      state.precisions = [];
      fillPrecisions();
      writeUrl();
      clearChart();
      setStatus('chart-status', `no counter named “${name}”`, true);
      return;
    }
    if (precisions.includes(asked)) {
      state.precision = asked;
    } else {
      state.precision = precisions.includes(60) ? 60 : precisions[0];
      if (wanted !== null && wanted !== undefined && wanted !== '') {
        const has = precisions.map(precisionLabel).join(', ');
        note = `no precision “${wanted}” for this counter (it has ${has}); showing ${precisionLabel(state.precision)}. `;
      }
    }
    state.precisions = precisions;
    fillPrecisions();
    writeUrl();
    await refreshChart(note);
  }

  function fillPrecisions() {
    const sel = $('precision');
    sel.replaceChildren(...state.precisions.map((p) => new Option(precisionLabel(p), p)));
    sel.disabled = state.precisions.length === 0;
    if (state.precision !== null) sel.value = state.precision;
  }

  async function refreshChart(note = '') {
    const { name, precision } = state;
    if (name === null || precision === null) return;
    const seq = ++state.chartSeq;
    try {
      const body = await api(`/api/v1/counters/${encodeURIComponent(name)}?precision=${precision}`);
      if (seq !== state.chartSeq) return;
      state.samples = body.samples;
      draw();
      await refreshStats(name, precision, seq, body.stats === true);
      const n = body.samples.length;
      setStatus('chart-status', `${note}${n} sample${n === 1 ? '' : 's'} of ${precisionLabel(precision)}; ` +
        `updated ${shortTime(Math.floor(Date.now() / 1000))} ${tzName()}, every ${REFRESH_MS / 1000} s`);
    } catch (e) {
      if (seq !== state.chartSeq) return;
      // No such counter: nothing to show. Anything else (Redis out of reach,
      // a lost connection) may pass: the last chart stays until it does.
      if (e.status === 404) {
        clearChart();
        $('stats').hidden = true;
      }
      setStatus('chart-status', e.message, true);
    }
  }

  /** A statistic as shown: four significant digits, "—" for none. */
  function figure(v) {
    return v === null || v === undefined ? '—' : String(Number(v.toPrecision(4)));
  }

  /**
   * The statistics of the open counter, when its hits carry values: asked
   * only when the counter's answer says there are some (`stats`), so a
   * counter without values costs no request and no 404.
   */
  async function refreshStats(name, precision, seq, has) {
    let body = null;
    if (has) {
      try {
        body = await api(`/api/v1/stats/${encodeURIComponent(name)}?precision=${precision}`);
      } catch (e) {
        // 404: removed since. Anything else shows with the chart's own
        // status on its next refresh.
        if (e.status !== 404) return;
      }
    }
    if (seq !== state.chartSeq) return;
    const rows = body ? body.buckets.slice(-STATS_ROWS).reverse() : [];
    $('stats-rows').replaceChildren(...rows.map((r) => {
      const tr = document.createElement('tr');
      const cells = [`${shortTime(r.t)}`, r.count, r.mean, r.min, r.max, r.stddev, r.p50, r.p90, r.p99];
      tr.replaceChildren(...cells.map((c, i) => {
        const td = document.createElement('td');
        td.textContent = i === 0 ? c : i === 1 ? String(c) : figure(c);
        return td;
      }));
      return tr;
    }));
    $('stats').hidden = rows.length === 0;
    probe.stats = rows;
    probe.statsDraws++;
  }

  function clearChart() {
    if (state.chart) state.chart.destroy();
    state.chart = null;
    state.chartKey = '';
    probe.chart = null;
    $('csv').disabled = true;
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  /** 24-hour axis labels (uPlot's defaults are 12-hour). */
  const X_VALUES = [
    [86400 * 365, '{YYYY}', null, null, null, null, null, null, 1],
    [86400 * 28, '{MMM}', '\n{YYYY}', null, null, null, null, null, 1],
    [86400, '{MM}-{DD}', '\n{YYYY}', null, null, null, null, null, 1],
    [3600, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MM}-{DD}', null, null, null, 1],
    [60, '{HH}:{mm}', '\n{YYYY}-{MM}-{DD}', null, '\n{MM}-{DD}', null, null, null, 1],
    [1, ':{ss}', '\n{YYYY}-{MM}-{DD} {HH}:{mm}', null, '\n{MM}-{DD} {HH}:{mm}', null, '\n{HH}:{mm}', null, 1],
  ];

  /** Whole-number steps for the count axis: 1, 2, 5, 10, 20, 50… */
  const Y_INCRS = Array.from({ length: 45 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

  /** The x range: at least the last SPAN_BUCKETS buckets, up to the current one. */
  function xRange() {
    const p = state.precision;
    const now = Math.floor(Date.now() / 1000 / p) * p;
    const first = state.samples.length ? state.samples[0][0] : now;
    return [Math.min(first, now - SPAN_BUCKETS * p), now + p];
  }

  function chartOptions() {
    const fg = cssVar('--fg');
    const grid = cssVar('--grid');
    const axis = { stroke: fg, grid: { stroke: grid }, ticks: { stroke: grid } };
    const width = Math.max(300, $('chart').clientWidth);
    return {
      width,
      height: 340,
      tzDate: state.tz === 'utc'
        ? (t) => uPlot.tzDate(new Date(t * 1000), 'Etc/UTC')
        : (t) => new Date(t * 1000),
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { time: true, range: () => xRange() },
        y: { range: (u, min, max) => [0, Math.max(1, max || 0) * 1.1] },
      },
      axes: [
        { ...axis, label: `time (${tzName()})`, values: X_VALUES },
        { ...axis, label: 'hits per bucket', size: 60, incrs: Y_INCRS },
      ],
      series: [
        { label: 'bucket', value: (u, t) => (t == null ? '—' : `${shortTime(t)} ${tzName()}`) },
        {
          label: 'hits',
          stroke: cssVar('--series'),
          fill: cssVar('--series-fill'),
          width: 1,
          // Each bar spans its bucket: [t, t + precision).
          paths: uPlot.paths.bars({
            disp: {
              x0: { unit: 1, values: (u) => u.data[0] },
              size: { unit: 1, values: () => [state.precision * 0.9] },
            },
          }),
          points: { show: false },
        },
      ],
    };
  }

  function draw() {
    const data = [state.samples.map((s) => s[0]), state.samples.map((s) => s[1])];
    const key = `${state.name}\n${state.precision}\n${state.tz}\n${cssVar('--fg')}`;
    if (state.chart && state.chartKey === key) {
      state.chart.setData(data);
    } else {
      clearChart();
      state.chart = new uPlot(chartOptions(), data, $('chart'));
      state.chartKey = key;
    }
    probe.chart = state.chart;
    probe.draws++;
    $('csv').disabled = false;
  }

  /** What the chart shows, as CSV: one line a bucket, its time in the chosen zone. */
  function exportCsv() {
    if (!state.chart) return;
    const [xs, ys] = state.chart.data;
    const lines = [`unix_seconds,time_${state.tz},count`];
    for (let i = 0; i < xs.length; i++) lines.push(`${xs[i]},${isoTime(xs[i])},${ys[i]}`);
    const blob = new Blob([lines.join('\n') + '\n'], { type: 'text/csv' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `hitcount-${state.name.replace(/[^\w.-]+/g, '_')}-${state.precision}s.csv`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  // ---- the hottest names ----

  function fillTopPrecisions() {
    const seen = new Set();
    for (const ps of state.known.values()) for (const p of ps) if (p >= TOP_MIN_PRECISION) seen.add(p);
    if (seen.size === 0) seen.add(TOP_MIN_PRECISION);
    const sel = $('top-precision');
    const current = Number(sel.value) || (seen.has(60) ? 60 : Math.min(...seen));
    const list = [...seen].sort((a, b) => a - b);
    sel.replaceChildren(...list.map((p) => new Option(precisionLabel(p), p)));
    sel.value = seen.has(current) ? current : list[0];
  }

  async function refreshTop() {
    if (state.view !== 'top') return;
    const seq = ++state.topSeq;
    const precision = Number($('top-precision').value) || TOP_MIN_PRECISION;
    const url = (bucket) => `/api/v1/top?precision=${precision}&limit=${TOP_LIMIT}` +
      (bucket === undefined ? '' : `&bucket=${bucket}`);
    try {
      let body = await api(url());
      let when = 'now';
      // A bucket just begun has no hits yet: show the one before it.
      if (body.counters.length === 0) {
        body = await api(url(body.bucket - precision));
        when = 'previous';
      }
      if (seq !== state.topSeq) return;
      $('top-names').replaceChildren(...body.counters.map((c) => nameLink(c.name, precision, c.count)));
      const bucket = `${precisionLabel(precision)} from ${shortTime(body.bucket)} ${tzName()}`;
      setStatus('top-status', body.counters.length === 0
        ? `no hits in the last two buckets of ${precisionLabel(precision)}`
        : `${when === 'now' ? 'current' : 'previous'} bucket: ${bucket} (up to 5 s old)`);
      probe.top = body;
      probe.topDraws++;
    } catch (e) {
      if (seq === state.topSeq) setStatus('top-status', e.message, true);
    }
  }

  function showView(view) {
    state.view = view;
    $('all').hidden = view !== 'all';
    $('top').hidden = view !== 'top';
    $('tab-all').setAttribute('aria-selected', view === 'all');
    $('tab-top').setAttribute('aria-selected', view === 'top');
    writeUrl();
    refreshTop();
  }

  // ---- wiring ----

  function start() {
    const q = new URLSearchParams(location.search);
    state.tz = q.get('tz') === 'local' ? 'local' : 'utc';
    state.prefix = q.get('prefix') || '';
    // Kept in the address bar until the counter has been looked up.
    state.name = q.get('name') || null;
    state.precision = Number(q.get('precision')) || null;
    $('tz').value = state.tz;
    $('filter').value = state.prefix;

    let typing = null;
    $('filter').addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        state.prefix = $('filter').value;
        writeUrl();
        loadNames(true);
      }, 250);
    });
    $('more').addEventListener('click', () => loadNames(false));
    $('precision').addEventListener('change', () => {
      state.precision = Number($('precision').value);
      writeUrl();
      refreshChart();
    });
    $('tz').addEventListener('change', () => {
      state.tz = $('tz').value;
      writeUrl();
      if (state.samples.length || state.chart) draw();
      refreshChart();
      refreshTop();
    });
    $('csv').addEventListener('click', exportCsv);
    $('tab-all').addEventListener('click', () => showView('all'));
    $('tab-top').addEventListener('click', () => showView('top'));
    $('top-precision').addEventListener('change', refreshTop);
    // The chart's colours follow the system's light or dark scheme.
    matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      if (state.chart) draw();
    });
    let resizing = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => {
        if (state.chart) state.chart.setSize({ width: Math.max(300, $('chart').clientWidth), height: 340 });
      }, 100);
    });
    // Live: read again what is shown, unless the tab is hidden.
    setInterval(() => {
      if (document.visibilityState === 'hidden') return;
      refreshChart();
      refreshTop();
    }, REFRESH_MS);

    loadNames(true);
    if (q.get('view') === 'top') showView('top');
    if (state.name !== null) open(state.name, q.get('precision'));
  }

  start();
})();
