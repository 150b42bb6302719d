//! Login with the site's directory (LDAP, Active Directory): find the user with the
//! service account, bind as the user with the given password, and take the highest role
//! of the groups they are in (`memberOf`, as AD and OpenLDAP's memberof overlay give
//! it). The directory owns those users' passwords and roles; twinops keeps a row for
//! each (sessions, tokens and the audit log hang on it) and re-reads the role at every
//! login and every `recheck_secs` for users with live sessions or tokens.
//!
//! Every call has a timeout; plain LDAP (passwords in clear on the wire) is refused
//! unless `allow_plain` says it is a lab. The name typed at login reaches the search
//! filter escaped (RFC 4515), so `*)(uid=*` finds nobody.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI8, Ordering};
use std::time::Duration;

use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, Scope, SearchEntry};
use serde::Deserialize;

use crate::domain::Role;
use crate::support::Secret;

/// The `[directory]` part: off unless set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryConfig {
    /// `ldaps://dc1.plant.local:636`, or `ldap://...:389` with StartTLS.
    pub url: String,
    /// The CA that signed the directory's certificate (PEM); default: the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `ldap://` without StartTLS: passwords cross the network in clear. A lab only.
    #[serde(default)]
    pub allow_plain: bool,
    /// The service account that searches for users (read access to them and `memberOf`).
    pub bind_dn: String,
    /// Its password, or a file holding it (`TWINOPS_DIRECTORY_BIND_PASSWORD` overrides).
    #[serde(default)]
    pub bind_password: Option<Secret>,
    #[serde(default)]
    pub bind_password_file: Option<PathBuf>,
    /// Where users are searched, e.g. `ou=people,dc=plant,dc=example`.
    pub user_base: String,
    /// `{name}` is the login name, escaped. Default AD's, disabled accounts excluded;
    /// OpenLDAP: `(&(objectClass=inetOrgPerson)(uid={name}))`.
    #[serde(default = "default_user_filter")]
    pub user_filter: String,
    /// Group DN to role, e.g. `"cn=twinops-operators,ou=groups,dc=plant,dc=example" =
    /// "operator"`; a user in several takes the highest.
    pub roles: BTreeMap<String, Role>,
    /// How often live sessions' and tokens' roles are read again (a leaver's end).
    #[serde(default = "default_recheck_secs")]
    pub recheck_secs: u64,
    /// Each call to the directory.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

fn default_user_filter() -> String {
    // userAccountControl bit 2: the account is disabled.
    "(&(objectClass=user)(sAMAccountName={name})(!(userAccountControl:1.2.840.113556.1.4.803:=2)))".into()
}

fn default_recheck_secs() -> u64 {
    900
}

fn default_timeout_secs() -> u64 {
    5
}

impl DirectoryConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        let url = reqwest::Url::parse(&self.url).map_err(|e| anyhow::anyhow!("directory.url '{}': {e}", self.url))?;
        match url.scheme() {
            "ldaps" | "ldap" => {}
            other => anyhow::bail!("directory.url: scheme '{other}' is not LDAP; use ldaps:// or ldap:// (StartTLS)"),
        }
        anyhow::ensure!(
            self.user_filter.contains("{name}"),
            "directory.user_filter must hold {{name}}, where the login name goes"
        );
        anyhow::ensure!(!self.roles.is_empty(), "directory.roles is empty: map at least one group to a role");
        anyhow::ensure!(
            (1..=86_400).contains(&self.recheck_secs),
            "directory.recheck_secs must be 1 to 86400 (15 minutes: 900)"
        );
        anyhow::ensure!((1..=60).contains(&self.timeout_secs), "directory.timeout_secs must be 1 to 60");
        // The service account's password may come from the environment alone, which the
        // file's settings cannot see: `Directory::new` checks that one is set somewhere.
        Ok(())
    }
}

/// Why a directory login or lookup did not give a role.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// The directory did not answer, or TLS failed: not the user's fault.
    #[error("the directory ({url}) does not answer: {detail}")]
    Unreachable { url: String, detail: String },
    /// The service account was refused: a configuration fault.
    #[error("the directory refused the service account {dn}: check directory.bind_dn and its password")]
    ServiceRefused { dn: String },
    /// No such user (or disabled, as the filter excludes them), or a wrong password.
    #[error("wrong user name or password")]
    Wrong,
    /// The right password, but in no group `roles` maps.
    #[error("{name} is in none of the directory groups twinops maps to a role")]
    NoRole { name: String },
    /// Our own database failed while acting on the directory's answer.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A user as the directory has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryUser {
    pub dn: String,
    pub role: Option<Role>,
}

