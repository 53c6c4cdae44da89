"""Containers for trade-off curves and reference points, and their JSON form."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def jsonable(x: Any) -> Any:
    """Nested dicts/lists/NumPy values -> plain JSON types."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    return x


class JsonRecord:
    """A dataclass written as plain JSON and read back field by field (unknown keys ignored)."""

    def to_json(self) -> dict:
        return jsonable(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: dict):
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


@dataclasses.dataclass
class Curve(JsonRecord):
    """One trade-off curve: points (SE, WS) with Monte Carlo standard errors.

    Attributes:
      name: identifier (JSON key, cache file name).
      label: legend text.
      cls: ``"linear"`` (Eq. 9-10), ``"hu"`` or ``"google"`` (App. C.2).
      decoder: the decoder's label.
      se, se_stderr: float64[n] sampling efficiency E Σ_w min(Q_ζ, P'_ζ) (Lemma 3.4).
      ws, ws_stderr: float64[n] watermark strength E KL(P'_ζ || P) (Def. 3.1).
      params: named float64[n] arrays: ``gamma`` (and for the linear class
        ``theta``, ``gamma0`` and ``ws_required``, the level of the constraint).
      num_samples: ζ samples behind the estimate (0 when exact).
      notes: method, tolerances and other provenance.
    """

    name: str
    label: str
    cls: str
    decoder: str
    se: np.ndarray
    se_stderr: np.ndarray
    ws: np.ndarray
    ws_stderr: np.ndarray
    params: dict
    num_samples: int
    notes: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "Curve":
        arr = lambda v: np.asarray(v, np.float64)  # noqa: E731
        return super().from_json({**d, **{k: arr(d[k]) for k in ("se", "se_stderr", "ws", "ws_stderr")},
                                  "params": {k: arr(v) for k, v in d["params"].items()},
                                  "num_samples": int(d["num_samples"]), "notes": dict(d.get("notes", {}))})

    def pareto_mask(self) -> np.ndarray:
        """bool[n]: points not dominated by another point of the curve (higher or
        equal SE and WS, one strictly); what a Pareto frontier would keep."""
        se, ws = self.se[:, None], self.ws[:, None]
        dominated = ((self.se[None, :] >= se) & (self.ws[None, :] >= ws)
                     & ((self.se[None, :] > se) | (self.ws[None, :] > ws))).any(1)
        return ~dominated


@dataclasses.dataclass
class Point(JsonRecord):
    """A reference point (SE, WS) with standard errors (0 when exact)."""

    name: str
    label: str
    se: float
    se_stderr: float
    ws: float
    ws_stderr: float
    num_samples: int
    notes: dict = dataclasses.field(default_factory=dict)


__all__ = ["Curve", "JsonRecord", "Point", "jsonable"]
