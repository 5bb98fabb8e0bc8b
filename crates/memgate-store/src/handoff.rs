//! The local store's handoff desk: [`memgate_core::handoff_desk`], held in
//! memory and bound to the user who prepared them; a commit stores one
//! milestone memory ([`crate::backend::LocalBackend`]).

pub use memgate_core::handoff_desk::{
    HandoffDesk, DEFAULT_HANDOFF_LIFETIME, MAX_HANDOFFS_PER_USER,
};
