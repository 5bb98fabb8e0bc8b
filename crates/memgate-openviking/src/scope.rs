//! Where a host request lands in OpenViking: owner check, peer, session, and
//! the memory roots recall searches.
//!
//! - **Owner.** One USER API key belongs to one host user
//!   (`owner_user_id`). Any other user is refused before the network or the
//!   cursor is touched, so one credential is never shared across users.
//! - **Peer.** Inside that user, each agent gets its own peer (memory scope):
//!   the default agent uses `default_peer_id`; a named agent uses its
//!   lowercased name when that is a safe peer id, and otherwise (unsafe,
//!   equal to the default, or in the reserved `df-agent-` namespace)
//!   `df-agent-` + 32 hex of SHA-256 of the lowercased name, so generated
//!   and chosen ids never alias.
//! - **Session.** One host thread of one peer is one OpenViking session:
//!   `df_` + 48 hex of SHA-256 over the namespaced, NUL-joined
//!   (owner, peer, thread). Commits archive inside it; it never changes.
//! - **Memory roots.** The user's own memory and the current peer's memory.

use crate::config::{is_safe_peer_id, GENERATED_PEER_PREFIX};
use crate::pystr;
use memgate_core::signature::sha256_hex;
use memgate_core::{Caller, MemoryError, Result};

/// The namespace salt of session ids (shared with DeerFlow, so sessions
/// created by either implementation are the same sessions).
pub const SESSION_NAMESPACE: &str = "deerflow-openviking-adapter-v1";

/// Refuses any user other than the key's owner. `None`/`""` users arrive as
/// `default` (see `UserId::from_host`), so `owner_user_id: default` serves a
/// host without authentication.
pub fn check_owner(owner_user_id: &str, caller: &Caller) -> Result<()> {
    let user = caller.user.as_str();
    if user == owner_user_id {
        Ok(())
    } else {
        Err(MemoryError::RejectedIdentity(format!(
            "OpenViking USER API key is bound to DeerFlow owner_user_id {}, but this request belongs to {}. Refusing to share one credential across users.",
            pystr::repr(owner_user_id),
            pystr::repr(user)
        )))
    }
}

/// The OpenViking peer of an agent (`None` = the host's default agent).
pub fn canonical_peer_id(agent_name: Option<&str>, default_peer_id: &str) -> Result<String> {
    let Some(name) = agent_name else {
        return Ok(default_peer_id.to_owned());
    };
    let v = pystr::strip(name).to_lowercase();
    if v.is_empty() || v == "__default__" {
        return Err(MemoryError::invalid(
            "agent_name",
            format!("Invalid OpenViking peer scope: {}", pystr::repr(name)),
        ));
    }
    if is_safe_peer_id(&v) && v != default_peer_id && !v.starts_with(GENERATED_PEER_PREFIX) {
        return Ok(v);
    }
    let digest = sha256_hex(v.as_bytes());
    Ok(format!("{GENERATED_PEER_PREFIX}{}", &digest[..32]))
}

/// The OpenViking session id of one thread of one peer.
pub fn session_id(owner_user_id: &str, peer_id: &str, thread_id: &str) -> String {
    let material = format!("{SESSION_NAMESPACE}\0{owner_user_id}\0{peer_id}\0{thread_id}");
    let digest = sha256_hex(material.as_bytes());
    format!("df_{}", &digest[..48])
}

/// How memory roots are spelled in target URIs.
///
/// OpenViking 0.5.x rejects the uid-less `viking://user/memories` with 400
/// `INVALID_URI` and asks for the caller's home, `viking://~/memories`
/// (which it expands to `viking://user/{uid}/memories`). Older servers (and
/// DeerFlow's code) use the uid-less form. memgate uses the home form unless
/// `/health` reported a server older than 0.5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UriStyle {
    /// `viking://~/memories`, `viking://~/peers/{peer}/memories` (0.5 and later).
    Home,
    /// `viking://user/memories`, `viking://user/peers/{peer}/memories` (before 0.5).
    Legacy,
}

impl UriStyle {
    /// The style for a server version string from `/health` (`"0.5.2"`);
    /// unknown or unparsable versions get the current style.
    pub fn for_server_version(version: Option<&str>) -> Self {
        let parsed = version.and_then(|v| {
            let mut parts = v.trim().trim_start_matches('v').split('.');
            let major: u64 = parts.next()?.parse().ok()?;
            let minor: u64 = parts
                .next()?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()?;
            Some((major, minor))
        });
        match parsed {
            Some(v) if v < (0, 5) => Self::Legacy,
            _ => Self::Home,
        }
    }

