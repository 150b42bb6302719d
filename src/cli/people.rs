//! `twinops user` and `twinops token`: accounts from the command line, as an installer
//! manages them on the box.

use super::*;
use crate::accounts::AccountOp;

#[derive(Subcommand)]
pub(super) enum UserCommand {
    /// Add a user. The password is read from the terminal without echo, or from the
    /// first line of stdin when it is not a terminal.
    #[command(
        after_help = "Examples:\n  twinops user add admin --role admin\n  printf '%s\\n' \"$PASSWORD\" | twinops user add operator.kaur --role operator"
    )]
    Add {
        name: String,
        /// viewer, operator, supervisor or admin.
        #[arg(long)]
        role: String,
    },
    /// List users: role, whether disabled, live API tokens, login locks in force.
    #[command(after_help = "Examples:\n  twinops user list")]
    List,
    /// Change a user's role (from the next request on).
    #[command(after_help = "Examples:\n  twinops user role operator.kaur supervisor")]
    Role {
        name: String,
        /// viewer, operator, supervisor or admin.
        role: String,
    },
    /// Reset a user's password (prompt or stdin, as for add); their sessions end.
    #[command(
        after_help = "Examples:\n  twinops user passwd operator.kaur\n  printf '%s\\n' \"$PASSWORD\" | twinops user passwd operator.kaur"
    )]
    Passwd { name: String },
    /// Disable a user: no login, sessions end, API tokens stop working (until enabled).
    #[command(after_help = "Examples:\n  twinops user disable operator.kaur")]
    Disable { name: String },
    /// Enable a disabled user again (their unrevoked tokens work again).
    #[command(after_help = "Examples:\n  twinops user enable operator.kaur")]
    Enable { name: String },
    /// Lift the locks failed logins put on a user, from every address (`user list`
    /// shows them; a password reset lifts them too).
    #[command(after_help = "Examples:\n  twinops user unlock supervisor.osei")]
    Unlock { name: String },
}

#[derive(Subcommand)]
pub(super) enum TokenCommand {
    /// Create a bearer token acting as USER (with that user's role).
    #[command(after_help = "Examples:\n  twinops token create --user scada-bridge --label 'historian export'")]
    Create {
        #[arg(long)]
        user: String,
        /// What the token is for, for the audit log.
        #[arg(long, default_value = "api")]
        label: String,
    },
    /// List tokens: id, user, label, created, last used (never the token itself).
    #[command(after_help = "Examples:\n  twinops token list")]
    List,
    /// Revoke a token for good, by the id `token list` shows.
    #[command(after_help = "Examples:\n  twinops token revoke 3")]
    Revoke { id: i64 },
}

pub(super) fn user(global: &Global, cmd: UserCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        UserCommand::Add { name, role } => {
            let role = crate::domain::Role::parse(&role).map_err(anyhow::Error::msg)?;
            let store = global.open()?;
            let password = read_password(&format!("password for {name}: "))?;
            account(global, &store, AccountOp::add_user(&name, role, &password)?)?;
            println!("added {name} as {role}");
        }
        UserCommand::List => {
            let store = global.open()?;
            let accounts = crate::accounts::accounts(&store)?;
            // Columns as wide as their longest value, so that they line up.
            let w = accounts.iter().map(|a| a.name.chars().count()).max().unwrap_or(0).max(4);
            println!(
                "{:<w$} {:<11} {:<9} {:<9} {:>6}  {:<20}  locks",
                "name", "role", "from", "state", "tokens", "created"
            );
            for a in accounts {
                let state = if a.disabled { "disabled" } else { "enabled" };
                let locks: Vec<String> = a.locks.iter().map(ToString::to_string).collect();
                println!(
                    "{:<w$} {:<11} {:<9} {state:<9} {:>6}  {:<20}  {}",
                    a.name,
                    a.role.as_str(),
                    a.source.as_str(),
                    a.live_tokens,
                    a.created_at.to_rfc3339(),
                    if locks.is_empty() { "-".to_string() } else { locks.join("; ") }
                );
            }
        }
        UserCommand::Role { name, role } => {
            let role = crate::domain::Role::parse(&role).map_err(anyhow::Error::msg)?;
            change_user(global, &name, Change::Role(role), &format!("is now {role}"))?;
        }
        UserCommand::Passwd { name } => {
            let password = read_password(&format!("new password for {name}: "))?;
            change_user(global, &name, Change::password(&password)?, "has a new password; their sessions have ended")?;
        }
        UserCommand::Disable { name } => {
            change_user(global, &name, Change::Disable, "is disabled: no login, no sessions, no tokens")?;
        }
        UserCommand::Enable { name } => {
            change_user(global, &name, Change::Enable, "is enabled")?;
        }
        UserCommand::Unlock { name } => {
            change_user(global, &name, Change::Unlock, "may log in again from every address")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn token(global: &Global, cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TokenCommand::Create { user, label } => {
            let store = global.open()?;
            let (op, token) = AccountOp::token(&user, &label);
            let id = account(global, &store, op)?["id"].clone();
            println!("{token}");
            eprintln!(
                "token {id}: send it as `Authorization: Bearer <token>`; it is not shown again (`twinops token revoke {id}` ends it)"
            );
        }
        TokenCommand::List => {
            let store = global.open()?;
            println!("{:>4}  {:<24} {:<20} {:<21} {:<21} state", "id", "user", "label", "created", "last used");
            for t in crate::accounts::tokens(&store)? {
                let used = t.last_used_at.map_or("never".into(), |t| t.to_rfc3339());
                let state = if t.revoked { "revoked" } else { "live" };
                println!(
                    "{:>4}  {:<24} {:<20} {:<21} {used:<21} {state}",
                    t.id,
                    t.user,
                    t.label,
                    t.created_at.to_rfc3339()
                );
            }
        }
        TokenCommand::Revoke { id } => {
            let store = global.open()?;
            account(global, &store, AccountOp::revoke(&store, id)?)?;
            println!("token {id} is revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An administrator's change to a user, from the command line; says what it did.
fn change_user(global: &Global, name: &str, change: Change, done: &str) -> anyhow::Result<()> {
    account(global, &global.open()?, AccountOp::change(name, change))?;
    println!("{name} {done}");
    Ok(())
}

/// Makes an account change: of a redundant pair through its decision log (both nodes
/// make it), alone here; what it answered.
fn account(global: &Global, store: &Store, op: AccountOp) -> anyhow::Result<serde_json::Value> {
    let change = || Ok((crate::accounts::changes::KIND, op.args()));
    match global.through_pair(store, change, "cli")? {
        Some(answer) => Ok(answer),
        None => Ok(crate::accounts::perform(store, &op, "cli")?),
    }
}

/// A password from the terminal (no echo), or the first line of stdin when piped.
fn read_password(prompt: &str) -> anyhow::Result<String> {
    use std::io::IsTerminal;
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(prompt)?;
        let again = rpassword::prompt_password("again: ")?;
        anyhow::ensure!(first == again, "the two passwords differ; nothing was changed");
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_string()
    };
    Ok(password)
}
