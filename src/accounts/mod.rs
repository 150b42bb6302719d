//! People and machines that use the HMI and the API: users with argon2id password
//! hashes and a role, session cookies, bearer tokens, login locks ([`lockout`]), and the
//! security audit log.
//!
//! Secrets (passwords, session and API tokens) are never stored or logged: passwords
//! as argon2id PHC strings, tokens as their SHA-256.

pub mod changes;
pub mod directory;
pub mod lockout;

use std::time::Duration;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::domain::UserSource as Source;
use crate::domain::{Role, Timestamp};
use crate::store::{Store, StoreError};
use crate::support::{hex, random_bytes};
pub use changes::{AccountOp, Change, perform, status_of};

/// A session lasts at most a long shift, and ends sooner when idle (`web.session_idle_minutes`).
pub const SESSION_MAX_SECS: i64 = 14 * 3600;
const MIN_PASSWORD_CHARS: usize = 12;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Of a redundant pair: its decision log did not carry the change, or this node
    /// refused it there (the HTTP status, and why).
    #[error("{1}")]
    Pair(u16, String),
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
    let added = perform(store, &AccountOp::add_user(name, role, password)?, by)?;
    serde_json::from_value(added).map_err(|e| AccountError::Invalid(e.to_string()))
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

/// Changes a user, journalled in the audit log as done by `by`. Refuses to leave no
/// enabled admin, once there has been one.
pub fn change_user(store: &Store, name: &str, change: Change, by: &str) -> Result<(), AccountError> {
    perform(store, &AccountOp::change(name, change), by).map(drop)
}

/// A user's own password change: the current password must be right. Their other
/// sessions end; the one given as `keep` (the caller's cookie) stays.
pub fn change_own_password(
    store: &Store,
    user: &User,
    current: &str,
    new: &str,
    keep: Option<&str>,
) -> Result<(), AccountError> {
    perform(store, &own_password(store, user, current, new, keep)?, &user.name).map(drop)
}

