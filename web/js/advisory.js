// What the agent wrote, shown as advice: notes, their citations and their traces.

import { $, api, h, markdown } from './core.js';

// What the agent wrote, marked as advice, with its flags and the way to its trace.
export function advisory(attrs, flags, runId, ...content) {
  const box = h(
    'div',
    { class: 'advisory', ...attrs },
    h('div', { class: 'tag' }, 'AI advisory: check before acting', flags?.length ? ` · ${flags.join(', ')}` : ''),
    ...content,
  );
  if (runId)
    box.append(h('button', { class: 'trace-button', onclick: () => showTrace(runId, box) }, 'Show the tool trace'));
  return box;
}

// A citation key opens its documentation chunk; a tool name is shown as it is.
export function source(src) {
  if (/^[\w./-]+\.md#\d+$/.test(src))
    return h(
      'a',
      {
        href: '#',
        class: 'citation',
        onclick: (ev) => {
          ev.preventDefault();
          openDoc(src);
        },
      },
      `[${src}]`,
    );
  return h('span', { class: 'quiet' }, `(${src})`);
}

export async function openDoc(citation) {
  const d = await api(`/api/docs/${encodeURIComponent(citation)}`);
  $('#doc-title').textContent = `${d.heading || d.title || citation} [${citation}]`;
  // The same safe Markdown subset as the notes: nothing fetched, no links followed.
  $('#doc-body').replaceChildren(markdown(d.text || d.body || ''));
  $('#doc-dialog').hidden = false;
}

// JSON text indented for reading; anything else as it is.
export function pretty(text) {
  try {
    return JSON.stringify(typeof text === 'string' ? JSON.parse(text) : text, null, 2);
  } catch {
    return String(text);
  }
}

export async function showTrace(runId, where) {
  const { run, steps } = await api(`/api/runs/${runId}`);
  where.querySelector('.trace')?.remove();
  where.append(
    h(
      'div',
      { class: 'trace' },
      h('p', {}, `Run ${run.id}: ${run.profile}, outcome ${run.outcome}, model ${run.model || '-'}`),
      h(
        'ol',
        {},
        steps.map((s) =>
          h(
            'li',
            {},
            h('span', { class: 'step' }, `${s.kind} ${s.name || ''}${s.is_error ? ' (error)' : ''}`),
            s.arguments ? h('pre', { class: 'args' }, pretty(s.arguments)) : null,
            s.kind === 'tool_call' && s.result ? h('pre', {}, pretty(s.result).slice(0, 2000)) : null,
          ),
        ),
      ),
    ),
  );
}
