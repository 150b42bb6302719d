//! People and machines that use the HMI and the API: users with argon2id password
//! hashes and a role, session cookies, bearer tokens, login locks ([`lockout`]), and the
//! security audit log.
//!
//! Secrets (passwords, session and API tokens) are never stored or logged: passwords
//! as argon2id PHC strings, tokens as their SHA-256.

pub mod directory;
pub mod lockout;

use std::time::Duration;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use crate::domain::UserSource as Source;
use crate::domain::{Role, Timestamp};
use crate::store::{Store, StoreError};
use crate::support::{hex, random_bytes};

/// A session lasts at most a long shift, and ends sooner when idle (`web.session_idle_minutes`).
pub const SESSION_MAX_SECS: i64 = 14 * 3600;
const MIN_PASSWORD_CHARS: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub role: Role,
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("{0}")]
    Invalid(String),
    /// A password given to confirm a change is not the user's (HTTP 403).
    #[error("the current password is wrong; nothing was changed")]
    WrongPassword,
    #[error("a user named {0} already exists")]
    Exists(String),
    #[error("no user named {0}; list users with `twinops user list` or GET /api/users")]
    NoSuchUser(String),
    #[error("no API token {0}; list tokens with `twinops token list` or GET /api/tokens")]
    NoSuchToken(i64),
    #[error(
        "{0} is disabled: a token for them would not work; enable them first (`twinops user enable {0}`, or Enable in the Account tab)"
    )]
    Disabled(String),
    #[error("{0} is the only admin left, and would leave nobody able to manage users; make another user admin first")]
    LastAdmin(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for AccountError {
    fn from(e: rusqlite::Error) -> Self {
        AccountError::Store(e.into())
    }
}

/// argon2id with OWASP's minimum: 19 MiB, 2 passes, 1 lane.
fn argon2() -> Argon2<'static> {
    Argon2::new(Algorithm::Argon2id, Version::V0x13, Params::new(19 * 1024, 2, 1, None).expect("valid argon2 params"))
}

pub fn hash_password(password: &str) -> String {
    let salt = SaltString::encode_b64(&random_bytes::<16>()).expect("16 bytes make a salt");
    argon2().hash_password(password.as_bytes(), &salt).expect("argon2id hashes any password").to_string()
}

fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
}

fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// A fresh secret: 256 random bits, hex.
pub fn new_secret() -> String {
    hex(&random_bytes::<32>())
}

/// Checks a user name: 2 to 40 of a-z, 0-9, `.`, `_`, `-`.
pub fn check_name(name: &str) -> Result<(), AccountError> {
    let ok = (2..=40).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(AccountError::Invalid(format!(
            "user name '{name}': use 2 to 40 lowercase letters, digits, '.', '_' or '-' (e.g. operator.kaur)"
        )))
    }
}

/// The one spelling of a name typed at login: blanks around it dropped, Unicode
/// compatibility forms folded (NFKC: a full-width `ｎｓａｔｏ` is `nsato`) and lower case,
/// as directories compare names. Local names are lower-case ASCII already
/// ([`check_name`]), so this is the account's own name; the login locks, the lookup and
/// the directory all see this form, and no change of case walks around a lock.
pub fn account_name(typed: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    typed.trim().nfkc().flat_map(char::to_lowercase).collect::<String>().trim().to_string()
}

/// Checks a new password's length, and hashes it.
fn new_password_hash(password: &str) -> Result<String, AccountError> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AccountError::Invalid(format!(
            "the password must be at least {MIN_PASSWORD_CHARS} characters; a passphrase of a few words is easiest"
        )));
    }
    Ok(hash_password(password))
}

