//! The requests being served, each by its method and route template (never
//! a path's values, an identity or memory text), so a shutdown that cuts
//! some off can say which ones.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Open requests counted by `METHOD /route`.
#[derive(Debug, Default)]
pub struct OpenRequests {
    open: Mutex<BTreeMap<String, usize>>,
}

/// One open request; dropping it (the request ended) forgets it.
pub struct OpenRequest {
    requests: Arc<OpenRequests>,
    label: String,
}

impl OpenRequests {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Counts a request to `route` (a route template) until the returned
    /// guard is dropped.
    pub fn enter(self: &Arc<Self>, method: &str, route: &str) -> OpenRequest {
        let label = format!("{method} {route}");
        *self.lock().entry(label.clone()).or_default() += 1;
        OpenRequest {
            requests: Arc::clone(self),
            label,
        }
    }

    /// The open requests, e.g. `2 × POST /v1/recall, GET /v1/facts`
    /// (empty when none is open).
    pub fn describe(&self) -> String {
        self.lock()
            .iter()
            .map(|(label, n)| match n {
                1 => label.clone(),
                n => format!("{n} × {label}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        // A count is still right after a panic elsewhere: never poisoned.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        let mut open = self.requests.lock();
        if let Some(n) = open.get_mut(&self.label) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.label);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_requests_are_named_by_route_and_forgotten_when_they_end() {
        let open = OpenRequests::new();
        let a = open.enter("POST", "/v1/recall");
        let b = open.enter("POST", "/v1/recall");
        let c = open.enter("GET", "/ui/facts/{id}");
        assert_eq!(open.describe(), "GET /ui/facts/{id}, 2 × POST /v1/recall");
        drop((a, c));
        assert_eq!(open.describe(), "POST /v1/recall");
        drop(b);
        assert_eq!(open.describe(), "");
    }
}
