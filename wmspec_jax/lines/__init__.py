"""Text lines, between the library and the tools: what a line says, checked; lines scored by settings
group; the deployment rule a tool scores under.

:mod:`wmspec_jax.detect` holds the statistics, detectors and p-values of token ids and keys; this package
turns JSON lines (generation records, ``{"text": ...}`` objects, plain texts) into them and back into
result lines:

1. :mod:`.text_line` — a line's settings, keys and token ids (:func:`read_line`, :class:`TextLine`),
   checked against what the user fixed for every text (:class:`Overrides`); a line that cannot be scored
   as it stands is a :class:`LineError` naming it.
2. :mod:`.scoring` — detectors by name or file, lines grouped by settings and keys, one result line per
   text (:func:`score_texts` for JSON records, :func:`score_lines` for read lines,
   :class:`ScoringOptions`).
3. :mod:`.model_scoring` — with the generator's models: each line's prompt and settings, the
   model-assisted p-value beside the key-only detectors (:class:`~.model_scoring.ModelScorer`).
4. :mod:`.deployment` — which settings and keys a run scores under when the lines cannot be believed
   (:class:`~.deployment.Rule`: the deployment record signed with the secret, corrections for what a line
   may claim).

The tools (:mod:`wmspec_jax.cli`) own the flags, the files and the messages; errors here name a line and
the option it concerns by the option's name (the field of :class:`ScoringOptions` or :class:`Overrides`,
the tool's flag of the same name).
"""

from wmspec_jax._lazy import attach

SUBMODULES = ("deployment", "model_scoring", "scoring", "text_line")
_NAMES = {
    "LineError": "text_line",
    "Overrides": "text_line",
    "TextLine": "text_line",
    "read_line": "text_line",
    "ScoringOptions": "scoring",
    "score_lines": "scoring",
    "score_texts": "scoring",
}
__getattr__, __dir__, __all__ = attach(__name__, SUBMODULES, _NAMES)
