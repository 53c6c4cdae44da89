"""What a watermark scheme tells the rest of the package, and the registry of schemes.

A scheme is a frozen dataclass subclassing :class:`WatermarkDecoder` in a module of its own
(:mod:`.gumbel`, :mod:`.synthid`, :mod:`.permutation`, :mod:`.kgw`, or a user's) and registered with
:func:`register`. It says, by class attributes and methods, everything the generation loop, detection,
the trade-off curves, the records and the command-line tools need of it:

* generation: :meth:`~WatermarkDecoder.watermark_index` (a token drawn from S(P, ζ), with the draw's
  private uniform when :attr:`~WatermarkDecoder.private_sampling`), and for a biased scheme
  (:attr:`~WatermarkDecoder.biased`) :meth:`~WatermarkDecoder.bias` on the raw logits;
* detection: :attr:`~WatermarkDecoder.family` (which detectors score it: ``"gumbel"`` — one U(0, 1)
  value per token and stream under the null, scored by the Gumbel-max detectors with exact p-values —
  ``"synthid"`` or ``"kgw"``), :attr:`~WatermarkDecoder.statistic` (its name in provenance records) and
  :meth:`~WatermarkDecoder.token_statistic` (one stream's per-token value);
* the trade-off Monte Carlo: :meth:`~WatermarkDecoder.vocab_zeta`, :meth:`~WatermarkDecoder.apply`,
  :meth:`~WatermarkDecoder.point` (unbiased schemes);
* records and tools: :meth:`~WatermarkDecoder.settings` (the fields a generated line carries) and
  :meth:`~WatermarkDecoder.from_settings` (the scheme those fields name), its names and labels.

``WatermarkDecoder(kind, ...)`` builds the registered scheme ``kind`` from the generic settings
(``num_layers``, ``alpha``, ``gamma``, ``delta``, ``options``), so code that names a scheme by its
string works for every registered scheme. Nothing outside a scheme's module compares scheme kinds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional

import jax

from wmspec_jax import prf, scheme_defaults

GUMBEL = "gumbel"
SYNTHID = "synthid"
KGW = "kgw"
FAMILIES = (GUMBEL, SYNTHID, KGW)
"""Which detectors score a scheme's texts: those on one uniform per token and stream (Gumbel-max's U_w
and every other uniform-valued statistic), those on SynthID's g-values, or KGW's green count."""

DEFAULT_DIPMARK_ALPHA = scheme_defaults.DIPMARK_ALPHA
"""DiPmark's α when none is given (:mod:`wmspec_jax.scheme_defaults`)."""
DEFAULT_KGW_GAMMA = scheme_defaults.KGW_GAMMA
DEFAULT_KGW_DELTA = scheme_defaults.KGW_DELTA
"""KGW's green fraction γ and bias δ when none are given (:mod:`wmspec_jax.scheme_defaults`)."""
SETTINGS_FIELDS = ("synthid_layers", "dipmark_alpha", "kgw_gamma", "kgw_delta", "decoder_options")
"""The fields of a generated line that hold a scheme's settings (:meth:`WatermarkDecoder.settings`)."""

_REGISTRY: dict = {}
_ALIASES: dict = {}


