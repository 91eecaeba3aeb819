"""Tests of the static deadlock check (xladist/analysis/deadlock/)."""
