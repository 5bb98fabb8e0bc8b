"""A stand-in for the DeerFlow package, for memgate's contract tests."""
