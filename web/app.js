// The twinops HMI. No framework and nothing from another origin (sites are air-gapped).
// The shell: login, tabs, the degraded banner and live events.

import { addToken, addUser, changeOwnPassword, loadAccount } from './js/account.js';
import { loadAlarms } from './js/alarms.js';
import { loadApprovals } from './js/approvals.js';
import { loadPerformance } from './js/performance.js';
import { loadAssets } from './js/assets.js';
import { ask, loadChat } from './js/chat.js';
import { $, api, h, state } from './js/core.js';
import { loadHandover, writeHandover } from './js/handover.js';

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
  $('#login-nogroup').hidden = q.get('login') !== 'nogroup';
  $('#login-directory').hidden = q.get('login') !== 'directory';
  $('#login-locked').textContent =
    `Too many failed logins from here: try again in ${q.get('minutes') || 15} minutes, ` +
    'or ask an administrator to unlock the account (Account tab, or twinops user unlock NAME).';
  $('#login-name').focus();
}

function show(tab) {
  const tabs = ['alarms', 'handover', 'assets', 'chat', 'approvals', 'performance', 'account'];
  state.tab = tabs.includes(tab) ? tab : 'alarms';
  history.replaceState(null, '', `#${state.tab}`);
  for (const b of document.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.tab === state.tab);
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${state.tab}`;
  ({
    alarms: loadAlarms,
    handover: loadHandover,
    assets: loadAssets,
    chat: loadChat,
    approvals: loadApprovals,
    performance: loadPerformance,
    account: loadAccount,
  })[state.tab]();
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
    showPair(s.cluster);
  } catch (e) {
    if (e.status === 401) location.reload();
  }
}

// Of a redundant pair: which node this is, whether it acts, and the way to the other.
function showPair(pair) {
  const p = $('#pair');
  p.hidden = !pair;
  if (!pair) return;
  p.classList.toggle('standby', !pair.acting);
  const active = pair.active_node ? `node ${pair.active_node} acts` : 'no node acts yet (the pair is choosing one)';
  const text = pair.acting
    ? `Node ${pair.node}: acting (term ${pair.term}).`
    : `Node ${pair.node}: standing by; ${active} (term ${pair.term}). Alarm actions and decisions on work orders and alarm changes work here; make other changes on the acting node.`;
  const link = !pair.acting && pair.peer_hmi ? [' ', h('a', { href: pair.peer_hmi }, 'Open the other node')] : [];
  p.replaceChildren(text, ' ', peerText(pair.peer), ...link);
}

// How the other node of the pair is doing, as it last said.
function peerText(peer) {
  if (!peer) return 'The other node has not been heard from yet.';
  if (!peer.online) return `Node ${peer.node} is offline.`;
  if (peer.decisions_behind == null) return `Node ${peer.node} is online.`;
  if (peer.decisions_behind === 0 && peer.alarms_behind_s === 0) return `Node ${peer.node} is level with this one.`;
  const behind = `Node ${peer.node} is ${peer.decisions_behind} decisions`;
  if (peer.alarms_behind_s == null) return `${behind} behind this one and has no alarm yet.`;
  return `${behind} and ${peer.alarms_behind_s} s of alarms behind this one.`;
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

start().catch((e) => {
  $('#banner').hidden = false;
  $('#banner').textContent = `The HMI could not start: ${e.message}`;
});
