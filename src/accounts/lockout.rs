//! Failed logins and the locks they cause, kept in the database: an admin sees and
//! lifts them from the CLI or the HMI, and a restart does not forget them.
//!
//! Three counts over the last [`WINDOW_SECS`], each a lock when it reaches its limit:
//! - one name from one address ([`PER_NAME_AND_ADDRESS`]): guesses from one place lock
//!   that place out of the account, not the account's owner at their own console, so
//!   nobody can keep a supervisor out by sending five guesses every quarter hour;
//! - one address, any names ([`PER_ADDRESS`]): a guesser going through accounts;
//! - one name from any address ([`PER_NAME`]): guessing spread over many addresses.
//!
//! A lock lasts until enough of its failures are older than the window. A right
//! password clears its name's failures from that address; `user unlock` and a password
//! reset clear all of the name's.

use std::collections::HashMap;

use rusqlite::{Connection, params};
use serde::Serialize;

use crate::domain::Timestamp;

/// How far back failures count.
pub const WINDOW_SECS: i64 = 15 * 60;
pub const PER_NAME_AND_ADDRESS: usize = 5;
pub const PER_ADDRESS: usize = 20;
pub const PER_NAME: usize = 50;

/// A lock in force: on a name from one address, on an address (any name), or on a name
/// (from anywhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lock {
    pub name: Option<String>,
    pub address: Option<String>,
    pub failures: usize,
    pub until: Timestamp,
}

impl Lock {
    /// The failures that make this kind of lock.
    fn limit(name: Option<&str>, address: Option<&str>) -> usize {
        match (name, address) {
            (Some(_), Some(_)) => PER_NAME_AND_ADDRESS,
            (None, _) => PER_ADDRESS,
            (Some(_), None) => PER_NAME,
        }
    }

    /// Whether it keeps `name` from logging in from `address`.
    fn holds(&self, name: &str, address: &str) -> bool {
        self.name.as_deref().is_none_or(|n| n == name) && self.address.as_deref().is_none_or(|a| a == address)
    }
}

impl std::fmt::Display for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let until = self.until.to_rfc3339();
        match (&self.name, &self.address) {
            (Some(n), Some(a)) => write!(f, "{n} locked for {a} until {until} ({} failed logins)", self.failures),
            (None, Some(a)) => write!(f, "address {a} locked until {until} ({} failed logins)", self.failures),
            (Some(n), None) => {
                write!(f, "{n} locked from every address until {until} ({} failed logins)", self.failures)
            }
            (None, None) => write!(f, "locked until {until}"),
        }
    }
}

