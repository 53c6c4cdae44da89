"""One generation setting as one frozen, typed value, and the loop's config built from it.

A :class:`Setting` is what makes two texts comparable: the method (Alg. 1 or a method it is compared
with, :mod:`wmspec_jax.methods`), the watermark decoders of the target and draft streams, K, the draft
shape (one chain, n chains or a static tree, :mod:`wmspec_jax.multidraft`), temperature (and the draft's
own, when it differs), top-k, the context width h, the key sequence (:mod:`wmspec_jax.key_sequence`) and
the PRF version. It holds every cross-field rule, so a setting that exists is one the loop can run; it
writes and reads the settings fields of a text line (:meth:`Setting.to_record`,
:meth:`Setting.from_record`), gives the provenance detection checks (:meth:`Setting.provenance`) and,
with the stopping fields, the loop's :class:`SpeculativeConfig` (:meth:`Setting.config`). A new knob is
one field here, its rule in :meth:`Setting._check_setting`, its line field in :meth:`Setting.to_record` /
:meth:`Setting.from_record`, and its use in the loop (:class:`wmspec_jax.stages.Static`).

:class:`SpeculativeConfig` is published by :mod:`wmspec_jax.speculative`, whose jitted loop compiles
per config; it lives here because :meth:`Setting.config` builds it and it extends :class:`Setting`.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import numpy as np

from wmspec_jax import prf_keys as prf
from wmspec_jax.methods import METHODS, Method

# JAX loads with the first setting built, not with this module: the tools read DEFAULTS for their flags
# and their --help stays instant. The decoders, the loop's stages and the rules' helpers are imported
# where they are used.
if TYPE_CHECKING:
    from wmspec_jax import decoders, stages

MAX_LOOKAHEAD = 32
"""Largest K accepted: the loop body drafts K tokens in sequence (compiled unrolled)."""


def _int_setting(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class Setting:
    """A generation setting (hashable; the rules below hold for every instance).

    Attributes:
      method: one of :data:`wmspec_jax.methods.METHODS` (``pseudorandom`` is Alg. 1).
      decoder: the watermark decoder (:class:`~wmspec_jax.decoders.WatermarkDecoder`) of the target
        stream ζ^T: residual and bonus tokens, and every token of ``basic``.
      draft_decoder: the decoder of the draft stream ζ^D when it differs from ``decoder`` (beyond the
        paper: e.g. a Gumbel-max draft under a SynthID target); None (default) or ``decoder`` itself
        means the same decoder (stored as None). Only for methods that watermark the draft (``hu``,
        ``dathathri``, ``pseudorandom``). Each token's record says which stream it came from, and
        detection scores each stream with its decoder's statistic (``docs/decoders.md``).
      lookahead: K drafts per step (must be 0 for ``plain``/``basic``).
      temperature: > 0, or 0 for greedy; applied to P, and to Q unless ``draft_temperature`` is given. At 0
        every distribution is one-hot and no watermark exists (a watermarking method warns; records say
        ``watermarked = False``).
      draft_temperature: the temperature of the draft's distribution Q when it differs from P's (beyond
        the paper, which samples both at one temperature); None (default) or ``temperature`` itself means
        the same (stored as None). Thm 4.1 holds for every Q, so the text's law is P's at ``temperature``
        whatever this is; it moves the acceptance 1 − TV(P, Q) and which tokens come from which stream.
        Only for speculative methods.
      top_k: optional top-k (exactly k tokens; ties broken towards lower ids), applied to P and Q
        alike; ``None`` or 0 keeps all (stored as None).
      context_width: h, the number of previous tokens keying ζ.
      num_drafts: n >= 1 candidate chains of K drafts per step, verified together by recursive
        rejection sampling (beyond the paper: :mod:`wmspec_jax.multidraft`); 1 (default) is the
        paper's one chain, token for token. Shorthand for ``draft_tree=(n, 1, ..., 1)`` and stored
        as that tree (``num_drafts`` then reads 1). The target scores the tree in one forward with
        tree attention (``LanguageModel.step_tree``).
      draft_tree: branching factors (b_1, ..., b_K) of a static draft tree, b_s children per node at
        depth s (e.g. (3, 2, 1)); None: given by ``num_drafts``. Stored as None when it is one chain.
      distinct_drafts: draw the siblings of a node without replacement (sibling c from Q without the
        earlier siblings' tokens; recursive speculative decoding's variant, still exact: its
        acceptance tests use the same Q_c); False: independent draws. Stored as False for one chain.
      key_sequence: n of a key sequence keying the streams with a random offset per text
        (Kuditipudi et al.; edit-robust detection), 0 (default): keyed by context. Needs decoders
        of the Gumbel-max family.
      prf_version: the pseudorandom function's version (:data:`wmspec_jax.prf.PRF_VERSIONS`); a
        setting read from an older line may name an older one, which detection scores but the loop
        does not generate (:meth:`config` refuses it).

    NumPy integer / float scalars are accepted and stored as Python numbers.
    """

    method: str = "pseudorandom"
    decoder: decoders.WatermarkDecoder = dataclasses.field(default_factory=lambda: _decoders().WatermarkDecoder())
    draft_decoder: Optional[decoders.WatermarkDecoder] = None
    lookahead: int = 3
    temperature: float = 1.0
    draft_temperature: Optional[float] = None
    top_k: Optional[int] = None
    context_width: int = prf.DEFAULT_CONTEXT_WIDTH
    num_drafts: int = 1
    draft_tree: Optional[tuple] = None
    distinct_drafts: bool = False
    key_sequence: int = 0
    prf_version: str = prf.PRF_VERSION

    def __post_init__(self):
        self._check_setting()
        self._warn_greedy()

    def _check_setting(self) -> None:
        """The cross-field rules: normalises the fields in place (frozen: through ``object.__setattr__``)."""
        from wmspec_jax import decoders, key_sequence

        if self.method not in METHODS:
            raise ValueError(f"method must be one of {sorted(METHODS)}, got {self.method!r}")
        spec = METHODS[self.method]
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        fix("lookahead", _int_setting("lookahead K", self.lookahead, 0))
        if self.lookahead > MAX_LOOKAHEAD:
            raise ValueError(f"lookahead K={self.lookahead} exceeds {MAX_LOOKAHEAD}: each step drafts K tokens "
                             "one forward at a time, and acceptance decays geometrically in K")
        if spec.speculative and self.lookahead < 1:
            raise ValueError(f"method {self.method!r} needs lookahead K >= 1")
        if not spec.speculative and self.lookahead != 0:
            raise ValueError(f"method {self.method!r} does not speculate: set lookahead=0")
        fix("temperature", decoders.check_temperature(self.temperature))
        if self.draft_temperature is not None:
            draft_temperature = decoders.check_temperature(self.draft_temperature)
            if not spec.speculative and draft_temperature != self.temperature:
                raise ValueError(f"method {self.method!r} does not speculate: it has no draft_temperature")
            fix("draft_temperature", None if draft_temperature == self.temperature else draft_temperature)
        if self.top_k is not None:
            top_k = _int_setting("top_k", self.top_k, 0)
            fix("top_k", top_k or None)
        fix("context_width", prf.check_context_width(self.context_width))
        self._check_decoders(spec)
        self._check_shape(spec)
        fix("key_sequence", key_sequence.check_key_length(self.key_sequence))
        if self.key_sequence and spec.watermarks:
            for d in {self.decoder, self.draft_stream_decoder}:
                if d.family != decoders.GUMBEL or d.target_stream_statistic:
                    raise ValueError(f"key_sequence needs a decoder of the Gumbel-max family (one uniform per "
                                     f"token and stream, what the edit test scores); {d.label} is not")
        fix("prf_version", prf.check_prf_version(self.prf_version))
        self._check_own_prf()

    def _check_own_prf(self) -> None:
        """A scheme that brings its own PRF (another engine's, :mod:`wmspec_jax.interop`) fixes h, keys
        by context and keys both streams of its tokens itself."""
        own = [d for d in (self.decoder, self.draft_decoder) if d is not None and d.own_context_width is not None]
        if not own:
            return
        if self.draft_decoder is not None:
            raise ValueError(f"{own[0].label} brings its own pseudorandom function: it takes no other decoder "
                             "for the draft, nor is it a draft decoder")
        width = self.decoder.own_context_width
        if self.context_width != width:
            raise ValueError(f"{self.decoder.label} reads the {width} previous tokens: context_width must be "
                             f"{width}, got {self.context_width}")
        if self.key_sequence:
            raise ValueError(f"{self.decoder.label} keys by context: it takes no key_sequence")

    def _check_decoders(self, spec: Method) -> None:
        decoders = _decoders()
        if not isinstance(self.decoder, decoders.WatermarkDecoder):
            raise TypeError("decoder must be a wmspec_jax.decoders.WatermarkDecoder")
        if self.draft_decoder is None:
            return
        if not isinstance(self.draft_decoder, decoders.WatermarkDecoder):
            raise TypeError("draft_decoder must be a wmspec_jax.decoders.WatermarkDecoder or None")
        if self.draft_decoder == self.decoder:
            object.__setattr__(self, "draft_decoder", None)
        elif self.decoder.biased or self.draft_decoder.biased:
            raise ValueError("a biased decoder (KGW) biases draft and target with one green list: it takes no "
                             "other decoder for the draft")
        elif not spec.watermark_draft:
            raise ValueError(f"method {self.method!r} draws no watermarked draft token: a draft_decoder "
                             "needs hu, dathathri or pseudorandom")

    def _check_shape(self, spec: Method) -> None:
        """num_drafts / draft_tree / distinct_drafts, normalised to one tree (None for one chain)."""
        from wmspec_jax import multidraft
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        fix("num_drafts", _int_setting("num_drafts", self.num_drafts, 1))
        if self.draft_tree is not None or self.num_drafts > 1:
            if not spec.speculative:
                raise ValueError(f"method {self.method!r} does not speculate: num_drafts / draft_tree need a "
                                 "speculative method")
            if self.draft_tree is not None and self.num_drafts > 1:
                raise ValueError("give num_drafts or draft_tree, not both (num_drafts=n is draft_tree=(n, 1, ...))")
            tree = multidraft.check_branching(self.draft_tree if self.draft_tree is not None
                                              else (self.num_drafts,) + (1,) * (self.lookahead - 1), self.lookahead)
            if self.decoder.biased:
                raise ValueError("a biased decoder (KGW) is not supported with num_drafts / draft_tree")
            fix("num_drafts", 1)
            fix("draft_tree", tree if multidraft.num_paths(tree) > 1 else None)
        if not isinstance(self.distinct_drafts, (bool, np.bool_)):
            raise TypeError(f"distinct_drafts must be a bool, got {self.distinct_drafts!r}")
        # a coupled tree's siblings are the first arrivals of one race: distinct by construction
        fix("distinct_drafts", (bool(self.distinct_drafts) or spec.coupled) and self.draft_tree is not None)

    def _warn_greedy(self) -> None:
        # stacklevel 4: the caller of the constructor (this method, __post_init__, __init__ in between)
        if self.temperature == 0 and self.spec.watermarks:
            warnings.warn(
                f"method {self.method!r} at temperature 0: every distribution is one-hot, so no watermark "
                "is embedded (records say watermarked=False)", stacklevel=4)

    @classmethod
    def from_shape(cls, method: str, decoder: decoders.WatermarkDecoder, lookahead: int, drafts: str = "1",
                   **fields):
        """The setting with its draft shape written as text (:func:`wmspec_jax.multidraft.parse_shape`:
        ``"1"`` the paper's one chain, ``"3"`` three chains, ``"3x2x1"`` a tree, a trailing ``"d"`` for
        distinct siblings), as the experiments and ``wmspec-generate`` write it; ``fields``: the others."""
        from wmspec_jax import multidraft

        return cls(method=method, decoder=decoder, lookahead=lookahead, **fields, **multidraft.parse_shape(drafts))

    @property
    def draft_stream_decoder(self) -> decoders.WatermarkDecoder:
        """The decoder of the draft stream ζ^D: ``draft_decoder``, else ``decoder``."""
        return self.decoder if self.draft_decoder is None else self.draft_decoder

    @property
    def q_temperature(self) -> float:
        """The temperature applied to the draft's logits: ``draft_temperature``, else ``temperature``."""
        return self.temperature if self.draft_temperature is None else self.draft_temperature

    @property
    def spec(self) -> Method:
        """The static :class:`~wmspec_jax.methods.Method` description."""
        return METHODS[self.method]

    @property
    def siblings(self) -> int:
        """The most children of a node of the draft tree (1 for one chain): the sibling streams detection
        searches."""
        return 1 if self.draft_tree is None else max(self.draft_tree)

    @property
    def setting(self) -> "Setting":
        """The plain :class:`Setting` (of a :class:`SpeculativeConfig`: without its stopping fields)."""
        return _unchecked(Setting, {f.name: getattr(self, f.name) for f in dataclasses.fields(Setting)})

    def config(self, max_new_tokens: int, stop_ids: Optional[Union[int, tuple]] = None,
               pad_id: int = 0) -> "SpeculativeConfig":
        """The loop's config: this setting with a per-row budget of ``max_new_tokens``, the stop ids
        (``eos_id``: one id, a tuple, or None: never stop early) and the ``pad_id`` filler."""
        config = _unchecked(SpeculativeConfig, {f.name: getattr(self, f.name) for f in dataclasses.fields(Setting)})
        for name, value in (("max_new_tokens", max_new_tokens), ("eos_id", stop_ids), ("pad_id", pad_id)):
            object.__setattr__(config, name, value)
        config._check_stopping()  # the setting's own rules held when it was made (and it warned then)
        return config

    def to_record(self, decoder_name: Optional[str] = None, draft_decoder_name: Optional[str] = None) -> dict:
        """The settings fields of a text line (``wmspec-generate``'s, ``docs/tools.md``), in their order.

        ``decoder_name`` / ``draft_decoder_name``: the names the decoders were asked for by (an alias
        such as ``gamma_reweight``), else their kinds; either reads back to the same decoder."""
        decoders = _decoders()
        scheme = dict.fromkeys(decoders.SETTINGS_FIELDS)
        for d in (self.draft_stream_decoder, self.decoder):  # the target's settings win a shared field
            scheme.update(d.settings())
        if scheme["decoder_options"] is None:
            del scheme["decoder_options"]  # only schemes beyond the built-in ones have options
        draft = None if self.draft_decoder is None else draft_decoder_name or self.draft_decoder.kind
        tree = self.draft_tree
        return {"method": self.method, "lookahead": self.lookahead, "decoder": decoder_name or self.decoder.kind,
                **scheme, "draft_decoder": draft, "context_width": self.context_width,
                "key_sequence": self.key_sequence or None, "temperature": self.temperature,
                "draft_temperature": self.draft_temperature, "top_k": self.top_k,
                "draft_tree": None if tree is None else list(tree),
                "distinct_drafts": self.distinct_drafts if tree is not None else None,
                "prf_version": self.prf_version}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], **defaults) -> "Setting":
        """The setting a text line records (:meth:`to_record`'s fields; lines of every text-record format:
        a field a line lacks or holds as null takes ``defaults[field]`` (a field value: decoders as
        :class:`~wmspec_jax.decoders.WatermarkDecoder`), else the field's default; a missing ``lookahead`` is
        the tree's depth, else 0 for a method that does not speculate).
        Raises ValueError / TypeError as the constructor does."""
        decoders = _decoders()
        given, defaults = defaults, {**DEFAULTS, "decoder": decoders.WatermarkDecoder(), **defaults}

        def get(name):
            value = record.get(name)
            return defaults[name] if value is None else value

        method, tree = get("method"), get("draft_tree")
        tree = tuple(tree) if isinstance(tree, list) else tree
        lookahead = record.get("lookahead")
        if lookahead is None:
            speculates = METHODS[method].speculative if method in METHODS else True  # unknown: refused below
            lookahead = len(tree) if tree else given.get("lookahead", DEFAULTS["lookahead"] if speculates else 0)
        named = {name: defaults[name] if record.get(name) is None
                 else decoders.from_settings(record[name], record) for name in ("decoder", "draft_decoder")}
        return cls(method=method, lookahead=lookahead, **named, temperature=get("temperature"),
                   draft_temperature=get("draft_temperature"), top_k=get("top_k"),
                   context_width=get("context_width"), draft_tree=tree, distinct_drafts=get("distinct_drafts"),
                   key_sequence=get("key_sequence"), prf_version=get("prf_version"))

    def provenance(self, key=None):
        """The :class:`wmspec_jax.detect.provenance.Provenance` of this setting's texts: the decoders'
        statistics, SynthID's m, h, the PRF version, the sibling streams, the key sequence, and, when
        ``key`` is given (a secret or :class:`wmspec_jax.keys.StreamKeys`), its fingerprint and derivation
        (:func:`wmspec_jax.keys.key_provenance`; never the key)."""
        from wmspec_jax import keys
        from wmspec_jax.detect.provenance import Provenance

        decoders = _decoders()

        fingerprint, derivation = (None, None) if key is None else keys.key_provenance(key)
        m = self.decoder.num_layers if self.decoder.family == decoders.SYNTHID else 0
        draft = None if self.draft_decoder is None else self.draft_decoder.statistic
        return Provenance(self.decoder.statistic, int(m), self.context_width, self.prf_version, fingerprint,
                          derivation, draft, self.siblings, self.key_sequence)


