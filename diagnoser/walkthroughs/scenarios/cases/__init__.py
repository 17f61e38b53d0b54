"""Copies of the real incident cases the bundled walkthroughs are built from (tests/data/cases)."""