class _BuildByName(type):
    """``WatermarkDecoder(kind, ...)`` builds the registered scheme; a scheme's own class builds itself."""

    def __call__(cls, *args, **kwargs):
        if cls is WatermarkDecoder:
            return make(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class WatermarkDecoder(metaclass=_BuildByName):
    """A watermark scheme S(P, ζ) (module doc); subclasses are frozen dataclasses, hashable, so a scheme
    is a static argument of jitted code.

    Class attributes every scheme sets: ``kind`` (its registry name), ``family``, ``degenerate`` (S(P, ζ)
    is a point mass for every ζ: Thm 3.2's equality case), ``biased`` (E_ζ[S(P, ζ)] ≠ P),
    ``private_sampling`` (the token is drawn from S(P, ζ) with private randomness, not as a function
    of ζ), ``target_stream_statistic`` (every token's statistic is the target stream's, as KGW's one
    green list for draft and target), ``statistic_needs_vocab`` (:meth:`token_statistic` depends on V),
    ``record_fields`` (the :data:`SETTINGS_FIELDS` its :meth:`settings` fills); ``title``, optional:
    its name in tables when it has no settings to show (:attr:`label`; default its kind).
    ``num_layers``, ``alpha``, ``gamma`` and ``delta`` are 0 where a
    scheme has no such setting.
    """

    kind: ClassVar[str] = ""
    aliases: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    family: ClassVar[str] = GUMBEL
    degenerate: ClassVar[bool] = False
    biased: ClassVar[bool] = False
    private_sampling: ClassVar[bool] = False
    target_stream_statistic: ClassVar[bool] = False
    statistic_needs_vocab: ClassVar[bool] = False
    record_fields: ClassVar[tuple] = ("decoder_options",)
    num_layers = 0
    alpha = 0.0
    gamma = 0.0
    delta = 0.0

    # -- names (a scheme with settings overrides ``name`` and ``label`` to show them) ---------------

    title: ClassVar[str] = ""
    statistic = property(lambda self: self.kind, doc="The per-token statistic detection recomputes for its "
                         "texts (its name in provenance records).")
    name = property(lambda self: self.kind, doc="Short identifier for file names and JSON keys.")
    label = property(lambda self: self.title or self.kind,
                     doc="Human-readable label for tables and plots (the class's ``title``, else its kind).")
    family_label = property(lambda self: self.label, doc="The scheme's name in tables, without settings.")
    run_tag = property(lambda self: self.name, doc="The scheme's part of an experiment run's name.")

    # -- settings ---------------------------------------------------------------------------------

    @classmethod
    def build(cls, num_layers: int = 30, alpha: float = DEFAULT_DIPMARK_ALPHA, gamma: float = DEFAULT_KGW_GAMMA,
              delta: float = DEFAULT_KGW_DELTA, options: Optional[Mapping[str, Any]] = None) -> "WatermarkDecoder":
        """The scheme from the generic settings (each scheme reads the ones it has; ``options``: the
        settings of a scheme beyond those four, by field name)."""
        del num_layers, alpha, gamma, delta
        return cls(**dict(options or {}))

    def settings(self) -> dict:
        """The fields of a generated line that record this scheme's settings (:data:`SETTINGS_FIELDS`):
        by default its dataclass fields under ``decoder_options``."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} if dataclasses.is_dataclass(self) \
            else {}
        return {"decoder_options": fields} if fields else {}

    @classmethod
    def from_settings(cls, record: Mapping[str, Any]) -> "WatermarkDecoder":
        """The scheme a line's settings fields name (the inverse of :meth:`settings`)."""
        return cls(**dict(record.get("decoder_options") or {}))

    # -- its pseudorandom function (our keyed PRF unless the scheme brings its own) ----------------

    bias_stage: ClassVar[str] = "logits"
    """Where a biased scheme's :meth:`bias` applies: ``"logits"``, the raw logits before temperature and
    top-k (our KGW), or ``"processed"``, added to the distribution after them (transformers' processor,
    which runs after its sampling warpers)."""
    bias_repeats: ClassVar[bool] = False
    """A biased scheme biases repeated contexts too (transformers' KGW processor has no repeated-context
    rule); False: only new contexts, as every other watermark of the loop."""
    own_context_width: ClassVar = None
    """The number of previous tokens the scheme's own PRF reads (another engine's n-gram), which the
    setting's context width must equal; None: the setting's h (our keyed PRF)."""
    context_fill: ClassVar = None
    """The token id that stands for a context position before the generation's start (another engine
    that keys the first tokens by its own padding, not by the prompt); None: the prompt's tokens."""

    def context_seeds(self, keys: jax.Array, contexts: jax.Array, stream: int) -> jax.Array:
        """The seeds of the draft or target stream at each context (the generation loop's ζ^D, ζ^T):
        uint32[..., W], read by :meth:`watermark_index` and :meth:`bias`.

        Args:
          keys: uint32[..., 2] the row's key words of the stream.
          contexts: int32[..., h] the previous h tokens, oldest first (-1, or :attr:`context_fill`,
            before the start).
          stream: :attr:`wmspec_jax.prf.Stream.DRAFT` or ``TARGET`` (static).

        The default is our keyed PRF, :func:`wmspec_jax.prf.context_seeds` (W = 2). A scheme that brings
        its own PRF (another engine's, :mod:`wmspec_jax.interop`) overrides it, with
        :meth:`sibling_seeds`, and reads its seeds in its own per-token values. The acceptance stream
        ζ^R of Alg. 1 is our keyed PRF under every scheme.
        """
        del stream
        return prf.context_seeds(keys, contexts)

    def sibling_seeds(self, seeds: jax.Array, candidate: jax.Array) -> jax.Array:
        """The seeds of sibling ``candidate`` (int[...]) of a draft tree at one position: ``seeds`` for
        c = 0, independent ones for c > 0 (default: :func:`wmspec_jax.prf.candidate_seeds`)."""
        return prf.candidate_seeds(seeds, candidate)

    # -- generation -------------------------------------------------------------------------------

    def watermark_index(self, weights: jax.Array, ids, seeds: jax.Array, uniform=None) -> jax.Array:
        """A candidate drawn from S(P, ζ): int32[B].

        Args:
          weights: float32[B, C] the (processed) distribution on its candidates.
          ids: int32[B, C] candidate token ids, or None for the whole vocabulary.
          seeds: uint32[B, W] the stream's seeds of the position (:meth:`context_seeds`; W = 2 for our PRF).
          uniform: float32[B] the draw's private (true-random) uniform in [0, 1); required when
            :attr:`private_sampling`, ignored otherwise.
        """
        raise NotImplementedError

    def check_uniform(self, uniform) -> None:
        if self.private_sampling and uniform is None:
            raise ValueError(f"{self.label} samples with private randomness: pass the draw's true-random uniform")

    def bias(self, logits: jax.Array, seeds: jax.Array, active: jax.Array) -> jax.Array:
        """A biased scheme's logits before temperature and top-k: float32[..., V] (unbiased: ValueError)."""
        raise ValueError(f"{self.label} is unbiased: it has no bias")

    # -- the trade-off Monte Carlo ----------------------------------------------------------------

    def vocab_zeta(self, seeds: jax.Array, vocab_size: int) -> jax.Array:
        """ζ over the whole vocabulary for n samples' seeds uint32[n, 2]."""
        raise ValueError(f"{self.label} has no trade-off Monte Carlo (the curves of Sec. 3 are for unbiased "
                         "decoders)")

    def apply(self, probs: jax.Array, zeta: jax.Array) -> jax.Array:
        """S(P, ζ) for a batch of :meth:`vocab_zeta`: float32[n, V] (probs float[V] or [n, V])."""
        raise ValueError(f"{self.label} has no trade-off Monte Carlo")

    def point(self, probs: jax.Array, zeta: jax.Array) -> jax.Array:
        """The token of a degenerate scheme, S(P, ζ) = δ_token: int32[n]."""
        raise ValueError(f"{self.label} is not degenerate; it has no single output token")

    # -- detection --------------------------------------------------------------------------------

    def token_statistic(self, seeds: jax.Array, tokens: jax.Array, *, version: str, vocab_size: int) -> jax.Array:
        """One stream's per-token statistic of the emitted tokens (the Gumbel and KGW families): float32[...].

        Args:
          seeds: uint32[..., 2] the stream's seeds of each position.
          tokens: int32[...] the emitted tokens.
          version: the PRF version of the text (:data:`wmspec_jax.prf.PRF_VERSIONS`).
          vocab_size: V (static).
        """
        raise ValueError(f"{self.label} texts are scored on their {self.family} statistics")


def register(scheme: type) -> type:
    """Adds a scheme class to the registry under its ``kind`` (and its ``aliases``: name -> fixed
    settings); returns it, so it can decorate the class. ValueError if the name is taken by another class."""
    if not (isinstance(scheme, type) and issubclass(scheme, WatermarkDecoder)) or not scheme.kind:
        raise ValueError(f"a scheme is a WatermarkDecoder subclass with a kind, got {scheme!r}")
    if scheme.family not in FAMILIES:
        raise ValueError(f"a scheme's family must be one of {FAMILIES}, got {scheme.family!r}")
    for name in (scheme.kind, *scheme.aliases):
        taken = _REGISTRY.get(name) or (_ALIASES.get(name) or (None,))[0]
        if taken is not None and taken.__qualname__ != scheme.__qualname__:
            raise ValueError(f"scheme name {name!r} is taken by {taken.__qualname__}")
    _REGISTRY[scheme.kind] = scheme
    for alias, fixed in scheme.aliases.items():
        _ALIASES[alias] = (scheme, dict(fixed))
    return scheme


def unregister(kind: str) -> None:
    """Removes a scheme (and its aliases) from the registry (a test's own scheme, when it is done)."""
    scheme = _REGISTRY.pop(kind, None)
    for alias in [a for a, (s, _) in _ALIASES.items() if s is scheme]:
        del _ALIASES[alias]


def names() -> tuple:
    """Every name :func:`make` accepts: the registered kinds, then their aliases."""
    return tuple(_REGISTRY) + tuple(_ALIASES)


def kinds() -> tuple:
    """The registered kinds."""
    return tuple(_REGISTRY)


def scheme_class(name: str) -> type:
    """The class registered under ``name`` (a kind or an alias); ValueError otherwise."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _ALIASES:
        return _ALIASES[name][0]
    raise ValueError(f"unknown decoder {name!r}; known: {', '.join(names())}")


def statistics() -> tuple:
    """The per-token statistics of the registered schemes (what a provenance record's decoder names)."""
    return tuple(dict.fromkeys(s.kind if s.family != SYNTHID else SYNTHID for s in _REGISTRY.values()))


def make(kind: str = GUMBEL, num_layers: int = 30, alpha: float = DEFAULT_DIPMARK_ALPHA,
         gamma: float = DEFAULT_KGW_GAMMA, delta: float = DEFAULT_KGW_DELTA,
         options: Optional[Mapping[str, Any]] = None) -> WatermarkDecoder:
    """The registered scheme ``kind`` (or alias) built from the generic settings (:meth:`WatermarkDecoder.build`)."""
    if not isinstance(kind, str):
        raise ValueError(f"decoder kind must be a registered name, got {kind!r}")
    if kind in _ALIASES:
        cls, fixed = _ALIASES[kind]
        settings = dict(num_layers=num_layers, alpha=alpha, gamma=gamma, delta=delta, options=options)
        settings.update(fixed)
        return cls.build(**settings)
    if kind not in _REGISTRY:
        raise ValueError(f"decoder kind must be one of {names()}, got {kind!r}")
    return _REGISTRY[kind].build(num_layers, alpha, gamma, delta, options)


def from_settings(kind: str, record: Mapping[str, Any]) -> WatermarkDecoder:
    """The scheme a generated line names: its ``decoder`` name and settings fields (:data:`SETTINGS_FIELDS`)."""
    if kind in _ALIASES:
        return make(kind)
    return scheme_class(kind).from_settings(record)


def check_real(name: str, value, low: float, high: float, scheme: str, closed: tuple = (True, True)) -> float:
    """``value`` as a float in [low, high] (or open ends per ``closed``); ValueError naming the scheme."""
    import numbers

    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if ok:
        v = float(value)
        ok = (low <= v if closed[0] else low < v) and (v <= high if closed[1] else v < high)
    if not ok:
        lo, hi = "[" if closed[0] else "(", "]" if closed[1] else ")"
        raise ValueError(f"{scheme} needs {name} in {lo}{low:g}, {high:g}{hi}, got {name}={value!r}")
    return float(value)


__all__ = ["DEFAULT_DIPMARK_ALPHA", "DEFAULT_KGW_DELTA", "DEFAULT_KGW_GAMMA", "FAMILIES", "GUMBEL", "KGW",
           "SETTINGS_FIELDS", "SYNTHID", "WatermarkDecoder", "check_real", "from_settings", "kinds", "make", "names",
           "register", "scheme_class", "statistics", "unregister"]
