//! Bearer tokens: who may call, and what each may do.
//!
//! Secrets come from the environment variables `[[worker.tokens]]` names,
//! read once at start. They are compared in constant time, and never
//! logged: the `Authorization` header is marked sensitive for the tracing
//! layer, and errors name a token only by its `name`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use config::Scope;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The shortest secret accepted: shorter ones are guessable.
pub const MIN_SECRET_BYTES: usize = 16;

/// One token, its secret loaded.
struct Token {
    name: String,
    scope: Scope,
    secret: Vec<u8>,
}

/// Whom a worker answers.
pub struct Tokens {
    /// Empty only with `insecure`.
    tokens: Vec<Token>,
    /// `--insecure-no-auth`: every request is let through with scope
    /// `admin`.
    insecure: bool,
}

/// What is wrong with the tokens a worker was given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `[[worker.tokens]]`, and no `--insecure-no-auth`.
    #[error("no [[worker.tokens]] configured: a worker without tokens answers anyone; give --insecure-no-auth to run one on loopback anyway")]
    NoTokens,
    /// A token's environment variable is unset or empty.
    #[error("token {name:?}: environment variable {env} is not set")]
    MissingSecret {
        /// The token's name.
        name: String,
        /// The variable.
        env: String,
    },
    /// A token's secret is too short.
    #[error("token {name:?}: the secret in {env} is shorter than {MIN_SECRET_BYTES} bytes")]
    ShortSecret {
        /// The token's name.
        name: String,
        /// The variable.
        env: String,
    },
}

impl Tokens {
    /// The tokens of `[[worker.tokens]]`, secrets read from the
    /// environment; with `insecure` and no tokens, everyone is admitted.
    pub fn from_config(worker: &config::Worker, insecure: bool) -> Result<Tokens, AuthError> {
        if worker.tokens.is_empty() && !insecure {
            return Err(AuthError::NoTokens);
        }
        let tokens = worker
            .tokens
            .iter()
            .map(|t| {
                let secret = std::env::var(&t.secret_env).unwrap_or_default();
                if secret.is_empty() {
                    return Err(AuthError::MissingSecret {
                        name: t.name.clone(),
                        env: t.secret_env.clone(),
                    });
                }
                if secret.len() < MIN_SECRET_BYTES {
                    return Err(AuthError::ShortSecret {
                        name: t.name.clone(),
                        env: t.secret_env.clone(),
                    });
                }
                Ok(Token {
                    name: t.name.clone(),
                    scope: t.scope,
                    secret: secret.into_bytes(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tokens {
            insecure: tokens.is_empty(),
            tokens,
        })
    }

    /// Whether every request is admitted.
    pub fn is_insecure(&self) -> bool {
        self.insecure
    }

    /// The token a presented secret belongs to. Every token's secret is
    /// compared, whatever matched, so the time taken says nothing about
    /// which token or how much of it matched.
    fn find(&self, presented: &[u8]) -> Option<(&str, Scope)> {
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.secret.as_slice().ct_eq(presented)) {
                found = Some((token.name.as_str(), token.scope));
            }
        }
        found
    }

    /// The request's token if its scope is at least `needed`: 401 without
    /// a valid token, 403 with one whose scope is too small.
    pub fn check(&self, request: &Request, needed: Scope) -> Result<(), ApiError> {
        if self.insecure {
            return Ok(());
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .map(|s| s.trim_ascii());
        let Some(presented) = presented else {
            metrics::counter!("mezzanine_worker_rejected_total", "reason" => "unauthorized")
                .increment(1);
            return Err(unauthorized(
                "this endpoint needs an Authorization: Bearer <token> header",
            ));
        };
        match self.find(presented) {
            None => {
                metrics::counter!("mezzanine_worker_rejected_total", "reason" => "unauthorized")
                    .increment(1);
                Err(unauthorized("the bearer token is not valid"))
            }
            Some((name, scope)) if scope < needed => {
                metrics::counter!("mezzanine_worker_rejected_total", "reason" => "forbidden")
                    .increment(1);
                Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    format!(
                        "token {name:?} has scope {}; this endpoint needs {}",
                        scope.as_str(),
                        needed.as_str()
                    ),
                ))
            }
            Some(_) => Ok(()),
        }
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// Middleware: lets a request through only with a token of `scope` or
/// more.
pub async fn require(
    State((tokens, scope)): State<(Arc<Tokens>, Scope)>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    tokens.check(&request, scope)?;
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens {
            insecure: false,
            tokens: vec![
                Token {
                    name: "reader".into(),
                    scope: Scope::Read,
                    secret: b"read-secret-0123456789".to_vec(),
                },
                Token {
                    name: "writer".into(),
                    scope: Scope::Write,
                    secret: b"write-secret-0123456789".to_vec(),
                },
            ],
        }
    }

    fn request(auth: Option<&str>) -> Request {
        let mut builder = Request::builder().uri("/v1/cells");
        if let Some(auth) = auth {
            builder = builder.header(header::AUTHORIZATION, auth);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn scopes_and_secrets_decide() {
        let t = tokens();
        let status = |auth, scope| t.check(&request(auth), scope).err().map(|e| e.status);
        assert_eq!(status(None, Scope::Read), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(
            status(Some("Bearer nope"), Scope::Read),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            status(Some("Basic read-secret-0123456789"), Scope::Read),
            Some(StatusCode::UNAUTHORIZED)
        );
        // A prefix of a valid secret is not the secret.
        assert_eq!(
            status(Some("Bearer read-secret"), Scope::Read),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            status(Some("Bearer read-secret-0123456789"), Scope::Read),
            None
        );
        assert_eq!(
            status(Some("Bearer read-secret-0123456789"), Scope::Write),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(Some("Bearer write-secret-0123456789"), Scope::Write),
            None
        );
        assert_eq!(
            status(Some("Bearer write-secret-0123456789"), Scope::Admin),
            Some(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn a_forbidden_answer_names_the_token_never_its_secret() {
        let t = tokens();
        let e = t
            .check(
                &request(Some("Bearer read-secret-0123456789")),
                Scope::Write,
            )
            .unwrap_err();
        assert!(e.message.contains("\"reader\""), "{}", e.message);
        assert!(!e.message.contains("read-secret"), "{}", e.message);
    }

    #[test]
    fn no_tokens_needs_the_insecure_flag() {
        let worker = config::Worker::default();
        assert!(matches!(
            Tokens::from_config(&worker, false),
            Err(AuthError::NoTokens)
        ));
        let open = Tokens::from_config(&worker, true).unwrap();
        assert!(open.is_insecure());
        assert!(open.check(&request(None), Scope::Admin).is_ok());
    }
}
