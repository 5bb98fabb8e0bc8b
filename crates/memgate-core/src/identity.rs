//! Caller identity as the host resolved it.
//!
//! memgate never derives identity from model tool arguments, prompt text or
//! thread titles: the host authenticates its user and passes the result in.
//! Hosts that have no identity fall back to the literal user id `default`
//! (DeerFlow does this when auth is disabled or no user context exists). That
//! fallback is kept observable here, so owner-bound backends can refuse it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The user id a host falls back to when it has no authenticated identity.
pub const DEFAULT_USER_ID: &str = "default";

/// A user id exactly as the host resolved it (no trimming, no case folding).
///
/// An absent or empty id becomes [`DEFAULT_USER_ID`], as in the host
/// contract; [`UserId::is_default_fallback`] tells the two apart from a real
/// user only by value, which is the point: `default` is never proof of
/// authentication.
#[derive(Clone, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct UserId(String);

/// `null` and `""` read as the `default` fallback, like an absent id.
impl<'de> Deserialize<'de> for UserId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Option::<String>::deserialize(d)?;
        Ok(UserId::from_host(raw.as_deref()))
    }
}

impl UserId {
    /// The user id the host passed, with `None` and `""` mapped to `default`.
    pub fn from_host(raw: Option<&str>) -> Self {
        match raw {
            None | Some("") => Self::default_fallback(),
            Some(id) => Self(id.to_owned()),
        }
    }

    /// The host's missing-identity fallback, `default`.
    pub fn default_fallback() -> Self {
        Self(DEFAULT_USER_ID.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the literal `default` user, the host's missing-identity fallback.
    pub fn is_default_fallback(&self) -> bool {
        self.0 == DEFAULT_USER_ID
    }

    /// Why this id cannot be an authenticated owner, if it cannot: blank,
    /// whitespace-padded, or the `default` fallback. Owner-bound backends
    /// (PowerContext) refuse such ids before any request.
    pub fn owner_defect(&self) -> Option<&'static str> {
        owner_id_defect(&self.0)
    }
}

/// Why a raw id cannot serve as an authenticated owner id, if it cannot.
pub fn owner_id_defect(raw: &str) -> Option<&'static str> {
    if raw.trim().is_empty() {
        Some("is blank")
    } else if raw.trim() != raw {
        Some("has leading or trailing whitespace")
    } else if raw == DEFAULT_USER_ID {
        Some("is the host's missing-identity fallback `default`")
    } else {
        None
    }
}

impl Default for UserId {
    fn default() -> Self {
        Self::default_fallback()
    }
}

impl fmt::Debug for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserId({:?})", self.0)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for UserId {
    fn from(raw: &str) -> Self {
        Self::from_host(Some(raw))
    }
}

impl From<String> for UserId {
    fn from(raw: String) -> Self {
        if raw.is_empty() {
            Self::default_fallback()
        } else {
            Self(raw)
        }
    }
}

/// Who is asking: the host-resolved user, the agent (`None` = the host's
/// default agent) and the conversation thread, when there is one.
///
/// In process, hosts build it with [`Caller::new`] / [`UserId::from_host`]
/// (where a missing id becomes `default`). On the wire (the HTTP API) it is
/// strict: an object with a non-empty `user` string (the fallback is spelled
/// `"default"`), optional `agent` and `thread`, no other field, and every id
/// free of control characters and at most [`MAX_ID_BYTES`] bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct Caller {
    /// The host-resolved user id; `default` is the host's missing-identity fallback.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 512)))]
    pub user: UserId,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 512)))]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 512)))]
    pub thread: Option<String>,
}

/// The longest user, agent, thread or message id accepted on the wire.
pub const MAX_ID_BYTES: usize = 512;

/// Why `value` cannot be an id, if it cannot: empty, too long, or holding a
/// control character (NUL included), which no host id contains and which
/// would end up in file names, URLs and logs.
pub fn id_defect(value: &str) -> Option<String> {
    if value.is_empty() {
        Some("must not be empty".to_owned())
    } else if value.len() > MAX_ID_BYTES {
        Some(format!(
            "must be at most {MAX_ID_BYTES} bytes (got {})",
            value.len()
        ))
    } else if value.chars().any(char::is_control) {
        Some("must not contain control characters (NUL, newlines, …)".to_owned())
    } else {
        None
    }
}

