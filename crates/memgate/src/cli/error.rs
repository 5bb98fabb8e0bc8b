//! What a command can fail with: the memory layer's own errors, and the
//! failures that belong to the command itself (its files and listener, the
//! chat's model endpoint, its own tasks). Kept apart so a full disk or a
//! model outage is never reported as a memory backend failure.

use memgate_core::MemoryError;

pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The memory layer answered with an error.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// An input the user named (a transcript or import file, stdin) cannot
    /// be read: bad input, like a wrong argument.
    #[error("cannot read {what}: {source}")]
    Input {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A file, the terminal or the listen socket the command opens.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The chat's model endpoint failed or refused (its key scrubbed; the
    /// text says it is the model, e.g. "model endpoint answered HTTP 401").
    #[error("{0}")]
    Model(String),
    /// A setting of the command itself broke a rule (e.g. the chat's model
    /// variables); names the setting and the rule.
    #[error("{0}")]
    Setting(String),
    /// The command's own machinery (the runtime, a task, rendering output).
    #[error("{0}")]
    Internal(String),
}

impl CliError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }

    /// 2 for bad input (arguments, config, refused identity), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Memory(e) if e.is_caller_error() => 2,
            Self::Setting(_) | Self::Input { .. } => 2,
            _ => 1,
        }
    }
}
