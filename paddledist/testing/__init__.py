"""Helpers that tests and benchmarks both use, importable without the test tree (as accelerate.test_utils)."""
