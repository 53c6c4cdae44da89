"""vLLM's Gumbel-max text watermarks ("gumbel", "dual_key_gumbel"), bit for bit, without torch.

What exists (public sources, 2026):

* **vLLM** (``vllm-project/vllm``) ships generation-time watermarking since v0.30.0:
  PR #54053 (Gumbel-max sampling + detector + Philox PRF, merged), PR #56122
  (``dual_key_gumbel`` and speculative decoding, merged); RFC #53916. Files:
  ``vllm/config/watermarking.py`` (``WatermarkConfig``, ``derive_watermark_key``),
  ``vllm/v1/watermarking/prfs/philox.py`` and ``prfs/base.py`` (the PRF,
  ``version = "philox4x32-10-v1"``), ``vllm/v1/watermarking/gumbel.py`` (samplers and
  detectors), ``vllm/v1/watermarking/detector.py`` (contexts, deduplication),
  ``vllm/v1/worker/gpu/sample/watermark.py`` (the Triton kernel, same PRF),
  ``vllm/v1/watermarking/gpu_sampler.py`` (contexts: output tokens only).
  Compatibility vectors: ``tests/watermarking/test_prf.py`` and
  ``tests/watermarking/watermarking_goldens.json``; ``tests/interop/test_engine_gumbel.py``
  reproduces both.
* **TensorRT-LLM** (``NVIDIA/TensorRT-LLM``): no watermark (Gumbel or other) was found in
  its code, documentation or tracker; nothing here claims to match it.

The PRF (``philox4x32-10-v1``), for a 64-bit key ``K = (k0, k1)`` (low, high 32-bit words),
a context ``c[0..C-1]`` (the ``C = context_width`` previous *output* tokens, oldest first,
``-1`` before the first output token, each taken mod 2**32) and a candidate token ``t``::

    P(counter4, key2) = Philox4x32-10 (Salmon et al. 2011; M0=0xD2511F53, M1=0xCD9E8D57,
                        W0=0x9E3779B9, W1=0xBB67AE85; the key is not bumped after round 10)
    s = (0x574D4358, C, 0, 0)                              # context domain, width
    for o in 0, 4, 8, ... < C:                             # 4-token blocks
        b = c[o:o+4], a short last block padded with 0xFFFFFFFF - j at its slot j
        s = P(s xor b, (k0 xor o, k1))
    w = P((t >> 2, s0, s1, s2), (k0 xor s3, k1 xor 0x574D544B))[t & 3]   # token domain
    u = float32(((w >> 8) + 1) / (2**24 + 1))              # float64 division; u in [5.96e-8, 1 - 2^-24]

Gumbel-max sampling (per token, after temperature / top-k / top-p): ``argmax(logits +
(-log(-log(u))))`` over the vocabulary, noise in float32 (first index on ties). A context
already seen earlier in the output (``deduplicate_contexts="single_turn"``, the default;
``"all"`` also searches the prompt and skips the first ``C`` tokens) is sampled *without*
the watermark, by the engine's ordinary random sampler. ``dual_key_gumbel`` derives
``key_a = SHA-256(b"key_a" || K as 8 bytes big-endian)[:8]`` and ``key_b`` likewise
(big-endian integers); each token is drawn with key A with probability ``1 - alpha`` and with
key B with probability ``alpha`` (default 0.1), the choice made by the engine's ordinary,
*unkeyed*, random sampler; under speculative decoding draft tokens use key A and the target's
recovery and bonus tokens key B.

Detection (vLLM's ``GumbelWatermarkDetector``): the contexts of the text's tokens (``-1``
padded at the start), each *context* scored once (its first occurrence), token score
``-log1p(-u)`` in float64, score = the sum, p-value = P(Gamma(n, 1) >= score). The dual-key
detector scores every token under both keys and sums ``(1 - alpha) s_A + alpha s_B``; its
p-value moment-matches a Gamma (shape ``n / v``, scale ``v``, ``v = (1 - alpha)^2 + alpha^2``),
exact only for alpha in {0, 1/2, 1}. Here :func:`score` gives the *exact* p-value of the same
statistic for every alpha (:func:`dual_key_log_sf`), and :func:`engine_p_value` vLLM's own.

Caveats: the PRF's words and uniforms are bit-exact on every device (vLLM's CPU, compiled and
Triton paths compute the same integers; the Triton float conversion equals the CPU one for all
2**24 mantissas). The float32 Gumbel noise uses each library's ``log`` (NumPy, torch's CPU
kernels, Triton's GPU ``log``), which differ in the last bits (NumPy vs torch CPU: noise equal
to ~1e-6, measured); a sampled token can then differ on a near-tie of the two best perturbed
logits (gap ~1e-6), detection never does (it reads ``u`` only). The Gamma null is exact for an
ideal PRF and continuous uniforms; ``u`` takes 2**24 values (per-token score at most 16.64,
null mean 1 - 5e-7), which makes the p-value very slightly conservative in the far tail.
Philox is not a cryptographic PRF.

Configuration: vLLM's ``--watermark-config`` JSON (``WatermarkConfig``), e.g.
``{"algorithm": "dual_key_gumbel", "key": 42, "alpha": 0.1, "context_width": 4,
"deduplicate_contexts": "single_turn", "deduplicate_contexts_max_history": 8192,
"prf": "philox", "allow_target_only_watermarking": false}``; read with :func:`config_from_dict`.

Layout: this package is the public face (its names are imported on first use, so a configuration can be
read without starting JAX); the code lives in its private modules :mod:`._config` (configuration, keys),
:mod:`._prf` (the PRF and sampling in NumPy), :mod:`._jax` (the PRF in JAX), :mod:`._detect` (scoring
and p-values) and :mod:`._scheme` (:class:`VllmGumbelScheme`, the watermark decoder of the generation loop:
``gumbel`` through every method, ``docs/interop.md``).
"""

