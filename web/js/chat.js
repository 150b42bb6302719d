// The Chat tab: questions to the agent, answers streamed.

import { $, api, can, h, markdown } from './core.js';

export async function loadChat() {
  if (!can('operator')) {
    $('#chat-log').replaceChildren(h('p', { class: 'quiet' }, 'Chat needs the operator role.'));
    $('#chat-send').disabled = true;
    return;
  }
  const { messages } = await api('/api/chat');
  $('#chat-log').replaceChildren(...messages.map((m) => message(m.role, m.text)));
  $('#chat-log').scrollTop = 1e9;
}

export function message(role, text) {
  const body = role === 'agent' ? markdown(text) : h('div', {}, text);
  return h(
    'div',
    { class: `msg ${role}` },
    h('div', { class: 'who' }, role === 'agent' ? 'twinops (AI advisory)' : 'you'),
    h('div', { class: 'body' }, body),
  );
}

// Sends the question and reads the answer as it streams: tool steps, then text.
export async function ask(ev) {
  ev.preventDefault();
  const input = $('#chat-input');
  const question = input.value.trim();
  if (!question) return;
  input.value = '';
  const log = $('#chat-log');
  log.append(message('operator', question));
  const steps = h('div', { class: 'steps' });
  const live = h('div', { class: 'body live' });
  const answer = h(
    'div',
    { class: 'msg agent', id: 'answer-live' },
    h('div', { class: 'who' }, 'twinops (AI advisory)'),
    steps,
    live,
  );
  log.append(answer);
  $('#chat-send').disabled = true;
  let text = '';
  try {
    const res = await fetch('/api/chat', {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: question }),
    });
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
        const data = block
          .split('\n')
          .filter((l) => l.startsWith('data: '))
          .map((l) => l.slice(6))
          .join('\n');
        if (!kind || !data) continue;
        const d = JSON.parse(data);
        if (kind === 'tool') steps.append(h('div', { class: 'step' }, `→ ${d.name} ${d.arguments}`));
        if (kind === 'text') {
          text += d.text;
          live.textContent = text;
        }
        if (kind === 'retract') {
          text = '';
          live.textContent = '';
        }
        if (kind === 'done') {
          live.replaceChildren(markdown(d.answer || text));
          answer.id = '';
          answer.dataset.run = d.run_id;
        }
        if (kind === 'error') live.replaceChildren(h('p', { class: 'error' }, d.error));
        log.scrollTop = 1e9;
      }
    }
  } catch (e) {
    live.replaceChildren(h('p', { class: 'error' }, e.message));
  }
  $('#chat-send').disabled = false;
}
