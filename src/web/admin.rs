//! Accounts over HTTP: an admin manages users and API tokens; every user may change
//! their own password. The rules (the last admin stays, a reset ends sessions) are in
//! `accounts`; here they become status codes.

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, Credential, WebState};
use crate::accounts::{self, Account, AccountError, AccountOp, Change, TokenInfo, User};
use crate::domain::Role;

type S = Arc<WebState>;

fn account_error(e: AccountError) -> ApiError {
    match e {
        AccountError::Store(e) => e.into(),
        e => ApiError::new(
            StatusCode::from_u16(accounts::status_of(&e)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.to_string(),
        ),
    }
}

/// Runs an account operation off the async threads (argon2 takes tens of ms).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AccountError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await?.map_err(account_error)
}

/// Makes an account change: of a redundant pair through its decision log, answered
/// once applied here (both nodes have it); alone at once.
async fn perform(s: &S, op: AccountOp, by: &str) -> Result<Value, ApiError> {
    if let Some(pair) = &s.cluster {
        return pair.submit(accounts::changes::KIND, op.args(), by).await;
    }
    let (s, by) = (Arc::clone(s), by.to_string());
    blocking(move || accounts::perform(&s.store, &op, &by)).await
}

/// A change a login makes (its session, a failed attempt, a session ended), from a
/// blocking thread: of a pair through its decision log; while the broker is away, on
/// this node alone, so that people can still log in to read.
pub(super) fn access(s: &WebState, op: &AccountOp, by: &str) -> Result<Value, AccountError> {
    let Some(pair) = s.cluster.as_ref().filter(|p| p.log.up()) else {
        return accounts::perform(&s.store, op, by);
    };
    tokio::runtime::Handle::current()
        .block_on(pair.submit(accounts::changes::KIND, op.args(), by))
        .map_err(|e| AccountError::Pair(e.status.as_u16(), e.message))
}

/// A session or an API token in use: of a pair, said through its decision log without
/// waiting (the request goes on), so that a session is idle on neither node and a
/// token's last use shows on both; alone, at once.
pub(super) fn seen(s: &WebState, op: &AccountOp) -> Result<(), crate::store::StoreError> {
    let Some(pair) = s.cluster.as_ref().filter(|p| p.log.up()) else {
        return accounts::store_errors(accounts::perform(&s.store, op, "twinops"));
    };
    if let AccountOp::Seen { token_hash } | AccountOp::TokenUsed { token_hash } = op
        && !pair.first_seen(token_hash)
    {
        return Ok(());
    }
    let (log, args) = (Arc::clone(&pair.log), op.args());
    tokio::spawn(async move {
        if let Err(e) = log.submit(accounts::changes::KIND, args, "twinops").await {
            tracing::debug!(stage = "web", error = %e, "a session's use was not shared with the other node");
        }
    });
    Ok(())
}

pub(super) async fn users(State(s): State<S>) -> Result<Json<Vec<Account>>, ApiError> {
    Ok(Json(blocking(move || Ok(accounts::accounts(&s.store)?)).await?))
}

/// A new user.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    /// 2 to 40 of a-z, 0-9, `.`, `_`, `-`, e.g. "operator.kaur".
    #[schemars(pattern(r"^[a-z0-9._-]{2,40}$"))]
    pub name: String,
    pub role: Role,
    /// At least 12 characters.
    #[schemars(length(min = 12))]
    pub password: String,
}

pub(super) async fn add_user(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Json(req): Json<NewUser>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let op = blocking(move || AccountOp::add_user(&req.name, req.role, &req.password)).await?;
    Ok((StatusCode::CREATED, Json(perform(&s, op, &admin.name).await?)))
}

/// A user's new role.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleRequest {
    pub role: Role,
}

/// A new password.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordRequest {
    /// At least 12 characters.
    #[schemars(length(min = 12))]
    pub password: String,
}

async fn change(s: S, admin: User, name: String, change: Change) -> Result<Json<Value>, ApiError> {
    Ok(Json(perform(&s, AccountOp::change(&name, change), &admin.name).await?))
}

pub(super) async fn set_role(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(name): Path<String>,
    Json(req): Json<RoleRequest>,
) -> Result<Json<Value>, ApiError> {
    change(s, admin, name, Change::Role(req.role)).await
}