/// The directory client. Cheap to clone; each call opens its own connection.
#[derive(Clone)]
pub struct Directory {
    cfg: Arc<DirectoryConfig>,
    password: Secret,
    tls: Arc<rustls::ClientConfig>,
    /// Whether the last call reached it: -1 not tried yet, 0 no, 1 yes.
    up: Arc<AtomicI8>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory").field("url", &self.cfg.url).finish_non_exhaustive()
    }
}

impl Directory {
    pub fn new(cfg: DirectoryConfig, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Directory> {
        cfg.validate()?;
        let env_password = env("TWINOPS_DIRECTORY_BIND_PASSWORD");
        anyhow::ensure!(
            env_password.is_some() || cfg.bind_password.is_some() || cfg.bind_password_file.is_some(),
            "directory: the service account ({}) has no password; set TWINOPS_DIRECTORY_BIND_PASSWORD, \
             or directory.bind_password_file (a file only the twinops user reads), or directory.bind_password",
            cfg.bind_dn
        );
        let password = crate::support::secret_from(
            env_password,
            cfg.bind_password.as_ref(),
            cfg.bind_password_file.as_deref(),
            "directory.bind_password",
        )
        .map_err(anyhow::Error::msg)?;
        let tls =
            Arc::new(crate::support::tls::builder(cfg.ca_file.as_deref(), "directory.ca_file")?.with_no_client_auth());
        Ok(Directory { cfg: Arc::new(cfg), password, tls, up: Arc::new(AtomicI8::new(-1)) })
    }

    /// Whether the directory answered the last call (`None` before any).
    pub fn up(&self) -> Option<bool> {
        match self.up.load(Ordering::Relaxed) {
            -1 => None,
            v => Some(v == 1),
        }
    }

    pub fn url(&self) -> &str {
        &self.cfg.url
    }

    pub fn recheck(&self) -> Duration {
        Duration::from_secs(self.cfg.recheck_secs)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.cfg.timeout_secs)
    }

    fn unreachable(&self, detail: impl std::fmt::Display) -> DirectoryError {
        self.up.store(0, Ordering::Relaxed);
        DirectoryError::Unreachable { url: self.cfg.url.clone(), detail: detail.to_string() }
    }

