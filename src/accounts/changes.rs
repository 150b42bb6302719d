//! Changes to people and their credentials as values ([`AccountOp`]): prepared where
//! they are asked (the name checked, a password hashed, a token drawn), then applied
//! alike wherever they are applied ([`apply_in`]). A node alone applies one at once
//! ([`perform`]); a redundant pair sends it through its decision log and both nodes
//! apply it, so that a user, a login or a token made on either works on both.
//!
//! No secret is in one: a password travels as its argon2id PHC string, a token and a
//! session cookie as their SHA-256.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{AccountError, SESSION_MAX_SECS, Source, User, audit_in, lockout, new_password_hash, sha256_hex};
use crate::domain::{Role, Timestamp};
use crate::store::{Store, StoreError};

/// The decision log's kind for [`AccountOp`]s.
pub const KIND: &str = "account";

/// What an administrator may change about a user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Role(Role),
    /// A new password (a reset), as its argon2id hash: make it with
    /// [`Change::password`]. The user's sessions end.
    Password(String),
    /// The user can no longer log in; their sessions end, their tokens stop working.
    Disable,
    Enable,
    /// Lift the locks on the name: its failed logins no longer count.
    Unlock,
}

impl Change {
    /// A password reset to `plain`, checked and hashed.
    pub fn password(plain: &str) -> Result<Change, AccountError> {
        Ok(Change::Password(new_password_hash(plain)?))
    }
}

/// A directory user's entry as the directory gave it at login.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectoryEntry {
    pub dn: String,
    pub role: Role,
}

/// One change to accounts, sessions or tokens, ready to apply on any node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AccountOp {
    /// A new local user ([`AccountOp::add_user`]).
    AddUser { name: String, role: Role, password_hash: String },
    /// An administrator's change to a user.
    Change { name: String, change: Change },
    /// A user's own new password (the current one was checked where it was typed);
    /// their sessions end, all but the one whose cookie hashes to `keep`.
    OwnPassword { name: String, password_hash: String, keep: String },
    /// A login: a new session for `name`. A directory user's row is made, or its role
    /// brought up to date, first.
    Login { token_hash: String, name: String, address: String, directory: Option<DirectoryEntry> },
    /// A session ended: by its user logging out (`logout`), or replaced by a new login.
    EndSession { token_hash: String, logout: bool },
    /// A session in use: idle on neither node.
    Seen { token_hash: String },
    /// A failed login, counted towards the locks ([`lockout`]).
    Failed { name: String, address: String },
    /// A new API token ([`AccountOp::token`]).
    Token { token_hash: String, user: String, label: String },
    /// An API token revoked for good.
    Revoke { token_hash: String },
    /// An API token in use: its last use is the same on both nodes.
    TokenUsed { token_hash: String },
    /// What the directory now says of a directory user: their role (a change is taken,
    /// audited), or none, and `why`: their sessions end and their tokens are revoked.
    DirectoryAccess { name: String, role: Option<Role>, why: String },
}

impl AccountOp {
    /// A new local user, `name` checked and `password` hashed.
    pub fn add_user(name: &str, role: Role, password: &str) -> Result<AccountOp, AccountError> {
        super::check_name(name)?;
        Ok(AccountOp::AddUser { name: name.to_string(), role, password_hash: new_password_hash(password)? })
    }

    /// An administrator's change to the user `name` (as typed).
    pub fn change(name: &str, change: Change) -> AccountOp {
        AccountOp::Change { name: super::account_name(name), change }
    }

    /// A new API token for `user`, and the token itself (shown once, never kept).
    pub fn token(user: &str, label: &str) -> (AccountOp, String) {
        let token = format!("tw_{}", super::new_secret());
        let op = AccountOp::Token { token_hash: sha256_hex(&token), user: user.to_string(), label: label.to_string() };
        (op, token)
    }

