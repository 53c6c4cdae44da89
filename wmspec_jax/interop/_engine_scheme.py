"""What the engines' watermark decoders of the generation loop share (:class:`EngineScheme`): their
records without the key, their refusal to be rebuilt from a line, their names."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from wmspec_jax.decoders.base import WatermarkDecoder


@dataclasses.dataclass(frozen=True)
class EngineScheme(WatermarkDecoder):
    """A scheme whose pseudorandom function is another engine's (:mod:`wmspec_jax.interop`), built from that
    engine's configuration (:meth:`wmspec_jax.interop.foreign.ForeignScheme.decoder`).

    Attributes:
      config: the engine's settings; they hold its key, which the repr, the name and the line's record
        never show (its fingerprint instead).
    """

    config: Any
    engine_title: ClassVar[str] = ""
    compiles_in_secret: ClassVar[bool] = True
    """The engine's key is a constant of the compiled generation program (the scheme is a static
    argument), not data: :mod:`wmspec_jax.executable_store` keeps no such program, and
    ``wmspec-generate --scheme_config`` does not turn on JAX's persistent compilation cache (a user who
    sets ``JAX_COMPILATION_CACHE_DIR`` asks JAX to keep every program)."""

    name = property(lambda self: self.kind)
    statistic = property(lambda self: self.kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    def settings(self) -> dict:
        """The line's record of the scheme: the engine's settings without its key."""
        return {"decoder_options": self.config.record()}

    @classmethod
    def from_settings(cls, record):
        raise ValueError(f"a text generated with {cls.engine_title}'s configuration is scored with that "
                         "configuration (its key is not in the line): wmspec-detect --scheme_config=FILE")


__all__ = ["EngineScheme"]
