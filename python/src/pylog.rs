//! Rust log events to Python's `logging`, so an operator sees memgate's
//! warnings (a fail-open recall, a dropped write) where the host's own logs
//! go: logger `memgate.<backend>.<module>` (e.g. `memgate.openviking.capture`).
//!
//! Only INFO and above are forwarded. Events carry no user text and no
//! secrets (the backends guarantee it). Spans are not tracked.

use crate::runtime::attached;
use pyo3::prelude::*;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

struct PythonLogging;

/// `message`, then ` key=value` for the other fields.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

/// `memgate_openviking::capture` → `memgate.openviking.capture`.
fn logger_name(target: &str) -> String {
    let dotted = target.replace("::", ".");
    match dotted.strip_prefix("memgate_") {
        Some(rest) => format!("memgate.{rest}"),
        None if dotted.starts_with("memgate") => dotted,
        None => format!("memgate.{dotted}"),
    }
}

fn python_level(level: &Level) -> u32 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    }
}

impl Subscriber for PythonLogging {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        let meta = event.metadata();
        let text = format!("{}{}", line.message, line.fields);
        let name = logger_name(meta.target());
        let level = python_level(meta.level());
        // Never block on or fail because of logging (e.g. at interpreter exit).
        attached(|py| {
            let logged = py
                .import("logging")
                .and_then(|logging| logging.call_method1("getLogger", (name,)))
                .and_then(|logger| logger.call_method1("log", (level, text)));
            if let Err(e) = logged {
                e.write_unraisable(py, None);
            }
        });
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Installs the bridge as the process-wide subscriber (once; a host that
/// installed its own keeps it).
pub fn install() {
    let _ = tracing::subscriber::set_global_default(PythonLogging);
}
