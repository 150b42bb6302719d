//! People and machines that use the HMI and the API: users with argon2id password
//! hashes and a role, session cookies, bearer tokens, login rate limits, and the
//! security audit log.
//!
//! Secrets (passwords, session and API tokens) are never stored or logged: passwords
//! as argon2id PHC strings, tokens as their SHA-256.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::domain::{Role, Timestamp};
use crate::rag::hex;
use crate::store::{Store, StoreError};

/// A session lasts at most a long shift, and ends sooner when idle (`web.session_idle_minutes`).
pub const SESSION_MAX_SECS: i64 = 14 * 3600;
/// Failed logins allowed per account, and per address, within [`FAILURE_WINDOW`].
pub const MAX_FAILURES_PER_ACCOUNT: usize = 5;
pub const MAX_FAILURES_PER_ADDRESS: usize = 20;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
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
    #[error("a user named {0} already exists")]
    Exists(String),
    #[error("no user named {0}; list users with `twinops user list`")]
    NoSuchUser(String),
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

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes
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

/// Adds a user. `by` is who did it, for the audit log.
pub fn add_user(store: &Store, name: &str, role: Role, password: &str, by: &str) -> Result<User, AccountError> {
    check_name(name)?;
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(AccountError::Invalid(format!(
            "the password must be at least {MIN_PASSWORD_CHARS} characters; a passphrase of a few words is easiest"
        )));
    }
    let hash = hash_password(password);
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

pub fn list_users(store: &Store) -> Result<Vec<User>, StoreError> {
    let db = store.read()?;
    let mut stmt = db.prepare_cached("SELECT id, name, role FROM users WHERE disabled = 0 ORDER BY name")?;
    let users = stmt.query_map([], |r| Ok(User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }))?;
    Ok(users.collect::<Result<_, _>>()?)
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

/// Failed logins, remembered per account and per address for [`FAILURE_WINDOW`].
#[derive(Default)]
pub struct LoginLimiter {
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginLimiter {
    /// How long until `key` may try again, if it is over `max` failures.
    fn wait(&self, key: &str, max: usize) -> Option<Duration> {
        let mut map = self.failures.lock().expect("limiter lock");
        let q = map.get_mut(key)?;
        while q.front().is_some_and(|t| t.elapsed() > FAILURE_WINDOW) {
            q.pop_front();
        }
        (q.len() >= max).then(|| FAILURE_WINDOW.saturating_sub(q.front().expect("non-empty").elapsed()))
    }

    fn fail(&self, key: String) {
        self.failures.lock().expect("limiter lock").entry(key).or_default().push_back(Instant::now());
    }

    fn clear(&self, key: &str) {
        self.failures.lock().expect("limiter lock").remove(key);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("wrong user name or password")]
    Wrong,
    #[error("too many failed logins; try again in {} minutes", .0.as_secs().div_ceil(60))]
    Limited(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a password and, if right, starts a session. Returns the user and the new
/// session token (the cookie value). Failures count against the account and the
/// address; a user that does not exist costs the same hash as one that does.
pub fn login(
    store: &Store,
    limiter: &LoginLimiter,
    name: &str,
    password: &str,
    address: &str,
) -> Result<(User, String), LoginError> {
    let (account_key, address_key) = (format!("user:{name}"), format!("addr:{address}"));
    if let Some(wait) =
        limiter.wait(&account_key, MAX_FAILURES_PER_ACCOUNT).or(limiter.wait(&address_key, MAX_FAILURES_PER_ADDRESS))
    {
        audit(store, name, "login_refused", "rate limited", Some(address))?;
        return Err(LoginError::Limited(wait));
    }
    let row: Option<(i64, String, Role, String)> = store
        .read()?
        .query_row("SELECT id, name, role, password_hash FROM users WHERE name = ?1 AND disabled = 0", [name], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
        .map_err(StoreError::from)?;
    // A fixed hash to verify against when the user does not exist, so timing does not
    // tell which names exist.
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let phc = row.as_ref().map(|r| r.3.clone()).unwrap_or_else(|| DUMMY.get_or_init(|| hash_password("x")).clone());
    let ok = verify_password(password, &phc) && row.is_some();
    let Some((id, name, role, _)) = row.filter(|_| ok) else {
        limiter.fail(account_key);
        limiter.fail(address_key);
        audit(store, name, "login_failed", "", Some(address))?;
        return Err(LoginError::Wrong);
    };
    limiter.clear(&account_key);
    let token = new_secret();
    let (hash, now) = (sha256_hex(&token), Timestamp::now().unix());
    let (actor, addr) = (name.clone(), address.to_string());
    store.writer().call(move |c| {
        c.prepare_cached(
            "INSERT INTO sessions (token_hash, user_id, created_at, last_seen_at, expires_at) VALUES (?1, ?2, ?3, ?3, ?4)",
        )?
        .execute(params![hash, id, now, now + SESSION_MAX_SECS])?;
        Ok::<_, StoreError>(audit_in(c, &actor, "login", "", Some(&addr))?)
    })?;
    Ok((User { id, name, role }, token))
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
pub fn create_token(store: &Store, user: &str, label: &str) -> Result<String, AccountError> {
    let token = format!("tw_{}", new_secret());
    let (hash, user, label) = (sha256_hex(&token), user.to_string(), label.to_string());
    store.writer().call(move |c| {
        let id: Option<i64> = c
            .prepare_cached("SELECT id FROM users WHERE name = ?1 AND disabled = 0")?
            .query_row([&user], |r| r.get(0))
            .optional()?;
        let id = id.ok_or_else(|| AccountError::NoSuchUser(user.clone()))?;
        c.prepare_cached("INSERT INTO api_tokens (token_hash, label, user_id, created_at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![hash, label, id, Timestamp::now().unix()])?;
        audit_in(c, &user, "token_created", &label, None)?;
        Ok::<_, AccountError>(())
    })?;
    Ok(token)
}

/// The user an API token belongs to, if it is valid.
pub fn token_user(store: &Store, token: &str) -> Result<Option<User>, StoreError> {
    Ok(store
        .read()?
        .query_row(
            "SELECT u.id, u.name, u.role FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = ?1 AND t.revoked = 0 AND u.disabled = 0",
            [sha256_hex(token)],
            |r| Ok(User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }),
        )
        .optional()?)
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

    #[test]
    fn the_limiter_counts_failures_in_the_window() {
        let l = LoginLimiter::default();
        for _ in 0..3 {
            l.fail("user:kaur".into());
        }
        assert!(l.wait("user:kaur", 3).is_some());
        assert!(l.wait("user:kaur", 4).is_none());
        l.clear("user:kaur");
        assert!(l.wait("user:kaur", 1).is_none());
    }
}
