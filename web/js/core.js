// What every part of the page uses: elements, the API, times in the site's zone,
// the safe Markdown subset. Every piece of text from the plant or the model goes into
// the page as text nodes, never as HTML.

export const $ = (sel) => document.querySelector(sel);

export const ROLES = ['viewer', 'operator', 'supervisor', 'admin'];

export const state = {
  me: null,
  tab: 'alarms',
  alarm: null,
  // The open episode (shown instead of an alarm), and the episodes unfolded in the list.
  episode: null,
  openEpisodes: new Set(),
  alarms: [],
  asset: null,
  sensor: null,
  hours: 24,
};

// Builds an element: h('td', {class: 'x', onclick: f}, 'text', child, ...).
export function h(tag, attrs, ...children) {
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

export async function api(path, opts = {}) {
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

// Whether someone is at work in `el`: one of its fields has the focus, or holds text
// typed and not yet sent. A live update leaves such a part as it is.
export const typing = (el) =>
  !!el &&
  [...el.querySelectorAll('input, textarea')].some(
    (i) => i === document.activeElement || ((i.type === 'text' || i.tagName === 'TEXTAREA') && i.value),
  );

// Puts `parts` (nulls skipped) into `parent` in that order, leaving those already there where they
// are: moving an element blurs it, so a kept part keeps its focus, text and caret.
// Kept parts must stay in the same order among themselves.
export function patchChildren(parent, parts) {
  const children = parts.filter(Boolean);
  const keep = new Set(children);
  for (const old of [...parent.childNodes]) if (!keep.has(old)) old.remove();
  let at = parent.firstChild;
  for (const c of children) {
    if (c === at) at = at.nextSibling;
    else parent.insertBefore(c, at);
  }
}

// A refused action, said where it was done: under the action's fields, naming the one
// at fault (marked and focused) when there is one. Cleared by the next attempt.
export function refuse(where, message, field) {
  where.querySelector(':scope > .action-error')?.remove();
  for (const f of where.querySelectorAll('[aria-invalid]')) f.removeAttribute('aria-invalid');
  where.append(h('p', { class: 'action-error', role: 'alert' }, message));
  if (field) {
    field.setAttribute('aria-invalid', 'true');
    field.focus();
  }
}

// An action's error, in the page (never an alert box): the server's own message.
export function showError(message) {
  $('#error-text').textContent = message;
  $('#error').hidden = false;
}

// Asks in place, under `where`, before `run`: `text` says what will happen.
export function confirmIn(where, text, label, run, cancel = () => {}) {
  where.querySelector(':scope > .confirm')?.remove();
  const box = h(
    'div',
    { class: 'confirm', role: 'group' },
    h('p', {}, text),
    h(
      'button',
      {
        class: 'confirm-yes',
        onclick: () => {
          box.remove();
          run();
        },
      },
      label,
    ),
    ' ',
    h(
      'button',
      {
        class: 'confirm-no',
        onclick: () => {
          box.remove();
          cancel();
        },
      },
      'Cancel',
    ),
  );
  where.append(box);
}

export const can = (role) => state.me && ROLES.indexOf(state.me.role) >= ROLES.indexOf(role);

// Times in the site's time zone, 24-hour, with the zone shown.
export function siteTime(date, { short = false } = {}) {
  const opts = short
    ? { month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }
    : {
        year: 'numeric',
        month: 'short',
        day: '2-digit',
        hour: '2-digit',
        minute: '2-digit',
        second: '2-digit',
        hourCycle: 'h23',
        timeZoneName: 'short',
      };
  try {
    return new Intl.DateTimeFormat('en-GB', { ...opts, timeZone: state.site?.timezone || undefined }).format(date);
  } catch {
    return new Intl.DateTimeFormat('en-GB', { ...opts, timeZone: 'UTC' }).format(date);
  }
}

// Every time in the API's JSON is RFC 3339 (a trend's points excepted: [unix s, value]).
export const time = (rfc3339) => (rfc3339 ? siteTime(new Date(rfc3339)) : '');

export const ago = (rfc3339) => {
  const m = Math.round((Date.now() - Date.parse(rfc3339)) / 60000);
  return m < 60 ? `${m} min ago` : m < 48 * 60 ? `${Math.round(m / 60)} h ago` : `${Math.round(m / 1440)} d ago`;
};

// A safe Markdown subset for model output: paragraphs, "- " lists, **bold**, `code`.
// Links and images become plain text: nothing is fetched or followed on render.
export function markdown(text) {
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

export function inline(text) {
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

export const when = (rfc3339) => time(rfc3339) || 'never';
