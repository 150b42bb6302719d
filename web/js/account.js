// The Account tab: one's own password; users and tokens for an admin.

import { $, ROLES, api, can, confirmIn, h, showError, when } from './core.js';

export async function loadAccount() {
  $('#admin-panel').hidden = !can('admin');
  if (!can('admin')) return;
  const [users, tokens] = await Promise.all([api('/api/users'), api('/api/tokens')]);
  const userAction = (name, path, json) => async () => {
    try {
      await api(`/api/users/${encodeURIComponent(name)}/${path}`, { json: json ? json() : {} });
    } catch (e) {
      showError(e.message);
    }
    loadAccount();
  };
  $('#user-rows').replaceChildren(
    ...users.map((u) => {
      const actions = h('td', {});
      const fromDirectory = u.source === 'directory';
      const role = h(
        'select',
        {
          'aria-label': `role of ${u.name}`,
          class: 'role',
          onchange: () =>
            confirmIn(
              actions,
              `Make ${u.name} ${role.value} (now ${u.role})? It applies from their next request.`,
              'Yes, change the role',
              userAction(u.name, 'role', () => ({ role: role.value })),
              () => (role.value = u.role),
            ),
        },
        ROLES.map((r) => h('option', { selected: r === u.role }, r)),
      );
      const disable = () =>
        confirmIn(
          actions,
          `Disable ${u.name}? They are logged out at once, cannot log in, ` +
            'and their API tokens stop working until they are enabled again.',
          'Yes, disable',
          userAction(u.name, 'disable'),
        );
      const reset = async () => {
        const password = prompt(`New password for ${u.name} (12 characters or more); their sessions end:`);
        if (password) await userAction(u.name, 'password', () => ({ password }))();
      };
      actions.append(
        u.disabled
          ? h('button', { class: 'enable', onclick: userAction(u.name, 'enable') }, 'Enable')
          : h('button', { class: 'disable', onclick: disable }, 'Disable'),
        ' ',
        ...(fromDirectory ? [] : [h('button', { class: 'reset', onclick: reset }, 'Reset password')]),
        ...(u.locks.length
          ? [' ', h('button', { class: 'unlock', onclick: userAction(u.name, 'unlock') }, 'Unlock')]
          : []),
      );
      return h(
        'tr',
        { 'data-user': u.name },
        h('td', {}, u.name),
        // The directory owns these users' roles and passwords: changed there, not here.
        h(
          'td',
          {},
          fromDirectory
            ? h('span', { class: 'role', title: 'set by the directory groups; change it in the directory' }, u.role)
            : role,
        ),
        h('td', { class: 'source' }, fromDirectory ? 'directory' : 'local'),
        h(
          'td',
          { class: 'state' },
          u.disabled ? 'disabled' : 'enabled',
          ...u.locks.map((l) =>
            h(
              'div',
              { class: 'lock' },
              `locked ${l.address ? `for ${l.address}` : 'from every address'} until ${when(l.until)} (${l.failures} failed logins)`,
            ),
          ),
        ),
        h('td', {}, u.live_tokens),
        h('td', {}, when(u.created_at)),
        actions,
      );
    }),
  );
  $('#token-rows').replaceChildren(
    ...tokens.map((t) =>
      h(
        'tr',
        { 'data-token': t.id },
        h('td', {}, t.id),
        h('td', {}, t.user),
        h('td', {}, t.label),
        h('td', {}, when(t.created_at)),
        h('td', {}, when(t.last_used_at)),
        h('td', { class: 'state' }, t.revoked ? 'revoked' : 'live'),
        h(
          'td',
          {},
          t.revoked
            ? ''
            : h(
                'button',
                {
                  class: 'revoke',
                  onclick: async () => {
                    if (!confirm(`Revoke token ${t.id} (${t.label}) of ${t.user}? Clients using it stop working.`))
                      return;
                    try {
                      await api(`/api/tokens/${t.id}/revoke`, { json: {} });
                    } catch (e) {
                      showError(e.message);
                    }
                    loadAccount();
                  },
                },
                'Revoke',
              ),
        ),
      ),
    ),
  );
}

export async function changeOwnPassword(ev) {
  ev.preventDefault();
  const result = $('#own-password-result');
  try {
    await api('/api/me/password', { json: { current: $('#own-current').value, new: $('#own-new').value } });
    result.textContent = 'Changed.';
    ev.target.reset();
  } catch (e) {
    result.textContent = e.message;
  }
}

export async function addUser(ev) {
  ev.preventDefault();
  try {
    await api('/api/users', {
      json: {
        name: $('#new-user-name').value.trim(),
        role: $('#new-user-role').value,
        password: $('#new-user-password').value,
      },
    });
    ev.target.reset();
  } catch (e) {
    showError(e.message);
  }
  loadAccount();
}

export async function addToken(ev) {
  ev.preventDefault();
  try {
    const { token } = await api('/api/tokens', {
      json: { user: $('#new-token-user').value.trim(), label: $('#new-token-label').value.trim() },
    });
    const shown = $('#new-token');
    shown.hidden = false;
    shown.replaceChildren(
      'Shown once; send it as Authorization: Bearer <token>: ',
      h('code', { id: 'new-token-value' }, token),
    );
    ev.target.reset();
  } catch (e) {
    showError(e.message);
  }
  loadAccount();
}
