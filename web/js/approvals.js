// The Approvals tab: proposed work orders and alarm changes, approved or rejected by a
// supervisor.

import { showTrace, source } from './advisory.js';
import { $, ago, api, can, confirmIn, h, patchChildren, refuse, typing } from './core.js';

export async function loadApprovals(countOnly) {
  const [{ work_orders }, { alarm_changes }] = await Promise.all([api('/api/work_orders'), api('/api/alarm-changes')]);
  const waiting = (x) => x.status === 'pending_approval';
  const count = work_orders.filter(waiting).length + alarm_changes.filter(waiting).length;
  $('#pending-count').textContent = count ? `(${count})` : '';
  if (countOnly) return;
  $('#approvals-readonly').hidden = can('supervisor');
  // A pending card is kept as it is while it is unchanged, or while a reason is being
  // typed into it (with its focus and caret): a live update takes nothing typed away.
  const list = $('#approval-list');
  const shown = new Map([...list.querySelectorAll(':scope > .card')].map((c) => [c.dataset.key, c]));
  const keyed = (key, x, make) => {
    const old = shown.get(key);
    const sig = JSON.stringify(x);
    if (old && (old.dataset.sig === sig || typing(old))) return old;
    const c = make(x);
    Object.assign(c.dataset, { key, sig });
    return c;
  };
  const pending = [
    ...work_orders.filter(waiting).map((w) => keyed(`w${w.id}`, w, card)),
    ...alarm_changes.filter(waiting).map((x) => keyed(`c${x.id}`, x, changeCard)),
  ];
  patchChildren(list, pending.length ? pending : [h('p', { class: 'quiet' }, 'Nothing waits for approval.')]);
  $('#decided-list').replaceChildren(
    ...work_orders
      .filter((w) => !waiting(w))
      .slice(0, 20)
      .map(card),
    ...alarm_changes
      .filter((c) => !waiting(c))
      .slice(0, 20)
      .map(changeCard),
  );
}

// The approve and reject buttons of a pending proposal, each asking to confirm what
// it will do, with the reason the decision needs.
function decisionRow(path, what, onApprove, onReject) {
  const reason = h('input', {
    type: 'text',
    placeholder: 'reason (required)',
    class: 'reason',
    'aria-label': 'reason',
  });
  const decide = (verb) => async () => {
    try {
      await api(`${path}/${verb}`, { json: { reason: reason.value } });
      reason.value = '';
    } catch (e) {
      refuse(row, `Not done: ${e.message}`);
    }
    loadApprovals();
  };
  const row = h('div', {}, reason, ' ');
  const ask = (verb, then) => () =>
    reason.value.trim()
      ? confirmIn(row, `${verb === 'approve' ? 'Approve' : 'Reject'} ${what}? ${then}`, `Yes, ${verb}`, decide(verb))
      : refuse(row, 'Reason: say why, for the record (e.g. "zone C: change the bearing this week").', reason);
  row.append(
    h('button', { class: 'approve', onclick: ask('approve', onApprove) }, 'Approve'),
    ' ',
    h('button', { class: 'reject', onclick: ask('reject', onReject) }, 'Reject'),
  );
  return row;
}

// One setting as proposed: `4.5 → 4.2`, or the value when it does not change.
function setting(current, proposed, unit) {
  return current === proposed ? `${current}${unit}` : `${current} → ${proposed}${unit}`;
}

