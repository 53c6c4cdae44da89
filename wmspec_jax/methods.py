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
``coupled``     from ζ^T      equal draws       — / watermarked (ζ^T)
==============  ============  ================  ==========================

``pseudorandom`` is Alg. 1 of the paper; ``hu`` is Hu et al. (2024) and
``dathathri`` Dathathri et al. (2024, SynthID-Text's speculative sampling).

``coupled`` (beyond the paper) drafts each token with the *target's* stream ζ^T, d_s =
decoder(Q_s, ζ^T), and accepts it when the target's own draw at that position, decoder(P_s, ζ^T), is
the same token; the step ends with the target's draw at the first mismatch (or after K accepts). Every
emitted token is the basic watermark's token at its context, so the text is the basic watermark's
text (law P, the basic watermark's strength and detection, whatever the draft) and only the speed
depends on Q. The price is acceptance: P(decoder(Q, ζ) = decoder(P, ζ)) ≤ 1 − TV(P, Q), for Gumbel-max
Σ_v 1 / Σ_w max(P_w / P_v, Q_w / Q_v) (:func:`wmspec_jax.theory.gumbel_coupling_acceptance`). With
Gumbel-max this is the shared exponential race Liu et al. (2026, "Watermarkable multi-draft speculative
sampling via Poisson processes") call PFR, as their paper describes it for one chain; it is not
compared with their code. Detection scores its texts as the basic watermark's (:func:`detected_as`):
every token's ``source`` record is ``target``, the stream it was drawn from. Over a draft tree
(``num_drafts`` / ``draft_tree``) a node's siblings are the decoder's successive draws with ζ^T from
Q without the earlier siblings (with Gumbel-max the race's first arrivals, Liu et al.'s MPFR) and the
text is still the basic watermark's (:mod:`wmspec_jax.race_tree`).
"""

from __future__ import annotations

import dataclasses

TRUE_RANDOM = "true_random"
PSEUDORANDOM = "pseudorandom"
COUPLED = "coupled"
ACCEPTANCES = (TRUE_RANDOM, PSEUDORANDOM, COUPLED)


@dataclasses.dataclass(frozen=True)
class Method:
    """What one generation method watermarks (static, hashable).

    Attributes:
      name: the method's name in :data:`METHODS`.
      speculative: drafts K tokens per step with Q and verifies them with P.
      watermark_draft: draft tokens come from Q_{ζ^D} (else plain Q).
      acceptance: ``"pseudorandom"`` (u from the ACCEPT stream ζ^R, Alg. 1
        line 6), ``"true_random"`` (an ordinary uniform) or ``"coupled"`` (no u: a draft drawn
        with ζ^T is accepted when the target's draw with ζ^T is the same token; module doc).
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
        if self.acceptance not in ACCEPTANCES:
            raise ValueError(f"acceptance must be one of {ACCEPTANCES}, got {self.acceptance!r}")
        if not self.speculative and (self.watermark_draft or self.watermark_residual or self.acceptance != TRUE_RANDOM):
            raise ValueError("a non-speculative method has no draft, residual or acceptance test")
        if self.coupled and (self.watermark_draft or self.watermark_residual or not self.watermark_target):
            raise ValueError("a coupled method draws every token with the target stream ζ^T: no ζ^D, no residual")

    @property
    def pseudorandom_acceptance(self) -> bool:
        return self.acceptance == PSEUDORANDOM

    @property
    def coupled(self) -> bool:
        """Drafts drawn with ζ^T, accepted when the target's draw is the same token (module doc)."""
        return self.acceptance == COUPLED

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
        Method("coupled", speculative=True, acceptance=COUPLED, watermark_target=True),
    )
}
"""Every method by name."""


def detected_as(name: str) -> str:
    """The method whose texts ``name``'s texts are, for detection: ``coupled`` texts are the basic
    watermark's (module doc); every other method is itself."""
    return "basic" if name in METHODS and METHODS[name].coupled else name


__all__ = ["ACCEPTANCES", "COUPLED", "METHODS", "Method", "PSEUDORANDOM", "TRUE_RANDOM", "detected_as"]
