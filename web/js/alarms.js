// The Alarms tab: the summary by point, and the open alarm with its note and actions.

import { advisory, source } from './advisory.js';
import { $, ago, api, can, h, inline, markdown, patchChildren, refuse, state, time, typing } from './core.js';
import { episodeBadge, groupByEpisode, openEpisode } from './episodes.js';

export async function loadAlarms() {
  const [{ points, active }, { alarms: suppressed }] = await Promise.all([
    api('/api/alarm-points'),
    api('/api/alarms?suppressed=true'),
  ]);
  // Shelved and out-of-service alarms stay in view (ISA-18.2), apart from those that need attention.
  $('#suppressed').hidden = suppressed.length === 0;
  $('#suppressed-count').textContent = `(${suppressed.length})`;
  $('#suppressed-rows').replaceChildren(
    ...suppressed.map((a) =>
      h(
        'tr',
        { 'data-alarm': a.id, onclick: () => openAlarm(a.id) },
        h('td', {}, h('span', { class: `sev ${a.severity}` }, a.severity)),
        h('td', {}, a.asset_id),
        h('td', {}, a.code),
        h('td', { class: `state-${a.state}` }, a.state.replaceAll('_', ' ')),
        h(
          'td',
          { class: 'quiet' },
          a.shelved_until
            ? time(a.shelved_until)
            : a.state === 'out_of_service'
              ? 'returned to service'
              : a.state === 'suppressed'
                ? 'by design, while its cause is active'
                : '',
        ),
      ),
    ),
  );
  // One row per alarm point, in the server's order (unacknowledged active first).
  state.points = new Map(points.map((a) => [pointKey(a), a]));
  $('#alarm-count').textContent = active ? `(${active})` : '';
  $('#no-alarms').hidden = points.length > 0;
  // An episode's points together, its consequences folded under its initiator.
  keyedRows(
    $('#alarm-rows'),
    groupByEpisode(points),
    (r) => pointKey(r.point),
    ({ point: a, ...r }) => [
      h(
        'td',
        { class: `prio ${a.severity}` },
        a.unacknowledged > 0 ? h('span', { class: 'unack', title: 'unacknowledged' }, '◆ ') : '',
        a.severity,
      ),
      h(
        'td',
        { class: 'nowrap', title: `first ${time(a.first_raised_at)}, last ${time(a.last_raised_at)}` },
        ago(a.last_raised_at),
      ),
      h('td', { class: 'nowrap' }, a.asset_id),
      h('td', { class: 'nowrap' }, a.sensor_id || '-'),
      h('td', { class: 'nowrap' }, r.role === 'member' ? `↳ ${a.code}` : a.code),
      h('td', {}, a.message, r.role === 'head' ? episodeBadge({ point: a, ...r }, loadAlarms) : ''),
      h('td', { class: `nowrap state-${a.state}` }, a.state.replaceAll('_', ' ')),
      h(
        'td',
        { class: 'count', title: 'occurrences that need attention' },
        a.occurrences > 1 ? `×${a.occurrences}` : '',
      ),
      h(
        'td',
        { class: 'quiet' },
        a.note_id ? 'note' : a.triage === 'queued' || a.triage === 'running' ? 'triaging…' : '',
      ),
    ],
    (row, { point: a, role }) => {
      row.className = [
        a.active ? '' : 'rtn',
        a.unacknowledged > 0 ? 'unacked' : '',
        pointKey(a) === state.point ? 'selected' : '',
        role ? `episode-${role}` : '',
      ]
        .join(' ')
        .trim();
      row.dataset.alarm = a.id;
      row.hidden = role === 'member' && !state.openEpisodes.has(a.episode.id);
    },
    (k) => openPoint(k),
  );
  if (state.alarm) openAlarm(state.alarm, true);
  else if (state.episode) openEpisode(state.episode, true);
}

export const pointKey = (a) => `${a.asset_id}|${a.sensor_id || '-'}|${a.code}`;

