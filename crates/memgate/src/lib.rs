//! memgate (under construction)
