"""The watermark schemes' default parameters, in one place that imports nothing.

The decoders (:mod:`wmspec_jax.decoders.base`), the tools' flags and the readers of lines that record
no setting take them from here; the tools read them without loading JAX, so ``--help`` stays instant.
"""

DIPMARK_ALPHA = 0.45
"""DiPmark's α when none is given (the value Wu et al. 2024 recommend)."""
KGW_GAMMA = 0.25
KGW_DELTA = 2.0
"""KGW's green fraction γ and bias δ when none are given (Kirchenbauer et al. 2023's γ = 0.25, δ = 2)."""

__all__ = ["DIPMARK_ALPHA", "KGW_DELTA", "KGW_GAMMA"]
