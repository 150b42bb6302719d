// The twinops HMI. No framework and nothing from another origin (sites are air-gapped).
// Every piece of text from the plant or the model goes into the page as text nodes,
// never as HTML.
'use strict';

const $ = (sel) => document.querySelector(sel);
const ROLES = ['viewer', 'operator', 'supervisor', 'admin'];
const state = { me: null, tab: 'alarms', alarm: null, alarms: [], asset: null, sensor: null, hours: 24 };

// Builds an element: h('td', {class: 'x', onclick: f}, 'text', child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, opts = {}) {
  const init = { credentials: 'same-origin', headers: {}, ...opts };
  if (opts.json !== undefined) {
    init.method = init.method || 'POST';
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(opts.json);
  }
  const res = await fetch(path, init);
  const body = res.headers.get('content-type')?.includes('json') ? await res.json() : null;
  if (!res.ok) {
    const err = new Error(body?.error || `HTTP ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return body;
}

// An action's error, in the page (never an alert box): the server's own message.
function showError(message) {
  $('#error-text').textContent = message;
  $('#error').hidden = false;
}

// Asks in place, under `where`, before `run`: `text` says what will happen.
function confirmIn(where, text, label, run, cancel = () => {}) {
  where.querySelector(':scope > .confirm')?.remove();
  const box = h('div', { class: 'confirm', role: 'group' }, h('p', {}, text),
    h('button', { class: 'confirm-yes', onclick: () => { box.remove(); run(); } }, label), ' ',
    h('button', { class: 'confirm-no', onclick: () => { box.remove(); cancel(); } }, 'Cancel'));
  where.append(box);
}

const can = (role) => state.me && ROLES.indexOf(state.me.role) >= ROLES.indexOf(role);
// Times in the site's time zone, 24-hour, with the zone shown.
function siteTime(date, { short = false } = {}) {
  const opts = short
    ? { month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }
    : { year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23', timeZoneName: 'short' };
  try {
    return new Intl.DateTimeFormat('en-GB', { ...opts, timeZone: state.site?.timezone || undefined }).format(date);
  } catch {
    return new Intl.DateTimeFormat('en-GB', { ...opts, timeZone: 'UTC' }).format(date);
  }
}
// Every time in the API's JSON is RFC 3339 (a trend's points excepted: [unix s, value]).
const time = (rfc3339) => (rfc3339 ? siteTime(new Date(rfc3339)) : '');

// The site's offset from UTC at `date`, in seconds (east positive).
function siteOffset(date) {
  try {
    const parts = new Intl.DateTimeFormat('en-GB', {
      timeZone: state.site?.timezone || 'UTC', hourCycle: 'h23',
      year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric',
    }).formatToParts(date);
    const v = Object.fromEntries(parts.map((p) => [p.type, Number(p.value)]));
    return (Date.UTC(v.year, v.month - 1, v.day, v.hour, v.minute, v.second) - Math.floor(date.getTime() / 1000) * 1000) / 1000;
  } catch {
    return 0;
  }
}
const ago = (rfc3339) => {
  const m = Math.round((Date.now() - Date.parse(rfc3339)) / 60000);
  return m < 60 ? `${m} min ago` : m < 48 * 60 ? `${Math.round(m / 60)} h ago` : `${Math.round(m / 1440)} d ago`;
};

// A safe Markdown subset for model output: paragraphs, "- " lists, **bold**, `code`.
// Links and images become plain text: nothing is fetched or followed on render.
function markdown(text) {
  const root = h('div', { class: 'md' });
  let list = null;
  for (const line of String(text || '').split('\n')) {
    const item = line.match(/^\s*[-*] (.*)$/);
    if (item) {
      if (!list) root.append((list = h('ul')));
      list.append(h('li', {}, inline(item[1])));
      continue;
    }
    list = null;
    if (line.trim()) root.append(h('p', {}, inline(line)));
  }
  return root;
}

function inline(text) {
  const out = [];
  const re = /!\[([^\]]*)\]\(([^)]*)\)|\[([^\]]*)\]\(([^)]*)\)|\*\*([^*]+)\*\*|`([^`]+)`/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    out.push(text.slice(last, m.index));
    if (m[1] !== undefined) out.push(`[image: ${m[1] || 'no description'} (${m[2]}), not loaded]`);
    else if (m[3] !== undefined) out.push(`${m[3]} (${m[4]})`);
    else if (m[5] !== undefined) out.push(h('strong', {}, m[5]));
    else out.push(h('code', {}, m[6]));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

// ---------------------------------------------------------------- shell

async function start() {
  try {
    state.me = await api('/api/me');
  } catch (e) {
    if (e.status === 401) return showLogin();
    throw e;
  }
  $('#login').hidden = true;
  $('#tabs').hidden = false;
  $('#who').hidden = false;
  $('#user').textContent = `${state.me.name} (${state.me.role})`;
  for (const b of document.querySelectorAll('.tab')) b.addEventListener('click', () => show(b.dataset.tab));
  $('#doc-close').addEventListener('click', () => ($('#doc-dialog').hidden = true));
  $('#error-dismiss').addEventListener('click', () => ($('#error').hidden = true));
  $('#chat-form').addEventListener('submit', ask);
  $('#own-password-form').addEventListener('submit', changeOwnPassword);
  $('#add-user-form').addEventListener('submit', addUser);
  $('#add-token-form').addEventListener('submit', addToken);
  $('#handover-write').addEventListener('click', writeHandover);
  // Live events first, so that nothing raised while the first view loads is missed;
  // then the site (its name, its time zone for every time shown), then the view.
  listen();
  await refreshStatus();
  show(location.hash.slice(1) || 'alarms');
  setInterval(refreshStatus, 15000);
}

function showLogin() {
  $('#login').hidden = false;
  const q = new URLSearchParams(location.search);
  $('#login-failed').hidden = q.get('login') !== 'failed';
  $('#login-locked').hidden = q.get('login') !== 'locked';
  $('#login-locked').textContent = `Too many failed logins from here: try again in ${q.get('minutes') || 15} minutes, `
    + 'or ask an administrator to unlock the account (Account tab, or twinops user unlock NAME).';
  $('#login-name').focus();
}

function show(tab) {
  state.tab = ['alarms', 'handover', 'assets', 'chat', 'approvals', 'account'].includes(tab) ? tab : 'alarms';
  history.replaceState(null, '', `#${state.tab}`);
  for (const b of document.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.tab === state.tab);
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${state.tab}`;
  ({ alarms: loadAlarms, handover: loadHandover, assets: loadAssets, chat: loadChat, approvals: loadApprovals, account: loadAccount })[state.tab]();
}

async function refreshStatus() {
  try {
    const s = await api('/api/status');
    if (s.site) {
      state.site = s.site;
      $('#top .site').textContent = s.site.name;
    }
    const b = $('#banner');
    b.hidden = !s.degraded;
    b.replaceChildren(...s.reasons.map((r) => h('div', {}, `Degraded: ${r}`)));
  } catch (e) {
    if (e.status === 401) location.reload();
  }
}

// Live updates: the server says what changed; the open view reloads what it shows.
function listen() {
  const es = new EventSource('/events');
  let timer = null;
  const soon = (kinds) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (state.tab === 'alarms') loadAlarms();
      if (state.tab === 'approvals' || kinds.has('work_order')) loadApprovals(state.tab !== 'approvals');
      refreshStatus();
    }, 300);
  };
  // The server ends the stream when the session does: find out now, not at the next poll.
  es.addEventListener('error', () => refreshStatus());
  const kinds = new Set();
  for (const kind of ['alarm', 'note', 'work_order']) {
    es.addEventListener(kind, (ev) => {
      if (kind === 'note' && JSON.parse(ev.data).kind === 'handover') {
        if (state.tab === 'handover') loadHandover();
        else $('#handover-new').textContent = '(new)';
        return;
      }
      kinds.add(kind);
      soon(kinds);
    });
  }
}

// ---------------------------------------------------------------- alarms

async function loadAlarms() {
  const [{ points, active }, { alarms: suppressed }] = await Promise.all([api('/api/alarm-points'), api('/api/alarms?suppressed=true')]);
  // Shelved and out-of-service alarms stay in view (ISA-18.2), apart from those that need attention.
  $('#suppressed').hidden = suppressed.length === 0;
  $('#suppressed-count').textContent = `(${suppressed.length})`;
  $('#suppressed-rows').replaceChildren(
    ...suppressed.map((a) =>
      h('tr', { 'data-alarm': a.id, onclick: () => openAlarm(a.id) },
        h('td', {}, h('span', { class: `sev ${a.severity}` }, a.severity)),
        h('td', {}, a.asset_id),
        h('td', {}, a.code),
        h('td', { class: `state-${a.state}` }, a.state.replaceAll('_', ' ')),
        h('td', { class: 'quiet' }, a.shelved_until ? time(a.shelved_until) : a.state === 'out_of_service' ? 'returned to service' : ''),
      ),
    ),
  );
  // One row per alarm point, in the server's order (unacknowledged active first).
  state.points = new Map(points.map((a) => [pointKey(a), a]));
  $('#alarm-count').textContent = active ? `(${active})` : '';
  $('#no-alarms').hidden = points.length > 0;
  keyedRows($('#alarm-rows'), points, pointKey, (a) => [
    h('td', { class: `prio ${a.severity}` },
      a.unacknowledged > 0 ? h('span', { class: 'unack', title: 'unacknowledged' }, '◆ ') : '', a.severity),
    h('td', { class: 'nowrap', title: `first ${time(a.first_raised_at)}, last ${time(a.last_raised_at)}` }, ago(a.last_raised_at)),
    h('td', { class: 'nowrap' }, a.asset_id),
    h('td', { class: 'nowrap' }, a.sensor_id || '-'),
    h('td', { class: 'nowrap' }, a.code),
    h('td', {}, a.message),
    h('td', { class: `nowrap state-${a.state}` }, a.state.replaceAll('_', ' ')),
    h('td', { class: 'count', title: 'occurrences that need attention' }, a.occurrences > 1 ? `×${a.occurrences}` : ''),
    h('td', { class: 'quiet' }, a.note_id ? 'note' : a.triage === 'queued' || a.triage === 'running' ? 'triaging…' : ''),
  ], (row, a) => {
    row.className = [a.active ? '' : 'rtn', a.unacknowledged > 0 ? 'unacked' : '', pointKey(a) === state.point ? 'selected' : ''].join(' ').trim();
    row.dataset.alarm = a.id;
  }, (k) => openPoint(k));
  if (state.alarm) openAlarm(state.alarm, true);
}

const pointKey = (a) => `${a.asset_id}|${a.sensor_id || '-'}|${a.code}`;

// Rows keyed by `key`, kept and updated in place: a row is rebuilt only when its item
// changed, and never replaced by another element, so a click on it lands.
function keyedRows(tbody, items, key, cells, decorate, onclick) {
  const old = new Map([...tbody.children].map((r) => [r.dataset.key, r]));
  tbody.replaceChildren(...items.map((it) => {
    const k = key(it);
    let row = old.get(k);
    if (!row) {
      row = h('tr', { 'data-key': k, onclick: () => onclick(k) });
    }
    const sig = JSON.stringify(it);
    if (row.dataset.sig !== sig) {
      row.replaceChildren(...cells(it));
      row.dataset.sig = sig;
    }
    decorate(row, it);
    return row;
  }));
}

function openPoint(key) {
  const a = state.points.get(key);
  if (!a) return;
  state.point = key;
  for (const r of document.querySelectorAll('#alarm-rows tr')) r.classList.toggle('selected', r.dataset.key === key);
  openAlarm(a.id);
}

// The open alarm, updated in place by live events: the parts are rebuilt, but not the
// actions while the operator is typing in them (a half-written reason survives), nor
// the note while its trace is open.
async function openAlarm(id, quiet) {
  const again = quiet && state.alarm === id;
  state.alarm = id;
  for (const r of document.querySelectorAll('#alarm-rows tr')) r.classList.toggle('selected', Number(r.dataset.alarm) === id);
  const { alarm: a, journal, note } = await api(`/api/alarms/${id}`);
  const point = state.points?.get(pointKey(a));
  const unit = a.unit ? ` ${a.unit}` : '';
  const returned = point?.returned_unacknowledged || 0;
  const query = new URLSearchParams({ asset: a.asset_id, sensor: a.sensor_id || '-', code: a.code, active: 'false', limit: '50' });
  const { alarms: occurrences } = await api(`/api/alarms?${query}`);
  const panel = $('#alarm-detail');
  panel.hidden = false;
  const part = (cls) => panel.querySelector(`:scope > .${cls}`);
  const typing = (el) => el && [...el.querySelectorAll('input')].some((i) => i === document.activeElement || (i.type === 'text' && i.value));
  const actionsSig = `${id}|${a.state}|${returned}`;
  const oldActions = part('actions');
  const actions = again && oldActions && (oldActions.dataset.sig === actionsSig || typing(oldActions))
    ? oldActions : alarmActions(a, returned);
  actions.dataset.sig = actions === oldActions ? oldActions.dataset.sig : actionsSig;
  const oldNote = part('note-part');
  const noteSig = `${id}|${note?.note_id ?? ''}`;
  const notePart = again && oldNote?.dataset.sig === noteSig ? oldNote
    : h('div', { class: 'note-part', 'data-sig': noteSig }, note ? noteView(note) : h('p', { class: 'quiet' }, 'Triage note pending.'));
  panel.replaceChildren(
    h('h2', {}, h('span', { class: `sev ${a.severity}` }, a.severity), ` ${a.asset_id} ${a.sensor_id ? `${a.sensor_id} ` : ''}${a.code}`),
    h('dl', { class: 'kv' },
      h('dt', {}, 'Message'), h('dd', {}, a.message),
      h('dt', {}, 'Sensor'), h('dd', {}, a.sensor_id || '-'),
      h('dt', {}, 'Value'), h('dd', {}, a.value != null ? `${a.value}${unit}` : '-', a.threshold != null ? ` (limit ${a.threshold}${unit})` : ''),
      h('dt', {}, 'Raised'), h('dd', {}, time(a.raised_at)),
      h('dt', {}, 'State'), h('dd', {}, a.state.replaceAll('_', ' ')),
    ),
    actions,
    notePart,
    h('h3', {}, `Occurrences of this point (${occurrences.length}${occurrences.length === 50 ? '+' : ''})`),
    h('ul', { class: 'occurrences' }, occurrences.map((o) => h('li', {},
      h('a', { href: '#', class: o.id === id ? 'current' : '', onclick: (ev) => { ev.preventDefault(); openAlarm(o.id); } },
        `${time(o.raised_at)} ${o.state.replaceAll('_', ' ')}${o.value != null ? `, ${o.value}${unit}` : ''}`)))),
    h('h3', {}, 'Journal'),
    h('ul', {}, journal.map((j) => h('li', {}, `${time(j.at)} ${j.kind} by ${j.actor}${j.detail ? `: ${j.detail}` : ''}`))),
  );
  if (!quiet) panel.scrollTop = 0;
}

// The buttons and inputs for what the user may do with alarm `a` in its state.
function alarmActions(a, returned) {
  const id = a.id;
  const actions = h('div', { class: 'actions' });
  if (can('operator')) {
    if (['unacknowledged', 'rtn_unacknowledged'].includes(a.state)) {
      actions.append(h('button', { id: 'ack', onclick: () => act(() => api(`/api/alarms/${id}/ack`, { method: 'POST' })) }, 'Acknowledge'));
    }
    // A point that went in and out of alarm several times: its returned occurrences go together.
    if (a.state === 'rtn_unacknowledged' && returned > 1) {
      actions.append(h('button', { id: 'ack-returned', onclick: () => act(() => api(`/api/alarms/${id}/ack-returned`, { method: 'POST' })) },
        `Acknowledge all ${returned} returned to normal on ${a.asset_id} ${a.code}`));
    }
    if (['unacknowledged', 'acknowledged'].includes(a.state)) {
      const minutes = h('input', { type: 'number', min: 1, max: 1440, value: 60, 'aria-label': 'minutes' });
      const reason = h('input', { type: 'text', placeholder: 'reason (e.g. permit number)', 'aria-label': 'reason' });
      actions.append(h('span', {}, ' Shelve for ', minutes, ' min ', reason,
        h('button', { onclick: () => act(() => api(`/api/alarms/${id}/shelve`, { json: { minutes: Number(minutes.value), reason: reason.value } })) }, 'Shelve')));
    }
    if (a.state === 'shelved') {
      actions.append(h('button', { id: 'unshelve', onclick: () => act(() => api(`/api/alarms/${id}/unshelve`, { method: 'POST' })) }, 'Unshelve'));
    }
  }
  if (can('supervisor')) {
    if (a.state === 'out_of_service') {
      actions.append(h('button', { id: 'in-service', onclick: () => act(() => api(`/api/alarms/${id}/in-service`, { method: 'POST' })) }, 'Return to service'));
    } else if (!a.cleared_at) {
      const why = h('input', { id: 'oos-reason', type: 'text', placeholder: 'reason (e.g. permit number)', 'aria-label': 'out of service reason' });
      actions.append(h('span', {}, ' ', why,
        h('button', { id: 'out-of-service', onclick: () => act(() => api(`/api/alarms/${id}/out-of-service`, { json: { reason: why.value } })) }, 'Take out of service')));
    }
  }
  return actions;
}

async function act(fn) {
  try {
    await fn();
    // Done: the actions are rebuilt for the alarm's new state, inputs and all.
    $('#alarm-detail > .actions')?.remove();
  } catch (e) {
    showError(e.message);
  }
  loadAlarms();
}

// What the agent wrote, marked as advice, with its flags and the way to its trace.
function advisory(attrs, flags, runId, ...content) {
  const box = h('div', { class: 'advisory', ...attrs },
    h('div', { class: 'tag' }, 'AI advisory: check before acting', flags?.length ? ` · ${flags.join(', ')}` : ''), ...content);
  if (runId) box.append(h('button', { class: 'trace-button', onclick: () => showTrace(runId, box) }, 'Show the tool trace'));
  return box;
}

function noteView(note) {
  const b = note.body || {};
  const content = b.summary
    ? [
        markdown(b.summary),
        h('p', {}, h('strong', {}, 'Urgency: '), b.urgency),
        h('strong', {}, 'Likely causes'), h('ul', {}, (b.likely_causes || []).map((c) => h('li', {}, inline(c)))),
        h('strong', {}, 'Recommended actions'), h('ol', {}, (b.recommended_actions || []).map((c) => h('li', {}, inline(c)))),
        h('strong', {}, 'Evidence'),
        h('ul', {}, (b.evidence || []).map((e) => h('li', {}, `${e.claim} `, source(e.source)))),
      ]
    : [markdown(b.text)];
  return advisory({ id: 'note' }, note.flags, note.run_id, content);
}

// A citation key opens its documentation chunk; a tool name is shown as it is.
function source(src) {
  if (/^[\w./-]+\.md#\d+$/.test(src)) return h('a', { href: '#', class: 'citation', onclick: (ev) => { ev.preventDefault(); openDoc(src); } }, `[${src}]`);
  return h('span', { class: 'quiet' }, `(${src})`);
}

async function openDoc(citation) {
  const d = await api(`/api/docs/${encodeURIComponent(citation)}`);
  $('#doc-title').textContent = `${d.heading || d.title || citation} [${citation}]`;
  // The same safe Markdown subset as the notes: nothing fetched, no links followed.
  $('#doc-body').replaceChildren(markdown(d.text || d.body || ''));
  $('#doc-dialog').hidden = false;
}

// JSON text indented for reading; anything else as it is.
function pretty(text) {
  try {
    return JSON.stringify(typeof text === 'string' ? JSON.parse(text) : text, null, 2);
  } catch {
    return String(text);
  }
}

async function showTrace(runId, where) {
  const { run, steps } = await api(`/api/runs/${runId}`);
  where.querySelector('.trace')?.remove();
  where.append(h('div', { class: 'trace' },
    h('p', {}, `Run ${run.id}: ${run.profile}, outcome ${run.outcome}, model ${run.model || '-'}`),
    h('ol', {}, steps.map((s) => h('li', {}, h('span', { class: 'step' }, `${s.kind} ${s.name || ''}${s.is_error ? ' (error)' : ''}`),
      s.arguments ? h('pre', { class: 'args' }, pretty(s.arguments)) : null,
      s.kind === 'tool_call' && s.result ? h('pre', {}, pretty(s.result).slice(0, 2000)) : null))),
  ));
}

// ---------------------------------------------------------------- shift handover

async function loadHandover() {
  $('#handover-new').textContent = '';
  $('#handover-write').hidden = !can('operator');
  const { handovers } = await api('/api/handovers?limit=10');
  const [latest, ...earlier] = handovers;
  const by = (t) => (t?.startsWith('user:') ? ` by ${t.slice(5)}` : t === 'schedule:handover' ? ' at the shift change' : '');
  const written = (x) => `${time(x.created_at)} (${ago(x.created_at)})${by(x.trigger)}`;
  $('#handover-when').textContent = latest
    ? `Written ${written(latest)}.`
    : 'No handover yet: one is written at each shift change.';
  const view = (x) => advisory({ class: 'advisory handover', 'data-note': x.note_id }, x.flags, x.run_id, markdown(x.text));
  $('#handover-latest').replaceChildren(...(latest ? [view(latest)] : []));
  $('#handover-earlier').hidden = earlier.length === 0;
  $('#handover-list').replaceChildren(...earlier.map((x) => h('details', {}, h('summary', {}, written(x)), view(x))));
}

async function writeHandover() {
  const button = $('#handover-write');
  button.disabled = true;
  $('#handover-result').textContent = 'Writing: the agent reads the plant first, which can take a minute.';
  try {
    await api('/api/handovers', { json: {} });
    $('#handover-result').textContent = '';
  } catch (e) {
    $('#handover-result').textContent = e.message;
  }
  button.disabled = false;
  loadHandover();
}

// ---------------------------------------------------------------- assets and trends

// The plant as imported: a header row per station, then its assets, each under its
// parent (a skid's pumps, a pump's motor), any kind; retired assets are not sent.
async function loadAssets() {
  const { stations } = await api('/api/plant');
  const rows = [];
  for (const st of stations) {
    const inAlarm = st.assets.filter((a) => a.active_alarms > 0).length;
    rows.push(h('tr', { class: 'station', 'data-station': st.id },
      h('th', { colspan: 5 }, `${st.name} (${st.id}): ${st.assets.length} assets${inAlarm ? `, ${inAlarm} in alarm` : ''}`)));
    const ids = new Set(st.assets.map((a) => a.id));
    const children = (parent) => st.assets.filter((a) => (a.parent && ids.has(a.parent) ? a.parent : null) === parent);
    const add = (a, depth) => {
      rows.push(h('tr', { 'data-asset': a.id, onclick: () => openAsset(a.id) },
        h('td', { style: `padding-left: ${0.5 + 1.2 * depth}em` }, depth ? `└ ${a.id}` : a.id), h('td', {}, a.name),
        h('td', {}, a.kind.replaceAll('_', ' ')), h('td', {}, a.status), h('td', {}, a.active_alarms || '')));
      if (depth < 4) children(a.id).forEach((c) => add(c, depth + 1));
    };
    children(null).forEach((a) => add(a, 0));
  }
  $('#asset-rows').replaceChildren(...rows);
  if (state.asset) openAsset(state.asset);
}

async function openAsset(id) {
  state.asset = id;
  const d = await api(`/api/assets/${encodeURIComponent(id)}`);
  const panel = $('#asset-detail');
  panel.hidden = false;
  const limit = (l) => ['ll', 'l', 'h', 'hh'].filter((k) => l[k] != null).map((k) => `${k.toUpperCase()} ${l[k]}`).join(' · ');
  panel.replaceChildren(
    h('h2', {}, `${d.asset.id} ${d.asset.name}`),
    h('p', { class: 'quiet' }, `${d.asset.station || ''} · ${d.asset.status} · criticality ${d.asset.criticality}`),
    h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Sensor'), h('th', {}, 'Latest'), h('th', {}, 'Limits'), h('th', {}, 'Band'))),
      h('tbody', {}, d.sensors.map((s) => h('tr', { 'data-sensor': s.id, onclick: () => openTrend(s.id) },
        h('td', {}, s.id),
        h('td', s.stale ? { class: 'stale', title: s.stale } : {},
          s.latest ? `${s.latest.value} ${s.unit}${s.stale ? ' (stale)' : ''}` : '-'),
        h('td', {}, limit(s.limits || {})), h('td', { class: `band-${s.band}` }, s.band || ''))))),
    h('div', { id: 'trend' }),
  );
  const worst = d.sensors.find((s) => s.band && s.band !== 'normal') || d.sensors[0];
  openTrend(d.sensors.some((s) => s.id === state.sensor) ? state.sensor : worst?.id);
}

async function openTrend(sensor) {
  if (!sensor) return;
  state.sensor = sensor;
  const d = await api(`/api/sensors/${encodeURIComponent(sensor)}/readings?hours=${state.hours}`);
  const canvas = h('canvas', { class: 'trend', id: 'trend-canvas' });
  const bar = h('div', { class: 'trend-bar' },
    h('strong', {}, `${d.sensor_id} (${d.unit})`),
    [24, 72, 168].map((hrs) => h('button', { class: state.hours === hrs ? 'active' : '', onclick: () => { state.hours = hrs; openTrend(sensor); } }, `${hrs} h`)),
    h('button', { id: 'zoom-reset', onclick: () => chart.reset() }, 'Reset zoom'),
    h('span', { class: 'quiet' }, 'Wheel to zoom, drag to pan'),
    d.stale ? h('div', { class: 'quiet', id: 'trend-stale' }, `No reading since ${when(d.until)}: the window ends there.`) : '');
  $('#trend').replaceChildren(bar, canvas);
  const chart = trendChart(canvas, d);
}

// A time-series chart on a canvas: the readings, the limits as dashed lines, time and
// value axes; the wheel zooms around the pointer, dragging pans.
function trendChart(canvas, d) {
  const pts = d.points;
  const full = [pts.length ? pts[0][0] : 0, pts.length ? pts[pts.length - 1][0] : 1];
  let view = [...full];
  const limits = Object.entries(d.limits).filter(([, v]) => v != null);
  const draw = () => {
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth, H = canvas.clientHeight;
    canvas.width = W * dpr; canvas.height = H * dpr;
    const g = canvas.getContext('2d');
    g.scale(dpr, dpr);
    g.clearRect(0, 0, W, H);
    const L = 56, R = 12, T = 12, B = 28;
    const shown = pts.filter(([t]) => t >= view[0] && t <= view[1]);
    const vals = shown.map((p) => p[1]).concat(limits.map(([, v]) => v));
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi - lo < 1e-9) { hi += 1; lo -= 1; }
    // Round ticks (1, 2 or 5 times a power of ten), and the axis from tick to tick.
    const raw = (hi - lo) / 4, mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    lo = Math.floor(lo / step) * step; hi = Math.ceil(hi / step) * step;
    const decimals = Math.max(0, -Math.floor(Math.log10(step)));
    const x = (t) => L + ((t - view[0]) / Math.max(1, view[1] - view[0])) * (W - L - R);
    const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    g.font = '12px sans-serif'; g.fillStyle = '#5a5a5a'; g.strokeStyle = '#d0d0cc'; g.lineWidth = 1;
    for (let v = lo; v <= hi + step / 2; v += step) {
      g.beginPath(); g.moveTo(L, y(v)); g.lineTo(W - R, y(v)); g.stroke();
      g.fillText(v.toFixed(decimals), 4, y(v) + 4);
    }
    // Time ticks on round times: the smallest of 5 min ... 1 day giving at most 6, whole
    // in the site's zone (its offset from UTC at the start of the view).
    const span = view[1] - view[0];
    const tick = [300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400].find((s) => span / s <= 6) || 86400;
    const offset = siteOffset(new Date(view[0] * 1000));
    for (let t = Math.ceil((view[0] + offset) / tick) * tick - offset; t <= view[1]; t += tick) {
      g.beginPath(); g.moveTo(x(t), T); g.lineTo(x(t), H - B); g.stroke();
      g.fillText(siteTime(new Date(t * 1000), { short: true }), Math.min(x(t) - 30, W - R - 90), H - 8);
    }
    // Limits dashed grey with their labels: colour is for alarm priority only.
    g.setLineDash([6, 4]);
    for (const [name, v] of limits) {
      g.strokeStyle = '#5a5a5a';
      g.beginPath(); g.moveTo(L, y(v)); g.lineTo(W - R, y(v)); g.stroke();
      g.fillStyle = '#1e1e1e'; g.fillText(`${name.toUpperCase()} ${v}`, W - R - 70, y(v) - 3);
    }
    g.setLineDash([]);
    g.strokeStyle = '#1e1e1e'; g.lineWidth = 1.5;
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
  return { reset: () => { view = [...full]; draw(); } };
}

// ---------------------------------------------------------------- chat

async function loadChat() {
  if (!can('operator')) {
    $('#chat-log').replaceChildren(h('p', { class: 'quiet' }, 'Chat needs the operator role.'));
    $('#chat-send').disabled = true;
    return;
  }
  const { messages } = await api('/api/chat');
  $('#chat-log').replaceChildren(...messages.map((m) => message(m.role, m.text)));
  $('#chat-log').scrollTop = 1e9;
}

function message(role, text) {
  const body = role === 'agent' ? markdown(text) : h('div', {}, text);
  return h('div', { class: `msg ${role}` }, h('div', { class: 'who' }, role === 'agent' ? 'twinops (AI advisory)' : 'you'), h('div', { class: 'body' }, body));
}

// Sends the question and reads the answer as it streams: tool steps, then text.
async function ask(ev) {
  ev.preventDefault();
  const input = $('#chat-input');
  const question = input.value.trim();
  if (!question) return;
  input.value = '';
  const log = $('#chat-log');
  log.append(message('operator', question));
  const steps = h('div', { class: 'steps' });
  const live = h('div', { class: 'body live' });
  const answer = h('div', { class: 'msg agent', id: 'answer-live' }, h('div', { class: 'who' }, 'twinops (AI advisory)'), steps, live);
  log.append(answer);
  $('#chat-send').disabled = true;
  let text = '';
  try {
    const res = await fetch('/api/chat', { method: 'POST', credentials: 'same-origin', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: question }) });
    if (!res.ok) throw new Error((await res.json()).error);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const kind = block.match(/^event: (.*)$/m)?.[1];
        const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        if (!kind || !data) continue;
        const d = JSON.parse(data);
        if (kind === 'tool') steps.append(h('div', { class: 'step' }, `→ ${d.name} ${d.arguments}`));
        if (kind === 'text') { text += d.text; live.textContent = text; }
        if (kind === 'retract') { text = ''; live.textContent = ''; }
        if (kind === 'done') { live.replaceChildren(markdown(d.answer || text)); answer.id = ''; answer.dataset.run = d.run_id; }
        if (kind === 'error') live.replaceChildren(h('p', { class: 'error' }, d.error));
        log.scrollTop = 1e9;
      }
    }
  } catch (e) {
    live.replaceChildren(h('p', { class: 'error' }, e.message));
  }
  $('#chat-send').disabled = false;
}

// ---------------------------------------------------------------- approvals

async function loadApprovals(countOnly) {
  const { work_orders } = await api('/api/work_orders');
  const pending = work_orders.filter((w) => w.status === 'pending_approval');
  $('#pending-count').textContent = pending.length ? `(${pending.length})` : '';
  if (countOnly) return;
  $('#approvals-readonly').hidden = can('supervisor');
  $('#approval-list').replaceChildren(...(pending.length ? pending.map(card) : [h('p', { class: 'quiet' }, 'Nothing waits for approval.')]));
  $('#decided-list').replaceChildren(...work_orders.filter((w) => w.status !== 'pending_approval').slice(0, 20).map(card));
}

function card(w) {
  const c = h('div', { class: 'card', 'data-work-order': w.id },
    h('h4', {}, `#${w.id} ${w.title}`),
    h('dl', { class: 'kv' },
      h('dt', {}, 'Asset'), h('dd', {}, w.asset_id),
      h('dt', {}, 'Action'), h('dd', {}, `${w.action} (${w.priority})`),
      h('dt', {}, 'Why'), h('dd', {}, w.justification),
      h('dt', {}, 'Evidence'), h('dd', {}, (w.evidence || []).map((e) => [source(e), ' '])),
      h('dt', {}, 'Proposed'), h('dd', {}, `by ${w.proposed_by} ${ago(w.proposed_at)}`, w.run_id ? ' · ' : '',
        w.run_id ? h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); showTrace(w.run_id, c); } }, `run ${w.run_id}`) : ''),
      h('dt', {}, 'Status'), h('dd', { class: 'status' }, w.status.replaceAll('_', ' '),
        w.decided_by ? ` by ${w.decided_by}: ${w.decision_reason || ''}` : '')));
  if (w.status === 'pending_approval' && can('supervisor')) {
    const reason = h('input', { type: 'text', placeholder: 'reason (required)', class: 'reason', 'aria-label': 'reason' });
    const decide = (verb) => async () => {
      try {
        await api(`/api/work_orders/${w.id}/${verb}`, { json: { reason: reason.value } });
      } catch (e) {
        showError(e.message);
      }
      loadApprovals();
    };
    const row = h('div', {}, reason, ' ');
    const ask = (verb, what) => () => confirmIn(row, `${verb === 'approve' ? 'Approve' : 'Reject'} work order ${w.id}, `
      + `"${w.title}"? ${what}`, `Yes, ${verb}`, decide(verb));
    row.append(
      h('button', { class: 'approve', onclick: ask('approve', `It will be dispatched to maintenance for ${w.asset_id} `
        + '(published on MQTT and to the webhook); this cannot be undone.') }, 'Approve'), ' ',
      h('button', { class: 'reject', onclick: ask('reject', 'The proposal is closed and nothing is dispatched; '
        + 'the agent may propose again.') }, 'Reject'));
    c.append(row);
  }
  return c;
}