// Rows keyed by `key`, kept and updated in place: a row is rebuilt only when its item
// changed, and never replaced by another element, so a click on it lands.
export function keyedRows(tbody, items, key, cells, decorate, onclick) {
  const old = new Map([...tbody.children].map((r) => [r.dataset.key, r]));
  tbody.replaceChildren(
    ...items.map((it) => {
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
    }),
  );
}

export function openPoint(key) {
  const a = state.points.get(key);
  if (!a) return;
  state.point = key;
  for (const r of document.querySelectorAll('#alarm-rows tr')) r.classList.toggle('selected', r.dataset.key === key);
  openAlarm(a.id);
}

// The open alarm, updated in place by live events: the parts are rebuilt, but not the
// actions while the operator is typing in them (a half-written reason survives, with
// its focus and caret: kept parts are not moved), nor the note while its trace is open.
export async function openAlarm(id, quiet) {
  const again = quiet && state.alarm === id;
  state.alarm = id;
  state.episode = null;
  for (const r of document.querySelectorAll('#alarm-rows tr'))
    r.classList.toggle('selected', Number(r.dataset.alarm) === id);
  const { alarm: a, journal, note, rationalization, episode } = await api(`/api/alarms/${id}`);
  const point = state.points?.get(pointKey(a));
  const unit = a.unit ? ` ${a.unit}` : '';
  const returned = point?.returned_unacknowledged || 0;
  const query = new URLSearchParams({
    asset: a.asset_id,
    sensor: a.sensor_id || '-',
    code: a.code,
    active: 'false',
    limit: '50',
  });
  const { alarms: occurrences } = await api(`/api/alarms?${query}`);
  const panel = $('#alarm-detail');
  panel.hidden = false;
  const part = (cls) => panel.querySelector(`:scope > .${cls}`);
  const actionsSig = `${id}|${a.state}|${returned}`;
  const oldActions = part('actions');
  const actions =
    again && oldActions && (oldActions.dataset.sig === actionsSig || typing(oldActions))
      ? oldActions
      : alarmActions(a, returned);
  actions.dataset.sig = actions === oldActions ? oldActions.dataset.sig : actionsSig;
  const oldNote = part('note-part');
  const noteSig = `${id}|${note?.note_id ?? ''}`;
  const notePart =
    again && oldNote?.dataset.sig === noteSig
      ? oldNote
      : h(
          'div',
          { class: 'note-part', 'data-sig': noteSig },
          note ? noteView(note) : h('p', { class: 'quiet' }, 'Triage note pending.'),
        );
  patchChildren(panel, [
    h(
      'h2',
      {},
      h('span', { class: `sev ${a.severity}` }, a.severity),
      ` ${a.asset_id} ${a.sensor_id ? `${a.sensor_id} ` : ''}${a.code}`,
    ),
    h(
      'dl',
      { class: 'kv' },
      h('dt', {}, 'Message'),
      h('dd', {}, a.message),
      h('dt', {}, 'Sensor'),
      h('dd', {}, a.sensor_id || '-'),
      h('dt', {}, 'Value'),
      h(
        'dd',
        {},
        a.value != null ? `${a.value}${unit}` : '-',
        a.threshold != null ? ` (limit ${a.threshold}${unit})` : '',
      ),
      h('dt', {}, 'Raised'),
      h('dd', {}, time(a.raised_at)),
      h('dt', {}, 'State'),
      h('dd', {}, a.state.replaceAll('_', ' ')),
    ),
    actions,
    episode ? episodeLink(episode) : null,
    rationalizationView(rationalization),
    notePart,
    h('h3', {}, `Occurrences of this point (${occurrences.length}${occurrences.length === 50 ? '+' : ''})`),
    h(
      'ul',
      { class: 'occurrences' },
      occurrences.map((o) =>
        h(
          'li',
          {},
          h(
            'a',
            {
              href: '#',
              class: o.id === id ? 'current' : '',
              onclick: (ev) => {
                ev.preventDefault();
                openAlarm(o.id);
              },
            },
            `${time(o.raised_at)} ${o.state.replaceAll('_', ' ')}${o.value != null ? `, ${o.value}${unit}` : ''}`,
          ),
        ),
      ),
    ),
    h('h3', {}, 'Journal'),
    h(
      'ul',
      {},
      journal.map((j) => h('li', {}, `${time(j.at)} ${j.kind} by ${j.actor}${j.detail ? `: ${j.detail}` : ''}`)),
    ),
  ]);
  if (!quiet) panel.scrollTop = 0;
}

