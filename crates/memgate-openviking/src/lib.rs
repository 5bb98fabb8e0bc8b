//! memgate-openviking (under construction)
