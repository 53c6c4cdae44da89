"""wmspec_jax: watermarking inside speculative sampling, in JAX.

Reference implementation of "Improving the Trade-off Between Watermark
Strength and Speculative Sampling Efficiency for Language Models" (ICLR 2026).

The public API (everything else is reached through its module):

  generate, precompile, SpeculativeConfig, GenerationResult, METHODS
                the jitted generation loop (Alg. 1 and the methods it is compared with)
  Setting       one generation setting (method, decoders, K, draft shape, temperature, top-k, h, key
                sequence, PRF version): its rules, its text-line record, its config and provenance
  WatermarkDecoder          Gumbel-max, SynthID(m), SynthID(m = ∞), inverse transform, DiPmark(α) /
                            γ-reweight, KGW(γ, δ), or a scheme registered with
                            ``decoders.register``: a scheme carries its behaviour
  interop       transformers' SynthID-Text and KGW, vLLM's Gumbel-max watermarks, bit for bit
  Secret, text_keys, StreamKeys, PRF_VERSION
                the secret, per-text stream keys, the pseudorandom construction's version
  LanguageModel, FeatureDraftModel, load_pair
                the model protocols; the built-in pair, the toy pair or local checkpoints
                (``models.pairs``)
  GeneratedText, generate_in_batches
                one generated text and its JSONL line (``text_record``); many prompts in batches
  detect        detectors from tokens and key (statistics, make, score, p-values, metrics)
  lines         text lines read, checked and scored (``lines.score_texts``: what ``wmspec-detect`` runs)
  tradeoff, theory          Fig. 1's Pareto frontiers; WS, SE, TV, A_spec
  score_law, score_power    the exact per-token detection score under H1 per method and draft; power over n tokens

Layers (import downwards only; ``tests/test_architecture.py``): storage
(``storage``, ``user_cache``) < the algorithm (``prf``, ``keys``, ``context``, ``key_sequence``,
``decoders``, ``theory``, ``candidates``, ``sampling``, ``methods``, ``score_law``, ``score_power``,
``stages``, ``setting``, ``speculative``, ``lm``, ``toy``, ``sharding``, ``models``, ``batching``,
``text_record``, ``detect``, ``tradeoff``, ``interop``) < text lines (``lines``) < the lab (``lab``: data, runs, the
experiments) < the tools (``cli``). Modules and names are imported on first
use (:mod:`wmspec_jax._lazy`): ``import wmspec_jax`` does not start JAX. Each module's
``__all__`` names what it offers; its other names are its own business.
"""

from wmspec_jax._lazy import attach

SUBMODULES = (
    "batching", "buffers", "candidates", "cli", "context", "decoders", "detect", "interop", "key_sequence", "keys", "lab",
    "lines", "lm", "methods",
    "models",
    "multidraft", "prf", "prf_keys", "prf_numpy", "race_tree", "sampling", "score_law", "score_power", "setting", "sharding", "sources",
    "speculative", "stages",
    "storage", "text_data", "text_record", "textnorm", "theory", "toy", "tradeoff", "user_cache", "validation",
)
_NAMES = {
    "generate": "speculative", "precompile": "speculative", "SpeculativeConfig": "speculative",
    "GenerationResult": "speculative", "METHODS": "methods", "Setting": "setting",
    "WatermarkDecoder": "decoders",
    "Secret": "keys", "text_keys": "keys", "StreamKeys": "keys", "PRF_VERSION": "prf_keys",
    "LanguageModel": "lm", "FeatureDraftModel": "lm",
    "load_pair": "models.pairs",
    "GeneratedText": "text_record", "generate_in_batches": "batching",
}
__getattr__, __dir__, __all__ = attach(__name__, SUBMODULES, _NAMES)

__version__ = "0.1.0"
