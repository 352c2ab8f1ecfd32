'use strict';
(() => {
const POLL_MS = 2000;
const TIMEOUT_MS = 8000;      // a hung request must not stall the poll chain
const STALE_MS = 3 * POLL_MS; // this long without an answer is stale even with no error yet
const SVG_NS = 'http://www.w3.org/2000/svg';
const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
const $ = id => document.getElementById(id);

// The API may omit or null any field; these turn anything into a safe value instead of throwing.
const num = v => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const str = v => (v === null || v === undefined ? '' : String(v));
const obj = v => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
const arr = v => (Array.isArray(v) ? v : []);
const devicesOf = fleet => arr(fleet.devices).filter(d => d && typeof d === 'object');
const DASH = '\u2013';

function setText(id, text) { const e = $(id); if (e) e.textContent = text; }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtBytes(v) {
  v = num(v);
  if (v === null) return DASH;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(Math.abs(v) < 10 ? 2 : Math.abs(v) < 100 ? 1 : 0)) + ' ' + UNITS[i];
}
const fmtRate = v => (num(v) === null ? DASH : fmtBytes(v) + '/s');
const fmtInt = v => (num(v) === null ? DASH : Math.round(v).toLocaleString('en-US'));
const fmtPct = v => (num(v) === null ? DASH : (v * 100).toFixed(1) + '%');
const fmtLoss = v => (num(v) === null ? DASH : v.toFixed(v < 10 ? 4 : 2));
function fmtAgo(s) {
  if (num(s) === null) return DASH;
  s = Math.max(0, Math.round(s));
  if (s < 120) return s + 's ago';
  if (s < 7200) return Math.round(s / 60) + 'm ago';
  if (s < 172800) return Math.round(s / 3600) + 'h ago';
  return Math.round(s / 86400) + 'd ago';
}
function fmtDuration(s) {
  if (num(s) === null) return DASH;
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = s % 60;
  const p = n => String(n).padStart(2, '0');
  if (d) return d + 'd ' + p(h) + 'h';
  if (h) return h + 'h ' + p(m) + 'm';
  if (m) return m + 'm ' + p(sec) + 's';
  return sec + 's';
}
const strategyName = s => ({ ist: 'IST', fedavg: 'FedAvg' }[s] || str(s));
const onOff = v => (typeof v === 'boolean' ? (v ? 'on' : 'off') : '');
// State names become CSS classes; keep only safe characters so no value can break the class list.
const stateClass = s => 'st-' + str(s).replace(/[^a-z_]/gi, '');

// ---- header -------------------------------------------------------------------------------------------
function renderStatus(st) {
  const hub = obj(st.hub), run = obj(st.run), fleet = obj(st.fleet);
  setText('hub-version', hub.version ? 'v' + str(hub.version) : '');
  setText('uptime', fmtDuration(num(hub.uptime_s)));

  const state = str(run.state) || 'unknown';
  const badge = $('state');
  badge.textContent = state.replace(/_/g, ' ');
  badge.className = 'badge ' + stateClass(state);
  setText('round', num(run.round) === null ? DASH : String(run.round));
  setText('rounds', num(run.rounds) === null ? DASH : String(run.rounds));

  const line = $('run-line');
  line.textContent = '';
  const parts = [
    ['strategy', strategyName(run.strategy)], ['model', str(run.model)], ['seed', str(run.seed)],
    ['codec', str(run.codec)], ['aggregate', str(run.aggregate)],
    ['devices', num(run.min_devices) === null ? '' : run.min_devices + '\u2013' + str(run.max_devices)],
    ['deadline', num(run.round_deadline_s) === null ? '' : run.round_deadline_s + ' s'],
    ['completed', num(run.completed) === null ? '' : String(run.completed)],
    ['secure aggregation', onOff(run.secure_aggregation)], ['DP', onOff(run.dp)],
  ];
  parts.filter(p => p[1] !== '').forEach((p, i) => {
    if (i) line.append(' \u00b7 ');
    line.append(p[0] + ' ');
    line.append(el('b', '', p[1]));
  });

  const test = num(run.last_test_accuracy), fed = num(run.last_fed_accuracy);
  setText('last-acc', fmtPct(test !== null ? test : fed));
  setText('last-acc-kind', test !== null ? 'test' : fed !== null ? 'federated' : '');
  const eps = num(run.epsilon);
  $('eps-fact').hidden = eps === null;
  setText('eps', eps === null ? '' : eps.toFixed(2));

  const list = devicesOf(fleet);
  setText('dev-connected', fmtInt(num(fleet.connected) ?? list.filter(d => d.connected === true).length));
  setText('dev-registered', fmtInt(num(fleet.registered) ?? list.length));
  setText('dev-training', fmtInt(fleet.training));

  runNotices = [];
  if (state === 'failed' || str(run.failure)) runNotices.push(['n-error', 'Run failed', str(run.failure) || 'no reason given']);
  if (run.paused) runNotices.push(['n-warn', 'Paused', 'no new round starts until the run is resumed']);
  if (run.finish_requested) runNotices.push(['n-warn', 'Finish requested', 'the run stops after the current round']);
  if (num(run.resumed_from) > 0) runNotices.push(['n-info', 'Resumed', 'from the checkpoint of round ' + run.resumed_from]);
  if (str(run.waiting_for)) runNotices.push(['n-warn waiting', 'Waiting', str(run.waiting_for)]);
  // Devices and certificates the hub refused lately: the newest few, each with its reason.
  const away = arr(fleet.turned_away).map(obj), now = num(hub.now_unix);
  away.slice(0, 5).forEach(t => {
    const ago = now === null || num(t.last_unix) === null ? '' : ', last ' + fmtAgo(now - t.last_unix);
    const serial = str(t.serial) ? ', serial ' + str(t.serial) : '';
    runNotices.push(['n-warn turned-away', 'Turned away: ' + str(t.who),
                     str(t.reason) + ' (' + str(t.address) + serial + '; ' + fmtInt(t.times) + '\u00d7' + ago + ')', str(t.who)]);
  });
  if (away.length > 5) runNotices.push(['n-warn turned-away', 'Turned away', (away.length - 5) + ' more: see api/status']);

  const r = num(run.round), n = num(run.rounds);
  document.title = 'Tessera hub \u2014 ' + (r === null ? '' : 'round ' + r + (n === null ? '' : '/' + n) + ' \u00b7 ') + state;
}

// ---- fleet table --------------------------------------------------------------------------------------
const byId = new Intl.Collator('en', { numeric: true, sensitivity: 'base' }); // pi-2 before pi-10

// The hub sends one page of the fleet (api/status?devices_from=N&devices=FLEET_PAGE), in natural order
// of the ids; the counts cover every device.
const FLEET_PAGE = 200;
let fleetFrom = 0;

function renderFleet(st) {
  const fleet = obj(st.fleet), now = num(obj(st.hub).now_unix);
  const devices = devicesOf(fleet).sort((a, b) => byId.compare(str(a.id), str(b.id)));
  const body = $('fleet');
  const rows = devices.map(d => {
    const up = d.connected === true;
    const tr = el('tr', 'device ' + (up ? 'connected' : 'offline'));
    tr.setAttribute('data-id', str(d.id));
    const state = str(d.state) || (up ? 'idle' : 'offline');
    const seen = num(d.last_seen_unix);
    // Ages come from the hub's own clock so a skewed browser clock cannot distort them.
    const cells = [
      [str(d.id), 'id'], [null, 'state'],
      [num(d.budget_bytes) === null ? DASH : +(d.budget_bytes / 1048576).toFixed(1) + ' MiB'],
      [fmtInt(d.examples)], [fmtInt(d.subnet_params)], [str(d.codec) || DASH],
      [now === null || seen === null ? DASH : fmtAgo(now - seen)],
      [fmtInt(d.rounds_done) + ' / ' + fmtInt(d.rounds_missed)],
      [fmtBytes(d.bytes_down)], [fmtBytes(d.bytes_up)], [fmtRate(d.down_bytes_per_s)], [fmtRate(d.up_bytes_per_s)],
    ];
    for (const [text, cls] of cells) {
      const td = el('td', cls || '');
      if (cls === 'state') td.append(el('span', 'badge ' + stateClass(state), state));
      else td.textContent = text;
      tr.append(td);
    }
    if (seen !== null) tr.title = 'last seen ' + new Date(seen * 1000).toISOString();
    return tr;
  });
  if (!rows.length) {
    const td = el('td', 'empty', 'no devices registered yet');
    td.colSpan = 12;
    rows.push(el('tr'));
    rows[0].append(td);
  }
  body.replaceChildren(...rows);
  const registered = num(fleet.registered) ?? devices.length;
  const connected = num(fleet.connected) ?? devices.filter(d => d.connected === true).length;
  const from = num(fleet.devices_from) ?? 0;
  const shown = devices.length ? ' \u00b7 showing ' + fmtInt(from + 1) + '\u2013' + fmtInt(from + devices.length) : '';
  setText('fleet-summary', fmtInt(registered) + ' registered \u00b7 ' + fmtInt(connected) + ' connected' + (registered > devices.length ? shown : ''));
  if (from > 0 && !devices.length) fleetFrom = Math.max(0, registered - FLEET_PAGE); // the fleet shrank under the page
  $('fleet-prev').disabled = from <= 0;
  $('fleet-next').disabled = from + devices.length >= registered;
  $('fleet-pager').hidden = registered <= FLEET_PAGE && from === 0;
}

function fleetUrl() { return 'api/status?devices_from=' + fleetFrom + '&devices=' + FLEET_PAGE; }

// Another page now, not at the next poll.
async function turnFleetPage(by) {
  fleetFrom = Math.max(0, fleetFrom + by * FLEET_PAGE);
  try { renderFleet(obj(parse('api/status', await getText(fleetUrl())))); } catch (e) { lastError = (e && e.message) || String(e); }
}

// ---- charts -------------------------------------------------------------------------------------------
const W = 480, H = 214, PAD = { l: 58, r: 14, t: 10, b: 34 };

// Round-number tick step: 1, 2, 2.5, 5 times a power of ten, integer steps only when asked.
function niceStep(span, count, integer) {
  const raw = Math.max(span / count, integer ? 1 : 1e-12);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 2.5, 5, 10]) {
    const s = m * mag;
    if (s >= raw && (!integer || Number.isInteger(s))) return s;
  }
  return 10 * mag;
}
function ticks(lo, hi, step) {
  const out = [];
  for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

// series: [{label, cls, pts: [{x, y, tip, extra}]}]; xr: [first, last] round shared by all charts;
// y: {max (fixed) | undefined, integer, div, fmt}
function drawChart(name, series, xr, y) {
  const svg = $('chart-' + name);
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  const nodes = [];
  const all = series.flatMap(s => s.pts);
  const keys = series.map((s, i) => s.pts.length && el('span', 's' + (s.color ?? i), s.label)).filter(Boolean);
  if (all.some(p => p.extra)) keys.push(el('span', 'ring', 'federated, not tested'));
  $('legend-' + name).replaceChildren(...keys);

  const x0 = PAD.l, x1 = W - PAD.r, y0 = H - PAD.b, y1 = PAD.t;
  nodes.push(svgEl('line', { class: 'axis', x1: x0, y1: y0, x2: x1, y2: y0 }));
  nodes.push(svgEl('line', { class: 'axis', x1: x0, y1: y0, x2: x0, y2: y1 }));
  if (!all.length) {
    nodes.push(svgEl('text', { x: (x0 + x1) / 2, y: (y0 + y1) / 2, 'text-anchor': 'middle' }, y.empty || 'no data yet'));
    svg.replaceChildren(...nodes);
    return;
  }

  // x: the same rounds in every chart so they line up; a single round gets room either side.
  let [xlo, xhi] = xr;
  if (xlo === xhi) { xlo -= 1; xhi += 1; }
  const sx = v => x0 + (v - xlo) / (xhi - xlo) * (x1 - x0);
  // y: from 0 up to a rounded maximum (or the fixed one), in units of y.div.
  const div = y.div || 1;
  const dmax = Math.max(...all.map(p => p.y)) / div;
  let ystep, yhi;
  if (y.max !== undefined) { yhi = y.max / div; ystep = niceStep(yhi, 4, false); }
  else {
    ystep = niceStep(dmax > 0 ? dmax : 1, 4, y.integer);
    yhi = Math.max(ystep, Math.ceil(dmax / ystep - 1e-9) * ystep);
  }
  // Clamped so a bad value stays on the plot; its tooltip still tells the truth.
  const sy = v => y0 - Math.min(Math.max(v / div / yhi, 0), 1) * (y0 - y1);

  for (const t of ticks(0, yhi, ystep)) {
    const py = sy(t * div);
    if (t > 0) nodes.push(svgEl('line', { class: 'grid', x1: x0 + 1, y1: py, x2: x1, y2: py }));
    nodes.push(svgEl('text', { x: x0 - 6, y: py + 4, 'text-anchor': 'end' }, y.fmt(t)));
  }
  for (const t of ticks(Math.ceil(xlo), xhi, niceStep(xhi - xlo, 6, true))) {
    if (t < xlo) continue;
    const px = sx(t);
    nodes.push(svgEl('line', { class: 'axis', x1: px, y1: y0, x2: px, y2: y0 + 4 }));
    nodes.push(svgEl('text', { x: px, y: y0 + 16, 'text-anchor': 'middle' }, String(t)));
  }
  nodes.push(svgEl('text', { x: (x0 + x1) / 2, y: H - 2, 'text-anchor': 'middle' }, 'round'));

  // Smaller dots when there are many, so 200 rounds read as a line rather than beads.
  series.forEach((s, i) => {
    if (!s.pts.length) return;
    const c = 's' + (s.color ?? i);
    const r = s.pts.length > 80 ? 1.6 : s.pts.length > 30 ? 2.2 : 3;
    if (s.pts.length > 1)
      nodes.push(svgEl('polyline', { class: c, points: s.pts.map(p => sx(p.x).toFixed(1) + ',' + sy(p.y).toFixed(1)).join(' ') }));
    for (const p of s.pts) {
      const dot = svgEl('circle', {
        class: 'point ' + s.cls + ' ' + c + (p.extra ? ' ' + p.extra : ''),
        'data-round': p.x, cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r,
      });
      dot.append(svgEl('title', {}, 'round ' + p.x + ': ' + p.tip));
      nodes.push(dot);
    }
  });
  svg.replaceChildren(...nodes);
}

// Points of one field: rounds where it is a number, in round order.
function pick(rounds, field, tip) {
  return rounds.filter(r => num(r[field]) !== null).map(r => ({ x: r.round, y: r[field], tip: tip(r[field], r) }));
}

function renderRounds(data) {
  const rounds = arr(obj(data).rounds).map(obj).filter(r => num(r.round) !== null).sort((a, b) => a.round - b.round);

  const xr = rounds.length ? [rounds[0].round, rounds[rounds.length - 1].round] : [0, 1];
  // One accuracy point per evaluated round: test accuracy, or the federated one when the hub did not test.
  const hasTest = rounds.some(r => num(r.test_accuracy) !== null);
  const acc = [], fedAcc = [];
  for (const r of rounds) {
    const t = num(r.test_accuracy), f = num(r.fed_accuracy);
    if (t !== null) {
      acc.push({ x: r.round, y: t, tip: 'test accuracy ' + fmtPct(t) + (num(r.test_loss) === null ? '' : ', test loss ' + fmtLoss(r.test_loss)) });
      if (f !== null) fedAcc.push({ x: r.round, y: f, tip: 'federated accuracy ' + fmtPct(f) });
    } else if (f !== null) {
      // Drawn hollow in the federated colour when the series is mostly test results, so the two never blur.
      acc.push({ x: r.round, y: f, tip: 'federated accuracy ' + fmtPct(f) + ' (no test evaluation)', extra: hasTest ? 'fallback' : '' });
    }
  }
  drawChart('accuracy', [
    { label: hasTest ? 'test' : 'federated', cls: 'accuracy', color: hasTest ? 0 : 1, pts: acc },
    { label: 'federated', cls: 'fed-accuracy', color: 1, pts: fedAcc },
  ], xr, { max: 1, fmt: t => Math.round(t * 100) + '%', empty: 'no evaluated rounds yet' });

  drawChart('loss', [
    { label: 'train', cls: 'loss', pts: pick(rounds, 'train_loss', (v, r) => 'train loss ' + fmtLoss(v) + (num(r.lr) === null ? '' : ', lr ' + r.lr)) },
    { label: 'test', cls: 'test-loss', pts: pick(rounds, 'test_loss', v => 'test loss ' + fmtLoss(v)) },
  ], xr, { fmt: t => String(+t.toPrecision(3)) });

  // Pick the unit from the largest value so the ticks are round numbers in that unit.
  const maxBytes = Math.max(0, ...rounds.map(r => Math.max(num(r.bytes_down) || 0, num(r.bytes_up) || 0)));
  let unit = 0;
  while (maxBytes >= Math.pow(1024, unit + 1) && unit < UNITS.length - 1) unit++;
  drawChart('bytes', [
    { label: 'down', cls: 'bytes', pts: pick(rounds, 'bytes_down', v => 'down ' + fmtBytes(v)) },
    { label: 'up', cls: 'bytes-up', pts: pick(rounds, 'bytes_up', v => 'up ' + fmtBytes(v)) },
  ], xr, { div: Math.pow(1024, unit), integer: unit === 0, fmt: t => +t.toPrecision(4) + ' ' + UNITS[unit] });

  drawChart('devices', [
    { label: 'devices', cls: 'devices', pts: pick(rounds, 'devices', (v, r) => v + ' devices' +
        (num(r.groups) === null ? '' : ', ' + r.groups + ' groups') + (num(r.seconds) === null ? '' : ', ' + r.seconds.toFixed(1) + ' s') +
        (num(r.refused) ? ', ' + r.refused + ' refused' : '') + (num(r.rejected) ? ', ' + r.rejected + ' rejected' : '')) },
    { label: 'stragglers', cls: 'stragglers', pts: pick(rounds, 'stragglers', v => v + ' stragglers') },
  ], xr, { integer: true, fmt: t => String(t) });
}

// ---- polling ------------------------------------------------------------------------------------------
let lastOk = 0;           // Date.now() of the last successful status fetch
let lastError = '';
// The per-round series is fetched once, then only the rounds after the last one held (api/rounds?since=N):
// a long run's series is not sent again every poll. Charts are redrawn only when rounds arrive, so hover
// tooltips survive a refresh.
let series = [];          // every round held, in round order
let lastRound = 0;        // the last round in `series`
let hubStarted = null;    // hub.started_unix: another value means another hub process, so start over
let runNotices = [];

async function getText(url) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  try {
    const res = await fetch(url, { cache: 'no-store', signal: ctl.signal });
    if (!res.ok) throw new Error(url + ': HTTP ' + res.status + (res.statusText ? ' ' + res.statusText : ''));
    return await res.text();
  } catch (e) {
    // Every message names its URL: "api/status: HTTP 503", "api/rounds: Failed to fetch".
    if (e.name === 'AbortError') throw new Error(url + ': no answer in ' + TIMEOUT_MS / 1000 + ' s');
    throw e.message.startsWith(url) ? e : new Error(url + ': ' + e.message);
  } finally {
    clearTimeout(timer);
  }
}

