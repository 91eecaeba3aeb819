"""Anchors for tests that read files: the checkout, the tests folder and its data."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
