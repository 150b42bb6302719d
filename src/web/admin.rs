//! Accounts over HTTP: an admin manages users and API tokens; every user may change
//! their own password. The rules (the last admin stays, a reset ends sessions) are in
//! `accounts`; here they become status codes.

use std::sync::Arc;

use axum::extract::{Extension, Json, Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, Credential, WebState};
use crate::accounts::{self, Account, AccountError, Change, TokenInfo, User};
use crate::domain::Role;

type S = Arc<WebState>;

fn account_error(e: AccountError) -> ApiError {
    match e {
        AccountError::Invalid(_) => ApiError::bad_request(e.to_string()),
        AccountError::WrongPassword => ApiError::new(StatusCode::FORBIDDEN, e.to_string()),
        AccountError::NoSuchUser(_) | AccountError::NoSuchToken(_) => ApiError::not_found(e.to_string()),
        AccountError::Exists(_) | AccountError::LastAdmin(_) | AccountError::Disabled(_) => {
            ApiError::new(StatusCode::CONFLICT, e.to_string())
        }
        AccountError::Store(e) => e.into(),
    }
}

/// Runs an account operation off the async threads (argon2 takes tens of ms).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AccountError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await?.map_err(account_error)
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
) -> Result<(StatusCode, Json<User>), ApiError> {
    let user = blocking(move || accounts::add_user(&s.store, &req.name, req.role, &req.password, &admin.name)).await?;
    Ok((StatusCode::CREATED, Json(user)))
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
    let who = name.clone();
    blocking(move || accounts::change_user(&s.store, &name, change, &admin.name)).await?;
    Ok(Json(json!({"name": who, "changed": true})))
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
    change(s, admin, name, Change::Password(req.password)).await
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
    blocking(move || accounts::change_own_password(&s.store, &user, &req.current, &req.new, keep.as_deref())).await?;
    Ok(Json(json!({"changed": true})))
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
    let (id, token) = blocking(move || accounts::create_token(&s.store, &req.user, &req.label, &admin.name)).await?;
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
    blocking(move || accounts::revoke_token(&s.store, id, &admin.name)).await?;
    Ok(Json(json!({"id": id, "revoked": true})))
}