// Notices are rebuilt from facts each time (run flags + fetch health), never patched.
function renderNotices() {
  const box = $('notices');
  const list = runNotices.slice();
  const age = lastOk ? Date.now() - lastOk : null;
  const stale = lastError !== '' || age === null || age > STALE_MS;
  if (stale && (lastError || lastOk)) {
    const head = lastOk ? 'stale: last update ' + Math.round(age / 1000) + 's ago' : 'no data from the hub yet';
    list.unshift(['n-error', head, lastError || 'waiting for an answer']);
  }
  box.replaceChildren(...list.map(([cls, head, text, who]) => {
    const d = el('div', 'notice ' + cls);
    if (who !== undefined) d.setAttribute('data-who', who);
    d.append(el('b', '', head), ' \u2014 ' + text);
    return d;
  }));
  document.body.classList.toggle('stale', stale && lastOk !== 0);
  setText('updated', lastOk ? 'updated ' + Math.round(age / 1000) + 's ago' : lastError ? 'hub unreachable' : 'connecting\u2026');
}

function parse(url, text) {
  try { return JSON.parse(text); } catch (e) { throw new Error(url + ': not JSON (' + e.message + ')'); }
}

async function poll() {
  try {
    const since = lastRound;
    const [st, rd] = await Promise.all([getText(fleetUrl()), getText('api/rounds?since=' + since)]);
    const status = obj(parse('api/status', st));
    const fresh = arr(obj(parse('api/rounds', rd)).rounds).map(obj).filter(r => num(r.round) !== null && r.round > since);
    renderStatus(status);
    renderFleet(status);
    // A restarted hub (it may redo rounds after its checkpoint) or a new run: drop what is held, and
    // fetch the whole series again on the next poll.
    const started = num(obj(status.hub).started_unix), completed = num(obj(status.run).completed);
    if ((hubStarted !== null && started !== hubStarted) || (completed !== null && completed < lastRound)) {
      series = []; lastRound = 0; hubStarted = started;
      renderRounds({ rounds: series });
    } else {
      hubStarted = started;
      if (fresh.length) { // the empty frames are drawn at start, so only new rounds redraw
        fresh.sort((a, b) => a.round - b.round);
        series = series.concat(fresh);
        lastRound = series[series.length - 1].round;
        renderRounds({ rounds: series });
      }
    }
    lastOk = Date.now();
    lastError = '';
  } catch (e) {
    lastError = (e && e.message) || String(e);
  } finally {
    renderNotices();
    setTimeout(poll, POLL_MS); // chained, so a slow hub never has two polls in flight
  }
}

$('fleet-prev').addEventListener('click', () => turnFleetPage(-1));
$('fleet-next').addEventListener('click', () => turnFleetPage(1));
renderRounds({}); // empty frames until the hub answers
setInterval(renderNotices, 1000); // keeps "Ns ago" honest between polls
poll();
})();
