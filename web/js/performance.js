// The Alarm performance tab: the alarm system as ISA-18.2 (Table 7) and EEMUA 191
// measure it, over a window: the figures against their targets, activations per
// 10 minutes with the 1 / 2 / 10 lines and floods shaded, the top 10 and the priority
// mix, and the tables of floods, stale, chattering, shelved and out-of-service points.
// Charts by uPlot, vendored (web/vendor/uplot, served by twinops: no CDN on site).

import uPlot from './uPlot.esm.js';
import { $, api, h, showError } from './core.js';

const DAY = 86400;

export async function loadPerformance() {
  $('#kpi-days').onchange = () => loadPerformance();
  const days = Number($('#kpi-days').value) || 7;
  const to = new Date();
  const from = new Date(to.getTime() - days * DAY * 1000);
  let k;
  try {
    k = await api(`/api/alarm-kpis?from=${from.toISOString()}&to=${to.toISOString()}`);
  } catch (e) {
    showError(e.message);
    return;
  }
  $('#kpi-summary').replaceChildren(summary(k));
  rateChart($('#kpi-rate'), k);
  pareto($('#kpi-pareto'), k);
  priorities($('#kpi-priority'), k);
  $('#kpi-tables').replaceChildren(...tables(k));
  $('#kpi-definitions').replaceChildren(
    ...Object.entries(k.definitions).map(([name, text]) => h('li', {}, h('b', {}, name), `: ${text}`)),
  );
}

// The headline figures, each with its target and whether it meets it.
function summary(k) {
  const row = (label, value, target, ok) =>
    h('tr', { class: ok === false ? 'miss' : '' }, h('th', {}, label), h('td', {}, String(value)), h('td', {}, target));
  return h(
    'table',
    { class: 'kpi-table', id: 'kpi-figures' },
    h('tr', {}, h('th', {}, 'figure'), h('th', {}, 'value'), h('th', {}, 'target (ISA-18.2 Table 7)')),
    row('Annunciated activations', k.annunciated, '', null),
    row('Average per day', k.rate_per_day, '~150 acceptable, ~300 manageable', k.rate_per_day <= 300),
    row(
      'Average per 10 minutes',
      k.rate_per_10min,
      `~1 acceptable, ~2 manageable (${k.rate_verdict})`,
      k.rate_per_10min <= 2,
    ),
    row('Peak in one 10-minute period', k.peak_10min, '≤ 10', k.peak_10min <= 10),
    row('10-minute periods over 10', `${k.pct_periods_over_10}%`, '~<1%', k.pct_periods_over_10 < 1),
    row('Time in flood', `${k.pct_time_in_flood}%`, '~<1%', k.pct_time_in_flood < 1),
    row('Top 10 share', `${k.top10_share_pct}%`, '~1-5%', k.top10_share_pct <= 5),
    row('Chattering points', k.chattering.length, '0', k.chattering.length === 0),
    row('Stale alarms', k.stale.length, '< 5', k.stale.length < 5),
  );
}

// Activations per aligned 10-minute period, the 1 / 2 / 10 lines, floods shaded.
function rateChart(el, k) {
  const start = Date.parse(k.window.from) / 1000;
  const first = Math.floor(start / 600) * 600;
  const xs = k.per_10min.map((_, i) => first + i * 600);
  const line = (v) => xs.map(() => v);
  const floods = k.floods.map((f) => [Date.parse(f.start) / 1000, Date.parse(f.end) / 1000]);
  const opts = {
    width: Math.max(el.clientWidth, 600),
    height: 260,
    scales: { x: { time: true } },
    // 24-hour times in UTC, where the periods are aligned.
    axes: [
      {
        label: 'UTC',
        space: 90,
        values: (_, ticks) => ticks.map((t) => new Date(t * 1000).toISOString().slice(5, 16).replace('T', ' ')),
      },
      { label: 'activations / 10 min' },
    ],
    series: [
      {},
      {
        label: 'activations',
        stroke: '#1e1e1e',
        width: 1,
        paths: uPlot.paths.stepped({ align: 1 }),
        points: { show: false },
      },
      { label: '1 (acceptable)', stroke: '#4a6fa5', dash: [4, 4], points: { show: false } },
      { label: '2 (manageable)', stroke: '#e06c00', dash: [4, 4], points: { show: false } },
      { label: '10 (flood)', stroke: '#c8102e', dash: [4, 4], points: { show: false } },
    ],
    hooks: {
      drawClear: [
        (u) => {
          const ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = 'rgba(200, 16, 46, 0.12)';
          for (const [a, b] of floods) {
            const x0 = u.valToPos(a, 'x', true);
            const x1 = u.valToPos(b, 'x', true);
            ctx.fillRect(x0, u.bbox.top, Math.max(x1 - x0, 1), u.bbox.height);
          }
          ctx.restore();
        },
      ],
    },
  };
  el.replaceChildren();
  el.dataset.periods = String(xs.length);
  new uPlot(opts, [xs, k.per_10min, line(1), line(2), line(10)], el);
}

