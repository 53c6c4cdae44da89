"""Where detection statistics come from, and the check that a detector fits them.

A :class:`Provenance` is a small frozen record: the decoder and SynthID's m,
the context width h, the PRF version, and the key's fingerprint and
derivation (:mod:`wmspec_jax.keys`: a hash, never the key). Statistics carry
the provenance of the call that computed them (``GumbelStats.provenance``,
``SynthIDStats.provenance``), fitted detectors record the provenance of
their training statistics (``Detector.provenance``, also saved), and every
scoring of a detector runs :func:`check_compatible` first: a mismatch is a
clear :class:`ProvenanceMismatch`, not a uniform p-value.

What "compatible" means: decoder, m, h and PRF version must be equal; the key
fingerprint and derivation must be equal *where both are known* (statistics
computed from raw uint32 key words have no known origin, ``None``).

The record is a static JAX pytree node (no array leaves), so statistics keep
it through ``jax.tree_util.tree_map`` (e.g. :func:`.streams.take`).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping, Optional, Sequence

import jax

from wmspec_jax import decoders, prf
from wmspec_jax import keys as keys_lib
from wmspec_jax.decoders import STATISTICS, WatermarkDecoder

DECODERS = STATISTICS
"""What :attr:`Provenance.decoder` may hold for the built-in schemes: the per-token statistic of the
generator's decoder (:attr:`wmspec_jax.decoders.WatermarkDecoder.statistic`); a registered scheme's
statistic too (:func:`wmspec_jax.decoders.statistics`)."""


class ProvenanceMismatch(ValueError):
    """Statistics and a detector (or two batches of statistics) come from different settings or keys."""


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Settings and key identity behind detection statistics (module doc).

    Attributes:
      decoder: the statistic of the generator's decoder: ``"gumbel"``, ``"synthid"``,
        ``"inverse_transform"`` or ``"dipmark"`` (:data:`DECODERS`).
      num_layers: SynthID's m (0 for the others).
      context_width: h.
      prf_version: the PRF version of the hash (:data:`wmspec_jax.prf.PRF_VERSIONS`). Statistics whose
        values no version changed (Gumbel-max's, SynthID's: :data:`wmspec_jax.prf.UNCHANGED_SINCE_V1`)
        are stored under the current version, so a detector saved under v1 scores v2 statistics.
      key_fingerprint: :attr:`wmspec_jax.keys.Secret.fingerprint` of the
        secret, or None if unknown.
      key_derivation: ``"wmspec-keys-v1"`` (per-text keys), ``"direct"`` (the
        secret itself) or None if unknown.
      draft_decoder: the draft stream's statistic when it differs from ``decoder``
        (``SpeculativeConfig.draft_decoder``; stored as None when equal).
      siblings: the sibling streams of the draft statistic, searched or read
        from the ``candidate`` records (multi-draft texts, ``docs/multidraft.md``:
        the most children of a node of ``SpeculativeConfig.draft_tree``); 1 for
        one chain.
      key_sequence: n of a key sequence the streams were keyed by (:mod:`wmspec_jax.key_sequence`; the
        edit test's statistics), 0 for streams keyed by context (then left out of :meth:`to_dict`, so
        the provenance of context-keyed statistics reads as before the field existed).
    """

    decoder: str
    num_layers: int = 0
    context_width: int = prf.DEFAULT_CONTEXT_WIDTH
    prf_version: str = prf.PRF_VERSION
    key_fingerprint: Optional[str] = None
    key_derivation: Optional[str] = None
    draft_decoder: Optional[str] = None
    siblings: int = 1
    key_sequence: int = 0

    def __post_init__(self):
        if self.decoder not in decoders.statistics():
            raise ValueError(f"provenance decoder must be one of {decoders.statistics()}, got {self.decoder!r}")
        prf.check_prf_version(self.prf_version)
        if all(d in prf.UNCHANGED_SINCE_V1 for d in (self.decoder, self.draft_decoder or self.decoder)):
            object.__setattr__(self, "prf_version", prf.PRF_VERSION)
        if self.draft_decoder == self.decoder:
            object.__setattr__(self, "draft_decoder", None)
        if self.draft_decoder is not None and (self.draft_decoder not in decoders.statistics() or WatermarkDecoder.from_name(
                self.draft_decoder).family != self.family):
            raise ValueError(f"provenance draft_decoder must be a statistic of the decoder's family, got "
                             f"{self.draft_decoder!r} with {self.decoder!r}")
        m = self.num_layers
        if isinstance(m, bool) or not isinstance(m, int) or m != self.watermark_decoder.num_layers:
            raise ValueError(f"num_layers must be >= 1 for SynthID and 0 otherwise, got {m!r} ({self.decoder})")
        prf.check_context_width(self.context_width)
        n = self.siblings
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"siblings must be an int >= 1, got {n!r}")
        n = self.key_sequence
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"key_sequence must be an int >= 0, got {n!r}")

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if not self.key_sequence:
            del out["key_sequence"]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Provenance":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown provenance fields {sorted(unknown)}")
        return cls(**dict(d))

    @property
    def watermark_decoder(self) -> WatermarkDecoder:
        """The decoder family's :class:`~wmspec_jax.decoders.WatermarkDecoder` with these m (a SynthID
        m of 0 gives m = 1 here, and the check above refuses it)."""
        return WatermarkDecoder.from_name(self.decoder, max(int(self.num_layers), 1))

    @property
    def family(self) -> str:
        """The detectors that score these statistics: ``"gumbel"`` (one uniform per token and stream)
        or ``"synthid"`` (:attr:`wmspec_jax.decoders.WatermarkDecoder.family`)."""
        return self.watermark_decoder.family

    def describe(self) -> str:
        dec = self.watermark_decoder.label
        if self.draft_decoder is not None:
            dec += f" (draft stream: {WatermarkDecoder.from_name(self.draft_decoder).label})"
        if self.siblings > 1:
            dec += f" over {self.siblings} sibling streams"
        key = self.key_fingerprint or "unknown key"
        if self.key_sequence:
            return f"{dec}, key sequence n={self.key_sequence}, {self.prf_version}, key {key} ({self.key_derivation or 'unknown'})"
        return f"{dec}, h={self.context_width}, {self.prf_version}, key {key} ({self.key_derivation or 'unknown'})"


