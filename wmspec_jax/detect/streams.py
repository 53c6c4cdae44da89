"""Per-token detection statistics rebuilt from token ids and the secret key.

A detector needs no model and no logits: every pseudorandom value the
generator used at a position is a function of (key, stream, the previous h
tokens, token) (:mod:`wmspec_jax.prf`). For each position t of a text this
module recomputes

* Gumbel-max: y^D_t, y^T_t — the draft-stream and target-stream uniforms
  U_{w_t} of the emitted token w_t (Eq. 2) — and the acceptance uniform u_t
  of the ACCEPT stream (Alg. 1 line 6);
* KGW: y^D_t = y^T_t = π^T(w_t), the emitted token's place in the target
  stream's keyed permutation of the vocabulary (the green list, the first
  ⌊γV⌋ places, is the target stream's for draft and target tokens), scored by
  :mod:`.kgw`'s green count (PRF v1 texts: the token's target-stream uniform,
  green when U >= 1 − γ);
* the other decoders scored by the same detectors (one U(0, 1) value per
  token and stream under the null, large under the watermark):
  DiPmark / γ-reweight: y = U_{w_t}, the emitted token's key in the order of
  π (the reweighting moves mass to the end of π), hashed in DiPmark's own lane
  (PRF v2; v1: Gumbel-max's token lane); inverse transform: the
  alignment value y = 1 − P(|U − η| ≤ |u − η|) for η = U_{w_t} (its own lane in v2) and u the
  stream's position uniform (the token's place in π and u agree under the
  watermark; under the null u is independent of η, so y is exactly uniform).
  Kuditipudi et al. (2023) score the alignment cost Σ |u − η| over shifts of a
  key sequence; with keys from the context there is no shift to search, and
  the per-token null probability turns the cost into a uniform;
* SynthID: the g-values g^D_t, g^T_t ∈ {0, 1}^m of the emitted token under
  both streams (Eq. 3-4) and u_t;

* multi-draft texts (``siblings`` > 1): each draft statistic of sibling c's
  stream; with the ``candidate`` records each token's own sibling, without
  them the weighted search over the siblings (Gumbel-max family:
  max_c y_c^(1/w_c); SynthID: :mod:`.synthid_search`), exactly one stream's
  null law either way;

plus the mask of scored positions from the repeated-context rule, which is
*the same function* generation uses (:func:`wmspec_jax.context.scored_mask`).

Texts are batches ``tokens[B, L]`` with per-row ``lengths`` (right padding)
and ``starts``: the first position of the watermarked text. Pass the prompt
+ text with ``starts = prompt length`` when the prompt is known (this
reproduces generation exactly); pass only the text with the default
``starts = h`` otherwise (earlier positions have no complete context).
A text with no scored position (shorter than h + 1 tokens, or all contexts
repeated) gets ``num_scored = 0``; detectors then return no score (NaN) and
p-value 1 rather than a wrong number.

Values at unscored positions are computed but meaningless: every consumer
multiplies by ``mask``.

Keys: pass what generation got — :class:`wmspec_jax.keys.StreamKeys` from
:func:`wmspec_jax.keys.text_keys` (the documented way), a secret, or raw
uint32 stream words. The statistics record where they came from
(:class:`.provenance.Provenance`: decoder, m, h, PRF version, key
fingerprint) and detectors check it before scoring.

Layout: this module is the public face; the code lives in :mod:`.streams_types` (the statistics and
records types, input checks), :mod:`.streams_compute` (computing the statistics) and
:mod:`.streams_batches` (take, truncate, concatenate and other operations on batches).
"""

from wmspec_jax.detect.streams_batches import (arrays_only, concat, concat_source, draft_fraction, num_scored,
                                               pseudo_source, take, truncate)
from wmspec_jax.detect.streams_compute import (SIBLING_DECAY, alignment_value, check_sibling_weights,
                                               gumbel_statistics, resolved_sibling_weights, statistics,
                                               statistics_provenance, synthid_statistics)
from wmspec_jax.detect.streams_types import (GenerationRecords, GumbelStats, SynthIDStats, check_source,
                                             check_statistics, check_texts, records_from_generation)
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_NONE, SOURCE_RESIDUAL, SOURCE_TARGET

__all__ = [
    "GumbelStats", "SynthIDStats", "GenerationRecords", "check_texts", "check_source", "check_statistics",
    "records_from_generation", "alignment_value", "SIBLING_DECAY", "resolved_sibling_weights",
    "check_sibling_weights", "statistics_provenance", "gumbel_statistics", "synthid_statistics", "statistics",
    "take", "arrays_only", "truncate", "num_scored", "draft_fraction", "pseudo_source", "concat", "concat_source",
    "SOURCE_DRAFT", "SOURCE_NONE", "SOURCE_RESIDUAL", "SOURCE_TARGET",
]
