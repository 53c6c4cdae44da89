"""The settings of an experiment run: one validated, frozen record (saved next to its outputs).

:class:`Settings` holds everything Tables 1-2, the detection experiment and
the robustness experiment depend on; the presets of
``experiments/reproduce.py`` are instances of it, and
:mod:`experiments.flags` turns every field into an absl flag (adding a
field here, with its help line in ``experiment.flags.FLAG_HELP``, adds the flag to
every script). The secret is a :class:`wmspec_jax.keys.Secret`: only its
fingerprint is ever stored (:meth:`Settings.public`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional, Sequence

import numpy as np

from wmspec_jax import decoders, keys
from wmspec_jax.models import pairs
from wmspec_jax.detect import synthid as _synthid

GUMBEL, SYNTHID = decoders.GUMBEL, decoders.SYNTHID
PARTS = ("speculative", "detection")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything an experiment run depends on (saved next to its outputs, without the secret).

    Validated when built (:meth:`validate`): a bad value fails before any work.
    ``secret`` accepts a :class:`wmspec_jax.keys.Secret` or the secret itself
    (stored as a ``Secret``: its ``repr`` shows only the fingerprint).
    """

    target: str = pairs.BUILTIN
    draft: str = pairs.BUILTIN
    dtype: str = "float32"
    dataset: str = "builtin-eli5"
    num_prompts: int = 16  # texts per run of the speed table
    num_detection_texts: int = 48  # texts per detection run
    num_detection_train: Optional[int] = None  # of which train the detectors (None: half); the rest test
    max_new_tokens: int = 48
    max_prompt_tokens: int = 96
    batch_size: int = 8
    detection_batch_size: Optional[int] = None  # rows per call of the detection runs (None: batch_size)
    lookaheads: tuple = (2, 3, 4)
    detect_lookahead: int = 3
    draft_trees: tuple = ()  # multi-draft shapes beyond the paper ("3", "3x2x1d"; multidraft.parse_shape)
    gumbel_temperature: float = 0.5
    synthid_temperature: float = 0.7
    synthid_layers: int = 30
    synthid_mixture: str = "layer"
    top_k: Optional[int] = None
    stop_at_eos: bool = False
    tpr_lengths: tuple = (8, 16, 24, 32, 48)
    roc_length_gumbel: int = 200
    roc_length_synthid: int = 100
    num_resamples: int = 1000
    seed: int = 0
    mesh: str = ""  # "data=D,model=M" (docs/sharding.md); "" = one device
    secret: keys.Secret = dataclasses.field(default=keys.Secret(keys.DEMO_SECRET), repr=False)

    def __post_init__(self):
        if not isinstance(self.secret, keys.Secret):
            object.__setattr__(self, "secret", keys.Secret(self.secret))
        if isinstance(self.target, str) and isinstance(self.draft, str) and self.target == pairs.BUILTIN:
            try:  # the built-in draft by name (builtin -> builtin:f3), so a resume cannot mix drafts
                object.__setattr__(self, "draft", pairs.canonical_draft(self.target, self.draft))
            except ValueError:
                pass  # validate() reports it
        for name in ("lookaheads", "tpr_lengths", "draft_trees"):
            value = getattr(self, name)
            if isinstance(value, (list, np.ndarray)):
                object.__setattr__(self, name, tuple(value))
        self.validate()

    def validate(self) -> None:
        """Raises ValueError (naming the flag) for any setting that would fail later."""
        def positive_int(name, value, low=1):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"--{name} must be an int >= {low}, got {value!r}")

        for name in ("num_prompts", "max_new_tokens", "max_prompt_tokens", "batch_size", "detect_lookahead",
                     "synthid_layers", "roc_length_gumbel", "roc_length_synthid", "num_resamples"):
            positive_int(name, getattr(self, name))
        positive_int("num_detection_texts", self.num_detection_texts, 4)  # train/test halves, train/val split
        positive_int("seed", self.seed, 0)
        for name in ("lookaheads", "tpr_lengths"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or not values:
                raise ValueError(f"--{name} must be a non-empty list, got {values!r}")
            for v in values:
                positive_int(name, v)
        self._validate_draft_trees()
        if self.top_k is not None:
            positive_int("top_k", self.top_k)
        if self.detection_batch_size is not None:
            positive_int("detection_batch_size", self.detection_batch_size)
        if self.num_detection_train is not None:
            positive_int("num_detection_train", self.num_detection_train, 2)
            if self.num_detection_texts - self.num_detection_train < 2:
                raise ValueError(f"--num_detection_train={self.num_detection_train} leaves fewer than 2 of the "
                                 f"{self.num_detection_texts} --num_detection_texts to test")
        for name in ("gumbel_temperature", "synthid_temperature"):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) or not (
                    math.isfinite(t) and t >= 0):
                raise ValueError(f"--{name} must be a finite number >= 0, got {t!r}")
            if t == 0:
                warnings.warn(f"--{name}=0: greedy decoding embeds no watermark (every distribution is one-hot)",
                              stacklevel=3)
        if self.synthid_mixture not in _synthid.MIXTURES:
            raise ValueError(f"--synthid_mixture must be one of {_synthid.MIXTURES}, got "
                             f"{self.synthid_mixture!r}")
        if not isinstance(self.stop_at_eos, bool):
            raise ValueError(f"--stop_at_eos must be a bool, got {self.stop_at_eos!r}")
        for name in ("target", "draft", "dtype", "dataset"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"--{name} must be a non-empty string")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"--dtype must be float32 or bfloat16, got {self.dtype!r}")
        if not isinstance(self.mesh, str):
            raise ValueError(f"--mesh must be a string like 'data=2,model=4', got {self.mesh!r}")
        if self.mesh:
            from wmspec_jax import sharding

            try:
                spec = sharding.parse_mesh_spec(self.mesh)
            except ValueError as e:
                raise ValueError(f"--mesh: {e}") from None
            for name in ("batch_size", "detection_batch_size"):
                rows = getattr(self, name)
                if spec.data > 0 and rows is not None and rows % spec.data:
                    raise ValueError(f"--{name}={rows} must be a multiple of the mesh's data axis "
                                     f"({spec.data}): each device holds the same number of rows")

    def _validate_draft_trees(self) -> None:
        from wmspec_jax import multidraft

        if not isinstance(self.draft_trees, tuple):
            raise ValueError(f"--draft_trees must be a list of draft shapes, got {self.draft_trees!r}")
        for shape in self.draft_trees:
            try:
                parsed = multidraft.parse_shape(shape) if isinstance(shape, str) else None
                if parsed:
                    tree = parsed.get("draft_tree") or (parsed["num_drafts"],)
                    multidraft.check_branching(tree, len(tree))
            except (ValueError, TypeError) as e:
                raise ValueError(f"--draft_trees: {e}") from None
            if not parsed:
                raise ValueError(f"--draft_trees: {shape!r} is not a multi-draft shape (n >= 2 chains like '3', or "
                                 "a tree like '3x2x1'; one chain is always run)")
            tree = parsed.get("draft_tree")
            if tree is not None and len(tree) not in set(self.lookaheads) | {self.detect_lookahead}:
                raise ValueError(f"--draft_trees: the tree {shape!r} has depth {len(tree)}, which is neither one of "
                                 f"--lookaheads {list(self.lookaheads)} nor --detect_lookahead={self.detect_lookahead}")

    def shapes_at(self, lookahead: int) -> list:
        """The ``--draft_trees`` shapes that apply at K = ``lookahead`` (n chains at any K, a tree at its
        depth)."""
        from wmspec_jax import multidraft

        out = []
        for shape in self.draft_trees:
            tree = multidraft.parse_shape(shape).get("draft_tree")
            if tree is None or len(tree) == lookahead:
                out.append(shape)
        return out

    def public(self) -> dict:
        """The settings without the secret (results never hold key material): its fingerprint instead."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "secret"}
        out.update(secret="<not stored>", key_fingerprint=self.secret.fingerprint,
                   key_derivation=keys.KEY_DERIVATION)
        return out

    def temperature(self, decoder: str) -> float:
        """The sampling temperature of the runs of a decoder family (the paper: 0.5 and 0.7)."""
        return {GUMBEL: self.gumbel_temperature, SYNTHID: self.synthid_temperature}[decoder]

    @property
    def detection_rows(self) -> int:
        """Rows per generation call of the detection runs (texts do not depend on it)."""
        return self.detection_batch_size or self.batch_size


# Settings that change the generated texts: a resumed output_dir must keep them. The secret is
# compared by its fingerprint (and the key derivation), so a new secret needs a new output_dir.
GENERATION_FIELDS = ("target", "draft", "dtype", "dataset", "max_new_tokens", "max_prompt_tokens",
                     "synthid_layers", "top_k", "stop_at_eos", "seed", "gumbel_temperature",
                     "synthid_temperature", "key_fingerprint", "key_derivation")


def prompts_needed(s: Settings, parts: Sequence[str] = PARTS) -> int:
    """Prompts the requested parts use (the speed table: ``num_prompts``; detection: ``num_detection_texts``)."""
    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {list(parts)}")
    return max(s.num_prompts if "speculative" in parts else 0,
               s.num_detection_texts if "detection" in parts else 0)


__all__ = ["GENERATION_FIELDS", "GUMBEL", "PARTS", "SYNTHID", "Settings", "prompts_needed"]
