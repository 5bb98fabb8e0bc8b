//! # memgate-redact — secrets never become memory
//!
//! Users paste API keys, bearer tokens, connection strings and private keys
//! into chats. Before memgate stores a turn, indexes it or sends it to a
//! memory server, [`Redactor::redact`] replaces every secret it recognises
//! with a typed placeholder such as `[redacted:api_key]`, so recall can still
//! say *that* a key was there without ever holding it.
//!
//! Pure: no I/O, no logging. A [`Redaction`] reports which kinds were found
//! and how many, never the matched text, so callers cannot log a secret by
//! logging the result.
//!
//! ## Where the rules come from
//!
//! The provider formats (AWS access key ids, GitHub, GitLab, Slack, Stripe,
//! OpenAI, Anthropic, Google, Hugging Face, npm, PyPI, SendGrid, Twilio,
//! Telegram, DigitalOcean, Shopify, Google OAuth client secrets, JWTs, PEM
//! private keys) follow the token formats documented by the providers and
//! catalogued in the gitleaks default ruleset (`config/gitleaks.toml`,
//! MIT-licensed); the expressions here are written for this crate, not
//! copied. The generic rules (a keyword such as `secret`, `token`, `api_key`
//! or `password` followed by an assignment, credentials in URLs, `Bearer` and
//! `Basic` authorization values) follow the same ruleset's generic-key idea:
//! a keyword plus a value that looks machine-made (letters *and* digits, and
//! enough Shannon entropy), which keeps commit hashes, UUIDs, base64 captions
//! and ordinary words intact unless a keyword says they are a secret.
//!
//! ## Cost
//!
//! One [`regex::RegexSet`] pass over the text decides which rules can match
//! at all; only those rules run again to find their spans. A turn without a
//! secret costs one scan and no allocation (the text is borrowed back).

use regex::{Regex, RegexSet};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// The placeholder that replaces a secret of `kind`.
pub fn placeholder(kind: &str) -> String {
    format!("[redacted:{kind}]")
}

/// What a matched value must also satisfy before it counts as a secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The format alone is specific enough.
    Format,
    /// A keyword-assigned value: at least 16 characters with letters and
    /// digits and at least 3.5 bits of entropy per character.
    MachineMade,
    /// A keyword-assigned password: at least 6 characters and not a plain
    /// word (it has a digit, a symbol, or an upper-case letter after the first).
    NotPlainWord,
    /// A `Bearer`/`Basic` value: at least one digit or a mix of cases.
    TokenLike,
}

/// One built-in rule: id, placeholder kind, expression, the capture group
/// that holds the secret (0: the whole match), and its check.
struct Builtin {
    id: &'static str,
    kind: &'static str,
    pattern: &'static str,
    group: usize,
    check: Check,
}

const fn rule(
    id: &'static str,
    kind: &'static str,
    pattern: &'static str,
    group: usize,
    check: Check,
) -> Builtin {
    Builtin {
        id,
        kind,
        pattern,
        group,
        check,
    }
}