    /// The user's own memory root, then the peer's.
    pub fn memory_target_uris(self, peer_id: &str) -> [String; 2] {
        let root = match self {
            Self::Home => "viking://~",
            Self::Legacy => "viking://user",
        };
        [
            format!("{root}/memories"),
            format!("{root}/peers/{peer_id}/memories"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Test vectors from deerflow-memory-contract §5.2.
    #[test]
    fn session_id_vectors() {
        assert_eq!(
            session_id("alice", "research", "thread-1"),
            "df_37a681a43a6b7c1cea6b092d50b00150bb780f0c09bec010"
        );
        assert_eq!(
            session_id("default", "deerflow", "t1"),
            "df_9830ea3328b0b0cd4a878e064f4b82101d37b33684db5ce7"
        );
        assert_eq!(session_id("a", "b", "c").len(), 51);
    }

    #[test]
    fn peer_vectors() {
        let peer = |name: Option<&str>| canonical_peer_id(name, "deerflow").unwrap();
        assert_eq!(peer(None), "deerflow");
        assert_eq!(peer(Some("Research")), "research");
        assert_eq!(peer(Some("  Research ")), "research");
        assert_eq!(
            peer(Some("deerflow")),
            "df-agent-ea44dcc4367369f986dee4986c0d1a3c"
        );
        assert_eq!(
            peer(Some("Deerflow")),
            "df-agent-ea44dcc4367369f986dee4986c0d1a3c"
        );
        assert_eq!(
            peer(Some("-research")),
            "df-agent-bae6b8f0e1ba865a2ce9fc8c18ff9081"
        );
        assert_eq!(
            peer(Some("df-agent-custom")),
            "df-agent-e263580004e16e6de841e8d2dc70b2d7"
        );
        assert_eq!(
            peer(Some("__x")),
            "df-agent-670321fce2d65975b95adb71e1757013"
        );
        assert_eq!(
            peer(Some("my agent")),
            "df-agent-8cae0b6284ac92403eee714c869f124a"
        );
        assert_eq!(
            peer(Some(&"a".repeat(65))),
            "df-agent-635361c48bb9eab14198e76ea8ab7f1a"
        );
        assert_eq!(peer(Some("df-agent-custom")).len(), 41);
    }

    #[test]
    fn peer_namespaces_are_disjoint() {
        let ids: Vec<String> = [
            None,
            Some("deerflow"),
            Some("-research"),
            Some("df-agent-custom"),
        ]
        .into_iter()
        .map(|n| canonical_peer_id(n, "deerflow").unwrap())
        .collect();
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn invalid_agent_names_are_input_errors() {
        for bad in ["", "  ", "__DEFAULT__", "__default__", "\u{1c}"] {
            let err = canonical_peer_id(Some(bad), "deerflow").unwrap_err();
            assert!(matches!(err, MemoryError::InvalidInput { .. }), "{bad:?}");
            assert!(
                err.to_string().contains("Invalid OpenViking peer scope: '"),
                "{err}"
            );
        }
        let err = canonical_peer_id(Some("  "), "deerflow").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid agent_name: Invalid OpenViking peer scope: '  '"
        );
    }

    #[test]
    fn owner_binding_uses_python_repr() {
        let err = check_owner("alice", &Caller::new("bob")).unwrap_err();
        assert!(matches!(err, MemoryError::RejectedIdentity(_)));
        assert_eq!(
            err.to_string(),
            "OpenViking USER API key is bound to DeerFlow owner_user_id 'alice', but this request belongs to 'bob'. Refusing to share one credential across users."
        );
        let err =
            check_owner("alice", &Caller::new(memgate_core::UserId::from_host(None))).unwrap_err();
        assert!(err.to_string().contains("belongs to 'default'"));
        assert!(check_owner(
            "default",
            &Caller::new(memgate_core::UserId::from_host(None))
        )
        .is_ok());
        assert!(check_owner(
            "default",
            &Caller::new(memgate_core::UserId::from_host(Some("")))
        )
        .is_ok());
        assert!(check_owner("alice", &Caller::new("alice")).is_ok());
        assert!(
            check_owner("alice", &Caller::new("Alice")).is_err(),
            "no case folding"
        );
    }

    #[test]
    fn uri_style_follows_the_server_version() {
        assert_eq!(UriStyle::for_server_version(Some("0.5.2")), UriStyle::Home);
        assert_eq!(UriStyle::for_server_version(Some("1.0.0")), UriStyle::Home);
        assert_eq!(
            UriStyle::for_server_version(Some("0.4.16")),
            UriStyle::Legacy
        );
        assert_eq!(
            UriStyle::for_server_version(Some("v0.3.1rc1")),
            UriStyle::Legacy
        );
        assert_eq!(UriStyle::for_server_version(None), UriStyle::Home);
        assert_eq!(UriStyle::for_server_version(Some("dev")), UriStyle::Home);
        assert_eq!(
            UriStyle::Home.memory_target_uris("research"),
            ["viking://~/memories", "viking://~/peers/research/memories"]
        );
        assert_eq!(
            UriStyle::Legacy.memory_target_uris("research"),
            [
                "viking://user/memories",
                "viking://user/peers/research/memories"
            ]
        );
    }
}
