// magnet host's live dashboard: one panel per VM from the daemon's event
// stream (/api/stream), a power chart of every VM, a VM picker, and a VM's
// own views on demand (/api/vm/NAME/views).  Plain JS; charts by uPlot.  Everything a VM
// reports is put in the page as text (textContent), never as markup.
'use strict';

const KEEP = 240;          // points per chart: 2 minutes at the default 500 ms
const MAX_REASONS = 6;     // exit reasons charted per VM (the busiest)
const panels = new Map();  // VM name -> panel state
let dropped = 0;

const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}
const fmt = (v, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : '–');

// The charts of a panel: name, unit, the series and how to read each from
// a VM's row of the stream.
const CHARTS = [
  { key: 'bw', title: 'bandwidth on its taps (Mbit/s)', series: [
    ['tx', (v) => v.tx_mbps, '#1f77b4'], ['rx', (v) => v.rx_mbps, '#ff7f0e']] },
  { key: 'queue', title: 'host queueing delay (µs)', series: [
    ['tx p50', (v) => v.queue_tx_p50_us, '#2ca02c'], ['tx p99', (v) => v.queue_tx_p99_us, '#98df8a'],
    ['rx p50', (v) => v.queue_rx_p50_us, '#d62728'], ['rx p99', (v) => v.queue_rx_p99_us, '#ff9896']] },
  { key: 'vcpu', title: 'vCPU (CPUs)', series: [
    ['run', (v) => v.vcpu_run, '#1f77b4'], ['wait', (v) => v.vcpu_wait, '#d62728'],
    ['halt', (v) => v.vcpu_halt, '#7f7f7f']] },
  { key: 'drops', title: 'drops on its taps (packets/s)', series: [
    ['drops', (v) => v.drops_per_s, '#9467bd']] },
];
const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2'];

function chartWidth(box) { return Math.max(260, Math.floor(box.clientWidth || 290)); }

function makeChart(box, title, names, colors, data) {
  const opts = {
    width: chartWidth(box), height: 140, legend: { live: false },
    scales: { x: { time: true } },
    series: [{}, ...names.map((n, i) => ({ label: n, stroke: colors[i], width: 1.5 }))],
    axes: [{}, { size: 50 }],
  };
  return new uPlot(opts, data, box);
}

// The row of numbers a panel shows, each also kept as a data- attribute
// (what the end-to-end test compares with `magnet top --json`).
const NOW = [
  ['tx-mbps', 'TX Mbit/s', (v) => v.tx_mbps],
  ['rx-mbps', 'RX Mbit/s', (v) => v.rx_mbps],
  ['vcpu-run', 'vCPU run', (v) => v.vcpu_run],
  ['vcpu-wait', 'vCPU wait', (v) => v.vcpu_wait],
  ['vcpu-halt', 'vCPU halt', (v) => v.vcpu_halt],
  ['exits-per-s', 'exits/s', (v) => v.exits_per_s],
  ['queue-tx-p50-us', 'queue tx p50 µs', (v) => v.queue_tx_p50_us],
  ['queue-tx-p99-us', 'queue tx p99 µs', (v) => v.queue_tx_p99_us],
  ['queue-rx-p50-us', 'queue rx p50 µs', (v) => v.queue_rx_p50_us],
  ['queue-rx-p99-us', 'queue rx p99 µs', (v) => v.queue_rx_p99_us],
  ['drops-per-s', 'drops/s', (v) => v.drops_per_s],
  ['power-watts', 'W', (v) => v.power_watts],
];

function newPanel(v) {
  const p = { name: v.name, times: [], values: {}, charts: {}, reasons: [], reasonData: {} };
  const nums = el('table', { class: 'now' });
  p.cells = {};
  let row = null;
  NOW.forEach(([k, label], i) => {
    if (i % 4 === 0) nums.append((row = el('tr')));
    const td = el('td', { class: 'v' }, '–');
    p.cells[k] = td;
    row.append(el('td', {}, label), td);
  });
  const views = el('button', { type: 'button' }, 'views of this VM');
  views.addEventListener('click', () => pick(v.name));
  p.uuidEl = el('span', { class: 'uuid' }, v.uuid || '');
  p.node = el('div', { class: 'panel', 'data-vm': v.name, 'data-uuid': v.uuid || '', 'data-samples': '0' },
    el('h2', {}, el('span', {}, v.name), p.uuidEl), nums);
  const charts = el('div', { class: 'charts' });
  p.node.append(charts, views);
  $('panels').append(p.node);
  for (const c of [...CHARTS, { key: 'exits', title: 'KVM exits by reason (/s)' }]) {
    const box = el('div', { class: 'chart', 'data-chart': c.key }, el('h3', {}, c.title));
    charts.append(box);
    p.charts[c.key] = { box, def: c, plot: null };
  }
  panels.set(v.name, p);
  return p;
}

function push(arr, x) {
  arr.push(x);
  if (arr.length > KEEP) arr.shift();
}

