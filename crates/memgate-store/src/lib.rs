//! memgate-store (under construction)
