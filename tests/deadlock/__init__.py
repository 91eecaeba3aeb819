"""Tests of the static deadlock check (xladist/runtime/deadlock/)."""