/// Failures in the window, newest first: (name, address, at).
fn recent(c: &Connection, now: Timestamp, only: Option<(&str, &str)>) -> rusqlite::Result<Vec<(String, String, i64)>> {
    let (name, address) = only.unzip();
    c.prepare_cached(
        "SELECT name, address, at FROM login_failures
         WHERE at > ?1 AND (?2 IS NULL OR name = ?2 OR address = ?3) ORDER BY at DESC, id DESC",
    )?
    .query_map(params![now.unix() - WINDOW_SECS, name, address], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
    .collect()
}

/// The locks among `failures` (newest first). A lock of `limit` lasts until its
/// `limit`-th newest failure leaves the window.
fn locks_in(failures: &[(String, String, i64)], now: Timestamp) -> Vec<Lock> {
    let mut groups: HashMap<(Option<&str>, Option<&str>), Vec<i64>> = HashMap::new();
    for (name, address, at) in failures {
        for key in
            [(Some(name.as_str()), Some(address.as_str())), (None, Some(address.as_str())), (Some(name.as_str()), None)]
        {
            groups.entry(key).or_default().push(*at);
        }
    }
    let mut locks: Vec<Lock> = groups
        .into_iter()
        .filter_map(|((name, address), ats)| {
            let until = ats.get(Lock::limit(name, address) - 1)? + WINDOW_SECS;
            (until > now.unix()).then(|| Lock {
                name: name.map(str::to_string),
                address: address.map(str::to_string),
                failures: ats.len(),
                until: Timestamp::from_unix(until),
            })
        })
        .collect();
    locks.sort_by(|a, b| (&a.name, &a.address).cmp(&(&b.name, &b.address)));
    locks
}

/// Every lock in force.
pub fn locks(c: &Connection, now: Timestamp) -> rusqlite::Result<Vec<Lock>> {
    Ok(locks_in(&recent(c, now, None)?, now))
}

/// The lock that keeps `name` from logging in from `address`, if any (the longest).
pub fn lock_on(c: &Connection, name: &str, address: &str, now: Timestamp) -> rusqlite::Result<Option<Lock>> {
    let locks = locks_in(&recent(c, now, Some((name, address)))?, now);
    Ok(locks.into_iter().filter(|l| l.holds(name, address)).max_by_key(|l| l.until))
}

/// Records a failed login; returns the locks it starts (those it brings to their limit).
pub fn fail(c: &Connection, name: &str, address: &str, now: Timestamp) -> rusqlite::Result<Vec<Lock>> {
    c.prepare_cached("DELETE FROM login_failures WHERE at <= ?1")?.execute([now.unix() - WINDOW_SECS])?;
    c.prepare_cached("INSERT INTO login_failures (at, name, address) VALUES (?1, ?2, ?3)")?.execute(params![
        now.unix(),
        name,
        address
    ])?;
    let failures = recent(c, now, Some((name, address)))?;
    Ok(locks_in(&failures, now)
        .into_iter()
        .filter(|l| l.failures == Lock::limit(l.name.as_deref(), l.address.as_deref()) && l.holds(name, address))
        .collect())
}

/// A right password: the name's failures from that address no longer count.
pub fn succeeded(c: &Connection, name: &str, address: &str) -> rusqlite::Result<()> {
    c.prepare_cached("DELETE FROM login_failures WHERE name = ?1 AND address = ?2")?.execute(params![name, address])?;
    Ok(())
}

/// Lifts every lock on `name` (its failures from all addresses); returns how many
/// failures were cleared.
pub fn unlock(c: &Connection, name: &str) -> rusqlite::Result<usize> {
    c.prepare_cached("DELETE FROM login_failures WHERE name = ?1")?.execute([name])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE login_failures (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, name TEXT NOT NULL, address TEXT NOT NULL);").unwrap();
        c
    }

    /// Guessing many names from one address locks the address at 20; guessing one name
    /// from many addresses locks the name everywhere at 50; locks end with the window.
    #[test]
    fn address_and_name_wide_locks() {
        let c = db();
        let t0 = Timestamp::from_unix(1_796_040_000);
        let mut started = Vec::new();
        for i in 0..20 {
            started.extend(fail(&c, &format!("user{}", i % 10), "192.0.2.1", t0.plus_secs(i)).unwrap());
        }
        assert_eq!(started.len(), 1, "{started:?}");
        assert_eq!((started[0].name.as_deref(), started[0].address.as_deref()), (None, Some("192.0.2.1")));
        assert!(lock_on(&c, "someone.else", "192.0.2.1", t0.plus_secs(30)).unwrap().is_some(), "any name");
        assert!(lock_on(&c, "user1", "192.0.2.2", t0.plus_secs(30)).unwrap().is_none(), "another address");

        for i in 0..50 {
            fail(&c, "supervisor", &format!("198.51.100.{i}"), t0.plus_secs(100 + i)).unwrap();
        }
        let lock = lock_on(&c, "supervisor", "203.0.113.1", t0.plus_secs(200)).unwrap().expect("locked everywhere");
        assert_eq!((lock.address, lock.failures), (None, 50));
        assert_eq!(lock.until, t0.plus_secs(100 + WINDOW_SECS));
        assert!(lock_on(&c, "supervisor", "203.0.113.1", t0.plus_secs(100 + WINDOW_SECS)).unwrap().is_none());
        assert_eq!(unlock(&c, "supervisor").unwrap(), 50);
        assert!(locks(&c, t0.plus_secs(200)).unwrap().iter().all(|l| l.name.as_deref() != Some("supervisor")));
    }
}
