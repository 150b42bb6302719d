// The Assets tab: the plant by station, an asset's sensors, and their trend.

import uPlot from './uPlot.esm.js';
import { $, api, h, siteTime, state, when } from './core.js';

// The plant as imported: a header row per station, then its assets, each under its
// parent (a skid's pumps, a pump's motor), any kind; retired assets are not sent.
export async function loadAssets() {
  const { stations } = await api('/api/plant');
  const rows = [];
  for (const st of stations) {
    const inAlarm = st.assets.filter((a) => a.active_alarms > 0).length;
    rows.push(
      h(
        'tr',
        { class: 'station', 'data-station': st.id },
        h(
          'th',
          { colspan: 5 },
          `${st.name} (${st.id}): ${st.assets.length} assets${inAlarm ? `, ${inAlarm} in alarm` : ''}`,
        ),
      ),
    );
    const ids = new Set(st.assets.map((a) => a.id));
    const children = (parent) => st.assets.filter((a) => (a.parent && ids.has(a.parent) ? a.parent : null) === parent);
    const add = (a, depth) => {
      rows.push(
        h(
          'tr',
          { 'data-asset': a.id, onclick: () => openAsset(a.id) },
          // A class per depth, not a style attribute: the page's CSP allows no inline style.
          h('td', { class: `depth-${depth}` }, depth ? `└ ${a.id}` : a.id),
          h('td', {}, a.name),
          h('td', {}, a.kind.replaceAll('_', ' ')),
          h('td', {}, a.status),
          h('td', {}, a.active_alarms || ''),
        ),
      );
      if (depth < 4) children(a.id).forEach((c) => add(c, depth + 1));
    };
    children(null).forEach((a) => add(a, 0));
  }
  $('#asset-rows').replaceChildren(...rows);
  if (state.asset) openAsset(state.asset);
}

export async function openAsset(id) {
  state.asset = id;
  const d = await api(`/api/assets/${encodeURIComponent(id)}`);
  const panel = $('#asset-detail');
  panel.hidden = false;
  const limit = (l) =>
    ['ll', 'l', 'h', 'hh']
      .filter((k) => l[k] != null)
      .map((k) => `${k.toUpperCase()} ${l[k]}`)
      .join(' · ');
  panel.replaceChildren(
    h('h2', {}, `${d.asset.id} ${d.asset.name}`),
    h('p', { class: 'quiet' }, `${d.asset.station || ''} · ${d.asset.status} · criticality ${d.asset.criticality}`),
    h(
      'table',
      {},
      h(
        'thead',
        {},
        h('tr', {}, h('th', {}, 'Sensor'), h('th', {}, 'Latest'), h('th', {}, 'Limits'), h('th', {}, 'Band')),
      ),
      h(
        'tbody',
        {},
        d.sensors.map((s) =>
          h(
            'tr',
            { 'data-sensor': s.id, onclick: () => openTrend(s.id) },
            h('td', {}, s.id),
            h(
              'td',
              s.stale ? { class: 'stale', title: s.stale } : {},
              s.latest ? `${s.latest.value} ${s.unit}${s.stale ? ' (stale)' : ''}` : '-',
            ),
            h('td', {}, limit(s.limits || {})),
            h('td', { class: `band-${s.band}` }, s.band || ''),
          ),
        ),
      ),
    ),
    h('div', { id: 'trend' }),
  );
  const worst = d.sensors.find((s) => s.band && s.band !== 'normal') || d.sensors[0];
  openTrend(d.sensors.some((s) => s.id === state.sensor) ? state.sensor : worst?.id);
}

export async function openTrend(sensor) {
  if (!sensor) return;
  state.sensor = sensor;
  const d = await api(`/api/sensors/${encodeURIComponent(sensor)}/readings?hours=${state.hours}`);
  const holder = h('div', { class: 'trend', id: 'trend-canvas' });
  const bar = h(
    'div',
    { class: 'trend-bar' },
    h('strong', {}, `${d.sensor_id} (${d.unit})`),
    [24, 72, 168].map((hrs) =>
      h(
        'button',
        {
          class: state.hours === hrs ? 'active' : '',
          onclick: () => {
            state.hours = hrs;
            openTrend(sensor);
          },
        },
        `${hrs} h`,
      ),
    ),
    h('button', { id: 'zoom-reset', onclick: () => chart.reset() }, 'Reset zoom'),
    h('span', { class: 'quiet' }, 'Drag across the chart to zoom; double-click to reset'),
    d.stale
      ? h('div', { class: 'quiet', id: 'trend-stale' }, `No reading since ${when(d.until)}: the window ends there.`)
      : '',
  );
  $('#trend').replaceChildren(bar, holder);
  const chart = trendChart(holder, d);
}

// A time-series chart (uPlot): the readings, the limits as dashed grey lines (colour is
// for alarm priority only), times in the site's zone; dragging across zooms.
export function trendChart(el, d) {
  const xs = d.points.map((p) => p[0]);
  const limits = Object.entries(d.limits).filter(([, v]) => v != null);
  const u = new uPlot(
    {
      width: Math.max(el.clientWidth, 400),
      height: 340,
      // Ticks on round times in the site's zone, labelled in it.
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), state.site?.timezone || 'UTC'),
      scales: { x: { time: true } },
      axes: [
        { space: 110, values: (_, ticks) => ticks.map((t) => siteTime(new Date(t * 1000), { short: true })) },
        { label: d.unit },
      ],
      series: [
        {},
        { label: d.sensor_id, stroke: '#1e1e1e', width: 1.5 },
        ...limits.map(([name, v]) => ({
          label: `${name.toUpperCase()} ${v}`,
          stroke: '#5a5a5a',
          dash: [6, 4],
          points: { show: false },
        })),
      ],
    },
    [xs, d.points.map((p) => p[1]), ...limits.map(([, v]) => xs.map(() => v))],
    el,
  );
  const full = { min: xs[0], max: xs[xs.length - 1] };
  return { reset: () => xs.length && u.setScale('x', full) };
}
