"""Hugging Face transformers' KGW watermark, bit for bit, without torch.

Reference: Kirchenbauer, Geiping, Wen, Katz, Miers, Goldstein (2023), "A Watermark for Large
Language Models" (ICML 2023), as implemented by transformers' ``WatermarkingConfig``,
``WatermarkLogitsProcessor`` and ``WatermarkDetector`` (``generation/configuration_utils.py``,
``generation/logits_process.py``, ``generation/watermarking.py``; read in transformers 5.x).

What transformers does (and what is reproduced here exactly):

* Green-list size ``k = int(vocab_size * greenlist_ratio)`` (float product, truncated: with
  V = 100 and γ = 0.29 it is 28). ``vocab_size`` is the MODEL config's (``get_text_config()``),
  not the tokenizer's.
* Seed. ``lefthash``: ``hashing_key * input_seq[-1]`` as a Python integer (only the LAST token;
  ``context_width`` > 1 changes which positions are scored, never the green list). ``selfhash``:
  a fixed table ``T = torch.randperm(1_000_003)`` drawn once from ``manual_seed(hashing_key)``; for
  the window ``w`` = the last ``context_width`` tokens INCLUDING the candidate token ``c = w[-1]``,
  ``seed = min_i(hashing_key * (T[w_i % 1_000_003] + 1) * (T[c % 1_000_003] + 1))`` in torch
  int64 arithmetic (products wrap modulo 2^64 and the minimum is taken as signed). Then
  ``manual_seed(seed % (2**64 - 1))``.
* ``torch.Generator().manual_seed(s)`` is an mt19937 initialised with ``init_genrand(s mod 2^32)``
  (negative seeds are taken modulo 2^64 first): two seeds equal modulo 2^32 give the same stream.
* ``torch.randperm(n, generator=g)`` on CPU (n < 2^32 / 20) is the forward Fisher-Yates shuffle
  ``r = arange(n); for i in range(n - 1): z = g.random() % (n - i); swap(r[i], r[i + z])`` with one
  32-bit mt19937 output per step. The green list is ``randperm(V)[:k]``.
* ``WatermarkLogitsProcessor.__call__``: lefthash adds ``bias`` to the k green logits of each row
  (rows whose input is shorter than ``context_width`` are left unchanged); selfhash takes the 40
  highest scores of the row, and adds ``bias`` to each candidate ``c`` that is green in the list
  seeded with ``c`` itself (the green set then depends on the candidate token).
* Order in ``generate``: the watermark processor runs AFTER every other logits processor and after
  the sampling warpers (temperature, top-k, top-p, min-p, typical, epsilon, eta; transformers
  PR #34630), only ``LogitNormalization`` follows. Tokens are drawn from
  ``softmax(warp(logits) + bias * green)``: the bias is not divided by the temperature, and a token
  removed by top-k / top-p stays at −inf.
* ``WatermarkDetector``: strips a leading BOS (all rows or none), scores n-grams of length
  ``context_width + 1`` (lefthash: prefix = the first ``context_width`` tokens, target = the last;
  T − context_width positions) or ``context_width`` (selfhash: the window is the prefix and its
  last token the target; T − context_width + 1 positions). ``ignore_repeated_ngrams=True`` counts
  each distinct n-gram once; the default counts every position. z = (g − γn) / sqrt(nγ(1 − γ))
  with γ = ``greenlist_ratio``; its p-value is the normal tail ``0.5 erfc(z / sqrt 2)``.

Departures from transformers (all in detection; generation-side functions are exact):

* p-values are the exact binomial tail P(Binomial(n, γ_eff) >= g) with γ_eff = k / V (the green
  list has exactly k of V tokens), not the normal approximation to the z-score. The z-score is
  still transformers' (with γ = ``greenlist_ratio``), for comparison.
* Repeated scores: by default each distinct 32-bit mt19937 seed is scored once (``dedup="seed"``),
  which makes the null exact (see :func:`score`); transformers' two rules are available
  (``"ngram"``, ``"none"``), as is ``"seed_token"``.
* Token ids must lie in [0, V) (transformers would silently treat others as red).
* selfhash in :func:`processor_call`: the 40 candidates come from a stable descending sort; torch's
  sort is not stable, so exact ties in the score at the 40th rank may pick other candidates.

Speed: no Python loop runs over tokens or the vocabulary. mt19937 is vectorised over seeds (its
623-step initialisation loops over the state words), the shuffle is never run step by step: a full
green list comes from pointer jumping over the swap targets (:func:`_fy_prefix_np`; in JAX the
green SET, :func:`_fy_green_set_jax`, without a sort), and the colour of one token from following
that token through the swaps (:func:`_track_green`). Only the first k steps of the shuffle matter
(positions below k are final after step k − 1), so a seed costs k draws, not V. Measured on a
shared 2-core x86 CPU at V = 32000, γ = 0.25: :func:`green_mask` 0.3-1.5 ms for one context,
3-5 ms for 8, 35-50 ms for 64 (after a 1.5-2 s compilation), against 60-70 ms and 0.9 s for 1 and
8 contexts with the k swaps as a ``lax.fori_loop``; :func:`is_green` on 40 × 200 tokens 0.7-1.2 s.

The JAX functions (:func:`green_mask`, :func:`biased_logits`) cover lefthash only: a selfhash
green mask over the whole vocabulary needs one seed (k draws) per candidate token, V·k draws per
row (2.6e8 at V = 32000); transformers itself only tests 40 candidates. selfhash is provided in
NumPy (:func:`greenlist`, :func:`is_green`, :func:`processor_call`, :func:`score`).

Layout: this package is the public face (its names are imported on first use, so a configuration can be
read without starting JAX); the code lives in its private modules :mod:`._config` (the config, input
checks), :mod:`._mt19937` (mt19937, Fisher-Yates), :mod:`._seeding` (seeds), :mod:`._greenlist` (NumPy
green lists, the processor), :mod:`._jax` (JAX, lefthash) and :mod:`._detect` (detection).
"""

from wmspec_jax._lazy import attach

_NAMES = {
    "HFKGWScheme": "_scheme",
    "DEDUP_RULES": "_config",
    "DEFAULT_HASHING_KEY": "_config",
    "HFKGWConfig": "_config",
    "SCHEMES": "_config",
    "SELFHASH_CANDIDATES": "_config",
    "TABLE_SIZE": "_config",
    "KGWScore": "_detect",
    "score": "_detect",
    "greenlist": "_greenlist",
    "is_green": "_greenlist",
    "processor_call": "_greenlist",
    "_key_array": "_jax",
    "biased_logits": "_jax",
    "green_mask": "_jax",
    "_fy_green_set_jax": "_mt19937",
    "_fy_prefix_np": "_mt19937",
    "_swap_targets_np": "_mt19937",
    "_track_green": "_mt19937",
    "mt19937": "_mt19937",
    "randperm": "_mt19937",
    "_fixed_table_prefix": "_seeding",
    "_lefthash_seed32": "_seeding",
    "mt_seeds": "_seeding",
}

__getattr__, __dir__, _ = attach(__name__, (), _NAMES)
__all__ = [
    "DEDUP_RULES", "HFKGWConfig", "KGWScore", "SELFHASH_CANDIDATES", "TABLE_SIZE", "biased_logits",
    "green_mask", "greenlist", "is_green", "mt19937", "mt_seeds", "processor_call", "randperm",
    "score", "HFKGWScheme",
]