// ---------------------------------------------------------------- account

const when = (rfc3339) => time(rfc3339) || 'never';

async function loadAccount() {
  $('#admin-panel').hidden = !can('admin');
  if (!can('admin')) return;
  const [users, tokens] = await Promise.all([api('/api/users'), api('/api/tokens')]);
  const userAction = (name, path, json) => async () => {
    try {
      await api(`/api/users/${encodeURIComponent(name)}/${path}`, { json: json ? json() : {} });
    } catch (e) {
      showError(e.message);
    }
    loadAccount();
  };
  $('#user-rows').replaceChildren(...users.map((u) => {
    const actions = h('td', {});
    const role = h('select', { 'aria-label': `role of ${u.name}`, class: 'role',
      onchange: () => confirmIn(actions, `Make ${u.name} ${role.value} (now ${u.role})? It applies from their next request.`,
        'Yes, change the role', userAction(u.name, 'role', () => ({ role: role.value })), () => (role.value = u.role)) },
    ROLES.map((r) => h('option', { selected: r === u.role }, r)));
    const disable = () => confirmIn(actions, `Disable ${u.name}? They are logged out at once, cannot log in, `
      + 'and their API tokens stop working until they are enabled again.', 'Yes, disable', userAction(u.name, 'disable'));
    const reset = async () => {
      const password = prompt(`New password for ${u.name} (12 characters or more); their sessions end:`);
      if (password) await userAction(u.name, 'password', () => ({ password }))();
    };
    actions.append(
      u.disabled
        ? h('button', { class: 'enable', onclick: userAction(u.name, 'enable') }, 'Enable')
        : h('button', { class: 'disable', onclick: disable }, 'Disable'),
      ' ', h('button', { class: 'reset', onclick: reset }, 'Reset password'),
      ...(u.locks.length ? [' ', h('button', { class: 'unlock', onclick: userAction(u.name, 'unlock') }, 'Unlock')] : []));
    return h('tr', { 'data-user': u.name },
      h('td', {}, u.name), h('td', {}, role),
      h('td', { class: 'state' }, u.disabled ? 'disabled' : 'enabled',
        ...u.locks.map((l) => h('div', { class: 'lock' },
          `locked ${l.address ? `for ${l.address}` : 'from every address'} until ${when(l.until)} (${l.failures} failed logins)`))),
      h('td', {}, u.live_tokens), h('td', {}, when(u.created_at)),
      actions);
  }));
  $('#token-rows').replaceChildren(...tokens.map((t) => h('tr', { 'data-token': t.id },
    h('td', {}, t.id), h('td', {}, t.user), h('td', {}, t.label), h('td', {}, when(t.created_at)),
    h('td', {}, when(t.last_used_at)), h('td', { class: 'state' }, t.revoked ? 'revoked' : 'live'),
    h('td', {}, t.revoked ? '' : h('button', { class: 'revoke', onclick: async () => {
      if (!confirm(`Revoke token ${t.id} (${t.label}) of ${t.user}? Clients using it stop working.`)) return;
      try {
        await api(`/api/tokens/${t.id}/revoke`, { json: {} });
      } catch (e) {
        showError(e.message);
      }
      loadAccount();
    } }, 'Revoke')))));
}

