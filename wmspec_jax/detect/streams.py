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
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import context, decoders, keys as keys_lib, prf, validation
from wmspec_jax.detect import synthid_search
from wmspec_jax.detect.provenance import Provenance, merge
from wmspec_jax.sources import SOURCE_DRAFT, SOURCE_NONE, SOURCE_RESIDUAL, SOURCE_TARGET  # noqa: F401


class GumbelStats(NamedTuple):
    """Gumbel-max per-token statistics of a batch of texts.

    Attributes:
      y_draft: float32[B, L] y^D_t = U^D_{w_t} of the DRAFT stream.
      y_target: float32[B, L] y^T_t = U^T_{w_t} of the TARGET stream.
      u: float32[B, L] acceptance uniform u_t of the ACCEPT stream.
      mask: bool[B, L] scored positions (repeated-context rule).
      starts: int32[B] first position of the watermarked text.
      lengths: int32[B] valid length of each row.
      provenance: :class:`.provenance.Provenance` of the call that computed
        them (None when built by hand: unknown, not checked).
    """

    y_draft: jax.Array
    y_target: jax.Array
    u: jax.Array
    mask: jax.Array
    starts: jax.Array
    lengths: jax.Array
    provenance: Optional[Provenance] = None

    def excess(self) -> tuple:
        """(draft, target) float64[B, L]: each stream's per-token evidence over its null mean,
        −log(1 − y) − 1 (Exp(1) under the null)."""
        return tuple(-np.log1p(-np.asarray(y, np.float64)) - 1.0 for y in (self.y_draft, self.y_target))


class SynthIDStats(NamedTuple):
    """SynthID per-token statistics of a batch of texts.

    Attributes:
      g_draft: uint8[B, L, m] g-values of the emitted token, DRAFT stream.
      g_target: uint8[B, L, m] g-values of the emitted token, TARGET stream.
      u: float32[B, L] acceptance uniform u_t.
      mask, starts, lengths, provenance: as in :class:`GumbelStats`.
    """

    g_draft: jax.Array
    g_target: jax.Array
    u: jax.Array
    mask: jax.Array
    starts: jax.Array
    lengths: jax.Array
    provenance: Optional[Provenance] = None

    def excess(self) -> tuple:
        """(draft, target) float64[B, L]: each stream's mean g-value over its null mean 1/2."""
        return tuple(np.asarray(g, np.float64).mean(-1) - 0.5 for g in (self.g_draft, self.g_target))