    /// A new connection (StartTLS on `ldap://` unless plain is allowed), not bound yet.
    async fn open(&self) -> Result<Ldap, DirectoryError> {
        let starttls = self.cfg.url.starts_with("ldap://") && !self.cfg.allow_plain;
        let settings = LdapConnSettings::new()
            .set_conn_timeout(self.timeout())
            .set_starttls(starttls)
            .set_config(Arc::clone(&self.tls));
        let (conn, mut ldap) =
            LdapConnAsync::with_settings(settings, &self.cfg.url).await.map_err(|e| self.unreachable(e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::debug!(stage = "directory", error = %e, "connection ended");
            }
        });
        ldap.with_timeout(self.timeout());
        Ok(ldap)
    }

    /// A connection bound as the service account.
    async fn connect(&self) -> Result<Ldap, DirectoryError> {
        let mut ldap = self.open().await?;
        let bound =
            ldap.simple_bind(&self.cfg.bind_dn, self.password.expose()).await.map_err(|e| self.unreachable(e))?;
        self.up.store(1, Ordering::Relaxed);
        if bound.rc != 0 {
            return Err(DirectoryError::ServiceRefused { dn: self.cfg.bind_dn.clone() });
        }
        Ok(ldap)
    }

    /// The user named `name` (as typed at login), if the filter finds exactly one.
    async fn find(&self, ldap: &mut Ldap, name: &str) -> Result<Option<DirectoryUser>, DirectoryError> {
        let filter = self.cfg.user_filter.replace("{name}", &ldap3::ldap_escape(name));
        ldap.with_timeout(self.timeout());
        let (entries, _) = ldap
            .search(&self.cfg.user_base, Scope::Subtree, &filter, vec!["memberOf"])
            .await
            .and_then(|r| r.success())
            .map_err(|e| self.unreachable(e))?;
        if entries.len() != 1 {
            return Ok(None);
        }
        let entry = SearchEntry::construct(entries.into_iter().next().expect("one entry"));
        let groups = entry.attrs.get("memberOf").or_else(|| entry.attrs.get("memberof"));
        Ok(Some(DirectoryUser { role: self.role_of(groups.map(Vec::as_slice).unwrap_or_default()), dn: entry.dn }))
    }

    /// The highest role the groups map to (group DNs compared without case).
    fn role_of(&self, groups: &[String]) -> Option<Role> {
        groups
            .iter()
            .filter_map(|g| self.cfg.roles.iter().find(|(dn, _)| dn.eq_ignore_ascii_case(g)).map(|(_, r)| *r))
            .max()
    }

    /// Checks `name`'s password against the directory and gives their DN and role.
    pub async fn authenticate(&self, name: &str, password: &str) -> Result<(String, Role), DirectoryError> {
        // An empty password is an unauthenticated bind, which LDAP servers accept.
        if password.is_empty() || name.is_empty() {
            return Err(DirectoryError::Wrong);
        }
        let mut ldap = self.connect().await?;
        let found = self.find(&mut ldap, name).await;
        let _ = ldap.unbind().await;
        let Some(user) = found? else {
            // Bind all the same, as a name nobody has: an unknown name then costs what a
            // wrong password does (a connection, TLS and a refused bind), so the time a
            // refusal takes does not tell which names the directory has.
            self.bind_as(&format!("cn=twinops-no-such-user,{}", self.cfg.user_base), password).await?;
            return Err(DirectoryError::Wrong);
        };
        if !self.bind_as(&user.dn, password).await? {
            return Err(DirectoryError::Wrong);
        }
        let role = user.role.ok_or_else(|| DirectoryError::NoRole { name: name.to_string() })?;
        Ok((user.dn, role))
    }

    /// Whether `dn` binds with `password`, on a connection of its own (the service
    /// account's stays clean).
    async fn bind_as(&self, dn: &str, password: &str) -> Result<bool, DirectoryError> {
        let mut ldap = self.open().await?;
        let bound = ldap.simple_bind(dn, password).await.map_err(|e| self.unreachable(e))?;
        let _ = ldap.unbind().await;
        Ok(bound.rc == 0)
    }

    /// The users named, as the directory has them now, in order, on one connection:
    /// `None` for a name it no longer has (deleted, or disabled, as the filter excludes).
    pub async fn users(&self, names: &[String]) -> Result<Vec<Option<DirectoryUser>>, DirectoryError> {
        let mut ldap = self.connect().await?;
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            match self.find(&mut ldap, name).await {
                Ok(user) => found.push(user),
                Err(e) => {
                    let _ = ldap.unbind().await;
                    return Err(e);
                }
            }
        }
        let _ = ldap.unbind().await;
        Ok(found)
    }

    /// The service account binds: the directory answers and takes its credentials.
    pub async fn probe(&self) -> Result<(), DirectoryError> {
        self.users(&[]).await.map(drop)
    }
}

/// Runs a directory call from blocking code (logins run on blocking threads).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime for the directory").block_on(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DirectoryConfig {
        toml::from_str(
            r#"
            url = "ldaps://dc1.plant.example:636"
            bind_dn = "cn=twinops,ou=services,dc=plant,dc=example"
            user_base = "ou=people,dc=plant,dc=example"
            roles = { "cn=ops,ou=groups,dc=plant,dc=example" = "operator" }
            "#,
        )
        .unwrap()
    }

    /// The service account's password from `TWINOPS_DIRECTORY_BIND_PASSWORD` alone is
    /// enough (the file's settings cannot see it); with none anywhere, the error names
    /// the three places it may come from.
    #[test]
    fn the_bind_password_may_come_from_the_environment_alone() {
        let cfg = config();
        cfg.validate().unwrap();
        let env = |k: &str| (k == "TWINOPS_DIRECTORY_BIND_PASSWORD").then(|| "s3cret".to_string());
        let dir = Directory::new(cfg.clone(), &env).unwrap();
        assert_eq!(dir.password.expose(), "s3cret");
        let err = Directory::new(cfg, &|_| None).unwrap_err().to_string();
        for named in ["TWINOPS_DIRECTORY_BIND_PASSWORD", "directory.bind_password_file", "cn=twinops,ou=services"] {
            assert!(err.contains(named), "{err}");
        }
    }
}