async function changeOwnPassword(ev) {
  ev.preventDefault();
  const result = $('#own-password-result');
  try {
    await api('/api/me/password', { json: { current: $('#own-current').value, new: $('#own-new').value } });
    result.textContent = 'Changed.';
    ev.target.reset();
  } catch (e) {
    result.textContent = e.message;
  }
}

async function addUser(ev) {
  ev.preventDefault();
  try {
    await api('/api/users', { json: { name: $('#new-user-name').value.trim(), role: $('#new-user-role').value,
      password: $('#new-user-password').value } });
    ev.target.reset();
  } catch (e) {
    showError(e.message);
  }
  loadAccount();
}

async function addToken(ev) {
  ev.preventDefault();
  try {
    const { token } = await api('/api/tokens', { json: { user: $('#new-token-user').value.trim(),
      label: $('#new-token-label').value.trim() } });
    const shown = $('#new-token');
    shown.hidden = false;
    shown.replaceChildren('Shown once; send it as Authorization: Bearer <token>: ', h('code', { id: 'new-token-value' }, token));
    ev.target.reset();
  } catch (e) {
    showError(e.message);
  }
  loadAccount();
}

start().catch((e) => {
  $('#banner').hidden = false;
  $('#banner').textContent = `The HMI could not start: ${e.message}`;
});
