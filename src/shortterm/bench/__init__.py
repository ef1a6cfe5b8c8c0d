"""Benchmarks run on demand by ``shortterm bench`` (never as timed tests)."""
