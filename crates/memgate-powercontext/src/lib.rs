//! memgate-powercontext (under construction)