/// The built-in rules, most specific first (on equal spans the earlier wins).
const BUILTIN: &[Builtin] = &[
    rule(
        "private_key",
        "private_key",
        r"-----BEGIN[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END[ A-Z0-9_-]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        0,
        Check::Format,
    ),
    rule(
        "aws_access_key_id",
        "access_key",
        r"(?-u:\b)(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "aws_secret_access_key",
        "secret",
        r#"(?i:aws_?secret_?access_?key)["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})"#,
        1,
        Check::Format,
    ),
    rule(
        "github_token",
        "token",
        r"(?-u:\b)(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "gitlab_token",
        "token",
        r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}",
        0,
        Check::Format,
    ),
    rule(
        "slack_token",
        "token",
        r"(?-u:\b)(?:xox[abeposr]-[0-9A-Za-z-]{10,}|xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+)",
        0,
        Check::Format,
    ),
    rule(
        "slack_webhook",
        "webhook_url",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{20,}",
        0,
        Check::Format,
    ),
    rule(
        "anthropic_api_key",
        "api_key",
        r"(?-u:\b)sk-ant-(?:api|admin|oat)[0-9]{2}-[A-Za-z0-9_-]{20,}",
        0,
        Check::Format,
    ),
    rule(
        "openai_api_key",
        "api_key",
        r"(?-u:\b)sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}(?-u:\b)|[A-Za-z0-9]{32,}(?-u:\b))",
        0,
        Check::Format,
    ),
    rule(
        "google_api_key",
        "api_key",
        r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
        0,
        Check::Format,
    ),
    rule(
        "google_oauth_client_secret",
        "secret",
        r"(?-u:\b)GOCSPX-[A-Za-z0-9_-]{28}",
        0,
        Check::Format,
    ),
    rule(
        "stripe_key",
        "api_key",
        r"(?-u:\b)(?:sk|rk)_(?:test|live|prod)_[0-9A-Za-z]{10,}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "sendgrid_api_key",
        "api_key",
        r"(?-u:\b)SG\.[A-Za-z0-9_-]{20,24}\.[A-Za-z0-9_-]{40,46}",
        0,
        Check::Format,
    ),
    rule(
        "huggingface_token",
        "api_key",
        r"(?-u:\b)hf_[A-Za-z]{34}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "npm_token",
        "token",
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "pypi_token",
        "token",
        r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        0,
        Check::Format,
    ),
    rule(
        "twilio_api_key",
        "api_key",
        r"(?-u:\b)SK[0-9a-fA-F]{32}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "telegram_bot_token",
        "token",
        r"(?-u:\b)[0-9]{8,10}:AA[0-9A-Za-z_-]{33}",
        0,
        Check::Format,
    ),
    rule(
        "digitalocean_token",
        "token",
        r"(?-u:\b)do[opr]_v1_[a-f0-9]{64}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "shopify_token",
        "token",
        r"(?-u:\b)shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?-u:\b)",
        0,
        Check::Format,
    ),
    rule(
        "jwt",
        "jwt",
        r"(?-u:\b)ey[A-Za-z0-9_-]{15,}\.ey[A-Za-z0-9/_-]{15,}\.(?:[A-Za-z0-9/_-]{10,}={0,2})?",
        0,
        Check::Format,
    ),
    rule(
        "bearer_token",
        "bearer_token",
        r"(?i:bearer)\s+([A-Za-z0-9._~+/-]{16,}=*)",
        1,
        Check::TokenLike,
    ),
    rule(
        "basic_auth",
        "password",
        r"(?i:authorization\s*:\s*basic)\s+([A-Za-z0-9+/]{8,}={0,2})",
        1,
        Check::TokenLike,
    ),
    rule(
        "url_password",
        "password",
        r"[A-Za-z][A-Za-z0-9+.-]+://[^\s:/@]+:([^\s@/]+)@",
        1,
        Check::Format,
    ),
    rule(
        "password_assignment",
        "password",
        r#"(?i:passw(?:or)?d|pwd|passphrase)[A-Za-z0-9_.-]*["'`]?\s*(?::=|=>|[:=]|\s(?i:is)\s)\s*["'`]?([^\s"'`,;<>\[\](){}]{6,})"#,
        1,
        Check::NotPlainWord,
    ),
    rule(
        "generic_secret",
        "secret",
        r#"(?i:api[_-]?key|apikey|access[_-]?key|secret|token|credentials?|(?:private|account|signing|encryption|master|auth|client)[_-]?key)[A-Za-z0-9_.-]*["'`]?\s*(?::=|=>|[:=]|\s(?i:is)\s)\s*["'`]?([^\s"'`,;<>\[\](){}]{16,})"#,
        1,
        Check::MachineMade,
    ),
];

