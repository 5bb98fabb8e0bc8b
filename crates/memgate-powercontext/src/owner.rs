//! Owner binding: only the configured owner may read or save, and only with
//! a real identity.
//!
//! The host's missing-identity fallback (`default`), blank or
//! whitespace-padded ids are refused first; then the id must equal the
//! configured owner byte for byte (no trimming, no case folding). Agent
//! names, thread titles and prompt text play no part. The check runs before
//! any request, so a refused caller costs the server nothing.

use crate::settings::{Settings, ENV_OWNER_USER_ID};
use memgate_core::{MemoryError, Result, UserId};

/// Admits the configured owner; refuses everyone else with
/// [`MemoryError::RejectedIdentity`]. Neither id is echoed in the message.
pub(crate) fn admit(settings: &Settings, user: &UserId) -> Result<()> {
    if let Some(defect) = user.owner_defect() {
        return Err(MemoryError::RejectedIdentity(format!(
            "powercontext refused the caller: the user id {defect}; \
             no memory is read or written without an authenticated owner"
        )));
    }
    if user.as_str() != settings.owner_user_id() {
        return Err(MemoryError::RejectedIdentity(format!(
            "powercontext refused the caller: the user is not the owner bound by {ENV_OWNER_USER_ID}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{ENV_BASE_URL, ENV_SCOPE_ID, ENV_TOKEN};

    fn settings() -> Settings {
        Settings::from_env(|name| {
            Some(
                match name {
                    ENV_BASE_URL => "http://127.0.0.1:9",
                    ENV_OWNER_USER_ID => "alice",
                    ENV_SCOPE_ID => "s",
                    ENV_TOKEN => "t",
                    _ => return None,
                }
                .to_owned(),
            )
        })
        .unwrap()
    }

    #[test]
    fn only_the_exact_owner_is_admitted() {
        let s = settings();
        assert!(admit(&s, &UserId::from("alice")).is_ok());
        for other in ["Alice", "alice ", " alice", "bob", "default", "   "] {
            let e = admit(&s, &UserId::from(other)).unwrap_err();
            assert!(matches!(e, MemoryError::RejectedIdentity(_)), "{other}");
            assert!(!e.to_string().contains("alice"), "owner id echoed: {e}");
        }
        let missing = admit(&s, &UserId::from_host(None)).unwrap_err();
        assert!(
            missing.to_string().contains("fallback `default`"),
            "{missing}"
        );
    }
}