function update(p, v, t) {
  push(p.times, t);
  for (const c of CHARTS) {
    const cols = (p.values[c.key] ||= c.series.map(() => []));
    c.series.forEach(([, get], i) => push(cols[i], get(v) ?? null));
  }
  // Exit reasons: a series per reason among the busiest seen; a new one
  // rebuilds that chart (with nulls before it appeared).
  const now = {};
  for (const e of v.exits_by_reason || []) now[e.reason] = e.per_s;
  for (const r of Object.keys(now).sort((a, b) => now[b] - now[a])) {
    if (p.reasons.length >= MAX_REASONS || p.reasons.includes(r)) continue;
    p.reasons.push(r);
    p.reasonData[r] = new Array(Math.max(0, p.times.length - 1)).fill(null);
    if (p.charts.exits.plot) { p.charts.exits.plot.destroy(); p.charts.exits.plot = null; }
  }
  for (const r of p.reasons) push(p.reasonData[r], now[r] ?? 0);

  for (const [k, , get] of NOW) {
    const x = get(v);
    p.node.setAttribute('data-' + k, String(x));
    p.cells[k].textContent = fmt(x, k.endsWith('-us') || k === 'exits-per-s' ? 0 : 2);
  }
  p.node.setAttribute('data-at-ms', String(t * 1000));
  p.node.setAttribute('data-samples', String(Number(p.node.getAttribute('data-samples')) + 1));
  if (p.uuidEl.textContent !== (v.uuid || '')) p.uuidEl.textContent = v.uuid || '';
  draw(p);
}

function draw(p) {
  if (p.node.hidden) return;
  for (const c of CHARTS) {
    const ch = p.charts[c.key];
    const data = [p.times, ...p.values[c.key]];
    if (!ch.plot) ch.plot = makeChart(ch.box, c.title, c.series.map((s) => s[0]), c.series.map((s) => s[2]), data);
    else ch.plot.setData(data);
  }
  const ex = p.charts.exits;
  const data = [p.times, ...p.reasons.map((r) => p.reasonData[r])];
  if (!ex.plot) ex.plot = makeChart(ex.box, '', p.reasons, PALETTE, data);
  else ex.plot.setData(data);
}

// The power chart, above the panels: each VM's share of the host's power
// (its row's power_watts) and, for an operator, the host's (the sample's
// "power"; a tenant's samples have neither it nor other VMs).  On a host
// without a power source both are null: the chart is hidden, a note says so.
const power = { times: [], series: new Map(), plot: null };  // key -> watts, aligned with times
const HOST = 'host';  // the host's key; a VM's is 'vm:' + its name

function powerNow(s) {
  const now = new Map();
  if (s.power) now.set(HOST, s.power.watts);
  for (const v of s.vms || []) if (typeof v.power_watts === 'number') now.set('vm:' + v.name, v.power_watts);
  return now;
}

const from0 = (u, lo, hi) => [0, Math.max(1, hi || 0) * 1.1];

// The host's power is far above any VM's share (its idle power alone is
// no VM's): it gets a scale and an axis of its own, on the right.
function powerChart(keys, labels, data) {
  const box = $('power-chart');
  const series = keys.map((k, i) => (k === HOST
    ? { label: labels[i], stroke: '#222', width: 1.5, scale: 'host' }
    : { label: labels[i], stroke: PALETTE[i % PALETTE.length], width: 1.5, scale: 'W' }));
  const axes = [{}, { scale: 'W', size: 50, label: 'VMs (W)' }];
  if (keys.includes(HOST)) axes.push({ scale: 'host', side: 1, size: 50, label: 'host (W)', grid: { show: false } });
  return new uPlot({
    width: chartWidth(box), height: 160, legend: { live: false },
    // Both from 0: a share is a part of the host's power, not a wiggle.
    scales: { x: { time: true }, W: { range: from0 }, host: { range: from0 } }, series: [{}, ...series], axes,
  }, data, box);
}

function updatePower(s, t) {
  const now = powerNow(s);
  const sec = $('power');
  sec.hidden = false;
  sec.dataset.source = s.power ? s.power.source : now.size ? 'share' : 'none';
  $('power-chart').hidden = !now.size;
  $('no-power').hidden = now.size > 0;
  if (!now.size) return;
  push(power.times, t);
  let changed = false;
  for (const k of now.keys())
    if (!power.series.has(k)) { power.series.set(k, new Array(power.times.length - 1).fill(null)); changed = true; }
  for (const [k, vals] of power.series) {
    push(vals, now.has(k) ? now.get(k) : null);
    // A VM gone: its series goes once its last point has scrolled out.
    if (vals.every((x) => x === null)) { power.series.delete(k); changed = true; }
  }
  const keys = [...power.series.keys()].sort((a, b) => (a === HOST ? -1 : b === HOST ? 1 : a.localeCompare(b)));
  const labels = keys.map((k) => (k === HOST ? 'host' + (s.power ? ' (' + s.power.source + ')' : '') : k.slice(3)));
  sec.dataset.series = JSON.stringify(keys.map((k) => (k === HOST ? HOST : k.slice(3))));
  sec.dataset.samples = String(Number(sec.dataset.samples) + 1);
  sec.dataset.hostWatts = s.power ? String(s.power.watts) : '';
  const data = [power.times, ...keys.map((k) => power.series.get(k))];
  if (changed && power.plot) { power.plot.destroy(); power.plot = null; }
  if (!power.plot) power.plot = powerChart(keys, labels, data);
  else {
    power.plot.setData(data);
  }
}

