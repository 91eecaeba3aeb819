"""Tests of xladist/bench/: the `xladist bench` harnesses."""
