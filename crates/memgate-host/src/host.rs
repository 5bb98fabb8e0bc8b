//! [`MemoryHost`]: the three host surfaces over one backend and one set of
//! switches, for hosts that want them together.

use crate::capture::CaptureHooks;
use crate::clock::Clock;
use crate::injection::RecallInjector;
use crate::settings::HostSettings;
use crate::tools::HostTools;
use memgate_core::MemoryBackend;
use std::sync::Arc;

/// Recall injection, capture hooks and memory tools sharing a backend.
#[derive(Clone)]
pub struct MemoryHost {
    backend: Arc<dyn MemoryBackend>,
    settings: HostSettings,
    injector: RecallInjector,
    capture: CaptureHooks,
    tools: HostTools,
}

impl MemoryHost {
    pub fn new(backend: Arc<dyn MemoryBackend>, settings: HostSettings) -> Self {
        Self {
            injector: RecallInjector::new(Arc::clone(&backend), settings),
            capture: CaptureHooks::new(Arc::clone(&backend), settings),
            tools: HostTools::new(Arc::clone(&backend), settings.remember_tool),
            backend,
            settings,
        }
    }

    /// Uses `clock` for reminder dates.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.injector = self.injector.with_clock(clock);
        self
    }

    pub fn backend(&self) -> &Arc<dyn MemoryBackend> {
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