// The 10 most frequent points as bars, with their cumulative share of all activations.
function pareto(el, k) {
  const top = k.bad_actors.slice(0, 10);
  const xs = top.map((_, i) => i + 1);
  let sum = 0;
  const cumulative = top.map((p) => (sum += p.share_pct));
  const names = top.map((p) => `${p.code} on ${p.asset_id}`);
  el.replaceChildren();
  el.dataset.points = String(top.length);
  if (!top.length) {
    el.append(h('p', { class: 'quiet' }, 'No activations in the window.'));
    return;
  }
  new uPlot(
    {
      width: Math.max(el.clientWidth, 600),
      height: 220,
      scales: { x: { time: false }, pct: { range: [0, 100] } },
      axes: [
        { values: (_, ticks) => ticks.map((t) => names[t - 1] ?? '') },
        { label: 'activations' },
        { scale: 'pct', side: 1, label: 'cumulative %', grid: { show: false } },
      ],
      series: [
        {},
        { label: 'activations', fill: 'rgba(74, 111, 165, 0.5)', paths: uPlot.paths.bars({ size: [0.6] }) },
        { label: 'cumulative share %', scale: 'pct', stroke: '#c8102e' },
      ],
    },
    [xs, top.map((p) => p.activations), cumulative],
    el,
  );
}

// The priority mix against 80 / 15 / 5 (critical apart).
function priorities(el, k) {
  const target = k.priority_target_pct;
  el.replaceChildren(
    h(
      'table',
      { class: 'kpi-table' },
      h('tr', {}, h('th', {}, 'priority'), h('th', {}, 'activations'), h('th', {}, 'share'), h('th', {}, 'target')),
      ...['low', 'medium', 'high', 'critical'].map((p) =>
        h(
          'tr',
          {},
          h('td', {}, h('span', { class: `sev ${p}` }, p)),
          h('td', {}, String(k.priority[p] ?? 0)),
          h('td', {}, `${k.priority_pct[p] ?? 0}%`),
          h('td', {}, target[p] != null ? `~${target[p]}%` : 'apart'),
        ),
      ),
    ),
  );
}

// A table per list the figures hold, each saying when it is empty.
function tables(k) {
  const point = (p) => `${p.code} on ${p.asset_id}${p.sensor_id ? ` (${p.sensor_id})` : ''}`;
  const table = (title, rows, columns) =>
    h(
      'div',
      { class: 'kpi-list' },
      h('h3', {}, `${title} (${rows.length})`),
      rows.length
        ? h(
            'table',
            { class: 'kpi-table' },
            h('tr', {}, ...columns.map(([name]) => h('th', {}, name))),
            ...rows.map((r) => h('tr', {}, ...columns.map(([, f]) => h('td', {}, String(f(r) ?? ''))))),
          )
        : h('p', { class: 'quiet' }, 'None.'),
    );
  return [
    table('Floods', k.floods, [
      ['start', (f) => f.start],
      ['end', (f) => f.end],
      ['activations', (f) => f.activations],
      ['peak / 10 min', (f) => f.peak_10min],
      ['top contributors', (f) => f.top.map(point).join(', ')],
    ]),
    table('Stale alarms', k.stale, [
      ['point', point],
      ['active since', (s) => s.active_since],
    ]),
    table('Chattering points', k.chattering, [
      ['point', point],
      ['activations', (c) => c.activations],
    ]),
    table('Shelved', k.shelved, [
      ['point', point],
      ['minutes', (s) => s.shelved_minutes],
      ['still shelved', (s) => (s.shelved_at_end ? 'yes' : 'no')],
    ]),
    table('Out of service', k.out_of_service, [
      ['point', point],
      ['minutes', (s) => s.out_of_service_minutes],
      ['still out of service', (s) => (s.out_of_service_at_end ? 'yes' : 'no')],
    ]),
    // What the journal teaches: candidates for designed suppression, for rationalization.
    table('Consequential pairs (candidates for designed suppression)', k.consequential_pairs || [], [
      ['first', (p) => point(p.first)],
      ['then', (p) => point(p.then)],
      ['support', (p) => `${p.support} of ${p.first_activations}`],
      ['confidence', (p) => `${Math.round(p.confidence * 100)}%`],
      ['lift', (p) => p.lift.toFixed(1)],
      ['lag median / p90', (p) => `${p.lag_median_s} / ${p.lag_p90_s} s`],
    ]),
  ];
}