impl<'de> Deserialize<'de> for Caller {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};

        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            user: String,
            #[serde(default)]
            agent: Option<String>,
            #[serde(default)]
            thread: Option<String>,
        }

        /// Only an object: a derived struct would also read from a sequence.
        struct ObjectOnly;
        impl<'de> Visitor<'de> for ObjectOnly {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object {\"user\": …, \"agent\"?: …, \"thread\"?: …}")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Fields, A::Error> {
                Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }

        let fields = d.deserialize_map(ObjectOnly)?;
        for (name, value) in [
            ("user", Some(&fields.user)),
            ("agent", fields.agent.as_ref()),
            ("thread", fields.thread.as_ref()),
        ] {
            if let Some(rule) = value.and_then(|v| id_defect(v)) {
                return Err(D::Error::custom(format!("caller.{name} {rule}")));
            }
        }
        Ok(Caller {
            user: UserId(fields.user),
            agent: fields.agent,
            thread: fields.thread,
        })
    }
}

impl Caller {
    pub fn new(user: impl Into<UserId>) -> Self {
        Self {
            user: user.into(),
            agent: None,
            thread: None,
        }
    }

    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    pub fn with_thread(mut self, thread: impl Into<String>) -> Self {
        self.thread = Some(thread.into());
        self
    }

    /// The thread id, or an `InvalidInput` error: captures always belong to a
    /// thread.
    pub fn require_thread(&self) -> crate::Result<&str> {
        match self.thread.as_deref() {
            Some(t) if !t.is_empty() => Ok(t),
            _ => Err(crate::MemoryError::invalid(
                "thread",
                "a capture requires a non-empty thread id",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_and_empty_user_fall_back_to_default() {
        assert!(UserId::from_host(None).is_default_fallback());
        assert!(UserId::from_host(Some("")).is_default_fallback());
        assert!(UserId::from(String::new()).is_default_fallback());
        assert!(!UserId::from("alice").is_default_fallback());
    }

    #[test]
    fn user_id_is_kept_verbatim() {
        assert_eq!(UserId::from(" alice ").as_str(), " alice ");
    }

    #[test]
    fn owner_defects_are_named() {
        assert_eq!(owner_id_defect("  "), Some("is blank"));
        assert_eq!(
            owner_id_defect(" alice"),
            Some("has leading or trailing whitespace")
        );
        assert!(owner_id_defect("default").unwrap().contains("fallback"));
        assert_eq!(owner_id_defect("alice"), None);
        assert_eq!(
            UserId::from_host(None).owner_defect(),
            owner_id_defect("default")
        );
    }

    #[test]
    fn caller_json_is_strict() {
        let c: Caller = serde_json::from_str(r#"{"user":"default","thread":"t"}"#).unwrap();
        assert!(c.user.is_default_fallback());
        assert_eq!(c.thread.as_deref(), Some("t"));
        let c: Caller = serde_json::from_str(r#"{"user":"a","agent":null}"#).unwrap();
        assert_eq!(c.agent, None);
        for (body, expect) in [
            (r#"{}"#, "missing field `user`"),
            (r#"{"user":null}"#, "invalid type: null"),
            (r#"{"user":""}"#, "caller.user must not be empty"),
            (r#"[]"#, "expected an object"),
            (r#"["alice"]"#, "expected an object"),
            (r#"{"user":"a","scope":"x"}"#, "unknown field `scope`"),
            (
                r#"{"user":"a\u0000b"}"#,
                "caller.user must not contain control characters",
            ),
            (
                r#"{"user":"a","thread":""}"#,
                "caller.thread must not be empty",
            ),
        ] {
            let e = serde_json::from_str::<Caller>(body)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expect), "{body}: {e}");
        }
        let long = format!(
            r#"{{"user":"a","thread":"{}"}}"#,
            "t".repeat(MAX_ID_BYTES + 1)
        );
        let e = serde_json::from_str::<Caller>(&long)
            .unwrap_err()
            .to_string();
        assert!(e.contains("caller.thread must be at most 512 bytes"), "{e}");
        // What the HTTP client sends reads back as the same caller.
        let c = Caller::new("alice").with_agent("coder").with_thread("t1");
        let back: Caller = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn captures_require_a_thread() {
        let err = Caller::new("u").require_thread().unwrap_err();
        assert!(err.to_string().contains("thread"));
        assert!(Caller::new("u").with_thread("").require_thread().is_err());
        assert_eq!(
            Caller::new("u").with_thread("t").require_thread().unwrap(),
            "t"
        );
    }
}