/// Shannon entropy of `s` in bits per byte.
fn entropy(s: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// The value without sentence punctuation a writer put after it.
fn trim_trailing_punctuation(value: &str) -> &str {
    value.trim_end_matches(['.', ',', '!', '?', ':', ';'])
}

impl Check {
    fn accepts(self, value: &str) -> bool {
        let has_digit = value.bytes().any(|b| b.is_ascii_digit());
        let has_alpha = value.chars().any(char::is_alphabetic);
        match self {
            Self::Format => true,
            Self::MachineMade => {
                value.chars().count() >= 16 && has_digit && has_alpha && entropy(value) >= 3.5
            }
            Self::NotPlainWord => {
                value.chars().count() >= 6
                    && (has_digit
                        || value.chars().any(|c| !c.is_alphanumeric())
                        || value.chars().skip(1).any(char::is_uppercase))
            }
            Self::TokenLike => {
                has_digit
                    || (value.chars().any(char::is_uppercase)
                        && value.chars().any(char::is_lowercase))
            }
        }
    }
}

/// One compiled rule.
struct Rule {
    id: String,
    kind: String,
    regex: Regex,
    group: usize,
    check: Check,
}

/// A rule an operator adds: every match of `pattern` (or of its first
/// capture group, when it has one) becomes `[redacted:<name>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomRule {
    pub name: String,
    pub pattern: String,
}

/// How a [`Redactor`] is built; the default is every built-in rule on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactionSettings {
    /// Off: text passes through unchanged (an operator's explicit choice).
    pub enabled: bool,
    /// Built-in rule ids to turn off (see [`builtin_rule_ids`]).
    pub disabled_rules: Vec<String>,
    /// Extra rules, checked after the built-in ones.
    pub custom_rules: Vec<CustomRule>,
}

impl Default for RedactionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            disabled_rules: Vec::new(),
            custom_rules: Vec::new(),
        }
    }
}

/// A setting that cannot be used; names the setting and the rule it broke,
/// never text that was scanned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    /// The setting, relative to the redaction settings (`disable[2]`,
    /// `patterns.ticket_id`).
    pub field: String,
    pub rule: String,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl std::error::Error for SettingsError {}

/// The ids of the built-in rules, in order.
pub fn builtin_rule_ids() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|r| r.id)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Finds secrets and replaces them with typed placeholders.
pub struct Redactor {
    enabled: bool,
    rules: Vec<Rule>,
    set: RegexSet,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("enabled", &self.enabled)
            .field("rules", &self.rule_ids().collect::<Vec<_>>())
            .finish()
    }
}

/// The result of one redaction. It never holds what was removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redaction<'a> {
    /// The text with every secret replaced (borrowed when nothing was found).
    pub text: Cow<'a, str>,
    /// How many secrets of each placeholder kind were replaced.
    pub found: BTreeMap<String, usize>,
    /// Words (two or more letters) left outside the secrets.
    words_left: usize,
}

impl Redaction<'_> {
    /// How many secrets were replaced.
    pub fn count(&self) -> usize {
        self.found.values().sum()
    }

    pub fn is_clean(&self) -> bool {
        self.found.is_empty()
    }

    /// True when the text is a secret rather than a sentence that mentions
    /// one: fewer than [`WORDS_OF_A_MEMORY`] words are left outside the
    /// secrets (`key: sk-…`, a bare token, a pasted private key). Such a
    /// text says nothing worth keeping once redacted, so an explicit save of
    /// it is refused rather than stored.
    pub fn is_mostly_secret(&self) -> bool {
        !self.found.is_empty() && self.words_left < WORDS_OF_A_MEMORY
    }

    /// The kinds found, e.g. `api_key, password` (for a refusal reason).
    pub fn kinds(&self) -> String {
        self.found.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    pub fn into_owned(self) -> Redaction<'static> {
        Redaction {
            text: Cow::Owned(self.text.into_owned()),
            found: self.found,
            words_left: self.words_left,
        }
    }
}

/// How many words a text needs outside its secrets to be worth remembering.
pub const WORDS_OF_A_MEMORY: usize = 3;

