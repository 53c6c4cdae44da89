"""The one registry of detectors, shared by the CLI, the experiments and the notebooks.

Every detector is a small typed object (:class:`.common.Detector`) with a
``score(stats, *, source=None) -> Scores`` method. This module maps

* user-facing **names** (the tools' detector names, the experiments'
  detector sets) to how a detector is made: built from its settings alone
  (key-only detectors: single stream, Ars-τ with a given τ, Ars-Prior with a
  given p, the SynthID mean tests) or fitted on training data and loaded from
  a saved file (soft, the Bayesian detectors; Ars-τ with a *fitted* τ);
* saved **kinds** (the ``kind`` field of ``wmspec-detector-v2`` files) to
  their class, so :func:`from_saved` rebuilds any saved detector.

The default per decoder (:data:`DEFAULTS`) is the best detector that needs
neither training data nor generation records, and every default is
deterministic (a function of the key and the text: no coin can be re-drawn):
Ars-Prior (Eq. 12, with keyed coins: :func:`.gumbel.choose_prior`) for
Gumbel-max — Ars-τ needs a τ fitted on watermarked texts, which the detection
experiment saves (``detectors/gumbel-ars-tau.npz``) — and the mean g-value
of both streams for SynthID (exact p-value).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import importlib

# The detector modules are imported when a detector is made or loaded, not with the registry:
# listing the names (a tool's help) does not start JAX.


def _module(name: str):
    return importlib.import_module(f"wmspec_jax.detect.{name}")


def _classes() -> dict:
    g, soft, s, b, k = _module("gumbel"), _module("soft"), _module("synthid"), _module("bayes"), _module("kgw")
    return {cls.kind: cls for cls in (g.SingleStream, g.ArsTau, g.ArsPrior, g.Oracle, soft.Soft, s.MeanTest, b.Bayes,
                                      k.GreenCount)}


def __getattr__(name: str):
    if name == "CLASSES":  # saved kind -> detector class
        return _classes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered detector name.

    Attributes:
      name: the user-facing name.
      decoder: the family of statistics it scores: ``"gumbel"`` (one uniform per token and
        stream: Gumbel-max, inverse transform, DiPmark), ``"synthid"`` or ``"kgw"``.
      summary: one line for help texts.
      build: makes the detector from a provenance and options (None: it must
        be fitted — pass a saved file).
      options: the option names ``build`` accepts (with their defaults).
      needs_source: scoring needs generation records (the Oracles).
      paper: where the paper defines it ("" for detectors beyond the paper).
    """

    name: str
    decoder: str
    summary: str
    build: Optional[Callable[..., Any]] = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    needs_source: bool = False
    paper: str = ""

    @property
    def trained(self) -> bool:
        return self.build is None


def _entries():
    g, s = "gumbel", "synthid"
    gumbel = lambda: _module("gumbel")  # noqa: E731
    synthid = lambda: _module("synthid")  # noqa: E731
    return [
        Entry("single", g, "y^T of every token: the basic (non-speculative) watermark",
              lambda prov: gumbel().SingleStream(prov), paper="Sec. 4.2"),
        Entry("ars-tau", g, "y^D if u < tau else y^T; tau from a saved detector or `tau`",
              lambda prov, tau=0.5: gumbel().ArsTau(prov, tau), {"tau": 0.5}, paper="Eq. 11"),
        Entry("ars-prior", g, "y^D with probability p per token, keyed coins (deterministic: a function of the key "
              "and the text); p from `draft_fraction`, else the line's draft_fraction, else 0.5",
              lambda prov, draft_fraction=0.5: gumbel().ArsPrior(prov, draft_fraction),
              {"draft_fraction": 0.5}, paper="Eq. 12 (keyed coins)"),
        Entry("oracle", g, "the true stream of each token (needs generation records)",
              lambda prov: gumbel().Oracle(prov), needs_source=True, paper="Sec. 4.2"),
        Entry("soft", g, "per-token likelihood ratio using u; fitted (saved detector)"),
        Entry("soft-oracle", g, "the soft statistic with the true sources; fitted (saved detector)",
              needs_source=True),
        Entry("synthid-mean", s, "mean g-value of both streams, exact p-value",
              lambda prov: synthid().MeanTest(prov, "both"), paper="Sec. 2 (mean score)"),
        Entry("synthid-mean-target", s, "mean g-value of the target stream: the basic watermark",
              lambda prov: synthid().MeanTest(prov, "target"), paper="Sec. 2 (mean score)"),
        Entry("synthid-weighted-mean", s, "SynthID's weighted mean of both streams; its p-value is a valid "
              "but conservative bound: exactly 1 for about half of unwatermarked texts",
              lambda prov: synthid().MeanTest(prov, "both", weighted=True)),
        Entry("bayes-prior", s, "Bayes-Prior; trained (saved detector)", paper="App. D"),
        Entry("bayes-mlp", s, "Bayes-MLP; trained (saved detector)", paper="App. D"),
        Entry("bayes-oracle", s, "Bayesian Oracle; trained (saved detector), needs generation records",
              needs_source=True, paper="App. D"),
        Entry("bayes-single", s, "single-stream Bayesian detector; trained (saved detector)", paper="App. D"),
        Entry("kgw-green", "kgw", "KGW's green-token count (target stream's green list of ⌊γV⌋ tokens), exact "
              "binomial p-value; gamma from `kgw_gamma`, else the line's kgw_gamma, else 0.25; vocab_size: V",
              lambda prov, gamma=0.25, vocab_size=None: _module("kgw").GreenCount(prov, gamma, vocab_size),
              {"gamma": 0.25, "vocab_size": None}),
    ]