// The episode the alarm came in: its one note is the alarm's, the episode one click away.
function episodeLink(e) {
  return h(
    'p',
    { class: 'in-episode' },
    `In alarm episode ${e.episode_id} (${e.points} points${e.closed ? ', ended' : ''}`,
    e.initiator_alarm ? `, started by alarm ${e.initiator_alarm}` : '',
    '): ',
    h(
      'a',
      {
        href: '#',
        id: 'open-episode',
        onclick: (ev) => {
          ev.preventDefault();
          openEpisode(e.episode_id);
        },
      },
      'open the episode',
    ),
  );
}

// The point's entry in the master alarm database: what the alarm means and what the
// operator does, as the site rationalized it; or that it has no entry.
function rationalizationView(r) {
  if (!r?.rationalized) {
    return h(
      'div',
      { class: 'rationalization missing' },
      h('h3', {}, 'Rationalization'),
      h('p', {}, `This alarm point is ${r?.note ?? 'not rationalized'}.`),
    );
  }
  const rows = [
    ['Response', r.response],
    ['Time to respond', r.respond_within_min != null ? `${r.respond_within_min} min` : null],
    ['Consequence', r.consequence],
    ['Causes', r.causes],
    ['Priority', [r.priority, r.class].filter(Boolean).join(', ')],
    [
      'Set point',
      r.set_point != null ? `${r.set_point}${r.deadband != null ? ` (deadband ${r.deadband})` : ''}` : null,
    ],
    [
      'Delays',
      r.on_delay_s != null || r.off_delay_s != null ? `on ${r.on_delay_s ?? 0} s, off ${r.off_delay_s ?? 0} s` : null,
    ],
    ['Rationalized', [r.rationalized_by, r.rationalized_on].filter(Boolean).join(', ')],
  ].filter(([, v]) => v);
  const history = (r.history || []).map((c) =>
    h(
      'li',
      {},
      `${time(c.at)} ${c.actor} (${c.source}): ${c.field} ${c.old ? `${c.old} → ` : ''}${c.new}${c.reason ? `, ${c.reason}` : ''}`,
    ),
  );
  return h(
    'div',
    { class: 'rationalization' },
    h('h3', {}, 'Rationalization'),
    h(
      'dl',
      { class: 'kv' },
      rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]),
    ),
    history.length ? h('details', {}, h('summary', {}, `Changes (${history.length})`), h('ul', {}, history)) : null,
  );
}