/// Adds a user. `by` is who did it, for the audit log.
pub fn add_user(store: &Store, name: &str, role: Role, password: &str, by: &str) -> Result<User, AccountError> {
    check_name(name)?;
    let hash = new_password_hash(password)?;
    let (name, by) = (name.to_string(), by.to_string());
    store.writer().call(move |c| {
        let inserted = c
            .prepare_cached(
                "INSERT INTO users (name, password_hash, role, created_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO NOTHING",
            )?
            .execute(params![name, hash, role, Timestamp::now().unix()])?;
        if inserted == 0 {
            return Err(AccountError::Exists(name));
        }
        let id = c.last_insert_rowid();
        audit_in(c, &by, "user_added", &format!("{name} as {role}"), None)?;
        Ok(User { id, name, role })
    })
}

pub fn user_count(store: &Store) -> Result<i64, StoreError> {
    Ok(store.read()?.query_row("SELECT count(*) FROM users WHERE disabled = 0", [], |r| r.get(0))?)
}

/// A user as an administrator sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    pub name: String,
    pub role: Role,
    /// A disabled user cannot log in, and their sessions and tokens no longer work.
    pub disabled: bool,
    pub created_at: Timestamp,
    /// API tokens not revoked.
    pub live_tokens: i64,
    /// Locks on this name in force ([`lockout`]).
    pub locks: Vec<lockout::Lock>,
    /// Local, or from the directory (whose groups give the role).
    pub source: Source,
}