/// The change of [`change_own_password`], once the current password is checked (a
/// wrong one is audited here).
pub fn own_password(
    store: &Store,
    user: &User,
    current: &str,
    new: &str,
    keep: Option<&str>,
) -> Result<AccountOp, AccountError> {
    let phc: String =
        store.read()?.query_row("SELECT password_hash FROM users WHERE id = ?1", [user.id], |r| r.get(0))?;
    if !verify_password(current, &phc) {
        audit(store, &user.name, "password_change_refused", "wrong current password", None)?;
        return Err(AccountError::WrongPassword);
    }
    let keep = keep.map(sha256_hex).unwrap_or_default();
    Ok(AccountOp::OwnPassword { name: user.name.clone(), password_hash: new_password_hash(new)?, keep })
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
    /// Of a redundant pair: the decision log did not carry the login (why).
    #[error("{0}; try again in a few seconds")]
    NotShared(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A login that passed: the change that starts its session, and the session's token
/// (the cookie value, never in the change).
pub struct Admitted {
    pub op: AccountOp,
    pub token: String,
}

/// A login refused: why, and the failed login to count towards the locks, when it is one.
pub struct Refused {
    pub error: LoginError,
    pub failure: Option<Box<AccountOp>>,
}

impl From<StoreError> for Refused {
    fn from(e: StoreError) -> Self {
        Refused { error: LoginError::Store(e), failure: None }
    }
}

impl From<rusqlite::Error> for Refused {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::from(e).into()
    }
}

/// Checks a password and, if right, starts a session at once. Returns the user and the
/// new session token (the cookie value).
pub fn login(
    store: &Store,
    dir: Option<&directory::Directory>,
    name: &str,
    password: &str,
    address: &str,
) -> Result<(User, String), LoginError> {
    login_with(store, dir, name, password, address, |op, by| perform(store, op, by))
}

/// [`login`], its changes (the session, or the failure) made by `apply`: at once, or
/// through a redundant pair's decision log.
pub fn login_with(
    store: &Store,
    dir: Option<&directory::Directory>,
    name: &str,
    password: &str,
    address: &str,
    apply: impl Fn(&AccountOp, &str) -> Result<serde_json::Value, AccountError>,
) -> Result<(User, String), LoginError> {
    let name = &account_name(name);
    let refused = |e: AccountError| match e {
        AccountError::Store(e) => LoginError::Store(e),
        AccountError::Pair(503 | 504, why) => LoginError::NotShared(why),
        // Disabled or removed between the check and the session.
        _ => LoginError::Wrong,
    };
    match admit(store, dir, name, password, address) {
        Ok(Admitted { op, token }) => {
            let user = apply(&op, name).map_err(refused)?;
            Ok((serde_json::from_value(user).map_err(|_| LoginError::Wrong)?, token))
        }
        Err(Refused { error, failure }) => {
            if let Some(failure) = failure {
                apply(&failure, name).map_err(refused)?;
            }
            Err(error)
        }
    }
}

/// Checks a password. A local user is checked against their hash; any other name, when
/// a directory is configured, against the directory ([`directory`]). The name is taken
/// in its one spelling ([`account_name`]) before anything else, so a locked account is
/// locked however it is typed, and never tried against the directory. A user that does
/// not exist costs the same hash as one that does. Changes nothing but the audit log:
/// the session, or the failure, is the caller's to make.
pub fn admit(
    store: &Store,
    dir: Option<&directory::Directory>,
    name: &str,
    password: &str,
    address: &str,
) -> Result<Admitted, Refused> {
    let name = &account_name(name);
    let now = Timestamp::now();
    if let Some(lock) = lockout::lock_on(&*store.read()?, name, address, now)? {
        audit(store, name, "login_refused", &lock.to_string(), Some(address))?;
        let wait = Duration::from_secs((lock.until.unix() - now.unix()).max(1) as u64);
        return Err(Refused { error: LoginError::Limited(wait), failure: None });
    }
    let local: Option<String> = store
        .read()?
        .query_row(
            "SELECT password_hash FROM users WHERE name = ?1 AND disabled = 0 AND source = 'local'",
            [name],
            |r| r.get(0),
        )
        .optional()?;
    if let (None, Some(dir)) = (&local, dir) {
        return directory_admit(store, dir, name, password, address);
    }
    // A fixed hash to verify against when the user does not exist, so timing does not
    // tell which names exist.
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let phc = local.clone().unwrap_or_else(|| DUMMY.get_or_init(|| hash_password("x")).clone());
    if !(verify_password(password, &phc) && local.is_some()) {
        return Err(wrong(name, address));
    }
    Ok(session(name, address, None))
}

/// A wrong password (or user): refused, and counted.
fn wrong(name: &str, address: &str) -> Refused {
    let failure = AccountOp::Failed { name: name.to_string(), address: address.to_string() };
    Refused { error: LoginError::Wrong, failure: Some(Box::new(failure)) }
}

/// A new session for `name`, with a fresh token.
fn session(name: &str, address: &str, directory: Option<changes::DirectoryEntry>) -> Admitted {
    let token = new_secret();
    let op = AccountOp::Login { token_hash: sha256_hex(&token), name: name.into(), address: address.into(), directory };
    Admitted { op, token }
}

/// A login for a name that is not a local user's (in its [`account_name`] spelling):
/// the directory checks the password and gives the role; the session's change makes
/// or updates the user's row to match.
fn directory_admit(
    store: &Store,
    dir: &directory::Directory,
    name: &str,
    password: &str,
    address: &str,
) -> Result<Admitted, Refused> {
    use directory::DirectoryError;
    let refuse = |error| Err(Refused { error, failure: None });
    let (dn, role) = match directory::block_on(dir.authenticate(name, password)) {
        Ok(found) => found,
        Err(DirectoryError::Wrong) => return Err(wrong(name, address)),
        Err(e @ DirectoryError::NoRole { .. }) => {
            let why = "in no directory group mapped to a role";
            audit(store, name, "login_refused", why, Some(address))?;
            let failure = AccountOp::DirectoryAccess { name: name.into(), role: None, why: why.into() };
            return Err(Refused { error: LoginError::NoRole(e.to_string()), failure: Some(Box::new(failure)) });
        }
        Err(e) => {
            tracing::warn!(stage = "directory", error = %e, "a directory login could not be checked");
            audit(store, name, "login_refused", "the directory did not answer", Some(address))?;
            return refuse(LoginError::DirectoryDown);
        }
    };
    // Disabled in twinops by an administrator: the directory's word does not lift it.
    let disabled: bool = store
        .read()?
        .query_row("SELECT disabled FROM users WHERE name = ?1 AND source = 'directory'", [name], |r| r.get(0))
        .optional()?
        .unwrap_or(false);
    if disabled {
        return Err(wrong(name, address));
    }
    Ok(session(name, address, Some(changes::DirectoryEntry { dn, role })))
}

/// Reads again the role of every directory user with a live session or token, and
/// answers how many were checked and the changes the directory's answers call for
/// ([`AccountOp::DirectoryAccess`]): a changed role, or a user it no longer gives one
/// (who loses their sessions and tokens). An unreachable directory changes nothing
/// (live sessions keep working) and is the error.
pub async fn directory_changes(
    store: &Store,
    dir: &directory::Directory,
) -> Result<(usize, Vec<AccountOp>), directory::DirectoryError> {
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
    let why = "no longer in the directory, or in none of its groups mapped to a role";
    let changes = users
        .iter()
        .zip(now_in)
        .filter_map(|((name, old), found)| match found.and_then(|u| u.role) {
            Some(role) if role == *old => None,
            role => Some(AccountOp::DirectoryAccess { name: name.clone(), role, why: why.into() }),
        })
        .collect();
    Ok((users.len(), changes))
}

/// [`directory_changes`], applied on this node at once (a node alone); returns how many
/// users were checked and how many lost access.
pub async fn recheck_directory_users(
    store: &Store,
    dir: &directory::Directory,
) -> Result<(usize, usize), directory::DirectoryError> {
    let (checked, changes) = directory_changes(store, dir).await?;
    let mut ended = 0;
    for op in &changes {
        ended += usize::from(directory_change(store, op)?);
    }
    Ok((checked, ended))
}

/// Makes one of the [`directory_changes`] on this node at once; whether it ended
/// someone's access. Only the store can refuse what the directory says.
pub fn directory_change(store: &Store, op: &AccountOp) -> Result<bool, StoreError> {
    let done = perform(store, op, "directory");
    let ended = done.as_ref().is_ok_and(|v| v["ended"] == true);
    store_errors(done)?;
    Ok(ended)
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

/// The user of a live session: not expired, not idle longer than `idle`. Touches it
/// (at most once a minute) so activity keeps it alive.
pub fn session_user(store: &Store, token: &str, idle: Duration) -> Result<Option<User>, StoreError> {
    session_user_with(store, token, idle, |op| store_errors(perform(store, op, "twinops")))
}

/// [`session_user`], the touch (an [`AccountOp::Seen`]) made by `seen`: at once, or
/// through a redundant pair's decision log, so that the session is idle on neither node.
pub fn session_user_with(
    store: &Store,
    token: &str,
    idle: Duration,
    seen: impl FnOnce(&AccountOp) -> Result<(), StoreError>,
) -> Result<Option<User>, StoreError> {
    let now = Timestamp::now().unix();
    let row: Option<(User, i64)> = store
        .read()?
        .query_row(
            "SELECT u.id, u.name, u.role, s.last_seen_at FROM sessions s JOIN users u ON u.id = s.user_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND u.disabled = 0",
            params![sha256_hex(token), now],
            |r| Ok((User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }, r.get(3)?)),
        )
        .optional()?;
    let Some((user, last_seen)) = row else { return Ok(None) };
    if now - last_seen > idle.as_secs() as i64 {
        end_session(store, token)?;
        return Ok(None);
    }
    if now - last_seen >= 60 {
        seen(&AccountOp::seen(token))?;
    }
    Ok(Some(user))
}

/// Ends a session; its cookie no longer works.
pub fn end_session(store: &Store, token: &str) -> Result<(), StoreError> {
    store_errors(perform(store, &AccountOp::end_session(token, false), "twinops"))
}

/// The outcome of a change that cannot be refused for the caller's fault (a session
/// ended or used): only the store's errors count.
pub fn store_errors(done: Result<serde_json::Value, AccountError>) -> Result<(), StoreError> {
    match done {
        Err(AccountError::Store(e)) => Err(e),
        _ => Ok(()),
    }
}

/// A new API token for `user`, labelled: its id (to revoke it by) and the token, shown
/// once (only its hash is kept). `by` is who did it, for the audit log.
pub fn create_token(store: &Store, user: &str, label: &str, by: &str) -> Result<(i64, String), AccountError> {
    let (op, token) = AccountOp::token(user, label);
    let made = perform(store, &op, by)?;
    Ok((made["id"].as_i64().unwrap_or_default(), token))
}

/// The user an API token belongs to, if it is valid. Notes its use (at most once a
/// minute), so that `token list` shows which tokens are still in use.
pub fn token_user(store: &Store, token: &str) -> Result<Option<User>, StoreError> {
    token_user_with(store, token, |op| store_errors(perform(store, op, "twinops")))
}

/// [`token_user`], the use (an [`AccountOp::TokenUsed`]) noted by `used`: at once, or
/// through a redundant pair's decision log, so that both nodes show it.
pub fn token_user_with(
    store: &Store,
    token: &str,
    used: impl FnOnce(&AccountOp) -> Result<(), StoreError>,
) -> Result<Option<User>, StoreError> {
    let now = Timestamp::now().unix();
    let token_hash = sha256_hex(token);
    let row: Option<(User, Option<i64>)> = store
        .read()?
        .query_row(
            "SELECT u.id, u.name, u.role, t.last_used_at FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = ?1 AND t.revoked = 0 AND u.disabled = 0",
            [&token_hash],
            |r| Ok((User { id: r.get(0)?, name: r.get(1)?, role: r.get(2)? }, r.get(3)?)),
        )
        .optional()?;
    let Some((user, last_used)) = row else { return Ok(None) };
    if last_used.is_none_or(|t| now - t >= 60) {
        used(&AccountOp::TokenUsed { token_hash })?;
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
    perform(store, &AccountOp::revoke(store, id)?, by).map(drop)
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
