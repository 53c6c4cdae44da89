"""wmspec_jax: watermarking inside speculative sampling, in JAX.

Reference implementation of "Improving the Trade-off Between Watermark
Strength and Speculative Sampling Efficiency for Language Models" (ICLR 2026).

Modules (one idea each):
  prf          keyed, versioned counter-based streams ζ^D, ζ^T, ζ^R
  context      the repeated-context rule shared by generation and detection
  decoders     unbiased decoders (Gumbel-max, SynthID), sampler, temperature/top-k
  theory       entropy, KL, TV, watermark strength, sampling efficiency, A_spec
  lm, toy      the language-model protocol and an exact toy Markov pair
"""

from wmspec_jax import context, decoders, lm, prf, theory, toy, tradeoff, validation
from wmspec_jax.decoders import (
    WatermarkDecoder,
    gumbel_max,
    identity,
    linear_mixture,
    process_logits,
    sample_token,
    synthid,
    synthid_limit,
)
from wmspec_jax.lm import LanguageModel
from wmspec_jax.prf import PRF_VERSION, Stream, WatermarkKey, stream_keys

__version__ = "0.1.0"