function onSample(s) {
  const t = (s.wall_ms || Date.now()) / 1000;
  updatePower(s, t);
  const seen = new Set();
  for (const v of s.vms || []) {
    seen.add(v.name);
    const p = panels.get(v.name) || newPanel(v);
    update(p, v, t);
    // The daemon's tick these numbers are from (`magnet top --json`'s at_ms).
    p.node.setAttribute('data-tick-ms', String(s.at_ms ?? ''));
  }
  for (const [name, p] of panels) {
    if (seen.has(name)) continue;
    p.node.remove();
    panels.delete(name);
  }
  syncPicker();
  $('empty').hidden = panels.size > 0;
}

function syncPicker() {
  const sel = $('picker');
  const want = ['', ...[...panels.keys()].sort()];
  const have = [...sel.options].map((o) => o.value);
  if (want.join('\n') !== have.join('\n')) {
    const cur = sel.value;
    sel.replaceChildren(...want.map((n) => el('option', { value: n }, n || 'all VMs')));
    sel.value = want.includes(cur) ? cur : '';
  }
  const only = sel.value;
  for (const [name, p] of panels) {
    const hide = only !== '' && name !== only;
    if (p.node.hidden !== hide) { p.node.hidden = hide; if (!hide) draw(p); }
  }
}

// A VM's own views (what `magnet views --vm NAME` prints): per view, its
// busiest groups (e.g. the flows).
let drillTimer = null;
function pick(name) {
  $('picker').value = name;
  location.hash = name ? 'vm=' + encodeURIComponent(name) : '';
  syncPicker();
  clearInterval(drillTimer);
  $('drill').hidden = !name;
  if (!name) return;
  $('drill-title').textContent = 'views of ' + name;
  const load = () => fetch('/api/vm/' + encodeURIComponent(name) + '/views', { credentials: 'same-origin' })
    .then((r) => (r.ok ? r.json() : r.text().then((t) => { throw new Error(t); })))
    .then((views) => showViews(name, views))
    .catch((e) => { $('drill-body').replaceChildren(el('p', { class: 'error' }, String(e.message || e))); });
  load();
  drillTimer = setInterval(load, 2000);
}

function showViews(name, views) {
  const body = [];
  for (const s of views) {
    const sec = el('div', { class: 'view', 'data-view': s.view });
    sec.append(el('h3', {}, s.view + '  (' + (s.matched ?? 0) + ' events matched)'));
    for (const g of s.groups || []) {
      const t = el('table', { 'data-by': g.by });
      t.append(el('tr', {}, el('th', {}, g.by), el('th', {}, 'events'), el('th', {}, 'bytes'), el('th', {}, 'avg Mbit/s')));
      for (const r of g.rows || [])
        t.append(el('tr', {}, el('td', {}, r.label || String(r.key)), el('td', {}, String(r.events)),
          el('td', {}, String(r.bytes)), el('td', {}, fmt((r.bandwidth_bps || 0) / 1e6))));
      sec.append(el('p', {}, 'by ' + g.by), t);
    }
    body.push(sec);
  }
  if (!body.length) body.push(el('p', {}, 'no views for ' + name));
  $('drill-body').replaceChildren(...body);
}

function connect() {
  const es = new EventSource('/api/stream', { withCredentials: true });
  es.addEventListener('open', () => { $('status').textContent = 'live'; $('status').dataset.state = 'live'; });
  es.addEventListener('error', () => {
    $('status').textContent = 'reconnecting…';
    $('status').dataset.state = 'down';
    // A refusal (429/503: this token's or the server's streams at their cap)
    // ends an EventSource for good; ask again later (the Retry-After).
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 10000);
  });
  es.addEventListener('sample', (m) => onSample(JSON.parse(m.data)));
  // Samples the daemon dropped for this browser (it fell behind): a gap.
  es.addEventListener('dropped', (m) => {
    dropped = Number(m.data);
    $('dropped').dataset.dropped = String(dropped);
    $('dropped').textContent = dropped ? dropped + ' samples dropped (slow connection)' : '';
  });
}

$('picker').addEventListener('change', (e) => pick(e.target.value));
window.addEventListener('resize', () => {
  if (power.plot) power.plot.setSize({ width: chartWidth($('power-chart')), height: 160 });
  for (const p of panels.values())
    for (const c of Object.values(p.charts))
      if (c.plot) c.plot.setSize({ width: chartWidth(c.box), height: 140 });
});
connect();
const fromHash = decodeURIComponent((location.hash.match(/vm=([^&]*)/) || [])[1] || '');
if (fromHash) {
  // Wait for the first sample so the picker knows the VM.
  const once = setInterval(() => { if (panels.has(fromHash)) { clearInterval(once); pick(fromHash); } }, 100);
}