DEFAULTS = {f.name: f.default for f in dataclasses.fields(Setting) if f.default is not dataclasses.MISSING}
"""Every field's default but the decoder's (Gumbel-max, built with the first setting): the one place the
tools' flags and the readers of lines that record no setting take them from."""


def _decoders():
    from wmspec_jax import decoders

    return decoders


def _unchecked(cls, values: dict):
    """An instance of ``cls`` with ``values``, whose rules already hold (no checks, no second warning)."""
    out = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(out, name, value)
    return out


@dataclasses.dataclass(frozen=True)
class SpeculativeConfig(Setting):
    """Static generation settings of the loop (hashable: part of the jit cache key): a :class:`Setting`
    and the stopping fields.

    Attributes (beyond :class:`Setting`'s):
      max_new_tokens: per-row budget of generated tokens.
      eos_id: stop a row after emitting this token, or any token of a tuple of stop ids (e.g. the
        end-of-turn token and ``<|endoftext|>``); None: never.
      pad_id: filler after each row's end in the returned buffer.
    """

    max_new_tokens: int = 64
    eos_id: Optional[Union[int, tuple]] = None
    pad_id: int = 0

    def __post_init__(self):
        self._check_setting()
        self._check_stopping()
        self._warn_greedy()

    def _check_stopping(self) -> None:
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        fix("max_new_tokens", _int_setting("max_new_tokens", self.max_new_tokens, 1))
        if isinstance(self.eos_id, (list, tuple)):
            ids = tuple(sorted({_int_setting("eos_id", e, 0) for e in self.eos_id}))
            fix("eos_id", (ids[0] if len(ids) == 1 else ids) if ids else None)
        elif self.eos_id is not None:
            fix("eos_id", _int_setting("eos_id", self.eos_id, 0))
        fix("pad_id", _int_setting("pad_id", self.pad_id, 0))
        if self.prf_version != prf.PRF_VERSION:
            raise ValueError(f"the loop generates with PRF version {prf.PRF_VERSION}, not {self.prf_version} "
                             "(texts of older versions are scored, not generated)")

    @classmethod
    def from_setting(cls, method: str, decoder: decoders.WatermarkDecoder, lookahead: int, *,
                     drafts: str = "1", **settings) -> "SpeculativeConfig":
        """:meth:`Setting.from_shape` for a config: ``settings`` may hold the stopping fields too."""
        return cls.from_shape(method, decoder, lookahead, drafts, **settings)

    @property
    def stop_ids(self) -> tuple:
        """The stop token ids as a tuple (empty: never stop early)."""
        if self.eos_id is None:
            return ()
        return self.eos_id if isinstance(self.eos_id, tuple) else (self.eos_id,)

    def static(self) -> stages.Static:
        """What the compiled step depends on (:class:`wmspec_jax.stages.Static`)."""
        from wmspec_jax import stages

        return stages.Static(
            method=self.spec, decoder=self.decoder, lookahead=self.lookahead, temperature=self.temperature,
            q_temperature=self.q_temperature, top_k=self.top_k, context_width=self.context_width,
            max_new_tokens=self.max_new_tokens, stop_ids=self.stop_ids, draft_decoder=self.draft_stream_decoder,
            tree=self.draft_tree, distinct_drafts=self.distinct_drafts, key_sequence=self.key_sequence)


# Published, pickled and keyed (wmspec_jax.executable_store.describe) under the loop's module, where
# callers import it from.
SpeculativeConfig.__module__ = "wmspec_jax.speculative"

__all__ = ["DEFAULTS", "MAX_LOOKAHEAD", "Setting", "SpeculativeConfig"]
