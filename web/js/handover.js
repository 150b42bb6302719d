// The Handover tab.

import { advisory } from './advisory.js';
import { $, ago, api, can, h, markdown, time } from './core.js';

export async function loadHandover() {
  $('#handover-new').textContent = '';
  $('#handover-write').hidden = !can('operator');
  const { handovers } = await api('/api/handovers?limit=10');
  const [latest, ...earlier] = handovers;
  const by = (t) =>
    t?.startsWith('user:') ? ` by ${t.slice(5)}` : t === 'schedule:handover' ? ' at the shift change' : '';
  const written = (x) => `${time(x.created_at)} (${ago(x.created_at)})${by(x.trigger)}`;
  $('#handover-when').textContent = latest
    ? `Written ${written(latest)}.`
    : 'No handover yet: one is written at each shift change.';
  const view = (x) =>
    advisory({ class: 'advisory handover', 'data-note': x.note_id }, x.flags, x.run_id, markdown(x.text));
  $('#handover-latest').replaceChildren(...(latest ? [view(latest)] : []));
  $('#handover-earlier').hidden = earlier.length === 0;
  $('#handover-list').replaceChildren(...earlier.map((x) => h('details', {}, h('summary', {}, written(x)), view(x))));
}

export async function writeHandover() {
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
