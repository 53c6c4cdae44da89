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

Modules and the names below are imported on first use (:mod:`wmspec_jax._lazy`):
``import wmspec_jax`` does not start JAX.
"""

from wmspec_jax._lazy import attach

SUBMODULES = (
    "candidates", "cli", "context", "decoders", "detect", "keys", "lab", "lm", "methods", "models", "prf",
    "prf_keys", "prf_numpy", "sampling", "sharding", "sources", "speculative", "stages", "storage", "theory", "toy",
    "tradeoff", "user_cache", "validation",
)
_NAMES = {
    "WatermarkDecoder": "decoders", "gumbel_max": "decoders", "identity": "decoders",
    "linear_mixture": "decoders", "process_logits": "decoders", "sample_token": "decoders",
    "synthid": "decoders", "synthid_limit": "decoders",
    "LanguageModel": "lm",
    "PRF_VERSION": "prf_keys", "Stream": "prf_keys", "WatermarkKey": "prf_keys", "stream_keys": "prf_keys",
    "GenerationResult": "speculative", "SpeculativeConfig": "speculative", "generate": "speculative",
}
__getattr__, __dir__, __all__ = attach(__name__, SUBMODULES, _NAMES)

__version__ = "0.1.0"
