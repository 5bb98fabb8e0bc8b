//! [`MemoryHost`]: the three host surfaces over one assembled backend and
//! one set of switches, for hosts that want them together. It takes the
//! assembly's backend (never a bare one), so a Rust host gets the same gates,
//! total deadlines and bounded drain as the service, MCP and Python.

use crate::capture::CaptureHooks;
use crate::clock::Clock;
use crate::injection::RecallInjector;
use crate::settings::HostSettings;
use crate::tools::HostTools;
use memgate_assembly::{AssembledBackend, DrainReport, Operation};
use memgate_core::MemoryBackend;
use std::sync::Arc;
use std::time::Duration;

/// Recall injection, capture hooks and memory tools sharing a backend.
#[derive(Clone)]
pub struct MemoryHost {
    backend: Arc<AssembledBackend>,
    settings: HostSettings,
    injector: RecallInjector,
    capture: CaptureHooks,
    tools: HostTools,
}

impl MemoryHost {
    /// The host's own switches narrow the assembly's gates (either can turn
    /// recall or capture off), and its recall deadline never exceeds the
    /// assembly's.
    pub fn new(backend: Arc<AssembledBackend>, settings: HostSettings) -> Self {
        let gates = backend.gates();
        let settings = HostSettings {
            enabled: settings.enabled && gates.enabled,
            injection_enabled: settings.injection_enabled && gates.injection_enabled,
            recall_deadline: settings
                .recall_deadline
                .min(backend.deadlines().of(Operation::Recall)),
            ..settings
        };
        let shared: Arc<dyn MemoryBackend> = backend.clone();
        Self {
            injector: RecallInjector::new(Arc::clone(&shared), settings),
            capture: CaptureHooks::new(Arc::clone(&shared), settings),
            tools: HostTools::new(shared, settings.remember_tool),
            backend,
            settings,
        }
    }

    /// Stops new work and waits for running captures and calls within
    /// `budget`; the report says what was still running.
    pub async fn drain(&self, budget: Duration) -> DrainReport {
        self.backend.drain(budget).await
    }

    /// Uses `clock` for reminder dates.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.injector = self.injector.with_clock(clock);
        self
    }

    pub fn backend(&self) -> &Arc<AssembledBackend> {
        &self.backend
    }

    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    /// Before each model call: first-turn recall and date reminders.
    pub fn injector(&self) -> &RecallInjector {
        &self.injector
    }

    /// After a turn and before compaction.
    pub fn capture(&self) -> &CaptureHooks {
        &self.capture
    }

    /// The tools to offer the model, and their dispatch.
    pub fn tools(&self) -> &HostTools {
        &self.tools
    }
}
