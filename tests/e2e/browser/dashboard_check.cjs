// Drives Debian's chromium (playwright-core) through magnet host's
// dashboard and writes what it saw as JSON; tests/e2e/metrics_test.cc
// (MetricsDirect.Dashboard) judges it.  Usage: node dashboard_check.cjs CONFIG.json
//
// CONFIG: url, operator_token, tenant_token, tenant_vm, other_vm,
// other_uuid, vms (names), magnet, socket (for `magnet top --json`), out_dir,
// snapshots (how many DOM/top pairs to take), need_traffic, need_power (the
// daemon has a power source: wait for the power chart's samples), quick_s
// and ready_s (the lab's bounds on a quick step and on readiness, docs/lab.md).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { chromium } = require('playwright-core');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
// Without these Chromium's background connections fail on a closed network.
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const QUICK = cfg.quick_s * 1000, WAIT = cfg.ready_s * 1000;
const out = { operator: {}, tenant: {} };

async function open(token) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'magnet-chromium-'));  // a fresh profile
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: '/usr/bin/chromium', headless: true, args: ARGS, viewport: { width: 1400, height: 1100 },
  });
  const page = ctx.pages()[0] || (await ctx.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push('pageerror: ' + String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  const res = await page.goto(cfg.url + '/?token=' + encodeURIComponent(token));
  return { ctx, page, dir, errors, requests, status: res ? res.status() : 0 };
}

async function close(b) {
  await b.ctx.close();
  fs.rmSync(b.dir, { recursive: true, force: true });
}

function top() {
  return JSON.parse(execFileSync(cfg.magnet, ['top', '--socket', cfg.socket, '--json', '--count', '1'],
    { encoding: 'utf8', timeout: QUICK }));
}

// Every panel's data- attributes: the numbers it shows.
function panels(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.panel')].map((p) => {
    const o = { hidden: p.hidden };
    for (const a of p.getAttributeNames()) if (a.startsWith('data-')) o[a.slice(5)] = p.getAttribute(a);
    return [o.vm, o];
  })));
}

// The power chart: its data- attributes, whether it and its "no power
// source" note are shown, and what uPlot drew (a canvas, the legend's labels).
function powerChart(page) {
  return page.evaluate(() => {
    const sec = document.getElementById('power');
    const box = document.getElementById('power-chart');
    return {
      hidden: sec.hidden, chart_hidden: box.hidden, note_hidden: document.getElementById('no-power').hidden,
      source: sec.dataset.source, series: JSON.parse(sec.dataset.series || '[]'),
      samples: Number(sec.dataset.samples), host_watts: sec.dataset.hostWatts || '',
      canvas: !!box.querySelector('canvas'),
      legend: [...box.querySelectorAll('.u-legend .u-series .u-label')].map((l) => l.textContent),
    };
  });
}

function waitPower(page, n) {
  return page.waitForFunction((count) => Number(document.getElementById('power').dataset.samples) >= count,
    n, { timeout: WAIT });
}

function waitPanels(page, names, needTraffic) {
  return page.waitForFunction(([vms, traffic]) => vms.every((v) => {
    const p = [...document.querySelectorAll('.panel')].find((x) => x.dataset.vm === v);
    return p && Number(p.dataset.samples) >= 3 && (!traffic || Number(p.dataset.txMbps) > 0);
  }), [names, needTraffic], { timeout: WAIT });
}

// Samples of the page's own stream, read by a second EventSource in it.
function streamSamples(page, n) {
  return page.evaluate(([count, quick]) => new Promise((resolve) => {
    const es = new EventSource('/api/stream');
    const got = [];
    const done = () => { es.close(); resolve(got); };
    es.addEventListener('sample', (m) => { got.push(m.data); if (got.length >= count) done(); });
    setTimeout(done, quick);
  }), [n, QUICK]);
}

function statusOf(page, url) {
  return page.evaluate((u) => fetch(u).then((r) => r.status), url);
}