/// Every user, disabled ones included, by name.
pub fn accounts(store: &Store) -> Result<Vec<Account>, StoreError> {
    let db = store.read()?;
    let mut stmt = db.prepare_cached(
        "SELECT name, role, disabled, created_at,
                (SELECT count(*) FROM api_tokens t WHERE t.user_id = u.id AND t.revoked = 0), source
         FROM users u ORDER BY name",
    )?;
    let locks = lockout::locks(&db, Timestamp::now())?;
    let rows = stmt.query_map([], |r| {
        let name: String = r.get(0)?;
        Ok(Account {
            locks: locks.iter().filter(|l| l.name.as_ref() == Some(&name)).cloned().collect(),
            name,
            role: r.get(1)?,
            disabled: r.get(2)?,
            created_at: Timestamp::from_unix(r.get(3)?),
            live_tokens: r.get(4)?,
            source: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What an administrator may change about a user.
#[derive(Debug, Clone)]
pub enum Change {
    Role(Role),
    /// A new password (a reset): the user's sessions end.
    Password(String),
    /// The user can no longer log in; their sessions end, their tokens stop working.
    Disable,
    Enable,
    /// Lift the locks on the name: its failed logins no longer count.
    Unlock,
}

/// Changes a user, journalled in the audit log as done by `by`. Refuses to leave no
/// enabled admin, once there has been one.
pub fn change_user(store: &Store, name: &str, change: Change, by: &str) -> Result<(), AccountError> {
    let hash = match &change {
        Change::Password(p) => Some(new_password_hash(p)?),
        _ => None,
    };
    let (name, by) = (account_name(name), by.to_string());
    store.writer().call(move |c| {
        let row: Option<(i64, Role, bool, Source)> = c
            .prepare_cached("SELECT id, role, disabled, source FROM users WHERE name = ?1")?
            .query_row([&name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let (id, role, disabled, source) = row.ok_or_else(|| AccountError::NoSuchUser(name.clone()))?;
        if source == Source::Directory && matches!(change, Change::Role(_) | Change::Password(_)) {
            return Err(AccountError::Invalid(format!(
                "{name} logs in with the directory, which owns their password and role: change them there \
                 (the role follows the directory groups at the next login, or within directory.recheck_secs)"
            )));
        }
        let demotes = match change {
            Change::Disable => true,
            Change::Role(new) => new != Role::Admin,
            Change::Password(_) | Change::Enable | Change::Unlock => false,
        };
        if role == Role::Admin && !disabled && demotes {
            let admins: i64 =
                c.query_row("SELECT count(*) FROM users WHERE role = 'admin' AND disabled = 0", [], |r| r.get(0))?;
            if admins == 1 {
                return Err(AccountError::LastAdmin(name));
            }
        }
        let (action, detail) = match change {
            Change::Role(new) => {
                c.prepare_cached("UPDATE users SET role = ?2 WHERE id = ?1")?.execute(params![id, new])?;
                ("user_role_changed", format!("{name}: {role} to {new}"))
            }
            Change::Password(_) => {
                set_password_in(c, id, hash.as_deref().expect("hashed above"), "")?;
                let detail = match lockout::unlock(c, &name)? {
                    0 => name.clone(),
                    cleared => format!("{name}; {cleared} failed logins cleared"),
                };
                ("password_set", detail)
            }
            Change::Unlock => {
                let cleared = lockout::unlock(c, &name)?;
                ("user_unlocked", format!("{name}: {cleared} failed logins cleared"))
            }
            Change::Disable => {
                c.prepare_cached("UPDATE users SET disabled = 1 WHERE id = ?1")?.execute([id])?;
                c.prepare_cached("DELETE FROM sessions WHERE user_id = ?1")?.execute([id])?;
                ("user_disabled", name.clone())
            }
            Change::Enable => {
                c.prepare_cached("UPDATE users SET disabled = 0 WHERE id = ?1")?.execute([id])?;
                ("user_enabled", name.clone())
            }
        };
        audit_in(c, &by, action, &detail, None)?;
        Ok(())
    })
}

/// A user's own password change: the current password must be right. Their other
/// sessions end; the one given as `keep` (the caller's) stays.
pub fn change_own_password(
    store: &Store,
    user: &User,
    current: &str,
    new: &str,
    keep: Option<&str>,
) -> Result<(), AccountError> {
    let phc: String =
        store.read()?.query_row("SELECT password_hash FROM users WHERE id = ?1", [user.id], |r| r.get(0))?;
    if !verify_password(current, &phc) {
        audit(store, &user.name, "password_change_refused", "wrong current password", None)?;
        return Err(AccountError::WrongPassword);
    }
    let hash = new_password_hash(new)?;
    let (id, name, keep) = (user.id, user.name.clone(), keep.map(sha256_hex).unwrap_or_default());
    store.writer().call(move |c| {
        set_password_in(c, id, &hash, &keep)?;
        Ok::<_, AccountError>(audit_in(c, &name, "password_changed", "", None)?)
    })
}

/// Sets a user's password hash and ends their sessions, all but the one whose token
/// hashes to `keep` (none when empty).
fn set_password_in(c: &Connection, id: i64, hash: &str, keep: &str) -> rusqlite::Result<()> {
    c.prepare_cached("UPDATE users SET password_hash = ?2 WHERE id = ?1")?.execute(params![id, hash])?;
    c.prepare_cached("DELETE FROM sessions WHERE user_id = ?1 AND token_hash != ?2")?.execute(params![id, keep])?;
    Ok(())
}

/// Appends to the security audit log.
pub fn audit(store: &Store, actor: &str, action: &str, detail: &str, address: Option<&str>) -> Result<(), StoreError> {
    let (actor, action, detail, address) =
        (actor.to_string(), action.to_string(), detail.to_string(), address.map(str::to_string));
    store.writer().call(move |c| Ok(audit_in(c, &actor, &action, &detail, address.as_deref())?))
}

pub(crate) fn audit_in(
    c: &Connection,
    actor: &str,
    action: &str,
    detail: &str,
    address: Option<&str>,
) -> rusqlite::Result<()> {
    c.prepare_cached("INSERT INTO audit_log (at, actor, action, detail, address) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![Timestamp::now().unix(), actor, action, detail, address])?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("wrong user name or password")]
    Wrong,
    #[error("too many failed logins; try again in {} minutes, or ask an administrator to unlock the account (`twinops user unlock NAME`, or Unlock in the Account tab)", .0.as_secs().div_ceil(60))]
    Limited(Duration),
    /// A directory user whose password is right, in no group mapped to a role.
    #[error("{0}; ask the directory's administrators for a group that gives access to twinops")]
    NoRole(String),
    /// The directory did not answer: directory users cannot log in now, local ones can.
    #[error(
        "the directory does not answer, so directory accounts cannot log in now (local accounts can); try again later"
    )]
    DirectoryDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a password and, if right, starts a session. Returns the user and the new
/// session token (the cookie value). A local user is checked against their hash; any
/// other name, when a directory is configured, against the directory ([`directory`]).
/// The name is taken in its one spelling ([`account_name`]) before anything else, so
/// a locked account is locked however it is typed, and never tried against the
/// directory. Failures count towards the locks of [`lockout`]; a user that does not
/// exist costs the same hash as one that does.
pub fn login(
    store: &Store,
    dir: Option<&directory::Directory>,
    name: &str,
    password: &str,
    address: &str,
) -> Result<(User, String), LoginError> {
    let name = &account_name(name);
    let now = Timestamp::now();
    if let Some(lock) = lockout::lock_on(&*store.read()?, name, address, now).map_err(StoreError::from)? {
        audit(store, name, "login_refused", &lock.to_string(), Some(address))?;
        return Err(LoginError::Limited(Duration::from_secs((lock.until.unix() - now.unix()).max(1) as u64)));
    }
    let local: Option<(i64, String, Role, String)> = store
        .read()?
        .query_row(
            "SELECT id, name, role, password_hash FROM users WHERE name = ?1 AND disabled = 0 AND source = 'local'",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .map_err(StoreError::from)?;
    if let (None, Some(dir)) = (&local, dir) {
        return directory_login(store, dir, name, password, address);
    }
    // A fixed hash to verify against when the user does not exist, so timing does not
    // tell which names exist.
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let phc = local.as_ref().map(|r| r.3.clone()).unwrap_or_else(|| DUMMY.get_or_init(|| hash_password("x")).clone());
    let ok = verify_password(password, &phc) && local.is_some();
    let Some((id, name, role, _)) = local.filter(|_| ok) else {
        failed(store, name, address, now)?;
        return Err(LoginError::Wrong);
    };
    let token = start_session(store, id, &name, Source::Local, address)?;
    Ok((User { id, name, role }, token))
}

/// A failed login: audited, and counted towards the locks.
fn failed(store: &Store, name: &str, address: &str, now: Timestamp) -> Result<(), StoreError> {
    let (tried, addr) = (name.to_string(), address.to_string());
    store.writer().call(move |c| {
        audit_in(c, &tried, "login_failed", "", Some(&addr))?;
        for lock in lockout::fail(c, &tried, &addr, now)? {
            tracing::warn!(stage = "web", %lock, "failed logins locked a login; `twinops user unlock NAME` lifts it");
            audit_in(c, &tried, "login_locked", &lock.to_string(), Some(&addr))?;
        }
        Ok::<_, StoreError>(())
    })
}

/// A new session for user `id`; returns its token (the cookie value).
fn start_session(store: &Store, id: i64, name: &str, source: Source, address: &str) -> Result<String, StoreError> {
    let token = new_secret();
    let (hash, now) = (sha256_hex(&token), Timestamp::now().unix());
    let (actor, addr) = (name.to_string(), address.to_string());
    store.writer().call(move |c| {
        c.prepare_cached(
            "INSERT INTO sessions (token_hash, user_id, created_at, last_seen_at, expires_at, source)
             VALUES (?1, ?2, ?3, ?3, ?4, ?5)",
        )?
        .execute(params![hash, id, now, now + SESSION_MAX_SECS, source])?;
        lockout::succeeded(c, &actor, &addr)?;
        let detail = if source == Source::Directory { "from the directory" } else { "" };
        Ok::<_, StoreError>(audit_in(c, &actor, "login", detail, Some(&addr))?)
    })?;
    Ok(token)
}

/// A login for a name that is not a local user's (in its [`account_name`] spelling):
/// the directory checks the password and gives the role; the user's row is made or
/// updated to match.
fn directory_login(
    store: &Store,
    dir: &directory::Directory,
    name: &str,
    password: &str,
    address: &str,
) -> Result<(User, String), LoginError> {
    use directory::DirectoryError;
    let name = name.to_string();
    let now = Timestamp::now();
    let (dn, role) = match directory::block_on(dir.authenticate(&name, password)) {
        Ok(found) => found,
        Err(DirectoryError::Wrong) => {
            failed(store, &name, address, now)?;
            return Err(LoginError::Wrong);
        }
        Err(e @ DirectoryError::NoRole { .. }) => {
            audit(store, &name, "login_refused", "in no directory group mapped to a role", Some(address))?;
            end_directory_access(store, &name, "in no directory group mapped to a role")?;
            return Err(LoginError::NoRole(e.to_string()));
        }
        Err(e) => {
            tracing::warn!(stage = "directory", error = %e, "a directory login could not be checked");
            audit(store, &name, "login_refused", "the directory did not answer", Some(address))?;
            return Err(LoginError::DirectoryDown);
        }
    };
    let (user, by) = (name.clone(), name.clone());
    let found: Option<(i64, bool)> = store.writer().call(move |c| {
        let before: Option<(i64, Role, bool)> = c
            .prepare_cached("SELECT id, role, disabled FROM users WHERE name = ?1 AND source = 'directory'")?
            .query_row([&user], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        match before {
            Some((id, old, disabled)) => {
                c.prepare_cached("UPDATE users SET role = ?2, directory_dn = ?3 WHERE id = ?1")?
                    .execute(params![id, role, dn])?;
                if old != role {
                    audit_in(c, &by, "directory_role", &format!("{} -> {}", old.as_str(), role.as_str()), None)?;
                }
                Ok::<_, StoreError>(Some((id, disabled)))
            }
            None => {
                c.prepare_cached(
                    "INSERT INTO users (name, password_hash, role, created_at, source, directory_dn)
                     VALUES (?1, '', ?2, ?3, 'directory', ?4)",
                )?
                .execute(params![user, role, now.unix(), dn])?;
                let id = c.last_insert_rowid();
                audit_in(c, &by, "directory_user", &format!("first login, {}", role.as_str()), None)?;
                Ok(Some((id, false)))
            }
        }
    })?;
    // Disabled in twinops by an administrator: the directory's word does not lift it.
    let Some((id, false)) = found else {
        failed(store, &name, address, now)?;
        return Err(LoginError::Wrong);
    };
    let token = start_session(store, id, &name, Source::Directory, address)?;
    Ok((User { id, name, role }, token))
}

/// Reads again the role of every directory user with a live session or token: a changed
/// role is taken (audited), a user the directory no longer gives one loses their
/// sessions and tokens ([`end_directory_access`]). Returns how many were checked and
/// how many lost access. An unreachable directory changes nothing (live sessions keep
/// working) and is the error.
pub async fn recheck_directory_users(
    store: &Store,
    dir: &directory::Directory,
) -> Result<(usize, usize), directory::DirectoryError> {
    let now = Timestamp::now().unix();
    let users: Vec<(String, Role)> = {
        let db = store.read()?;
        let mut stmt = db
            .prepare_cached(
                "SELECT name, role FROM users u WHERE source = 'directory' AND disabled = 0
                   AND (EXISTS (SELECT 1 FROM sessions s WHERE s.user_id = u.id AND s.expires_at > ?1)
                        OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.user_id = u.id AND t.revoked = 0))
                 ORDER BY name",
            )
            .map_err(StoreError::from)?;
        let rows = stmt.query_map([now], |r| Ok((r.get(0)?, r.get(1)?))).map_err(StoreError::from)?;
        rows.collect::<Result<_, _>>().map_err(StoreError::from)?
    };
    let names: Vec<String> = users.iter().map(|(n, _)| n.clone()).collect();
    let now_in = dir.users(&names).await?;
    let mut ended = 0;
    for ((name, old), found) in users.iter().zip(now_in) {
        match found.and_then(|u| u.role) {
            Some(role) if role != *old => {
                let (n, detail) = (name.clone(), format!("{} -> {}", old.as_str(), role.as_str()));
                store.writer().call(move |c| {
                    c.prepare_cached("UPDATE users SET role = ?2 WHERE name = ?1 AND source = 'directory'")?
                        .execute(params![n, role])?;
                    Ok::<_, StoreError>(audit_in(c, "directory", "directory_role", &format!("{n}: {detail}"), None)?)
                })?;
            }
            Some(_) => {}
            None => {
                let why = "no longer in the directory, or in none of its groups mapped to a role";
                ended += usize::from(end_directory_access(store, name, why)?);
            }
        }
    }
    Ok((users.len(), ended))
}

/// Local users whose name the directory also has: a configuration error (which of the
/// two would log in?), reported at start. Local ones win at login meanwhile.
pub async fn directory_conflicts(
    store: &Store,
    dir: &directory::Directory,
) -> Result<Vec<String>, directory::DirectoryError> {
    let names: Vec<String> = {
        let db = store.read()?;
        let mut stmt = db
            .prepare_cached("SELECT name FROM users WHERE source = 'local' ORDER BY name")
            .map_err(StoreError::from)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(StoreError::from)?;
        rows.collect::<Result<_, _>>().map_err(StoreError::from)?
    };
    let found = dir.users(&names).await?;
    Ok(names.into_iter().zip(found).filter(|(_, u)| u.is_some()).map(|(n, _)| n).collect())
}

/// A directory user the directory no longer gives a role: their sessions end and their
/// tokens are revoked, audited with `why`.
pub fn end_directory_access(store: &Store, name: &str, why: &str) -> Result<bool, StoreError> {
    let (name, why) = (name.to_string(), why.to_string());
    store.writer().call(move |c| {
        let Some(id): Option<i64> = c
            .prepare_cached("SELECT id FROM users WHERE name = ?1 AND source = 'directory'")?
            .query_row([&name], |r| r.get(0))
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
        Ok::<_, StoreError>(sessions + tokens > 0)
    })
}

/// The user of a live session: not expired, not idle longer than `idle`. Touches it
/// (at most once a minute) so activity keeps it alive.
pub fn session_user(store: &Store, token: &str, idle: Duration) -> Result<Option<User>, StoreError> {
    let hash = sha256_hex(token);
    let now = Timestamp::now().unix();
    let row: Option<(User, i64)> = store
        .read()?
        .query_row(
            "SELECT u.id, u.name, u.role, s.last_seen_at FROM sessions s JOIN users u ON u.id = s.user_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND u.disabled = 0",
            params![hash, now],
            |r| Ok((User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }, r.get(3)?)),
        )
        .optional()?;
    let Some((user, last_seen)) = row else { return Ok(None) };
    if now - last_seen > idle.as_secs() as i64 {
        end_session(store, token)?;
        return Ok(None);
    }
    if now - last_seen >= 60 {
        store.writer().call(move |c| {
            Ok::<_, StoreError>(
                c.prepare_cached("UPDATE sessions SET last_seen_at = ?2 WHERE token_hash = ?1")?
                    .execute(params![hash, now])?,
            )
        })?;
    }
    Ok(Some(user))
}

/// Ends a session; its cookie no longer works.
pub fn end_session(store: &Store, token: &str) -> Result<(), StoreError> {
    let hash = sha256_hex(token);
    store.writer().call(move |c| {
        c.prepare_cached("DELETE FROM sessions WHERE token_hash = ?1")?.execute([hash])?;
        Ok::<_, StoreError>(())
    })
}

/// Creates an API token for `user`, labelled; returns it (shown once, stored hashed).
/// `by` is who did it, for the audit log.
/// A new API token for `user`: its id (to revoke it by) and the token, shown once.
pub fn create_token(store: &Store, user: &str, label: &str, by: &str) -> Result<(i64, String), AccountError> {
    let token = format!("tw_{}", new_secret());
    let (hash, user, label, by) = (sha256_hex(&token), user.to_string(), label.to_string(), by.to_string());
    let id = store.writer().call(move |c| {
        let found: Option<(i64, bool)> = c
            .prepare_cached("SELECT id, disabled FROM users WHERE name = ?1")?
            .query_row([&user], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let id = match found {
            None => return Err(AccountError::NoSuchUser(user)),
            Some((_, true)) => return Err(AccountError::Disabled(user)),
            Some((id, false)) => id,
        };
        c.prepare_cached("INSERT INTO api_tokens (token_hash, label, user_id, created_at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![hash, label, id, Timestamp::now().unix()])?;
        let id = c.last_insert_rowid();
        audit_in(c, &by, "token_created", &format!("{id} ({label}) for {user}"), None)?;
        Ok::<_, AccountError>(id)
    })?;
    Ok((id, token))
}

/// The user an API token belongs to, if it is valid. Notes its use (at most once a
/// minute), so that `token list` shows which tokens are still in use.
pub fn token_user(store: &Store, token: &str) -> Result<Option<User>, StoreError> {
    let now = Timestamp::now().unix();
    let row: Option<(User, i64, Option<i64>)> = store
        .read()?
        .query_row(
            "SELECT u.id, u.name, u.role, t.id, t.last_used_at FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = ?1 AND t.revoked = 0 AND u.disabled = 0",
            [sha256_hex(token)],
            |r| Ok((User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }, r.get(3)?, r.get(4)?)),
        )
        .optional()?;
    let Some((user, id, last_used)) = row else { return Ok(None) };
    if last_used.is_none_or(|t| now - t >= 60) {
        store.writer().call(move |c| {
            Ok::<_, StoreError>(
                c.prepare_cached("UPDATE api_tokens SET last_used_at = ?2 WHERE id = ?1")?.execute(params![id, now])?,
            )
        })?;
    }
    Ok(Some(user))
}

/// An API token as an administrator sees it (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub id: i64,
    pub label: String,
    pub user: String,
    pub created_at: Timestamp,
    pub last_used_at: Option<Timestamp>,
    pub revoked: bool,
}

/// Every API token, newest first.
pub fn tokens(store: &Store) -> Result<Vec<TokenInfo>, StoreError> {
    let db = store.read()?;
    let mut stmt = db.prepare_cached(
        "SELECT t.id, t.label, u.name, t.created_at, t.last_used_at, t.revoked
         FROM api_tokens t JOIN users u ON u.id = t.user_id ORDER BY t.id DESC",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(TokenInfo {
            id: r.get(0)?,
            label: r.get(1)?,
            user: r.get(2)?,
            created_at: Timestamp::from_unix(r.get(3)?),
            last_used_at: r.get::<_, Option<i64>>(4)?.map(Timestamp::from_unix),
            revoked: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Revokes an API token for good; revoking it again changes nothing.
pub fn revoke_token(store: &Store, id: i64, by: &str) -> Result<(), AccountError> {
    let by = by.to_string();
    store.writer().call(move |c| {
        let found: Option<(String, String, bool)> = c
            .prepare_cached(
                "SELECT t.label, u.name, t.revoked FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.id = ?1",
            )?
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let (label, user, revoked) = found.ok_or(AccountError::NoSuchToken(id))?;
        if !revoked {
            c.prepare_cached("UPDATE api_tokens SET revoked = 1 WHERE id = ?1")?.execute([id])?;
            audit_in(c, &by, "token_revoked", &format!("{id} ({label}) of {user}"), None)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argon2id_with_at_least_the_owasp_minimum() {
        let phc = hash_password("correct horse battery");
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify_password("correct horse battery", &phc));
        assert!(!verify_password("correct horse battery!", &phc));
        assert_ne!(phc, hash_password("correct horse battery"), "salted");
    }
}