from wmspec_jax._lazy import attach

_NAMES = {
    "VllmGumbelScheme": "_scheme",
    "EngineConfig": "_config",
    "PRF_VERSION": "_config",
    "VllmDualKeyGumbelConfig": "_config",
    "VllmGumbelConfig": "_config",
    "config_from_dict": "_config",
    "derive_watermark_key": "_config",
    "key_words": "_config",
    "BatchScores": "_detect",
    "ScoreResult": "_detect",
    "contexts_of": "_detect",
    "dual_key_log_sf": "_detect",
    "engine_p_value": "_detect",
    "gamma_log_sf": "_detect",
    "log_p_value": "_detect",
    "score": "_detect",
    "score_batch": "_detect",
    "scored_positions": "_detect",
    "token_scores": "_detect",
    "gumbel_argmax_jax": "_jax",
    "vocab_uniforms_jax": "_jax",
    "context_states": "_prf",
    "gumbel_argmax": "_prf",
    "gumbel_noise": "_prf",
    "philox_words": "_prf",
    "sample_tokens": "_prf",
    "to_uniform": "_prf",
    "uniforms": "_prf",
    "vocab_uniforms": "_prf",
}

__getattr__, __dir__, _ = attach(__name__, (), _NAMES)
__all__ = [
    "PRF_VERSION", "VllmGumbelConfig", "VllmDualKeyGumbelConfig", "config_from_dict",
    "derive_watermark_key", "key_words", "context_states", "philox_words", "to_uniform", "uniforms",
    "vocab_uniforms", "gumbel_noise", "gumbel_argmax", "sample_tokens", "vocab_uniforms_jax",
    "gumbel_argmax_jax", "contexts_of", "scored_positions", "token_scores", "ScoreResult",
    "BatchScores", "score", "score_batch", "log_p_value", "engine_p_value", "gamma_log_sf",
    "dual_key_log_sf",
    "VllmGumbelScheme",
]
