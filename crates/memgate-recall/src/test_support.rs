//! A captured turn for the arithmetic tests.

use crate::citation::turn_citation;
use crate::ranked::{Origin, Ranked, TURN_KIND};

/// Turn `id` of thread `t` at position `id`, with `score`.
pub fn turn(id: i64, score: f64) -> Ranked {
    Ranked {
        citation: turn_citation(id),
        kind: TURN_KIND.to_owned(),
        text: format!("turn {id}"),
        score,
        origin: Origin::Turn {
            thread: "t".into(),
            seq: id,
            message_id: None,
            role: "human".into(),
            speaker: None,
            occurred_at: None,
        },
    }
}
