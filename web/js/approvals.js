// The Approvals tab: proposed work orders, approved or rejected by a supervisor.

import { showTrace, source } from './advisory.js';
import { $, ago, api, can, confirmIn, h, showError } from './core.js';

export async function loadApprovals(countOnly) {
  const { work_orders } = await api('/api/work_orders');
  const pending = work_orders.filter((w) => w.status === 'pending_approval');
  $('#pending-count').textContent = pending.length ? `(${pending.length})` : '';
  if (countOnly) return;
  $('#approvals-readonly').hidden = can('supervisor');
  $('#approval-list').replaceChildren(
    ...(pending.length ? pending.map(card) : [h('p', { class: 'quiet' }, 'Nothing waits for approval.')]),
  );
  $('#decided-list').replaceChildren(
    ...work_orders
      .filter((w) => w.status !== 'pending_approval')
      .slice(0, 20)
      .map(card),
  );
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
    const reason = h('input', {
      type: 'text',
      placeholder: 'reason (required)',
      class: 'reason',
      'aria-label': 'reason',
    });
    const decide = (verb) => async () => {
      try {
        await api(`/api/work_orders/${w.id}/${verb}`, { json: { reason: reason.value } });
      } catch (e) {
        showError(e.message);
      }
      loadApprovals();
    };
    const row = h('div', {}, reason, ' ');
    const ask = (verb, what) => () =>
      confirmIn(
        row,
        `${verb === 'approve' ? 'Approve' : 'Reject'} work order ${w.id}, ` + `"${w.title}"? ${what}`,
        `Yes, ${verb}`,
        decide(verb),
      );
    row.append(
      h(
        'button',
        {
          class: 'approve',
          onclick: ask(
            'approve',
            `It will be dispatched to maintenance for ${w.asset_id} ` +
              '(published on MQTT and to the webhook); this cannot be undone.',
          ),
        },
        'Approve',
      ),
      ' ',
      h(
        'button',
        {
          class: 'reject',
          onclick: ask('reject', 'The proposal is closed and nothing is dispatched; ' + 'the agent may propose again.'),
        },
        'Reject',
      ),
    );
    c.append(row);
  }
  return c;
}
