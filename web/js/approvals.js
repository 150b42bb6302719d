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
  const keyed = cardsOf(list);
  const pending = [
    ...work_orders.filter(waiting).map((w) => keyed(`w${w.id}`, w, card)),
    ...alarm_changes.filter(waiting).map((x) => keyed(`c${x.id}`, x, changeCard)),
  ];
  patchChildren(list, pending.length ? pending : [h('p', { class: 'quiet' }, 'Nothing waits for approval.')]);
  // Suppressions in force first: they stay until lifted, however old. Kept as the
  // pending cards are, so that a lift reason being typed survives a live update.
  const inForce = (x) => x.kind === 'suppression' && x.status === 'approved';
  const decided = $('#decided-list');
  const keep = cardsOf(decided);
  patchChildren(decided, [
    ...alarm_changes.filter(inForce).map((x) => keep(`c${x.id}`, x, changeCard)),
    ...work_orders
      .filter((w) => !waiting(w))
      .slice(0, 20)
      .map((w) => keep(`w${w.id}`, w, card)),
    ...alarm_changes
      .filter((c) => !waiting(c) && !inForce(c))
      .slice(0, 20)
      .map((x) => keep(`c${x.id}`, x, changeCard)),
  ]);
}

// A card for `x` under `list`: the one shown, while it is unchanged or a reason is
// being typed into it (with its focus and caret), else a new one made by `make`.
function cardsOf(list) {
  const shown = new Map([...list.querySelectorAll(':scope > .card')].map((c) => [c.dataset.key, c]));
  return (key, x, make) => {
    const old = shown.get(key);
    const sig = JSON.stringify(x);
    if (old && (old.dataset.sig === sig || typing(old))) return old;
    const c = make(x);
    Object.assign(c.dataset, { key, sig });
    return c;
  };
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

// A point as `ASSET CODE (sensor)`.
const pointName = (p) => `${p.asset_id} ${p.code}${p.sensor_id ? ` (${p.sensor_id})` : ''}`;

// A proposed designed suppression with the learned pair and what it would have held
// back; one in force can be lifted by a supervisor.
function suppressionCard(x) {
  const e = x.evidence || {};
  const p = e.pair || {};
  const follower = pointName(x);
  const leader = pointName(x.while_active);
  const c = h(
    'div',
    { class: 'card', 'data-alarm-change': x.id },
    h('h4', {}, `Suppression #${x.id}: ${follower} while ${leader} is active`),
    h(
      'dl',
      { class: 'kv' },
      h('dt', {}, 'Why'),
      h('dd', {}, x.reason),
      h('dt', {}, 'Learned pair'),
      h(
        'dd',
        {},
        `follows in ${p.support} of ${p.first_activations} activations (confidence ${Math.round((p.confidence || 0) * 100)}%, ` +
          `lift ${Number(p.lift || 0).toFixed(1)}), lag median ${p.lag_median_s} s, p90 ${p.lag_p90_s} s`,
      ),
      h('dt', {}, `Last ${e.days} days`),
      h(
        'dd',
        { class: 'replay' },
        `${e.while_leader_active} of ${e.follower_activations} activations came while the cause was active and would ` +
          `not have been annunciated; ${e.otherwise} would still be`,
        e.critical_while_leader_active
          ? h('strong', {}, `; ${e.critical_while_leader_active} of those held back were critical`)
          : '',
      ),
      h('dt', {}, 'Applies to'),
      h('dd', {}, "twinops's alarm list and triage; the SCADA's own display is unchanged"),
      h('dt', {}, 'Proposed'),
      h('dd', {}, `by ${x.proposed_by} ${ago(x.proposed_at)}`),
      h('dt', {}, 'Status'),
      h(
        'dd',
        { class: 'status' },
        x.status === 'approved' ? 'in force' : x.status.replaceAll('_', ' '),
        x.decided_by
          ? ` (${x.status === 'lifted' ? 'approved' : x.status} by ${x.decided_by}: ${x.decision_reason || ''})`
          : '',
        x.lifted_by ? `; lifted by ${x.lifted_by}: ${x.lift_reason || ''}` : '',
        x.suppressed_occurrences ? `; ${x.suppressed_occurrences} occurrence(s) held back so far` : '',
      ),
    ),
  );
  if (x.status === 'pending_approval' && can('supervisor')) {
    c.append(
      decisionRow(
        `/api/alarm-changes/${x.id}`,
        `the suppression of ${follower} while ${leader} is active`,
        'From now on its occurrences while the cause is active are recorded, not annunciated or triaged, until a supervisor lifts it.',
        'The proposal is closed and nothing changes.',
      ),
    );
  }
  if (x.status === 'approved' && can('supervisor')) c.append(liftRow(x, follower));
  return c;
}

// Lifting a suppression in force, with the reason the record needs.
function liftRow(x, follower) {
  const reason = h('input', {
    type: 'text',
    placeholder: 'reason (required)',
    class: 'reason',
    'aria-label': 'lift reason',
  });
  const row = h('div', {}, reason, ' ');
  const lift = async () => {
    try {
      await api(`/api/alarm-changes/${x.id}/lift`, { json: { reason: reason.value } });
      reason.value = '';
    } catch (e) {
      refuse(row, `Not done: ${e.message}`);
    }
    loadApprovals();
  };
  const ask = () =>
    reason.value.trim()
      ? confirmIn(row, `Lift suppression ${x.id}? ${follower} is annunciated again from now on.`, 'Yes, lift', lift)
      : refuse(row, 'Reason: say why, for the record (e.g. "MOC-2301: trip interlock changed").', reason);
  row.append(h('button', { class: 'lift', onclick: ask }, 'Lift'));
  return row;
}

// A proposed alarm change with the replay that is its evidence.
export function changeCard(x) {
  if (x.kind === 'suppression') return suppressionCard(x);
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