ENTRIES = {e.name: e for e in _entries()}
"""Name -> :class:`Entry`."""

DEFAULTS = {"gumbel": "ars-prior", "synthid": "synthid-mean", "kgw": "kgw-green"}
"""The default detector of each family of statistics (module doc)."""


def names(decoder: Optional[str] = None, *, buildable: Optional[bool] = None) -> list:
    """Registered names, optionally of one family (``"gumbel"`` / ``"synthid"``) and only those buildable
    from settings (or only trained)."""
    return [n for n, e in ENTRIES.items() if (decoder is None or e.decoder == decoder)
            and (buildable is None or buildable != e.trained)]


def entry(name: str) -> Entry:
    if name not in ENTRIES:
        raise ValueError(f"unknown detector {name!r}; known: {', '.join(ENTRIES)} (or a saved detector file)")
    return ENTRIES[name]


def make(name: str, provenance, **options):
    """The detector ``name`` built from its settings (key-only detectors).

    Args:
      name: a registered name (:data:`ENTRIES`) whose detector needs no
        training (trained ones come from :func:`wmspec_jax.detect.load_detector`).
      provenance: the settings of the statistics it will score (decoder, m,
        h; key fingerprint if known).
      options: the entry's options (e.g. ``tau=0.4``, ``draft_fraction=0.3``).

    Raises:
      ValueError: unknown name or option, a trained detector, or a provenance
        of the other decoder.
    """
    from wmspec_jax.detect.provenance import Provenance

    e = entry(name)
    if not isinstance(provenance, Provenance):
        raise TypeError(f"expected a Provenance, got {type(provenance).__name__}")
    if provenance.family != e.decoder:
        raise ValueError(f"detector {name!r} is a {e.decoder} detector; the statistics are {provenance.decoder}")
    if e.trained:
        raise ValueError(f"detector {name!r} is fitted on training data: load a saved one "
                         "(experiments/detection.py writes them to <output_dir>/detectors/)")
    unknown = set(options) - set(e.options)
    if unknown:
        raise ValueError(f"detector {name!r} takes options {sorted(e.options) or 'none'}, got {sorted(unknown)}")
    return e.build(provenance, **options)


def from_saved(kind: str, config: Mapping[str, Any], params: Mapping[str, Any]):
    """Rebuilds a detector from its saved kind, config and arrays (:mod:`.io`)."""
    classes = _classes()
    if kind not in classes:
        raise ValueError(f"unknown detector kind {kind!r} (known: {sorted(classes)})")
    return classes[kind].from_saved(dict(config), dict(params))


def name_of(detector) -> str:
    """The registered name of a detector object (e.g. ``"bayes-mlp"``, ``"soft-oracle"``)."""
    plain = {"single": "single", "ars_tau": "ars-tau", "ars_prior": "ars-prior", "gumbel_oracle": "oracle",
             "kgw_green": "kgw-green"}
    if getattr(detector, "kind", None) in plain:  # without importing the SynthID module (Flax)
        return plain[detector.kind]
    soft, synthid, bayes = _module("soft"), _module("synthid"), _module("bayes")
    if isinstance(detector, bayes.Bayes):
        return f"bayes-{detector.bayes_config.mode}"
    if isinstance(detector, soft.Soft):
        return "soft-oracle" if detector.oracle else "soft"
    if isinstance(detector, synthid.MeanTest):
        if detector.weighted:
            return "synthid-weighted-mean"
        return "synthid-mean" if detector.streams == "both" else f"synthid-mean-{detector.streams}"
    return plain[detector.kind]


def help_text() -> str:
    """The registry as lines of help (options a detector takes by name in backquotes: `tau`)."""
    lines = []
    for e in ENTRIES.values():
        opts = f" [{', '.join(f'{k}={v}' for k, v in e.options.items())}]" if e.options else ""
        lines.append(f"  {e.name:22s} {e.decoder:7s} {e.summary}{opts}")
    return "\n".join(lines)


__all__ = ["CLASSES", "DEFAULTS", "ENTRIES", "Entry", "entry", "from_saved", "help_text", "make", "name_of", "names"]