pub(super) async fn reset_password(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(name): Path<String>,
    Json(req): Json<PasswordRequest>,
) -> Result<Json<Value>, ApiError> {
    let reset = blocking(move || Change::password(&req.password)).await?;
    change(s, admin, name, reset).await
}

pub(super) async fn disable(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    change(s, admin, name, Change::Disable).await
}

pub(super) async fn enable(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    change(s, admin, name, Change::Enable).await
}

pub(super) async fn unlock(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    change(s, admin, name, Change::Unlock).await
}

/// A password change by its owner.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnPasswordRequest {
    pub current: String,
    /// At least 12 characters.
    pub new: String,
}

/// The caller's own password; their other sessions end, this one stays.
pub(super) async fn change_own_password(
    State(s): State<S>,
    Extension(user): Extension<User>,
    credential: Option<Extension<Credential>>,
    Json(req): Json<OwnPasswordRequest>,
) -> Result<Json<Value>, ApiError> {
    let keep = match credential {
        Some(Extension(Credential::Session(token))) => Some(token),
        _ => None,
    };
    let (st, by) = (Arc::clone(&s), user.name.clone());
    let op =
        blocking(move || accounts::own_password(&st.store, &user, &req.current, &req.new, keep.as_deref())).await?;
    Ok(Json(perform(&s, op, &by).await?))
}

pub(super) async fn tokens(State(s): State<S>) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    Ok(Json(blocking(move || Ok(accounts::tokens(&s.store)?)).await?))
}

/// A new API token.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// The user it acts as, with that user's role.
    pub user: String,
    /// What it is for, e.g. "historian export".
    pub label: String,
}

/// The token is in the answer once; only its hash is kept.
pub(super) async fn create_token(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Json(req): Json<NewToken>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (op, token) = AccountOp::token(&req.user, &req.label);
    let id = perform(&s, op, &admin.name).await?["id"].clone();
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": id, "token": token, "note": "shown once: send it as Authorization: Bearer <token>; revoke it by its id"}),
        ),
    ))
}

pub(super) async fn revoke_token(
    State(s): State<S>,
    Extension(admin): Extension<User>,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    let st = Arc::clone(&s);
    let op = blocking(move || AccountOp::revoke(&st.store, id)).await?;
    perform(&s, op, &admin.name).await?;
    Ok(Json(json!({"id": id, "revoked": true})))
}

/// A consistent copy of the twin, as `twinops backup` writes it, streamed: an
/// administrator's backup over the network, and what the other node of a pair takes
/// when it was away longer than the broker kept its sessions (`cluster::copy`).
pub(super) async fn backup_copy(State(s): State<S>, Extension(admin): Extension<User>) -> Result<Response, ApiError> {
    use std::io::Read;
    let from = s.store.path().to_path_buf();
    let to = from.with_extension(format!("copy-{}.db", crate::support::hex(&crate::support::random_bytes::<6>())));
    let (src, dst) = (from.clone(), to.clone());
    let made =
        tokio::task::spawn_blocking(move || crate::store::backup(&src, &dst)).await?.map_err(ApiError::internal)?;
    let file = std::fs::File::open(&to).map_err(ApiError::internal)?;
    // Unlinked now: the open file stays readable, and nothing is left behind.
    let _ = std::fs::remove_file(&to);
    let detail = format!("{} bytes, schema {}", made.bytes, made.schema_version);
    let (st, by) = (Arc::clone(&s), admin.name.clone());
    tokio::task::spawn_blocking(move || accounts::audit(&st.store, &by, "backup_taken", &detail, None)).await??;
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0; 1 << 20];
            let n = file.read(&mut buf);
            (file, n.map(|n| buf[..n].to_vec()))
        })
        .await
        .ok()?;
        match read {
            (_, Ok(chunk)) if chunk.is_empty() => None,
            (file, Ok(chunk)) => Some((Ok(axum::body::Bytes::from(chunk)), Some(file))),
            (_, Err(e)) => Some((Err(e), None)),
        }
    });
    let headers = [
        (header::CONTENT_TYPE, "application/vnd.sqlite3".to_string()),
        (header::CONTENT_LENGTH, made.bytes.to_string()),
        (header::CONTENT_DISPOSITION, "attachment; filename=\"twinops.db\"".to_string()),
    ];
    Ok((headers, axum::body::Body::from_stream(chunks)).into_response())
}
