// Alarm episodes: the alarm list's rows grouped under their initiator, and the episode
// view an operator reads in a flood (timeline, initiator, consequences, note, the
// floods like it before).

import { noteView, openAlarm } from './alarms.js';
import { $, api, h, patchChildren, state, time } from './core.js';

const samePoint = (a, b) =>
  b && a.asset_id === b.asset_id && (a.sensor_id || null) === (b.sensor_id || null) && a.code === b.code;

// The rows in the server's order, each episode's moved together where its first row
// was: its head (the initiator's point, or its first row if the initiator needs no
// attention now) and its other points folded under it.
export function groupByEpisode(points) {
  const members = new Map();
  for (const p of points) {
    if (p.episode) members.set(p.episode.id, [...(members.get(p.episode.id) || []), p]);
  }
  const rows = [];
  const placed = new Set();
  for (const p of points) {
    if (placed.has(p)) continue;
    const group = p.episode ? members.get(p.episode.id) : [];
    if (group.length < 2) {
      rows.push({ point: p, role: '' });
      placed.add(p);
      continue;
    }
    const head = group.find((m) => samePoint(m, p.episode.initiator)) || group[0];
    // Whether it is unfolded is part of the row, so that its fold is drawn again.
    rows.push({ point: head, role: 'head', folded: group.length - 1, open: state.openEpisodes.has(p.episode.id) });
    placed.add(head);
    for (const m of group.filter((m) => m !== head)) {
      rows.push({ point: m, role: 'member' });
      placed.add(m);
    }
  }
  return rows;
}

// What a head row carries: the fold and the way to the episode.
export function episodeBadge(row, reload) {
  const id = row.point.episode.id;
  const open = row.open;
  return h(
    'span',
    { class: 'episode-badge' },
    h(
      'button',
      {
        class: 'fold',
        title: open ? 'fold the consequences' : 'show the consequences',
        onclick: (ev) => {
          ev.stopPropagation();
          if (open) state.openEpisodes.delete(id);
          else state.openEpisodes.add(id);
          reload();
        },
      },
      `${open ? '▾' : '▸'} ${row.folded} more`,
    ),
    ' ',
    h(
      'a',
      {
        href: '#',
        class: 'episode-link',
        onclick: (ev) => {
          ev.preventDefault();
          ev.stopPropagation();
          openEpisode(id);
        },
      },
      `episode ${id}`,
    ),
  );
}

// The episode in the detail panel, kept up to date by live events like an open alarm.
export async function openEpisode(id, quiet) {
  state.episode = id;
  state.alarm = null;
  const e = await api(`/api/episodes/${id}`);
  const best = e.ranking?.[0];
  const follows = [...(best?.downstream || []), ...(best?.followed_by || [])];
  const role = (t) =>
    t.alarm_id === e.initiator_alarm ? '★ initiator' : follows.some((f) => samePoint(t, f)) ? '↳ follows' : '';
  const panel = $('#alarm-detail');
  panel.hidden = false;
  patchChildren(panel, [
    h(
      'h2',
      { class: 'episode-title' },
      `Alarm episode ${id} `,
      h('span', { class: 'quiet' }, e.closed ? 'ended' : 'growing'),
    ),
    h(
      'dl',
      { class: 'kv' },
      h('dt', {}, 'Opened'),
      h('dd', {}, time(e.opened)),
      h('dt', {}, 'Last'),
      h('dd', {}, time(e.last)),
      h('dt', {}, 'Size'),
      h('dd', {}, `${e.points} points, ${e.activations} activations`),
    ),
    best
      ? h(
          'div',
          { class: 'initiator' },
          h('h3', {}, `Likely initiator: ${best.point.asset_id} ${best.point.code}`),
          h(
            'ul',
            {},
            best.evidence.map((x) => h('li', {}, x)),
          ),
        )
      : null,
    h('h3', {}, 'Timeline'),
    h(
      'table',
      { class: 'timeline' },
      h(
        'tbody',
        {},
        e.timeline.map((t) =>
          h(
            'tr',
            {
              class: role(t).startsWith('★') ? 'initiator' : '',
              'data-alarm': t.alarm_id,
              onclick: () => openAlarm(t.alarm_id),
            },
            h('td', { class: 'nowrap' }, `+${t.offset_s} s`),
            h('td', { class: `prio ${t.severity}` }, t.severity),
            h('td', { class: 'nowrap' }, t.asset_id),
            h('td', { class: 'nowrap' }, t.code),
            h('td', { class: 'count' }, t.activations > 1 ? `×${t.activations}` : ''),
            h('td', { class: 'role' }, role(t)),
          ),
        ),
      ),
    ),
    e.note ? noteView(e.note) : h('p', { class: 'quiet' }, 'The episode note is being written.'),
    h('h3', {}, 'Floods like this one before'),
    e.similar.length
      ? h(
          'ul',
          { class: 'similar' },
          e.similar.map((s) =>
            h(
              'li',
              {},
              h(
                'a',
                {
                  href: '#',
                  'data-episode': s.episode_id,
                  onclick: (ev) => {
                    ev.preventDefault();
                    openEpisode(s.episode_id);
                  },
                },
                `Episode ${s.episode_id}`,
              ),
              ` of ${time(s.opened)}, similarity ${s.similarity}: started by ${s.initiator.asset_id} ${s.initiator.code}`,
              s.work_orders.length
                ? `; work orders ${s.work_orders.map((w) => `${w.id} (${w.action}, ${w.status})`).join(', ')}`
                : '',
              s.note ? h('div', { class: 'quiet' }, s.note) : null,
            ),
          ),
        )
      : h('p', { class: 'quiet' }, 'Nothing like it happened before.'),
  ]);
  if (!quiet) panel.scrollTop = 0;
}