jax.tree_util.register_static(Provenance)

_STRUCTURAL = ("decoder", "draft_decoder", "num_layers", "context_width", "prf_version", "siblings", "key_sequence")
_KEY = ("key_fingerprint", "key_derivation")
_HINTS = {
    "key_fingerprint": "the statistics were computed with another secret than the detector's",
    "key_derivation": ("one side used per-text keys (wmspec_jax.keys.text_keys) and the other the secret "
                       "itself; compute statistics with the keys generation used"),
    "context_width": "pass the generator's context_width h",
    "num_layers": "pass the generator's number of SynthID layers m",
    "prf_version": "the text was generated by another PRF version",
    "decoder": "statistics of different watermark decoders are not interchangeable",
    "draft_decoder": "pass the generator's draft_decoder (None when draft and target share the decoder)",
    "key_sequence": ("texts generated under a key sequence are scored by the edit test "
                     "(wmspec_jax.detect.edit_test), with the generator's key_sequence n"),
    "siblings": ("multi-draft texts are scored over their sibling streams: pass siblings = the most children of "
                 "a node of the generator's draft_tree (1 for one chain)"),
}


def check_compatible(stats: Optional[Provenance], reference: Optional[Provenance], *,
                     what: str = "statistics", against: str = "detector") -> None:
    """Raises :class:`ProvenanceMismatch` unless ``stats`` may be scored by something built for ``reference``.

    Either side ``None`` (unknown provenance) passes.
    """
    if stats is None or reference is None:
        return
    diffs = []
    for name in _STRUCTURAL + _KEY:
        a, b = getattr(stats, name), getattr(reference, name)
        if name in _KEY and (a is None or b is None):
            continue
        if name == "key_fingerprint" and keys_lib.fingerprints_agree(a, b) is None:
            warnings.warn(f"{what} and {against} carry key fingerprints of two derivations (one of "
                          "wmspec-keys-v1, written before the slow fingerprint): the secret is not checked; "
                          "re-save the older one with the secret", FutureWarning, stacklevel=2)
            continue
        if a != b:
            diffs.append(f"{name}: {what} {a!r}, {against} {b!r} ({_HINTS[name]})")
    if diffs:
        raise ProvenanceMismatch(f"{what} do not match the {against}: " + "; ".join(diffs))


def merge(provenances: Sequence[Optional[Provenance]]) -> Optional[Provenance]:
    """One provenance for concatenated statistics.

    The settings (decoder, m, h, PRF) must agree; key fields are kept where
    all agree and become unknown (None) where they differ (negatives scored
    under other keys are legitimate). ``None`` if any input is unknown.
    """
    if not provenances or any(p is None for p in provenances):
        return None
    first = provenances[0]
    for p in provenances[1:]:
        for name in _STRUCTURAL:
            if getattr(p, name) != getattr(first, name):
                raise ProvenanceMismatch(f"cannot combine statistics with different {name}: "
                                         f"{getattr(first, name)!r} and {getattr(p, name)!r}")
    keys = {name: getattr(first, name) if all(getattr(p, name) == getattr(first, name) for p in provenances)
            else None for name in _KEY}
    return dataclasses.replace(first, **keys)


__all__ = ["Provenance", "ProvenanceMismatch", "check_compatible", "merge"]
