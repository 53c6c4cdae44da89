"""wmspec_jax: watermarking inside speculative sampling (JAX)."""
