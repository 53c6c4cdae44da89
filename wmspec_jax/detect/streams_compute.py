"""Computing the per-token detection statistics of a batch of texts from token ids and keys
(:func:`gumbel_statistics`, :func:`synthid_statistics`, :func:`statistics`), the search over sibling
streams of multi-draft texts and the statistics' provenance. Public face:
:mod:`wmspec_jax.detect.streams`."""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import context, decoders, keys as keys_lib, prf
from wmspec_jax.detect import synthid_search
from wmspec_jax.detect.provenance import Provenance
from wmspec_jax.detect.streams_types import GenerationRecords, GumbelStats, SynthIDStats, _check_keys, check_texts

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


def _texts_of(tokens, lengths, starts) -> tuple:
    """(tokens, lengths, starts) of either form the statistics take: token ids with their lengths and starts,
    or one typed batch of texts — :class:`GenerationRecords` or any batch with ``tokens``, ``lengths`` and
    ``starts`` arrays (the lab's ``TextRows``); passing ``lengths`` / ``starts`` beside it would say two
    things at once."""
    batch = isinstance(tokens, GenerationRecords) or all(hasattr(tokens, f) for f in ("tokens", "lengths", "starts"))
    if not batch:
        return tokens, lengths, starts
    if lengths is not None or starts is not None:
        raise ValueError("lengths / starts come with the typed batch of texts; pass them only with token ids")
    return tokens.tokens, tokens.lengths, tokens.starts


def gumbel_statistics(tokens, key, *, vocab_size: int, lengths=None, starts=None,
                      context_width: int = prf.DEFAULT_CONTEXT_WIDTH, decoder=None, draft_decoder=None,
                      siblings: int = 1, candidate=None, sibling_weights=None,
                      prf_version: str = prf.PRF_VERSION) -> GumbelStats:
    """(y^D_t, y^T_t, u_t) and the scored mask of a batch of texts (Gumbel-max, or another decoder
    whose statistic is one uniform per token and stream).

    Args:
      tokens: int[B, L] token ids (prompt + text when the prompt is known), or a
        :class:`GenerationRecords` batch (:func:`records_from_generation`; its lengths and starts too — the
        Oracle's ``candidate`` is still passed explicitly, ``candidate=records.candidate``).
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
    tok, lens, st = check_texts(*_texts_of(tokens, lengths, starts), context_width=context_width,
                                vocab_size=vocab_size)
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
      Others (``tokens``: ids or a :class:`GenerationRecords` batch): as :func:`gumbel_statistics`.
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
        raise ValueError(f"number of SynthID layers m must be a positive int, got {num_layers!r}")
    prf.check_prf_version(prf_version)  # SynthID's values are the same in every version
    tok, lens, st = check_texts(*_texts_of(tokens, lengths, starts), context_width=context_width,
                                vocab_size=vocab_size)
    keys = _check_keys(key, tok.shape[0])
    _check_siblings(siblings)
    candidate = _check_candidate(candidate, tok.shape, siblings)
    gd, gt, u, mask = _statistics(jnp.asarray(tok), jnp.asarray(lens), jnp.asarray(st), keys,
                                  width=int(context_width), num_layers=int(num_layers), siblings=int(siblings),
                                  candidate=candidate, weights=_search_weights(sibling_weights, int(siblings), candidate))
    prov = statistics_provenance(key, "synthid", int(num_layers), context_width, siblings=int(siblings))
    return SynthIDStats(gd, gt, u, mask, jnp.asarray(st), jnp.asarray(lens), prov)


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


__all__ = ["SIBLING_DECAY", "alignment_value", "check_sibling_weights", "gumbel_statistics",
           "resolved_sibling_weights", "statistics", "statistics_provenance", "synthid_statistics"]
