"""Bounded cost per line: what ``wmspec-detect`` refuses to score before it spends any work on a text.

A line of the input is data, and a hostile or damaged one must not cost more than the texts the generator
can write. The work of a text grows with its length and with the settings its line declares (K draft
passes per token under ``--model``, the key length n of the edit test, the draft tree's paths), so before
a text is tokenised:

* its length is held to ``--max_chars`` characters (:data:`DEFAULT_MAX_CHARS`), and so are the lengths of
  what the line brings beside it that is scored or run through a model (``tokens``, ``prompt``);
* the settings it declares are held to the bounds ``wmspec-generate`` accepts, read from the same
  constants (:func:`generator_bounds`): K at most :data:`wmspec_jax.speculative.MAX_LOOKAHEAD`, a key
  sequence as :func:`wmspec_jax.key_sequence.check_key_length` allows, a draft tree as
  :func:`wmspec_jax.multidraft.check_branching` allows (at most ``MAX_PATHS`` paths). (m and h cost
  nothing beyond their bounds either: :mod:`wmspec_jax.lines.text_line` refuses a line beyond them.)

A line outside them is skipped and reported with its line number and the reason, exactly like a line
that is not JSON (:func:`wmspec_jax.cli.texts.iter_inputs`); the lines after it are still scored.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

from absl import flags

DEFAULT_MAX_CHARS = 100_000
"""The longest text ``wmspec-detect`` scores by default (characters, after normalisation)."""


def define_flags(fv: flags.FlagValues) -> None:
    """``--max_chars``."""
    flags.DEFINE_integer("max_chars", DEFAULT_MAX_CHARS, "longest text scored, in characters (a longer one, or a "
                         "line whose tokens or prompt are longer, is skipped and reported before it is tokenised)",
                         lower_bound=1, flag_values=fv)


def generator_bounds() -> dict:
    """The bounds ``wmspec-generate`` holds its cost-bearing int settings to, by line field: (low, high),
    both included."""
    from wmspec_jax import key_sequence, speculative

    return {"lookahead": (0, speculative.MAX_LOOKAHEAD), "key_sequence": (0, key_sequence.MAX_KEY_LENGTH)}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _draft_tree_problem(tree) -> Optional[str]:
    from wmspec_jax import multidraft, speculative

    bound = (f"wmspec-generate's bound: children per depth, ints >= 1, at most {multidraft.MAX_PATHS} paths and "
             f"at most {speculative.MAX_LOOKAHEAD} depths")
    if not isinstance(tree, list) or not 1 <= len(tree) <= speculative.MAX_LOOKAHEAD:
        return f"field 'draft_tree' is beyond {bound}"
    try:
        multidraft.check_branching(tree, len(tree))
    except (TypeError, ValueError) as e:
        return f"field 'draft_tree' is beyond {bound} ({str(e)[:120]})"
    return None


def problem(record: dict, text: str, max_chars: int) -> Optional[str]:
    """Why a line may not be scored at all (a text, a field or a setting beyond the bounds in the module
    doc), or None. Reads nothing but lengths and a few fields: no parsing, no tokenising."""
    if len(text) > max_chars:
        return f"the text has {len(text):,} characters, more than --max_chars={max_chars:,}"
    for name in ("tokens", "prompt"):
        value = record.get(name)
        if isinstance(value, (str, list)) and len(value) > max_chars:
            what = "token ids" if name == "tokens" else "characters"
            return f"field {name!r} has {len(value):,} {what}, more than --max_chars={max_chars:,}"
    for name, (low, high) in generator_bounds().items():
        value = record.get(name)
        if value is None:
            continue
        if not _is_int(value) or not low <= value <= high:
            return (f"field {name!r} must be an int in [{low}, {high}] (wmspec-generate's bound), got "
                    f"{str(value)[:40]}")
    if record.get("draft_tree") is not None:
        return _draft_tree_problem(record["draft_tree"])
    return None


def within_bounds(texts: Iterable, skipped: list, max_chars: int) -> Iterator:
    """The texts of ``texts`` (:class:`wmspec_jax.cli.texts.InputText`) that may be scored; each other one
    is appended to ``skipped`` as ``(where, why)`` (:func:`problem`), as the reader reports a line it
    cannot read."""
    for item in texts:
        why = problem(item.record if isinstance(item.record, dict) else {}, item.text, max_chars)
        if why is None:
            yield item
        else:
            skipped.append((item.where, why))


__all__ = ["DEFAULT_MAX_CHARS", "define_flags", "generator_bounds", "problem", "within_bounds"]