    /// Revoking the API token this node lists as `id`.
    pub fn revoke(store: &Store, id: i64) -> Result<AccountOp, AccountError> {
        let hash: Option<String> = store
            .read()?
            .prepare_cached("SELECT token_hash FROM api_tokens WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?;
        Ok(AccountOp::Revoke { token_hash: hash.ok_or(AccountError::NoSuchToken(id))? })
    }

    /// The session whose cookie is `token` ended; by its user when `logout`.
    pub fn end_session(token: &str, logout: bool) -> AccountOp {
        AccountOp::EndSession { token_hash: sha256_hex(token), logout }
    }

    /// The change as a pair's decision log carries it (of kind [`KIND`]).
    pub fn args(&self) -> Value {
        serde_json::to_value(self).expect("an AccountOp is plain data, which JSON always holds")
    }

    /// The session whose cookie is `token` was used.
    pub fn seen(token: &str) -> AccountOp {
        AccountOp::Seen { token_hash: sha256_hex(token) }
    }
}

/// Applies `op` on this node at once (a node alone, or the CLI): what [`apply_in`] answers.
pub fn perform(store: &Store, op: &AccountOp, by: &str) -> Result<Value, AccountError> {
    let (op, by) = (op.clone(), by.to_string());
    store.writer().call(move |c| apply_in(c, &op, &by, Timestamp::now()))
}

/// The HTTP status a refusal answers with.
pub fn status_of(e: &AccountError) -> u16 {
    match e {
        AccountError::Invalid(_) => 400,
        AccountError::WrongPassword => 403,
        AccountError::NoSuchUser(_) | AccountError::NoSuchToken(_) => 404,
        AccountError::Exists(_) | AccountError::LastAdmin(_) | AccountError::Disabled(_) => 409,
        AccountError::Pair(status, _) => *status,
        AccountError::Store(_) => 500,
    }
}

/// Applies `op`, made by `by` at `at`, on the write connection, audited; answers what
/// the HMI shows (the user, the token's id on this node).
pub fn apply_in(c: &Connection, op: &AccountOp, by: &str, at: Timestamp) -> Result<Value, AccountError> {
    match op {
        AccountOp::AddUser { name, role, password_hash } => {
            let inserted = c
                .prepare_cached(
                    "INSERT INTO users (name, password_hash, role, created_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (name) DO NOTHING",
                )?
                .execute(params![name, password_hash, role, at.unix()])?;
            if inserted == 0 {
                return Err(AccountError::Exists(name.clone()));
            }
            let user = User { id: c.last_insert_rowid(), name: name.clone(), role: *role };
            audit_in(c, by, "user_added", &format!("{name} as {role}"), None)?;
            Ok(json!(user))
        }
        AccountOp::Change { name, change } => change_in(c, name, change, by),
        AccountOp::OwnPassword { name, password_hash, keep } => {
            let id = user_id(c, name)?;
            set_password_in(c, id, password_hash, keep)?;
            audit_in(c, name, "password_changed", "", None)?;
            Ok(json!({"changed": true}))
        }
        AccountOp::Login { token_hash, name, address, directory } => {
            login_in(c, token_hash, name, address, directory.as_ref(), at)
        }
        AccountOp::EndSession { token_hash, logout } => {
            let user: Option<String> = c
                .prepare_cached(
                    "SELECT u.name FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ?1",
                )?
                .query_row([token_hash], |r| r.get(0))
                .optional()?;
            c.prepare_cached("DELETE FROM sessions WHERE token_hash = ?1")?.execute([token_hash])?;
            if let (true, Some(user)) = (logout, &user) {
                audit_in(c, user, "logout", "", None)?;
            }
            Ok(json!({"ended": user.is_some()}))
        }
        AccountOp::Seen { token_hash } => {
            c.prepare_cached("UPDATE sessions SET last_seen_at = max(last_seen_at, ?2) WHERE token_hash = ?1")?
                .execute(params![token_hash, at.unix()])?;
            Ok(json!({"seen": true}))
        }
        AccountOp::TokenUsed { token_hash } => {
            c.prepare_cached(
                "UPDATE api_tokens SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE token_hash = ?1",
            )?
            .execute(params![token_hash, at.unix()])?;
            Ok(json!({"used": true}))
        }
        AccountOp::Failed { name, address } => {
            audit_in(c, name, "login_failed", "", Some(address))?;
            for lock in lockout::fail(c, name, address, at)? {
                tracing::warn!(stage = "web", %lock, "failed logins locked a login; `twinops user unlock NAME` lifts it");
                audit_in(c, name, "login_locked", &lock.to_string(), Some(address))?;
            }
            Ok(json!({"counted": true}))
        }
        AccountOp::Token { token_hash, user, label } => token_in(c, token_hash, user, label, by, at),
        AccountOp::DirectoryAccess { name, role: Some(role), .. } => Ok(directory_role_in(c, name, *role)?),
        AccountOp::DirectoryAccess { name, role: None, why } => Ok(json!({"ended": end_access_in(c, name, why)?})),
        AccountOp::Revoke { token_hash } => {
            let found: Option<(i64, String, String, bool)> = c
                .prepare_cached(
                    "SELECT t.id, t.label, u.name, t.revoked FROM api_tokens t JOIN users u ON u.id = t.user_id
                     WHERE t.token_hash = ?1",
                )?
                .query_row([token_hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()?;
            // A token made on the other node before the pair was formed is not here.
            let Some((id, label, user, revoked)) = found else { return Ok(json!({"revoked": false})) };
            if !revoked {
                c.prepare_cached("UPDATE api_tokens SET revoked = 1 WHERE id = ?1")?.execute([id])?;
                audit_in(c, by, "token_revoked", &format!("{id} ({label}) of {user}"), None)?;
            }
            Ok(json!({"id": id, "revoked": true}))
        }
    }
}

fn user_id(c: &Connection, name: &str) -> Result<i64, AccountError> {
    c.prepare_cached("SELECT id FROM users WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?
        .ok_or_else(|| AccountError::NoSuchUser(name.to_string()))
}

/// An administrator's change. Refuses to leave no enabled admin, once there has been one.
fn change_in(c: &Connection, name: &str, change: &Change, by: &str) -> Result<Value, AccountError> {
    let row: Option<(i64, Role, bool, Source)> = c
        .prepare_cached("SELECT id, role, disabled, source FROM users WHERE name = ?1")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .optional()?;
    let (id, role, disabled, source) = row.ok_or_else(|| AccountError::NoSuchUser(name.to_string()))?;
    if source == Source::Directory && matches!(change, Change::Role(_) | Change::Password(_)) {
        return Err(AccountError::Invalid(format!(
            "{name} logs in with the directory, which owns their password and role: change them there \
             (the role follows the directory groups at the next login, or within directory.recheck_secs)"
        )));
    }
    let demotes = match change {
        Change::Disable => true,
        Change::Role(new) => *new != Role::Admin,
        Change::Password(_) | Change::Enable | Change::Unlock => false,
    };
    if role == Role::Admin && !disabled && demotes {
        let admins: i64 =
            c.query_row("SELECT count(*) FROM users WHERE role = 'admin' AND disabled = 0", [], |r| r.get(0))?;
        if admins == 1 {
            return Err(AccountError::LastAdmin(name.to_string()));
        }
    }
    let (action, detail) = match change {
        Change::Role(new) => {
            c.prepare_cached("UPDATE users SET role = ?2 WHERE id = ?1")?.execute(params![id, new])?;
            ("user_role_changed", format!("{name}: {role} to {new}"))
        }
        Change::Password(hash) => {
            set_password_in(c, id, hash, "")?;
            let detail = match lockout::unlock(c, name)? {
                0 => name.to_string(),
                cleared => format!("{name}; {cleared} failed logins cleared"),
            };
            ("password_set", detail)
        }
        Change::Unlock => {
            let cleared = lockout::unlock(c, name)?;
            ("user_unlocked", format!("{name}: {cleared} failed logins cleared"))
        }
        Change::Disable => {
            c.prepare_cached("UPDATE users SET disabled = 1 WHERE id = ?1")?.execute([id])?;
            c.prepare_cached("DELETE FROM sessions WHERE user_id = ?1")?.execute([id])?;
            ("user_disabled", name.to_string())
        }
        Change::Enable => {
            c.prepare_cached("UPDATE users SET disabled = 0 WHERE id = ?1")?.execute([id])?;
            ("user_enabled", name.to_string())
        }
    };
    audit_in(c, by, action, &detail, None)?;
    Ok(json!({"name": name, "changed": true}))
}

/// Sets a user's password hash and ends their sessions, all but the one whose token
/// hashes to `keep` (none when empty).
fn set_password_in(c: &Connection, id: i64, hash: &str, keep: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE users SET password_hash = ?2 WHERE id = ?1")?.execute(params![id, hash])?;
    c.prepare_cached("DELETE FROM sessions WHERE user_id = ?1 AND token_hash != ?2")?.execute(params![id, keep])?;
    Ok(())
}

/// A new session for `name`: a directory user's row made or brought up to date first.
/// A user disabled here is refused (the directory's word does not lift it).
fn login_in(
    c: &Connection,
    token_hash: &str,
    name: &str,
    address: &str,
    directory: Option<&DirectoryEntry>,
    at: Timestamp,
) -> Result<Value, AccountError> {
    if let Some(entry) = directory {
        directory_user_in(c, name, entry, at)?;
    }
    let source = if directory.is_some() { Source::Directory } else { Source::Local };
    let row: Option<(i64, Role, bool)> = c
        .prepare_cached("SELECT id, role, disabled FROM users WHERE name = ?1 AND source = ?2")?
        .query_row(params![name, source], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let (id, role) = match row {
        None => return Err(AccountError::NoSuchUser(name.to_string())),
        Some((_, _, true)) => return Err(AccountError::Disabled(name.to_string())),
        Some((id, role, false)) => (id, role),
    };
    c.prepare_cached(
        "INSERT INTO sessions (token_hash, user_id, created_at, last_seen_at, expires_at, source)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5) ON CONFLICT (token_hash) DO NOTHING",
    )?
    .execute(params![token_hash, id, at.unix(), at.unix() + SESSION_MAX_SECS, source])?;
    lockout::succeeded(c, name, address)?;
    let detail = if directory.is_some() { "from the directory" } else { "" };
    audit_in(c, name, "login", detail, Some(address))?;
    Ok(json!(User { id, name: name.to_string(), role }))
}

/// A directory user's role as the directory now gives it; a change is audited.
fn directory_role_in(c: &Connection, name: &str, role: Role) -> Result<Value, StoreError> {
    let old: Option<Role> = c
        .prepare_cached("SELECT role FROM users WHERE name = ?1 AND source = 'directory'")?
        .query_row([name], |r| r.get(0))
        .optional()?;
    if let Some(old) = old.filter(|old| *old != role) {
        c.prepare_cached("UPDATE users SET role = ?2 WHERE name = ?1 AND source = 'directory'")?
            .execute(params![name, role])?;
        audit_in(c, "directory", "directory_role", &format!("{name}: {} -> {}", old.as_str(), role.as_str()), None)?;
    }
    Ok(json!({"name": name, "role": role}))
}

/// A directory user the directory no longer gives a role: their sessions end and their
/// tokens are revoked, audited with `why`. Whether there was any to end.
fn end_access_in(c: &Connection, name: &str, why: &str) -> Result<bool, StoreError> {
    let Some(id): Option<i64> = c
        .prepare_cached("SELECT id FROM users WHERE name = ?1 AND source = 'directory'")?
        .query_row([name], |r| r.get(0))
        .optional()?
    else {
        return Ok(false);
    };
    let sessions = c.prepare_cached("DELETE FROM sessions WHERE user_id = ?1")?.execute([id])?;
    let tokens =
        c.prepare_cached("UPDATE api_tokens SET revoked = 1 WHERE user_id = ?1 AND revoked = 0")?.execute([id])?;
    if sessions + tokens > 0 {
        let detail = format!("{why}: {sessions} sessions ended, {tokens} tokens revoked");
        audit_in(c, "directory", "directory_access_ended", &format!("{name}: {detail}"), None)?;
    }
    Ok(sessions + tokens > 0)
}

/// A directory user's row as the directory gave it: made at the first login, its role
/// and entry kept up to date (a change of role audited).
fn directory_user_in(c: &Connection, name: &str, entry: &DirectoryEntry, at: Timestamp) -> Result<(), StoreError> {
    let before: Option<(i64, Role)> = c
        .prepare_cached("SELECT id, role FROM users WHERE name = ?1 AND source = 'directory'")?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    match before {
        Some((id, old)) => {
            c.prepare_cached("UPDATE users SET role = ?2, directory_dn = ?3 WHERE id = ?1")?
                .execute(params![id, entry.role, entry.dn])?;
            if old != entry.role {
                audit_in(c, name, "directory_role", &format!("{} -> {}", old.as_str(), entry.role.as_str()), None)?;
            }
        }
        None => {
            c.prepare_cached(
                "INSERT INTO users (name, password_hash, role, created_at, source, directory_dn)
                 VALUES (?1, '', ?2, ?3, 'directory', ?4)",
            )?
            .execute(params![name, entry.role, at.unix(), entry.dn])?;
            audit_in(c, name, "directory_user", &format!("first login, {}", entry.role.as_str()), None)?;
        }
    }
    Ok(())
}

/// A new API token for `user`, unless they are disabled.
fn token_in(
    c: &Connection,
    hash: &str,
    user: &str,
    label: &str,
    by: &str,
    at: Timestamp,
) -> Result<Value, AccountError> {
    let found: Option<(i64, bool)> = c
        .prepare_cached("SELECT id, disabled FROM users WHERE name = ?1")?
        .query_row([user], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let uid = match found {
        None => return Err(AccountError::NoSuchUser(user.to_string())),
        Some((_, true)) => return Err(AccountError::Disabled(user.to_string())),
        Some((id, false)) => id,
    };
    c.prepare_cached("INSERT INTO api_tokens (token_hash, label, user_id, created_at) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![hash, label, uid, at.unix()])?;
    let id = c.last_insert_rowid();
    audit_in(c, by, "token_created", &format!("{id} ({label}) for {user}"), None)?;
    Ok(json!({"id": id}))
}
