"""Benchmarks: each a module, ``python -m benchmarks.<name>``; numbers in docs/performance.md."""
