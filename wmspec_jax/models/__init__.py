"""Functional transformers implementing the :mod:`wmspec_jax.lm` protocol."""
