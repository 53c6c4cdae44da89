"""Hugging Face transformers' SynthID-Text watermark, bit for bit, without torch.

SynthID-Text (Dathathri et al., "Scalable watermarking for identifying large language model outputs",
Nature 634, 2024) as transformers implements it in ``SynthIDTextWatermarkingConfig``
(``generation/configuration_utils.py``), ``SynthIDTextWatermarkLogitsProcessor`` and
``SynthIDTextWatermarkState`` (``generation/logits_process.py``) and ``SynthIDTextWatermarkDetector``
(``generation/watermarking.py``). Everything below reproduces transformers' integers exactly with
NumPy (uint64 arithmetic, which wraps modulo 2**64 like torch's int64) and with JAX in 32-bit words
(x64 stays disabled: a 64-bit value is a pair of uint32 words).

The construction, as transformers computes it
---------------------------------------------
* Sampling table: ``torch.randint(0, 2, (S,), generator=torch.Generator("cpu").manual_seed(seed))``.
  On the CPU torch draws each entry as ``mt19937() % 2`` (MT19937 seeded with ``seed & 0xffffffff``
  by the reference ``init_genrand``); :func:`sampling_table` runs the same MT19937 in NumPy.
  A processor built on a CUDA device draws its table with torch's CUDA generator (Philox) instead, a
  different table: only the CPU table is reproduced here.
* Hash: ``accumulate_hash(h, x) = (h + x) * 6364136223846793005 + 1`` in int64 with two's-complement
  wrap-around, folded over the values left to right from ``h = 1``. The key of an n-gram at depth l is
  ``accumulate_hash(accumulate_hash(1, ngram), [keys[l]])``; its g-value is
  ``table[key mod S]`` with the floor (Python) modulo of the signed int64, in ``[0, S)``.
* Scores: ``update_scores`` turns the scores into probabilities and applies, for each depth l in turn,
  ``p <- p * (1 + g_l - sum(g_l * p))`` (the tournament with two candidates per match, Dathathri et
  al.'s Bernoulli(0.5) case), then returns ``log p`` with ``-inf`` replaced by the float32 minimum.
* State: the processor's context starts as ``ngram_len - 1`` zeros, NOT the prompt; each later call
  shifts in ``input_ids[:, -1]``, the token sampled at the previous call. A context whose 64-bit hash
  is among the last ``context_history_size`` context hashes (a history that starts filled with zeros)
  is not watermarked: the raw scores pass through unchanged. With ``skip_first_ngram_calls`` the
  first ``ngram_len - 1`` calls pass the scores through and leave the history untouched.
* Order in ``generate``: the processor runs LAST, after every other processor and after the sampling
  warpers (temperature, top-k (default 50), top-p, min-p, typical, epsilon, eta), and before
  ``LogitNormalization``; ``generate`` then samples from ``softmax`` of its output.
* Detection in transformers (``SynthIDTextWatermarkDetector``) scores the g-values of every n-gram of
  the given ids under the mask ``context_repetition_mask * eos_token_mask[:, ngram_len - 1:]``
  with a trained Bayesian classifier (``BayesianDetectorModel``), which gives a posterior, no p-value.

What differs here
-----------------
* :func:`score` is a calibrated test instead of the trained classifier: its p-value is exact under
  H0 ("the text is independent of the keys"), see :func:`score` for the model and its proof.
* :func:`g_values` and :func:`context_repetition_mask` return empty arrays for texts shorter than
  ``ngram_len`` (transformers raises); ``eos_token_id`` may be a list of ids.
* ``generation_start=True`` (detection) prepends the processor's initial all-zeros context, so that
  the first ``ngram_len - 1`` generated tokens, which transformers watermarks with that zero context,
  are scored too; transformers' detector never scores them.
* ``debug_mode`` (uniform scores before watermarking, a test switch) is accepted by
  :meth:`HFSynthIDConfig.from_dict` and dropped: nothing here reproduces it.

Public functions: :class:`HFSynthIDConfig`, :func:`sampling_table`, :func:`accumulate_hash`,
:func:`ngram_keys`, :func:`sample_g_values`, :func:`g_values`, :func:`context_repetition_mask`,
:func:`eos_token_mask` (NumPy, exact integers); :func:`vocab_g_values`, :func:`update_scores`,
:func:`watermarked_log_probs`, :class:`SynthIDState`, :func:`init_state`, :func:`process_scores`
(JAX, jit-able); :func:`score`, :func:`null_distribution`, :func:`weighted_mean_score` (detection);
:class:`HFSynthIDScheme` (the watermark decoder of the generation loop, ``docs/interop.md``).

Layout: this package is the public face (its names are imported on first use, so a configuration can be
read without starting JAX); the code lives in its private modules :mod:`._config` (the config, the
sampling table), :mod:`._hash` (NumPy), :mod:`._jax` (JAX), :mod:`._detect` (detection and the null
law) and :mod:`._scheme` (the decoder).
"""

from wmspec_jax._lazy import attach

_NAMES = {
    "HFSynthIDScheme": "_scheme",
    "HFSynthIDConfig": "_config",
    "INCREMENT": "_config",
    "MAX_TABLE_SIZE": "_config",
    "MULTIPLIER": "_config",
    "sampling_table": "_config",
    "SynthIDScores": "_detect",
    "_sum_tail": "_detect",
    "null_distribution": "_detect",
    "score": "_detect",
    "weighted_mean_score": "_detect",
    "accumulate_hash": "_hash",
    "context_repetition_mask": "_hash",
    "eos_token_mask": "_hash",
    "g_values": "_hash",
    "ngram_keys": "_hash",
    "sample_g_values": "_hash",
    "SynthIDState": "_jax",
    "init_state": "_jax",
    "process_scores": "_jax",
    "update_scores": "_jax",
    "vocab_g_values": "_jax",
    "watermarked_log_probs": "_jax",
}

__getattr__, __dir__, _ = attach(__name__, (), _NAMES)
__all__ = [
    "HFSynthIDConfig", "sampling_table", "accumulate_hash", "ngram_keys", "sample_g_values",
    "g_values", "context_repetition_mask", "eos_token_mask", "vocab_g_values", "update_scores",
    "watermarked_log_probs", "SynthIDState", "init_state", "process_scores", "SynthIDScores",
    "score", "null_distribution", "weighted_mean_score", "HFSynthIDScheme",
]