// A proposed alarm change with the replay that is its evidence.
export function changeCard(x) {
  const e = x.evidence || {};
  const cur = x.current;
  const pro = x.proposed;
  const delay = e.delay_median_s != null ? `; first activation of an episode ${e.delay_median_s} s later (median)` : '';
  const c = h(
    'div',
    { class: 'card', 'data-alarm-change': x.id },
    h('h4', {}, `Alarm change #${x.id}: ${x.code} on ${x.sensor_id}`),
    h(
      'dl',
      { class: 'kv' },
      h('dt', {}, 'Set point'),
      h('dd', {}, setting(cur.set_point, pro.set_point, '')),
      h('dt', {}, 'Deadband'),
      h('dd', {}, setting(cur.deadband, pro.deadband, '')),
      h('dt', {}, 'Delays'),
      h(
        'dd',
        {},
        `on ${setting(cur.on_delay_s, pro.on_delay_s, ' s')}, off ${setting(cur.off_delay_s, pro.off_delay_s, ' s')}`,
      ),
      h('dt', {}, 'Why'),
      h('dd', {}, x.reason),
      h('dt', {}, 'Replay'),
      h(
        'dd',
        { class: 'replay' },
        `${e.readings ?? 0} readings: ${e.current?.activations ?? '?'} activations now, ` +
          `${e.proposed?.activations ?? '?'} with the change; ${e.suppressed ?? 0} of ${e.episodes ?? 0} episodes ` +
          `no longer annunciated${delay}`,
      ),
      h('dt', {}, 'Applies to'),
      h(
        'dd',
        {},
        x.applies === 'twin' ? 'the twin (twinops raises this alarm)' : 'the SCADA (a record for its engineer)',
      ),
      h('dt', {}, 'Proposed'),
      h('dd', {}, `by ${x.proposed_by} ${ago(x.proposed_at)}`),
      h('dt', {}, 'Status'),
      h(
        'dd',
        { class: 'status' },
        x.status.replaceAll('_', ' '),
        x.decided_by ? ` by ${x.decided_by}: ${x.decision_reason || ''}` : '',
      ),
    ),
  );
  if (x.status === 'pending_approval' && can('supervisor')) {
    c.append(
      decisionRow(
        `/api/alarm-changes/${x.id}`,
        `alarm change ${x.id} of ${x.code} on ${x.sensor_id}`,
        x.applies === 'twin'
          ? "twinops applies it to the sensor at once, recorded in the point's history."
          : 'It is recorded for the SCADA engineer to make in the SCADA; the twin is unchanged.',
        'The proposal is closed and nothing changes.',
      ),
    );
  }
  return c;
}

export function card(w) {
  const c = h(
    'div',
    { class: 'card', 'data-work-order': w.id },
    h('h4', {}, `#${w.id} ${w.title}`),
    h(
      'dl',
      { class: 'kv' },
      h('dt', {}, 'Asset'),
      h('dd', {}, w.asset_id),
      h('dt', {}, 'Action'),
      h('dd', {}, `${w.action} (${w.priority})`),
      h('dt', {}, 'Why'),
      h('dd', {}, w.justification),
      h('dt', {}, 'Evidence'),
      h(
        'dd',
        {},
        (w.evidence || []).map((e) => [source(e), ' ']),
      ),
      h('dt', {}, 'Proposed'),
      h(
        'dd',
        {},
        `by ${w.proposed_by} ${ago(w.proposed_at)}`,
        w.run_id ? ' · ' : '',
        w.run_id
          ? h(
              'a',
              {
                href: '#',
                onclick: (ev) => {
                  ev.preventDefault();
                  showTrace(w.run_id, c);
                },
              },
              `run ${w.run_id}`,
            )
          : '',
      ),
      h('dt', {}, 'Status'),
      h(
        'dd',
        { class: 'status' },
        w.status.replaceAll('_', ' '),
        w.decided_by ? ` by ${w.decided_by}: ${w.decision_reason || ''}` : '',
      ),
    ),
  );
  if (w.status === 'pending_approval' && can('supervisor')) {
    c.append(
      decisionRow(
        `/api/work_orders/${w.id}`,
        `work order ${w.id}, "${w.title}"`,
        `It will be dispatched to maintenance for ${w.asset_id} ` +
          '(published on MQTT and to the webhook); this cannot be undone.',
        'The proposal is closed and nothing is dispatched; the agent may propose again.',
      ),
    );
  }
  return c;
}