/// Runs of two or more letters in `s`.
fn words(s: &str) -> usize {
    s.split(|c: char| !c.is_alphabetic())
        .filter(|w| w.chars().nth(1).is_some())
        .count()
}

/// Why a pattern failed to compile, without the pattern: the regex crate's
/// message quotes the expression, which may hold the very value it guards.
fn regex_reason(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(message) => message
            .lines()
            .find_map(|l| l.trim().strip_prefix("error: "))
            .unwrap_or("syntax error")
            .to_owned(),
        regex::Error::CompiledTooBig(limit) => {
            format!("the compiled expression exceeds the size limit of {limit} bytes")
        }
        _ => "cannot be compiled".to_owned(),
    }
}

/// A secret's place in the text and the index of its rule.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    rule: usize,
}

impl Redactor {
    /// Builds a redactor; errors name the setting and the rule it broke.
    pub fn new(settings: &RedactionSettings) -> Result<Self, SettingsError> {
        for (i, id) in settings.disabled_rules.iter().enumerate() {
            if !BUILTIN.iter().any(|r| r.id == id) {
                return Err(SettingsError {
                    field: format!("disable[{i}]"),
                    rule: format!(
                        "`{id}` is not a built-in rule (known: {})",
                        builtin_rule_ids().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        let mut rules = Vec::new();
        for b in BUILTIN {
            if settings.disabled_rules.iter().any(|d| d == b.id) {
                continue;
            }
            rules.push(Rule {
                id: b.id.to_owned(),
                kind: b.kind.to_owned(),
                regex: Regex::new(b.pattern).expect("built-in redaction rules compile"),
                group: b.group,
                check: b.check,
            });
        }
        for custom in &settings.custom_rules {
            let field = format!("patterns.{}", custom.name);
            if !valid_name(&custom.name) {
                return Err(SettingsError {
                    field: "patterns".to_owned(),
                    rule: "rule names must be 1-40 characters of a-z, 0-9 and _ \
                           (they become the placeholder kind)"
                        .to_owned(),
                });
            }
            if rules.iter().any(|r| r.id == custom.name) {
                return Err(SettingsError {
                    field,
                    rule: "a rule with this name already exists".to_owned(),
                });
            }
            let regex = Regex::new(&custom.pattern).map_err(|e| SettingsError {
                field: field.clone(),
                rule: format!("must be a valid regular expression ({})", regex_reason(&e)),
            })?;
            if regex.is_match("") {
                return Err(SettingsError {
                    field,
                    rule: "must not match the empty string".to_owned(),
                });
            }
            let group = usize::from(regex.captures_len() > 1);
            rules.push(Rule {
                id: custom.name.clone(),
                kind: custom.name.clone(),
                regex,
                group,
                check: Check::Format,
            });
        }
        let set =
            RegexSet::new(rules.iter().map(|r| r.regex.as_str())).map_err(|e| SettingsError {
                field: "patterns".to_owned(),
                rule: format!("the rules cannot be combined ({})", regex_reason(&e)),
            })?;
        Ok(Self {
            enabled: settings.enabled,
            rules,
            set,
        })
    }

    /// A redactor that changes nothing (redaction turned off).
    pub fn disabled() -> Self {
        Self::new(&RedactionSettings {
            enabled: false,
            disabled_rules: builtin_rule_ids().map(str::to_owned).collect(),
            custom_rules: Vec::new(),
        })
        .expect("an empty rule set builds")
    }

    /// The process-wide redactor with every built-in rule on, compiled once.
    pub fn shared_default() -> Arc<Self> {
        static DEFAULT: OnceLock<Arc<Redactor>> = OnceLock::new();
        Arc::clone(DEFAULT.get_or_init(|| {
            Arc::new(Redactor::new(&RedactionSettings::default()).expect("defaults build"))
        }))
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The ids of the active rules, in order.
    pub fn rule_ids(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|r| r.id.as_str())
    }

    /// Replaces every secret in `text` with its placeholder.
    pub fn redact<'a>(&self, text: &'a str) -> Redaction<'a> {
        let clean = |text: &'a str| Redaction {
            text: Cow::Borrowed(text),
            found: BTreeMap::new(),
            words_left: 0,
        };
        if !self.enabled || self.rules.is_empty() {
            return clean(text);
        }
        // Most texts hold no secret: the set's first-match search stops
        // early and runs cheaper than the overlapping search that names
        // every rule, which only texts that match need.
        if !self.set.is_match(text) {
            return clean(text);
        }
        let matched = self.set.matches(text);
        let mut spans = Vec::new();
        for index in matched.iter() {
            let rule = &self.rules[index];
            for caps in rule.regex.captures_iter(text) {
                let Some(m) = caps.get(rule.group) else {
                    continue;
                };
                let value = if rule.check == Check::Format {
                    m.as_str()
                } else {
                    trim_trailing_punctuation(m.as_str())
                };
                if value.is_empty() || value.contains("[redacted:") || !rule.check.accepts(value) {
                    continue;
                }
                spans.push(Span {
                    start: m.start(),
                    end: m.start() + value.len(),
                    rule: index,
                });
            }
        }
        if spans.is_empty() {
            return clean(text);
        }
        // Leftmost first, then the longest, then the more specific rule.
        spans.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end), s.rule));
        let mut out = String::with_capacity(text.len());
        let mut found: BTreeMap<String, usize> = BTreeMap::new();
        let mut words_left = 0;
        let mut last = 0;
        for span in spans {
            if span.start < last {
                continue; // inside a secret already replaced
            }
            let kind = &self.rules[span.rule].kind;
            out.push_str(&text[last..span.start]);
            out.push_str(&placeholder(kind));
            words_left += words(&text[last..span.start]);
            *found.entry(kind.clone()).or_default() += 1;
            last = span.end;
        }
        words_left += words(&text[last..]);
        out.push_str(&text[last..]);
        Redaction {
            text: Cow::Owned(out),
            found,
            words_left,
        }
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(&RedactionSettings::default()).expect("defaults build")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed_back() {
        let r = Redactor::default();
        let out = r.redact("I prefer tea in the morning.");
        assert!(matches!(out.text, Cow::Borrowed(_)));
        assert!(out.is_clean());
    }

