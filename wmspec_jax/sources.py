"""Where each generated token came from (the ``source`` record of a generation).

One code per position of a generated text, shared by the generation loop
(:mod:`wmspec_jax.speculative`), which writes them, and the detectors
(:mod:`wmspec_jax.detect`), which read them to pick a token's stream:

* ``SOURCE_DRAFT``: an accepted draft token, drawn from Q_{ζ^D} (Alg. 1 line 5);
* ``SOURCE_RESIDUAL``: drawn from the residual (P − Q)+ after a rejection
  (line 12), stream ζ^T;
* ``SOURCE_TARGET``: the bonus token after K acceptances (line 16), or any
  token of a non-speculative method, stream ζ^T;
* ``SOURCE_NONE``: prompt or padding.
"""

SOURCE_NONE = -1
SOURCE_DRAFT = 0
SOURCE_RESIDUAL = 1
SOURCE_TARGET = 2

SOURCE_NAMES = {SOURCE_NONE: "none", SOURCE_DRAFT: "draft", SOURCE_RESIDUAL: "residual", SOURCE_TARGET: "target"}


__all__ = ["SOURCE_DRAFT", "SOURCE_NAMES", "SOURCE_NONE", "SOURCE_RESIDUAL", "SOURCE_TARGET"]
