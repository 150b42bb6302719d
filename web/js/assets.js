// The Assets tab: the plant by station, an asset's sensors, and their trend.

import { $, api, h, siteOffset, siteTime, state, when } from './core.js';

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
          h('td', { style: `padding-left: ${0.5 + 1.2 * depth}em` }, depth ? `└ ${a.id}` : a.id),
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
  const canvas = h('canvas', { class: 'trend', id: 'trend-canvas' });
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
    h('span', { class: 'quiet' }, 'Wheel to zoom, drag to pan'),
    d.stale
      ? h('div', { class: 'quiet', id: 'trend-stale' }, `No reading since ${when(d.until)}: the window ends there.`)
      : '',
  );
  $('#trend').replaceChildren(bar, canvas);
  const chart = trendChart(canvas, d);
}

// A time-series chart on a canvas: the readings, the limits as dashed lines, time and
// value axes; the wheel zooms around the pointer, dragging pans.
export function trendChart(canvas, d) {
  const pts = d.points;
  const full = [pts.length ? pts[0][0] : 0, pts.length ? pts[pts.length - 1][0] : 1];
  let view = [...full];
  const limits = Object.entries(d.limits).filter(([, v]) => v != null);
  const draw = () => {
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth,
      H = canvas.clientHeight;
    canvas.width = W * dpr;
    canvas.height = H * dpr;
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    g.clearRect(0, 0, W, H);
    const L = 56,
      R = 12,
      T = 12,
      B = 28;
    const shown = pts.filter(([t]) => t >= view[0] && t <= view[1]);
    const vals = shown.map((p) => p[1]).concat(limits.map(([, v]) => v));
    let lo = Math.min(...vals),
      hi = Math.max(...vals);
    if (!isFinite(lo)) {
      lo = 0;
      hi = 1;
    }
    if (hi - lo < 1e-9) {
      hi += 1;
      lo -= 1;
    }
    // Round ticks (1, 2 or 5 times a power of ten), and the axis from tick to tick.
    const raw = (hi - lo) / 4,
      mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    lo = Math.floor(lo / step) * step;
    hi = Math.ceil(hi / step) * step;
    const decimals = Math.max(0, -Math.floor(Math.log10(step)));
    const x = (t) => L + ((t - view[0]) / Math.max(1, view[1] - view[0])) * (W - L - R);
    const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    g.font = '12px sans-serif';
    g.fillStyle = '#5a5a5a';
    g.strokeStyle = '#d0d0cc';
    g.lineWidth = 1;
    for (let v = lo; v <= hi + step / 2; v += step) {
      g.beginPath();
      g.moveTo(L, y(v));
      g.lineTo(W - R, y(v));
      g.stroke();
      g.fillText(v.toFixed(decimals), 4, y(v) + 4);
    }
    // Time ticks on round times: the smallest of 5 min ... 1 day giving at most 6, whole
    // in the site's zone (its offset from UTC at the start of the view).
    const span = view[1] - view[0];
    const tick = [300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].find((s) => span / s <= 6) || 86400;
    const offset = siteOffset(new Date(view[0] * 1000));
    for (let t = Math.ceil((view[0] + offset) / tick) * tick - offset; t <= view[1]; t += tick) {
      g.beginPath();
      g.moveTo(x(t), T);
      g.lineTo(x(t), H - B);
      g.stroke();
      g.fillText(siteTime(new Date(t * 1000), { short: true }), Math.min(x(t) - 30, W - R - 90), H - 8);
    }
    // Limits dashed grey with their labels: colour is for alarm priority only.
    g.setLineDash([6, 4]);
    for (const [name, v] of limits) {
      g.strokeStyle = '#5a5a5a';
      g.beginPath();
      g.moveTo(L, y(v));
      g.lineTo(W - R, y(v));
      g.stroke();
      g.fillStyle = '#1e1e1e';
      g.fillText(`${name.toUpperCase()} ${v}`, W - R - 70, y(v) - 3);
    }
    g.setLineDash([]);
    g.strokeStyle = '#1e1e1e';
    g.lineWidth = 1.5;
    g.beginPath();
    shown.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
    g.stroke();
  };
  canvas.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    const f = Math.min(1, Math.max(0, (ev.clientX - rect.left - 56) / (rect.width - 68)));
    const at = view[0] + f * (view[1] - view[0]);
    const k = ev.deltaY < 0 ? 0.8 : 1.25;
    view = [Math.max(full[0], at - (at - view[0]) * k), Math.min(full[1], at + (view[1] - at) * k)];
    if (view[1] - view[0] < 300) view = [at - 150, at + 150];
    draw();
  });
  let drag = null;
  canvas.addEventListener('mousedown', (ev) => (drag = { x: ev.clientX, view: [...view] }));
  window.addEventListener('mouseup', () => (drag = null));
  canvas.addEventListener('mousemove', (ev) => {
    if (!drag) return;
    const span = drag.view[1] - drag.view[0];
    const dt = ((drag.x - ev.clientX) / canvas.clientWidth) * span;
    const a = Math.min(Math.max(full[0], drag.view[0] + dt), full[1] - span);
    view = [a, a + span];
    draw();
  });
  draw();
  return {
    reset: () => {
      view = [...full];
      draw();
    },
  };
}
