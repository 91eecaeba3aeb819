"""Tests of the static deadlock check (runtime/deadlock/)."""