// The buttons and inputs for what the user may do with alarm `a` in its state.
export function alarmActions(a, returned) {
  const id = a.id;
  const actions = h('div', { class: 'actions' });
  if (can('operator')) {
    if (['unacknowledged', 'rtn_unacknowledged'].includes(a.state)) {
      actions.append(
        h(
          'button',
          { id: 'ack', onclick: () => act(actions, () => api(`/api/alarms/${id}/ack`, { method: 'POST' })) },
          'Acknowledge',
        ),
      );
    }
    // A point that went in and out of alarm several times: its returned occurrences go together.
    if (a.state === 'rtn_unacknowledged' && returned > 1) {
      actions.append(
        h(
          'button',
          {
            id: 'ack-returned',
            onclick: () => act(actions, () => api(`/api/alarms/${id}/ack-returned`, { method: 'POST' })),
          },
          `Acknowledge all ${returned} returned to normal on ${a.asset_id} ${a.code}`,
        ),
      );
    }
    if (['unacknowledged', 'acknowledged'].includes(a.state)) {
      const minutes = h('input', {
        id: 'shelve-minutes',
        type: 'number',
        min: 1,
        max: 1440,
        step: 'any',
        value: 60,
        'aria-label': 'minutes',
      });
      const reason = h('input', {
        id: 'shelve-reason',
        type: 'text',
        placeholder: 'reason (e.g. permit number)',
        'aria-label': 'reason',
      });
      const shelve = () => {
        const m = Number(minutes.value);
        if (minutes.value.trim() === '' || !(m >= 1 && m <= 1440)) {
          return refuse(
            actions,
            `Minutes: shelve for 1 to 1440 minutes (24 hours), not ${minutes.value.trim() || 'nothing'}; 1.5 is 90 seconds.`,
            minutes,
          );
        }
        if (!reason.value.trim()) {
          return refuse(
            actions,
            'Reason: say why the alarm is shelved (it goes in the journal), e.g. a permit number.',
            reason,
          );
        }
        act(actions, () => api(`/api/alarms/${id}/shelve`, { json: { minutes: m, reason: reason.value } }));
      };
      actions.append(
        h(
          'span',
          {},
          ' Shelve for ',
          minutes,
          ' min ',
          reason,
          h('button', { id: 'shelve', onclick: shelve }, 'Shelve'),
        ),
      );
    }
    if (a.state === 'shelved') {
      actions.append(
        h(
          'button',
          { id: 'unshelve', onclick: () => act(actions, () => api(`/api/alarms/${id}/unshelve`, { method: 'POST' })) },
          'Unshelve',
        ),
      );
    }
  }
  if (can('supervisor')) {
    if (a.state === 'out_of_service') {
      actions.append(
        h(
          'button',
          {
            id: 'in-service',
            onclick: () => act(actions, () => api(`/api/alarms/${id}/in-service`, { method: 'POST' })),
          },
          'Return to service',
        ),
      );
    } else if (!a.cleared_at) {
      const why = h('input', {
        id: 'oos-reason',
        type: 'text',
        placeholder: 'reason (e.g. permit number)',
        'aria-label': 'out of service reason',
      });
      actions.append(
        h(
          'span',
          {},
          ' ',
          why,
          h(
            'button',
            {
              id: 'out-of-service',
              onclick: () =>
                why.value.trim()
                  ? act(actions, () => api(`/api/alarms/${id}/out-of-service`, { json: { reason: why.value } }))
                  : refuse(actions, 'Reason: say why the point is taken out of service, e.g. a permit number.', why),
            },
            'Take out of service',
          ),
        ),
      );
    }
  }
  return actions;
}

// Runs an action of the open alarm's; a refusal is said under its fields (`actions`),
// which keep what was typed.
export async function act(actions, fn) {
  try {
    await fn();
    // Done: the actions are rebuilt for the alarm's new state, inputs and all.
    actions.remove();
  } catch (e) {
    refuse(actions, `Not done: ${e.message}`);
  }
  loadAlarms();
}

export function noteView(note) {
  const b = note.body || {};
  const content = b.summary
    ? [
        markdown(b.summary),
        h('p', {}, h('strong', {}, 'Urgency: '), b.urgency),
        h('strong', {}, 'Likely causes'),
        h(
          'ul',
          {},
          (b.likely_causes || []).map((c) => h('li', {}, inline(c))),
        ),
        h('strong', {}, 'Recommended actions'),
        h(
          'ol',
          {},
          (b.recommended_actions || []).map((c) => h('li', {}, inline(c))),
        ),
        h('strong', {}, 'Evidence'),
        h(
          'ul',
          {},
          (b.evidence || []).map((e) => h('li', {}, `${e.claim} `, source(e.source))),
        ),
      ]
    : [markdown(b.text)];
  // Why the model's own note is not the one shown (the rules model's is).
  if (note.set_aside) content.unshift(h('p', { class: 'set-aside' }, `⚠ ${note.set_aside}.`));
  // A grouped alarm's note is its lead's: one click to that alarm.
  const lead = note.covered_by;
  if (lead && !(note.flags || []).includes('episode')) {
    content.unshift(
      h(
        'p',
        { class: 'covered-by' },
        'Triaged together with ',
        h(
          'a',
          {
            href: '#',
            onclick: (ev) => {
              ev.preventDefault();
              openAlarm(lead.alarm_id);
            },
          },
          `alarm ${lead.alarm_id}`,
        ),
        `: its note (${lead.note_id}) covers this alarm.`,
      ),
    );
  }
  return advisory({ id: 'note' }, note.flags, note.run_id, content);
}
