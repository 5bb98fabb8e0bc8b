//! Credentials memgate holds (server tokens, API keys, the model endpoint's
//! key): one type for all of them, so none can reach a log line, an error
//! message or a metric by formatting. Its `Debug` is redacted, it has no
//! `Display` and no `Serialize`, and the raw value is read only where it goes
//! on the wire ([`Secret::expose`]).

use std::fmt;
use std::sync::Arc;

/// A credential. Comparisons take the same time whatever the prefix.
#[derive(Clone)]
pub struct Secret(Arc<str>);

impl Secret {
    /// The value as given (callers validate their own format rules).
    pub fn new(raw: impl Into<String>) -> Self {
        Self(raw.into().into())
    }

    /// `None` for an absent or blank value; surrounding whitespace (a
    /// trailing newline from a file or a shell) is trimmed.
    pub fn from_setting(raw: Option<String>) -> Option<Self> {
        raw.map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .map(Self::new)
    }

    /// The raw value, for an `Authorization` header or a DSN only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison with what a client presented.
    pub fn matches(&self, presented: &str) -> bool {
        let a = self.0.as_bytes();
        let b = presented.as_bytes();
        let mut diff = a.len() ^ b.len();
        for i in 0..a.len().max(b.len()) {
            let x = a.get(i).copied().unwrap_or(0);
            let y = b.get(i).copied().unwrap_or(0);
            diff |= usize::from(x ^ y);
        }
        diff == 0
    }

    /// `text` with every occurrence of the value replaced by `[redacted]`:
    /// for quoting a peer's error body, which may echo the credential.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_owned()
        } else {
            text.replace(&*self.0, "[redacted]")
        }
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.expose())
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("s3cret-value");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(<redacted>))");
    }

    #[test]
    fn matches_only_the_exact_value() {
        let s = Secret::new("s3cret");
        assert!(s.matches("s3cret"));
        assert!(!s.matches("s3cre"));
        assert!(!s.matches("s3cret "));
        assert!(!s.matches(""));
        assert_eq!(s, Secret::new("s3cret"));
        assert_ne!(s, Secret::new("other"));
    }

    #[test]
    fn settings_are_trimmed_and_blank_is_none() {
        assert_eq!(
            Secret::from_setting(Some(" tok \n".into()))
                .unwrap()
                .expose(),
            "tok"
        );
        assert!(Secret::from_setting(Some("  ".into())).is_none());
        assert!(Secret::from_setting(None).is_none());
    }

    #[test]
    fn scrub_replaces_every_occurrence() {
        let s = Secret::new("k-123");
        assert_eq!(
            s.scrub("bad key k-123 (k-123)"),
            "bad key [redacted] ([redacted])"
        );
    }
}