class Records(NamedTuple):
    """What detection uses from a ``speculative.GenerationResult`` (host arrays).

    Attributes:
      tokens: int32[B, L] prompt + generated tokens, right-padded.
      lengths: int32[B].
      starts: int32[B] the prompt lengths.
      source: int8[B, L] SOURCE_* per position (−1 prompt/padding).
      watermarked: bool[B, L].
      accept_u: float32[B, L] (NaN where no acceptance test ran).
      candidate: int8[B, L] sibling index of each accepted draft token under multi-draft sampling
        (``docs/multidraft.md``; pass it to :func:`gumbel_statistics` for the Oracle), or None when
        the generation had none.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    source: np.ndarray
    watermarked: np.ndarray
    accept_u: np.ndarray
    candidate: Optional[np.ndarray] = None


# ---------------------------------------------------------------------------
# Input validation (host side, once, before entering jitted code)
# ---------------------------------------------------------------------------


def check_texts(tokens, lengths=None, starts=None, *, vocab_size: int,
                context_width: int = prf.DEFAULT_CONTEXT_WIDTH):
    """Validates a batch of texts; returns host arrays (tokens, lengths, starts).

    Args:
      tokens: int[B, L] (or int[L] for one text) token ids.
      lengths: int[B] valid lengths (default: L for every row).
      starts: int or int[B] first watermarked position (default
        ``context.detection_start(h)`` = h: text without its prompt).
      vocab_size: V of the generator's tokenizer (required): every valid
        token must lie in [0, V). (The hash accepts any id, so an id from
        another vocabulary would be scored silently.)
      context_width: h.

    Raises:
      TypeError: non-integer token ids or vocabulary size.
      ValueError: empty batch or text, lengths/starts out of range, tokens
        outside the vocabulary (with the offending rows).
    """
    h = prf.check_context_width(context_width)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise TypeError(f"vocab_size must be the tokenizer's vocabulary size (an int >= 1), got {vocab_size!r}")
    tok = validation.concrete(tokens)
    if tok is None:
        raise TypeError("detection inputs must be concrete arrays (validate before jax.jit)")
    if tok.ndim == 1:
        tok = tok[None]
    if tok.ndim != 2:
        raise ValueError(f"tokens must be [B, L] (or [L] for one text), got shape {tok.shape}")
    if tok.shape[0] == 0 or tok.shape[1] == 0:
        raise ValueError(f"empty batch of texts: tokens has shape {tok.shape}")
    if not np.issubdtype(tok.dtype, np.integer):
        raise TypeError(f"tokens must hold integer token ids, got dtype {tok.dtype}")
    bsz, length = tok.shape
    if lengths is None:
        lens = np.full((bsz,), length, np.int64)
    else:
        lens = np.asarray(lengths)
        if lens.ndim == 0:
            lens = np.full((bsz,), int(lens))
        if lens.shape != (bsz,) or not np.issubdtype(lens.dtype, np.integer):
            raise ValueError(f"lengths must be int[{bsz}], got {lens.dtype}{list(lens.shape)}")
    bad = np.flatnonzero((lens < 1) | (lens > length))
    if bad.size:
        raise ValueError(
            f"text lengths must lie in [1, {length}] (an empty text cannot be scored); "
            f"rows {bad[:10].tolist()} have lengths {lens[bad[:10]].tolist()}"
        )
    if starts is None:
        st = np.full((bsz,), context.detection_start(h), np.int64)
    else:
        st = np.asarray(starts)
        if st.ndim == 0:
            st = np.full((bsz,), int(st))
        if st.shape != (bsz,) or not np.issubdtype(st.dtype, np.integer):
            raise ValueError(f"starts must be an int or int[{bsz}], got {st.dtype}{list(st.shape)}")
        bad = np.flatnonzero((st < 0) | (st > lens))
        if bad.size:
            raise ValueError(
                f"starts (prompt lengths) must lie in [0, length]; rows {bad[:10].tolist()} have "
                f"starts {st[bad[:10]].tolist()} and lengths {lens[bad[:10]].tolist()}"
            )
    valid = np.arange(length)[None] < lens[:, None]
    outside = ((tok < 0) | (tok >= int(vocab_size))) & valid
    if outside.any():
        rows = np.flatnonzero(outside.any(axis=1))
        raise ValueError(f"token ids outside the vocabulary [0, {vocab_size}) in rows {rows[:10].tolist()} "
                         f"(e.g. {tok[outside][:5].tolist()})")
    return tok.astype(np.int32), lens.astype(np.int32), st.astype(np.int32)


def _check_keys(key, bsz: int) -> jax.Array:
    if isinstance(key, keys_lib.Secret):
        key = key.stream_keys()
    keys = prf.check_stream_keys(key)
    if keys.ndim == 2:
        keys = jnp.broadcast_to(keys, (bsz,) + keys.shape)
    if keys.ndim != 3 or keys.shape[0] != bsz:
        raise ValueError(f"per-text stream keys must be uint32[{bsz}, 3, 2], got shape {keys.shape}")
    return keys


def check_source(source, shape) -> np.ndarray:
    """Validates a record array of token sources (int8[B, L], values −1..2)."""
    src = np.asarray(source)
    if src.shape != tuple(shape):
        raise ValueError(f"length mismatch of records: source has shape {src.shape}, texts have {tuple(shape)}")
    if not np.issubdtype(src.dtype, np.integer) or ((src < -1) | (src > 2)).any():
        raise ValueError("source must hold integers in {-1, 0, 1, 2} (none / draft / residual / target)")
    return src.astype(np.int8)


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------


alignment_value = decoders.alignment_value  # the inverse transform's statistic (its module's)


def _uniform_statistic(seeds, tokens, statistic: str, version: str = prf.PRF_VERSION, vocab_size: int = 0):
    """One stream's per-token value under PRF ``version``: the scheme's own
    (:meth:`wmspec_jax.decoders.WatermarkDecoder.token_statistic`; module doc)."""
    return decoders.scheme_class(statistic).build().token_statistic(seeds, tokens, version=version,
                                                                    vocab_size=vocab_size)


def _sibling_statistic(seeds, tokens, statistic: str, siblings: int, candidate, weights,
                       version: str = prf.PRF_VERSION, vocab_size: int = 0):
    """The draft stream's per-token value under multi-draft sampling: of the sibling the record names
    (``candidate`` int[B, L]), or, from tokens and key alone, the weighted search
    max_c (y^D_{t,c})^(1/w_c) over the ``siblings`` streams (:func:`check_sibling_weights`): exactly U(0, 1)
    when the text is independent of the key, as P(max_c y_c^(1/w_c) <= x) = Π_c x^(w_c) = x."""
    values = [_uniform_statistic(prf.candidate_seeds(seeds, jnp.uint32(c)), tokens, statistic, version, vocab_size)
              for c in range(siblings)]
    if candidate is not None:
        out = values[0]
        for c in range(1, siblings):
            out = jnp.where(candidate == c, values[c], out)
        return out
    if weights is None:  # equal weights (check_sibling_weights): (max_c y_c)^n
        top = values[0]
        for v in values[1:]:
            top = jnp.maximum(top, v)
        return top ** siblings
    log_top = jnp.max(jnp.stack([jnp.log(v) / jnp.float32(w) for v, w in zip(values, weights)]), axis=0)
    return jnp.exp(log_top)


SIBLING_DECAY = 0.25
"""The default search weights decay as w_c ∝ SIBLING_DECAY^c (:func:`check_sibling_weights`)."""


def resolved_sibling_weights(weights, siblings: int) -> tuple:
    """The weights of the search over ``siblings`` sibling streams, validated and rescaled to sum 1:
    ``weights`` or, for None, the default w_c ∝ :data:`SIBLING_DECAY`^c (:func:`check_sibling_weights`)."""
    w = check_sibling_weights(weights, siblings)
    return (1.0 / siblings,) * siblings if w is None else w


def check_sibling_weights(weights, siblings: int) -> Optional[tuple]:
    """Validated weights of the search over sibling streams, rescaled to sum 1: a tuple, or None
    for equal weights (the search (max_c y_c)^n) and for one chain.

    Args:
      weights: ``siblings`` positive numbers, or None for the default w_c ∝ :data:`SIBLING_DECAY`^c.
      siblings: n.

    Sibling c's weight should be its share of the accepted draft tokens: multi-draft verification
    tries the siblings in order, so the first is accepted most often (on the built-in pair, K = 3,
    3 chains, T = 1, about 0.83 / 0.11 / 0.06), and a search that weighs them equally loses power to
    scoring sibling 0 alone (``docs/multidraft.md``). Any positive weights keep the statistics'
    null law exact.
    """
    if siblings <= 1:
        if weights is not None and np.size(weights) != 1:
            raise ValueError(f"sibling_weights are for multi-draft texts (siblings > 1); got {np.size(weights)} "
                             "weights with siblings = 1")
        return None
    w = SIBLING_DECAY ** np.arange(siblings, dtype=np.float64) if weights is None else \
        np.asarray(weights, np.float64)
    if w.shape != (siblings,) or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"sibling_weights must be {siblings} positive numbers (one per sibling stream), got "
                         f"{list(np.atleast_1d(w))[:8]}")
    w = w / w.sum()
    return None if np.all(w == w[0]) else tuple(float(x) for x in w)


@functools.partial(jax.jit, static_argnames=("width", "num_layers", "statistic", "draft_statistic", "siblings",
                                             "weights", "version", "vocab_size"))
def _statistics(tokens, lengths, starts, keys, width: int, num_layers: int, statistic: str = decoders.GUMBEL,
                draft_statistic: str = decoders.GUMBEL, siblings: int = 1, candidate=None, weights=None,
                version: str = prf.PRF_VERSION, vocab_size: int = 0):
    bsz, length = tokens.shape
    mask = context.scored_mask(tokens, lengths, starts, width)
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (bsz, length))
    ctx = prf.gather_contexts(tokens, pos, width)  # [B, L, h]
    # one seed per (stream, position): [B, 3, L, 2]
    seeds = prf.context_seeds(keys[:, :, None, :], ctx[:, None])
    accept_seeds = seeds[:, prf.Stream.ACCEPT]
    if candidate is not None:  # the acceptance test of the sibling that was accepted
        accept_seeds = prf.candidate_seeds(accept_seeds, candidate.astype(jnp.uint32))
    u = prf.position_uniforms(accept_seeds)
    if decoders.scheme_class(statistic).target_stream_statistic:  # e.g. KGW's one green list per position
        draft = target = _uniform_statistic(seeds[:, prf.Stream.TARGET], tokens, statistic, version, vocab_size)
    elif num_layers == 0:
        if siblings > 1:
            draft = _sibling_statistic(seeds[:, prf.Stream.DRAFT], tokens, draft_statistic, siblings, candidate,
                                       weights, version, vocab_size)
        else:
            draft = _uniform_statistic(seeds[:, prf.Stream.DRAFT], tokens, draft_statistic, version, vocab_size)
        target = _uniform_statistic(seeds[:, prf.Stream.TARGET], tokens, statistic, version, vocab_size)
    else:
        draft_seeds = seeds[:, prf.Stream.DRAFT]
        if candidate is not None:  # each draft token's g-values in the sibling stream it was drawn from
            draft = prf.token_gbits(prf.candidate_seeds(draft_seeds, candidate.astype(jnp.uint32)), tokens,
                                    num_layers)
        elif siblings > 1:  # from tokens and key alone: the search over the sibling streams
            per_sibling = jnp.stack([prf.token_gbits(prf.candidate_seeds(draft_seeds, jnp.uint32(c)), tokens,
                                                     num_layers) for c in range(siblings)], axis=-2)
            draft = synthid_search.searched_gbits(per_sibling, seeds[:, prf.Stream.ACCEPT], weights)
        else:
            draft = prf.token_gbits(draft_seeds, tokens, num_layers)
        target = prf.token_gbits(seeds[:, prf.Stream.TARGET], tokens, num_layers)
    return draft, target, u, mask


def statistics_provenance(key, decoder: str, num_layers: int = 0,
                          context_width: int = prf.DEFAULT_CONTEXT_WIDTH, draft_decoder=None,
                          siblings: int = 1, prf_version: str = prf.PRF_VERSION) -> Provenance:
    """The :class:`.provenance.Provenance` of statistics computed with ``key`` (fingerprint, never the key)."""
    fingerprint, derivation = keys_lib.key_provenance(key)
    return Provenance(decoder, int(num_layers), int(context_width), prf_version, fingerprint, derivation,
                      draft_decoder, int(siblings))


def _check_siblings(siblings) -> None:
    if isinstance(siblings, bool) or not isinstance(siblings, (int, np.integer)) or siblings < 1:
        raise ValueError(f"siblings must be an int >= 1, got {siblings!r}")


def _search_weights(sibling_weights, siblings: int, candidate) -> Optional[tuple]:
    """The static weights argument of :func:`_statistics`: validated always, None where no search runs
    (with the records), so that weights never compile a program of their own there."""
    weights = check_sibling_weights(sibling_weights, siblings)
    return None if candidate is not None else weights


def _check_candidate(candidate, shape: tuple, siblings: int):
    """The ``candidate`` record as int32[B, L] (None stays None); its values in [0, siblings)."""
    if candidate is None:
        return None
    candidate = np.asarray(candidate)
    if candidate.shape != tuple(shape) or not np.issubdtype(candidate.dtype, np.integer):
        raise ValueError(f"candidate must be int[{shape[0]}, {shape[1]}] like the texts, got "
                         f"{candidate.dtype}{list(candidate.shape)}")
    if candidate.size and (candidate.min() < 0 or candidate.max() >= siblings):
        raise ValueError(f"candidate records must lie in [0, siblings={siblings})")
    return jnp.asarray(candidate, jnp.int32)


def gumbel_statistics(tokens, key, *, vocab_size: int, lengths=None, starts=None,
                      context_width: int = prf.DEFAULT_CONTEXT_WIDTH, decoder=None, draft_decoder=None,
                      siblings: int = 1, candidate=None, sibling_weights=None,
                      prf_version: str = prf.PRF_VERSION) -> GumbelStats:
    """(y^D_t, y^T_t, u_t) and the scored mask of a batch of texts (Gumbel-max, or another decoder
    whose statistic is one uniform per token and stream).

    Args:
      tokens: int[B, L] token ids (prompt + text when the prompt is known).
      key: the keys generation used: :class:`wmspec_jax.keys.StreamKeys`
        (from :func:`wmspec_jax.keys.text_keys`), a secret
        (:class:`wmspec_jax.keys.Secret`, bytes/str/int) used directly, or raw
        stream words uint32[3, 2] / [B, 3, 2].
      vocab_size: V (required, see :func:`check_texts`).
      lengths, starts, context_width: see :func:`check_texts`.
      decoder: the generator's :class:`~wmspec_jax.decoders.WatermarkDecoder` (default Gumbel-max);
        any of the ``"gumbel"`` family (module doc).
      draft_decoder: the decoder of the draft stream when generation used another one
        (``SpeculativeConfig.draft_decoder``; also of the ``"gumbel"`` family); None: ``decoder``.
      siblings: texts of multi-draft sampling (``docs/multidraft.md``): the most siblings a node had
        (max of ``draft_tree``). y^D_t is then max_c (y^D_{t,c})^(1/w_c) over the sibling streams
        ((max_c y^D_{t,c})^siblings with equal weights), exactly U(0, 1) under H0, so every
        detector's p-values stay exact; 1: one chain.
      candidate: int[B, L] the generation's ``candidate`` record: y^D_t and u_t come from the sibling
        stream each token was drawn from (what the Oracle needs); needs ``siblings`` > its maximum.
      sibling_weights: w_c of the search without records (:func:`check_sibling_weights`; None: the
        default, decaying with c).
      prf_version: the PRF version the texts were generated with (:data:`wmspec_jax.prf.PRF_VERSIONS`;
        v1 texts of the inverse transform, DiPmark and KGW read v1's lanes).

    Returns:
      :class:`GumbelStats` with their provenance. Cost: one context hash per
      stream and one token hash per statistic and position — O(B L), no
      vocabulary loop.
    """
    decoder = decoders.gumbel() if decoder is None else decoder
    draft_decoder = decoder if draft_decoder is None else draft_decoder
    for d in (decoder, draft_decoder):
        if d.family == decoders.SYNTHID:
            raise ValueError(f"{d.label} texts are scored with synthid_statistics, not gumbel_statistics")
    one_stream = decoder.target_stream_statistic or draft_decoder.target_stream_statistic
    if one_stream and decoder != draft_decoder:
        raise ValueError(f"{decoder.label}'s statistic is the target stream's for every token: no other "
                         "draft_decoder with it")
    tok, lens, st = check_texts(tokens, lengths, starts, context_width=context_width, vocab_size=vocab_size)
    keys = _check_keys(key, tok.shape[0])
    _check_siblings(siblings)
    candidate = _check_candidate(candidate, tok.shape, siblings)
    if one_stream and siblings > 1:
        raise ValueError(f"{decoder.label} texts come from one chain: siblings must be 1")
    version = prf.check_prf_version(prf_version)
    yd, yt, u, mask = _statistics(jnp.asarray(tok), jnp.asarray(lens), jnp.asarray(st), keys,
                                  width=int(context_width), num_layers=0, statistic=decoder.statistic,
                                  draft_statistic=draft_decoder.statistic, siblings=int(siblings),
                                  candidate=candidate, weights=_search_weights(sibling_weights, int(siblings), candidate),
                                  version=version, vocab_size=int(vocab_size) if decoder.statistic_needs_vocab else 0)
    prov = statistics_provenance(key, decoder.statistic, 0, context_width, draft_decoder.statistic, siblings,
                                 prf_version=version)
    return GumbelStats(yd, yt, u, mask, jnp.asarray(st), jnp.asarray(lens), prov)


def synthid_statistics(tokens, key, num_layers: int, *, vocab_size: int, lengths=None, starts=None,
                       context_width: int = prf.DEFAULT_CONTEXT_WIDTH, siblings: int = 1,
                       candidate=None, sibling_weights=None, prf_version: str = prf.PRF_VERSION) -> SynthIDStats:
    """(g^D_t, g^T_t ∈ {0,1}^m, u_t) and the scored mask of a batch of texts (SynthID).

    Args:
      num_layers: m, the number of tournament layers used in generation.
      siblings: texts of multi-draft sampling (``docs/multidraft.md``): the most siblings a node had
        (max of ``draft_tree``). Without records, g^D_t is then the search over the sibling
        streams of :mod:`.synthid_search`: under H0 m independent Bernoulli(½) bits, exactly as one
        stream's, so every SynthID detector's p-values stay exact; 1: one chain.
      candidate: int[B, L] the ``candidate`` record of a multi-draft generation: g^D_t and u_t
        come from the sibling stream each token was drawn from, so every SynthID detector scores
        the streams generation used (the records' counterpart of the Oracle); needs ``siblings``
        > its maximum, as :func:`gumbel_statistics`.
      sibling_weights: w_c of the search (:func:`check_sibling_weights`; None: the default).
      Others: as :func:`gumbel_statistics`.
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
        raise ValueError(f"number of SynthID layers m must be a positive int, got {num_layers!r}")
    prf.check_prf_version(prf_version)  # SynthID's values are the same in every version
    tok, lens, st = check_texts(tokens, lengths, starts, context_width=context_width, vocab_size=vocab_size)
    keys = _check_keys(key, tok.shape[0])
    _check_siblings(siblings)
    candidate = _check_candidate(candidate, tok.shape, siblings)
    gd, gt, u, mask = _statistics(jnp.asarray(tok), jnp.asarray(lens), jnp.asarray(st), keys,
                                  width=int(context_width), num_layers=int(num_layers), siblings=int(siblings),
                                  candidate=candidate, weights=_search_weights(sibling_weights, int(siblings), candidate))
    prov = statistics_provenance(key, "synthid", int(num_layers), context_width, siblings=int(siblings))
    return SynthIDStats(gd, gt, u, mask, jnp.asarray(st), jnp.asarray(lens), prov)


def check_statistics(stats, kind) -> Any:
    """Type and shape check of statistics given to a detector (they may be built by hand).

    Gumbel: y^D, y^T, u, mask all [B, L]. SynthID: g^D, g^T [B, L, m] — the
    layer axis last (a transposed [B, m, L] array is refused, also when m = L
    would make the shapes agree, by its recorded m) — u and mask [B, L].
    """
    if not isinstance(stats, kind):
        maker = "gumbel_statistics" if kind is GumbelStats else "synthid_statistics"
        raise TypeError(f"expected {kind.__name__} (from detect.{maker}), got {type(stats).__name__}")
    shape = tuple(np.shape(stats.mask))
    if len(shape) != 2:
        raise ValueError(f"statistics mask must be [B, L], got shape {shape}")
    for name in ("starts", "lengths"):
        if tuple(np.shape(getattr(stats, name))) != shape[:1]:
            raise ValueError(f"statistics {name} must be [{shape[0]}], got shape {np.shape(getattr(stats, name))}")
    per_token = ("y_draft", "y_target", "u") if kind is GumbelStats else ("u",)
    for name in per_token:
        if tuple(np.shape(getattr(stats, name))) != shape:
            raise ValueError(f"statistics {name} has shape {np.shape(getattr(stats, name))}, mask {shape}")
    if kind is SynthIDStats:
        gd, gt = np.shape(stats.g_draft), np.shape(stats.g_target)
        m = stats.provenance.num_layers if stats.provenance is not None else gt[-1] if gt else None
        if gd != gt or len(gt) != 3 or tuple(gt[:2]) != shape or gt[2] != m:
            raise ValueError(f"g-values must be [B, L, m] = {shape + (m,)} for both streams (layers last), "
                             f"got {gd} and {gt}")
    if stats.provenance is not None and not isinstance(stats.provenance, Provenance):
        raise TypeError(f"statistics provenance must be a Provenance, got {type(stats.provenance).__name__}")
    return stats


def take(stats, rows):
    """The statistics of texts ``rows`` (a slice, int array or list along B); keeps the provenance."""
    if isinstance(rows, slice):
        rows = np.arange(*rows.indices(np.shape(stats.mask)[0]))
    rows = np.asarray(rows)
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    return _take(arrays_only(stats), rows.astype(np.int32))._replace(provenance=stats.provenance)


@jax.jit
def _take(stats, rows):  # one compiled gather per shape for every field
    return jax.tree_util.tree_map(lambda x: x[rows], stats)


def arrays_only(stats):
    """``stats`` without its provenance: what jitted code receives, so that
    statistics of different keys share one compiled function."""
    return stats._replace(provenance=None)


def records_from_generation(result: Any) -> Records:
    """Host copies of the fields of a ``speculative.GenerationResult`` detection uses.

    Checks that every record array matches ``tokens`` in shape (a length
    mismatch of records is an error, not a silent broadcast).
    """
    tokens = np.asarray(result.tokens)
    if tokens.ndim != 2:
        raise ValueError(f"generation tokens must be [B, L], got shape {tokens.shape}")
    fields = {}
    for name in ("source", "watermarked", "accept_u"):
        arr = np.asarray(getattr(result, name))
        if arr.shape != tokens.shape:
            raise ValueError(f"length mismatch of records: {name} has shape {arr.shape}, tokens {tokens.shape}")
        fields[name] = arr
    candidate = getattr(result, "candidate", None)
    if candidate is not None:
        candidate = np.asarray(candidate).astype(np.int8)
        if candidate.shape != tokens.shape:
            raise ValueError(f"length mismatch of records: candidate has shape {candidate.shape}, tokens {tokens.shape}")
    lengths = np.asarray(result.lengths).astype(np.int32)
    starts = np.asarray(result.prompt_lengths).astype(np.int32)
    for name, arr in (("lengths", lengths), ("prompt_lengths", starts)):
        if arr.shape != tokens.shape[:1]:
            raise ValueError(f"length mismatch of records: {name} has shape {arr.shape}, expected ({tokens.shape[0]},)")
    return Records(
        tokens=tokens.astype(np.int32),
        lengths=lengths,
        starts=starts,
        source=check_source(fields["source"], tokens.shape),
        watermarked=fields["watermarked"].astype(bool),
        accept_u=fields["accept_u"].astype(np.float32),
        candidate=candidate,
    )


# ---------------------------------------------------------------------------
# Helpers on statistics
# ---------------------------------------------------------------------------


def truncate(stats, num_tokens: int):
    """The same statistics restricted to the first ``num_tokens`` positions of each text.

    Positions start + [0, num_tokens) stay scored (if they were); later ones
    are dropped. Used for "TPR as a function of token length": the
    repeated-context rule only looks backwards, so the truncated mask is
    exactly the mask of the truncated text.
    """
    num_tokens = int(num_tokens)
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    cut = _truncate(arrays_only(stats), np.int32(min(num_tokens, np.iinfo(np.int32).max // 2)))
    return cut._replace(provenance=stats.provenance)


@jax.jit
def _truncate(stats, num_tokens):  # the length is an argument: one program for every length
    pos = jnp.arange(stats.mask.shape[1], dtype=jnp.int32)[None]
    keep = pos < (stats.starts[:, None] + num_tokens)
    return stats._replace(mask=stats.mask & keep, lengths=jnp.minimum(stats.lengths, stats.starts + num_tokens))


def num_scored(stats) -> jax.Array:
    """int32[B] number of scored positions per text."""
    return jnp.sum(stats.mask, axis=1, dtype=jnp.int32)


def draft_fraction(source, mask) -> float:
    """Fraction of scored tokens that are accepted drafts (source == 0).

    The empirical P(ζ_t = ζ^D) over a training split: the "acceptance rate"
    prior of Ars-Prior (Eq. 12) and Bayes-Prior (App. D).
    """
    src = np.asarray(source)
    m = np.asarray(mask, bool)
    if src.shape != m.shape:
        raise ValueError(f"length mismatch of records: source {src.shape} vs mask {m.shape}")
    total = int(m.sum())
    if total == 0:
        raise ValueError("no scored tokens to estimate the draft fraction from")
    return float(((src == SOURCE_DRAFT) & m).sum() / total)


def pseudo_source(mask, draft_fraction_: float, rng) -> jax.Array:
    """Random sources (draft w.p. ``draft_fraction_``, else target) for texts without records.

    Negatives such as human text have no generation records; a hard
    selection that is independent of the statistics gives the Oracle
    detector the same null as it has on generated text.

    Args:
      mask: bool[B, L].
      draft_fraction_: in [0, 1].
      rng: a ``jax.random`` key.

    Returns:
      int8[B, L] with SOURCE_DRAFT / SOURCE_TARGET inside the mask, SOURCE_NONE elsewhere.
    """
    if not 0.0 <= float(draft_fraction_) <= 1.0:
        raise ValueError(f"draft fraction must lie in [0, 1], got {draft_fraction_}")
    mask = jnp.asarray(mask, bool)
    coin = jax.random.bernoulli(rng, float(draft_fraction_), mask.shape)
    src = jnp.where(coin, SOURCE_DRAFT, SOURCE_TARGET).astype(jnp.int8)
    return jnp.where(mask, src, jnp.int8(SOURCE_NONE))


def concat(stats_list):
    """Concatenates statistics of several batches along B (padding L with unscored positions)."""
    if not stats_list:
        raise ValueError("nothing to concatenate")
    kind = type(stats_list[0])
    if any(type(s) is not kind for s in stats_list):
        raise TypeError("cannot mix Gumbel and SynthID statistics")
    length = max(s.mask.shape[1] for s in stats_list)

    def pad(x, fill):
        widths = [(0, 0), (0, length - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
        return jnp.pad(x, widths, constant_values=fill)

    out = []
    for name in kind._fields:
        parts = [getattr(s, name) for s in stats_list]
        if name == "provenance":
            out.append(merge(parts))
        elif name in ("starts", "lengths"):
            out.append(jnp.concatenate(parts))
        else:
            fill = False if name == "mask" else (0 if parts[0].dtype == jnp.uint8 else 0.5)
            out.append(jnp.concatenate([pad(p, fill) for p in parts]))
    return kind(*out)


def concat_source(sources, length: int) -> np.ndarray:
    """Concatenates int8[B_i, L_i] source arrays along B, padding L with SOURCE_NONE."""
    return np.concatenate(
        [np.pad(np.asarray(s, np.int8), [(0, 0), (0, length - np.shape(s)[1])], constant_values=SOURCE_NONE)
         for s in sources]
    )


def statistics(decoder, tokens, keys, *, draft_decoder=None, **kwargs):
    """The statistics detection scores texts of ``decoder`` (a
    :class:`~wmspec_jax.decoders.WatermarkDecoder`) with: its family's (:func:`gumbel_statistics` with
    the decoder's uniform statistic, or :func:`synthid_statistics` with m = ``decoder.num_layers``);
    ``kwargs`` as theirs.

    ``draft_decoder``: the draft stream's decoder when generation used another one
    (``SpeculativeConfig.draft_decoder``). Both must be of the ``"gumbel"`` family (one uniform per token
    and stream): a SynthID stream next to a uniform one, or two SynthID streams of different m, has no
    statistics type here (ValueError; score the target stream alone with ``statistics(decoder, ...)``).
    """
    if draft_decoder is not None and draft_decoder.statistic != decoder.statistic or \
            draft_decoder is not None and draft_decoder.num_layers != decoder.num_layers:
        if decoder.family != decoders.GUMBEL or draft_decoder.family != decoders.GUMBEL:
            raise ValueError(f"no statistics for a {draft_decoder.label} draft stream under a {decoder.label} target "
                             "stream: both must be uniform-statistic decoders (Gumbel-max, inverse transform, "
                             "DiPmark); score the target stream alone with statistics(decoder, ...)")
        return gumbel_statistics(tokens, keys, decoder=decoder, draft_decoder=draft_decoder, **kwargs)
    if decoder.family == decoders.SYNTHID:
        return synthid_statistics(tokens, keys, decoder.num_layers, **kwargs)
    return gumbel_statistics(tokens, keys, decoder=decoder, **kwargs)  # uniform statistics and KGW's
