//! memgate-server (under construction)
