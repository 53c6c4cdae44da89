"""transformers' SynthID-Text as a watermark decoder of the generation loop: its pseudorandom function
(context hash, per-layer keys, sampling table) keys the target stream, so basic sampling, Alg. 1,
the other speculative methods and draft trees generate texts that transformers' detector reads.
Public face: :mod:`wmspec_jax.interop.hf_synthid` (:class:`HFSynthIDScheme`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from wmspec_jax import prf
from wmspec_jax.decoders.base import SYNTHID
from wmspec_jax.decoders.kernels import _float, candidate_tokens, inverse_cdf
from wmspec_jax.decoders.synthid_scheme import pack_g_values, tournament_packed
from wmspec_jax.interop._engine_scheme import EngineScheme
from wmspec_jax.interop.hf_synthid._config import HFSynthIDConfig, _check_config
from wmspec_jax.interop.hf_synthid._jax import _context_hash64, _device_table, _g_after_hash


@dataclasses.dataclass(frozen=True)
class HFSynthIDScheme(EngineScheme):
    """S(P, ζ) of transformers' ``SynthIDTextWatermarkLogitsProcessor``: the tournament
    ``p <- p (1 + g_l − Σ g_l p)`` over its ``depth`` layers (Eq. 3 with transformers' g-values), then
    a draw with the engine's ordinary randomness (the draw's private uniform), as ``generate`` samples
    from the processor's output. The scores are the loop's processed distribution (temperature, top-k),
    as the processor runs after transformers' warpers.

    Seeds (:meth:`context_seeds`, uint32[..., 2], a 64-bit context hash as (high, low) words):

    * target stream ζ^T: ``accumulate_hash(1, context)`` of the ``ngram_len − 1`` previous tokens, with
      transformers' zeros standing for the positions before the generation's start (its processor
      ignores the prompt), XOR the row's target key words. The tools pass zero words
      (:meth:`wmspec_jax.interop.foreign.ForeignScheme.stream_keys`), so ζ^T is transformers' own; other
      words give an independent copy of it (the law tests draw one per row);
    * draft stream ζ^D: our keyed PRF's seeds under the row's draft key words, read as a context hash by
      transformers' g-value function, so a watermarked draft token carries g-values of the same
      construction under a stream transformers' detector does not score.

    The repeated-context rule is the loop's (a context seen earlier in the text is not watermarked),
    not transformers' history of the last ``context_history_size`` context hashes; the two agree on
    texts shorter than that history. ``skip_first_ngram_calls`` is not reproduced (refused).

    Attributes:
      config: the engine's settings (they hold its keys; the repr shows their fingerprint).
    """

    config: HFSynthIDConfig
    engine_title: ClassVar[str] = "transformers' SynthID-Text"
    kind: ClassVar[str] = "transformers-synthid"
    family: ClassVar[str] = SYNTHID
    private_sampling: ClassVar[bool] = True
    context_fill: ClassVar[int] = 0

    def __post_init__(self):
        _check_config(self.config)
        if self.config.ngram_len < 2:
            raise ValueError("the generation loop keys by a context of at least one token: ngram_len must be >= 2, "
                             f"got {self.config.ngram_len}")
        if self.config.skip_first_ngram_calls:
            raise ValueError("skip_first_ngram_calls is not reproduced by the generation loop: generate with a "
                             "configuration without it")

    @property
    def own_context_width(self) -> int:
        return self.config.ngram_len - 1

    label = property(lambda self: f"transformers SynthID-Text (depth {self.config.depth}, "
                                  f"key {self.config.keys_fingerprint})")

    def context_seeds(self, keys, contexts, stream):
        keys = jnp.asarray(keys, jnp.uint32)
        if stream == prf.Stream.TARGET:
            hi, lo = _context_hash64(jnp.asarray(contexts, jnp.int32).reshape(-1, contexts.shape[-1]))
            hashed = jnp.stack([hi, lo], axis=-1).reshape(contexts.shape[:-1] + (2,))
            return hashed ^ keys
        return prf.context_seeds(keys, contexts)

    def _g_values(self, seeds, tokens):
        """int32[..., C, depth] g-values of ``tokens`` (uint32[C] or [..., C]) at seeds uint32[..., 2]."""
        table = jnp.asarray(_device_table(self.config.sampling_table_seed, self.config.sampling_table_size))
        return _g_after_hash(table, seeds[..., None, 0], seeds[..., None, 1], tokens, self.config)

    def distribution(self, weights: jax.Array, ids, seeds: jax.Array) -> jax.Array:
        """The processor's distribution on the candidates: float32[B, C] (weights float32[B, C] or [B, V])."""
        g = self._g_values(seeds, candidate_tokens(weights, ids))
        return tournament_packed(weights, pack_g_values(jnp.swapaxes(g, -1, -2)), self.config.depth)

    def watermark_index(self, weights, ids, seeds, uniform=None):
        self.check_uniform(uniform)
        return inverse_cdf(self.distribution(weights, ids, seeds), _float(uniform))


__all__ = ["HFSynthIDScheme"]
