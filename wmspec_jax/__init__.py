"""wmspec_jax: watermarking inside speculative sampling, in JAX.

Reference implementation of "Improving the Trade-off Between Watermark
Strength and Speculative Sampling Efficiency for Language Models" (ICLR 2026).

Modules (one idea each):
  keys         the secret and the one way from it to per-text stream keys
  prf          keyed, versioned counter-based streams ζ^D, ζ^T, ζ^R
  context      the repeated-context rule shared by generation and detection
  decoders     unbiased decoders (Gumbel-max, SynthID), sampler, temperature/top-k
  theory       entropy, KL, TV, watermark strength, sampling efficiency, A_spec
  lm, toy      the language-model protocol and an exact toy Markov pair
  speculative  the jitted generation loop: plain/basic/standard/hu/dathathri/
               pseudorandom (Alg. 1), with per-token records
  detect       detectors from tokens + key: Ars-τ/Prior/Oracle, soft, SynthID
               mean and Bayesian tests, metrics
  tradeoff     Pareto frontiers of watermark strength vs sampling efficiency
  models       Llama/Gemma transformers, HF/GGUF loaders, the built-in pair
  data, results, pairs   prompts and human text, atomic/resumable outputs,
               model-pair resolution for the experiments
"""

from wmspec_jax import (
    context,
    data,
    decoders,
    detect,
    keys,
    lm,
    models,
    pairs,
    prf,
    results,
    speculative,
    theory,
    toy,
    tradeoff,
    validation,
)
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
from wmspec_jax.speculative import GenerationResult, SpeculativeConfig, generate

__version__ = "0.1.0"