    #[test]
    fn redaction_is_idempotent() {
        let r = Redactor::default();
        let once =
            r.redact("password: Hunter2! and token=ghp_0123456789abcdefghijABCDEFGHIJ012345");
        assert_eq!(once.count(), 2, "{}", once.text);
        let twice = r.redact(&once.text);
        assert!(twice.is_clean(), "{}", twice.text);
    }

    #[test]
    fn entropy_is_bits_per_byte() {
        assert_eq!(entropy("aaaa"), 0.0);
        assert!((entropy("abcd") - 2.0).abs() < 1e-9);
    }

    #[test]
    fn settings_errors_name_the_setting() {
        let e = Redactor::new(&RedactionSettings {
            disabled_rules: vec!["jwt".into(), "nope".into()],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "disable[1]");
        let e = Redactor::new(&RedactionSettings {
            custom_rules: vec![CustomRule {
                name: "ticket".into(),
                pattern: "(TCK-Zq81secret".into(),
            }],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "patterns.ticket");
        // The reason, never the pattern (it may hold the value it guards).
        assert!(e.rule.contains("unclosed group"), "{e}");
        assert!(!e.to_string().contains("Zq81secret"), "{e}");
        let e = Redactor::new(&RedactionSettings {
            custom_rules: vec![CustomRule {
                name: "Bad Name".into(),
                pattern: "x".into(),
            }],
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.rule.contains("a-z"), "{e}");
        let e = Redactor::new(&RedactionSettings {
            custom_rules: vec![CustomRule {
                name: "empty".into(),
                pattern: "x*".into(),
            }],
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.rule.contains("empty string"), "{e}");
    }
}