async function main() {
  fs.mkdirSync(cfg.out_dir, { recursive: true });
  const shot = (page, name) => page.screenshot({ path: path.join(cfg.out_dir, name), fullPage: true });

  // The operator: every VM, live.
  const op = await open(cfg.operator_token);
  out.operator.status = op.status;
  await waitPanels(op.page, cfg.vms, cfg.need_traffic);
  // Pairs of (the page's numbers, `magnet top --json`) from the same tick of
  // the daemon: `magnet top` first, then the page until it shows that tick
  // (it arrives on the stream within a tick) or a later one (then the pair
  // is dropped).  Pairing by "no sample arrived while we looked" kept too
  // few pairs within the traffic once the page drew more per sample: the
  // page, magnet top and the page again took longer than a tick.
  out.operator.snapshots = [];
  for (let tries = 0; tries < 200 && out.operator.snapshots.length < cfg.snapshots; tries++) {
    const t = top();
    let a = await panels(op.page);
    for (let w = 0; w < 20 && cfg.vms.some((v) => a[v] && Number(a[v]['tick-ms']) < t.at_ms); w++) {
      await op.page.waitForTimeout(20);
      a = await panels(op.page);
    }
    if (cfg.vms.every((v) => a[v] && Number(a[v]['tick-ms']) === t.at_ms))
      out.operator.snapshots.push({ dom: a, top: t });
    await op.page.waitForTimeout(300);  // the next pair a few samples later
  }
  if (cfg.need_power) await waitPower(op.page, 3);
  out.operator.power = await powerChart(op.page);
  out.operator.picker = await op.page.$$eval('#picker option', (o) => o.map((x) => x.value));
  out.operator.status_text = await op.page.textContent('#status');
  await shot(op.page, 'dashboard-operator.png');
  // Drill-down: the tenant VM's views (its flows).
  await op.page.selectOption('#picker', cfg.tenant_vm);
  await op.page.waitForSelector('#drill-body .view table', { timeout: WAIT });
  out.operator.drill = await op.page.evaluate(() => ({
    title: document.getElementById('drill-title').textContent,
    views: [...document.querySelectorAll('#drill-body .view')].map((v) => v.dataset.view),
    flows: [...document.querySelectorAll('#drill-body .view[data-view="guest-tx"] table tr')].length - 1,
  }));
  out.operator.after_pick = await panels(op.page);
  await shot(op.page, 'dashboard-operator-' + cfg.tenant_vm + '-views.png');
  out.operator.errors = op.errors;
  out.operator.offsite = op.requests.filter((u) => !u.startsWith(cfg.url + '/'));
  await close(op);

  // A tenant: its VM alone.
  const tn = await open(cfg.tenant_token);
  out.tenant.status = tn.status;
  await waitPanels(tn.page, [cfg.tenant_vm], false);
  out.tenant.panels = await panels(tn.page);
  if (cfg.need_power) await waitPower(tn.page, 3);
  out.tenant.power = await powerChart(tn.page);
  out.tenant.picker = await tn.page.$$eval('#picker option', (o) => o.map((x) => x.value));
  out.tenant.html = await tn.page.evaluate(() => document.documentElement.outerHTML);
  out.tenant.stream = await streamSamples(tn.page, 5);
  out.tenant.views_own = await statusOf(tn.page, '/api/vm/' + cfg.tenant_vm + '/views');
  out.tenant.views_other = await statusOf(tn.page, '/api/vm/' + cfg.other_vm + '/views');
  out.tenant.views_other_uuid = await statusOf(tn.page, '/api/vm/' + cfg.other_uuid + '/views');
  out.tenant.metrics = await statusOf(tn.page, '/metrics');
  out.tenant.api_vms = await tn.page.evaluate(() => fetch('/api/vms').then((r) => r.text()));
  await tn.page.selectOption('#picker', cfg.tenant_vm);
  await tn.page.waitForSelector('#drill-body .view table', { timeout: WAIT });
  await shot(tn.page, 'dashboard-tenant-' + cfg.tenant_vm + '.png');
  out.tenant.errors = tn.errors;
  out.tenant.offsite = tn.requests.filter((u) => !u.startsWith(cfg.url + '/'));
  await close(tn);
}

main().then(() => {
  fs.writeFileSync(path.join(cfg.out_dir, 'dashboard-result.json'), JSON.stringify(out, null, 1));
  process.exit(0);
}, (e) => {
  out.failure = String(e && e.stack || e);
  fs.writeFileSync(path.join(cfg.out_dir, 'dashboard-result.json'), JSON.stringify(out, null, 1));
  console.error(out.failure);
  process.exit(1);
});
