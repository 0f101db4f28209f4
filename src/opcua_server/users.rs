//! Who may log in to the server, and what they may do: the users of `opcua_server.users`
//! (an Argon2id hash of each password in the config, never the password), and anonymous
//! sessions when `anonymous: true`. A `read` user and an anonymous session see every
//! variable without write access; a `write` user may write the writable ones.
//!
//! Every endpoint offers a user name token (on a `None` endpoint the password still travels
//! encrypted, as its token policy says), and the anonymous token only with `anonymous: true`.
//! A refused login (unknown user, wrong password) is counted and logged with the user name,
//! never the password.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use async_trait::async_trait;
use opcua::types::{Error, NodeId, StatusCode, UAString, UserTokenPolicy, UserTokenType};
use ua_server::address_space::AccessLevel;
use ua_server::authenticator::{user_pass_security_policy_id, AuthManager, Password, UserToken};
use ua_server::ServerEndpoint;

use super::config::{OpcuaServerConfig, Role, User};
use super::Stats;

/// The policy id of the anonymous token, as the stack expects it.
const ANONYMOUS_POLICY: &str = "anonymous";

/// The password's Argon2id hash as a PHC string, with a fresh random salt and the crate's
/// default cost (19 MiB, two passes): what `opex-connector hash-password` prints.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// True when `password` is the one `hash` was made from.
pub fn verify(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// The server's users.
pub struct Users {
    users: Vec<User>,
    anonymous: bool,
    stats: Arc<Stats>,
}

impl Users {
    /// The users of `config`, counting logins in `stats`.
    pub fn new(config: &OpcuaServerConfig, stats: Arc<Stats>) -> Self {
        Self {
            users: config.users.clone(),
            anonymous: config.anonymous,
            stats,
        }
    }

    fn refuse(&self, user: &str, why: &str) -> Error {
        self.stats.refused_logins.fetch_add(1, Ordering::Relaxed);
        log::warn!("opcua server login refused: user={user:?} reason=\"{why}\"");
        Error::new(StatusCode::BadUserAccessDenied, why)
    }
}

#[async_trait]
impl AuthManager for Users {
    async fn authenticate_anonymous_token(&self, _: &ServerEndpoint) -> Result<(), Error> {
        if self.anonymous {
            self.stats.logins.fetch_add(1, Ordering::Relaxed);
            Ok(())
        } else {
            self.stats.refused_logins.fetch_add(1, Ordering::Relaxed);
            Err(Error::new(
                StatusCode::BadIdentityTokenRejected,
                "anonymous sessions are not allowed",
            ))
        }
    }

    async fn authenticate_username_identity_token(
        &self,
        _: &ServerEndpoint,
        username: &str,
        password: &Password,
    ) -> Result<UserToken, Error> {
        let Some(user) = self.users.iter().find(|u| u.name == username) else {
            return Err(self.refuse(username, "no such user"));
        };
        // Argon2 takes tens of milliseconds of CPU on a small board: off the async threads.
        let (hash, given) = (user.password_hash.clone(), password.get().to_string());
        let ok = tokio::task::spawn_blocking(move || verify(&hash, &given))
            .await
            .unwrap_or(false);
        if ok {
            self.stats.logins.fetch_add(1, Ordering::Relaxed);
            log::info!("opcua server login: user={username}");
            Ok(UserToken(username.to_string()))
        } else {
            Err(self.refuse(username, "wrong password"))
        }
    }

    fn effective_user_access_level(
        &self,
        token: &UserToken,
        user_access_level: AccessLevel,
        _: &NodeId,
    ) -> AccessLevel {
        let writes = !token.is_anonymous()
            && self
                .users
                .iter()
                .any(|u| u.name == token.0 && u.role == Role::Write);
        if writes {
            user_access_level
        } else {
            user_access_level - AccessLevel::CURRENT_WRITE
        }
    }

    fn user_token_policies(&self, endpoint: &ServerEndpoint) -> Vec<UserTokenPolicy> {
        let mut out = Vec::new();
        if self.anonymous {
            out.push(UserTokenPolicy {
                policy_id: UAString::from(ANONYMOUS_POLICY),
                token_type: UserTokenType::Anonymous,
                issued_token_type: UAString::null(),
                issuer_endpoint_url: UAString::null(),
                security_policy_uri: UAString::null(),
            });
        }
        if !self.users.is_empty() {
            let policy = endpoint.password_security_policy();
            out.push(UserTokenPolicy {
                // The id the stack checks a user name token against.
                policy_id: user_pass_security_policy_id(endpoint),
                token_type: UserTokenType::UserName,
                issued_token_type: UAString::null(),
                issuer_endpoint_url: UAString::null(),
                security_policy_uri: UAString::from(policy.to_uri()),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let hash = hash_password("correct horse").expect("hashed");
        assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
        assert!(verify(&hash, "correct horse"));
        assert!(!verify(&hash, "correct horse "));
        assert!(!verify("not a hash", "correct horse"));
    }
}
