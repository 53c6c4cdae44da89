"""The generation methods as static descriptions (Sec. 4.1, App. E).

A :class:`Method` says what a method watermarks and where its acceptance
variable u comes from. It is hashable and static: the generation loop is
compiled once per method and computes only what that method uses (``plain``
and ``standard`` hash nothing, ``hu`` draws no watermarked residual, ...).

==============  ============  ================  ==========================
method          draft         acceptance u      residual / bonus token
==============  ============  ================  ==========================
``plain``       —             —                 plain target (no watermark)
``basic``       —             —                 watermarked target (ζ^T)
``standard``    plain         true random       plain / plain
``hu``          watermarked   true random       plain / watermarked
``dathathri``   watermarked   true random       watermarked / watermarked
``pseudorandom``watermarked   ACCEPT stream ζ^R watermarked / watermarked
==============  ============  ================  ==========================

``pseudorandom`` is Alg. 1 of the paper; ``hu`` is Hu et al. (2024) and
``dathathri`` Dathathri et al. (2024, SynthID-Text's speculative sampling).
"""

from __future__ import annotations

import dataclasses

TRUE_RANDOM = "true_random"
PSEUDORANDOM = "pseudorandom"


@dataclasses.dataclass(frozen=True)
class Method:
    """What one generation method watermarks (static, hashable).

    Attributes:
      name: the method's name in :data:`METHODS`.
      speculative: drafts K tokens per step with Q and verifies them with P.
      watermark_draft: draft tokens come from Q_{ζ^D} (else plain Q).
      acceptance: ``"pseudorandom"`` (u from the ACCEPT stream ζ^R, Alg. 1
        line 6) or ``"true_random"`` (an ordinary uniform).
      watermark_residual: the token after a rejection comes from
        (P − Q)+_{ζ^T} (else plain (P − Q)+).
      watermark_target: the bonus token (speculative methods) or every token
        (non-speculative ones) comes from P_{ζ^T} (else plain P).
    """

    name: str
    speculative: bool
    watermark_draft: bool = False
    acceptance: str = TRUE_RANDOM
    watermark_residual: bool = False
    watermark_target: bool = False

    def __post_init__(self):
        if self.acceptance not in (TRUE_RANDOM, PSEUDORANDOM):
            raise ValueError(f"acceptance must be {TRUE_RANDOM!r} or {PSEUDORANDOM!r}, got {self.acceptance!r}")
        if not self.speculative and (self.watermark_draft or self.watermark_residual or self.acceptance != TRUE_RANDOM):
            raise ValueError("a non-speculative method has no draft, residual or acceptance test")

    @property
    def pseudorandom_acceptance(self) -> bool:
        return self.acceptance == PSEUDORANDOM

    @property
    def watermarks(self) -> bool:
        """True when any token of the method can carry a watermark."""
        return self.watermark_draft or self.watermark_residual or self.watermark_target


METHODS = {
    m.name: m
    for m in (
        Method("plain", speculative=False),
        Method("basic", speculative=False, watermark_target=True),
        Method("standard", speculative=True),
        Method("hu", speculative=True, watermark_draft=True, watermark_target=True),
        Method("dathathri", speculative=True, watermark_draft=True, watermark_residual=True, watermark_target=True),
        Method("pseudorandom", speculative=True, watermark_draft=True, acceptance=PSEUDORANDOM,
               watermark_residual=True, watermark_target=True),
    )
}
"""Every method by name."""


__all__ = ["METHODS", "Method", "PSEUDORANDOM", "TRUE_RANDOM"]
