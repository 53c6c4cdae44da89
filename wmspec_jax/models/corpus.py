"""Built-in prompts and natural text, from packages already on the machine.

* Questions: the first turn of each conversation in the PyPI package
  ``chatterbot-corpus`` (``chatterbot_corpus/data/english/*.yml``).
* Documentation text: paragraphs of CPython's ``pydoc_data.topics``.

Each item goes to the ``"train"`` or ``"eval"`` split by a stable hash of its
key (the question, or the pydoc topic name so that paragraphs of one topic
never straddle the split), so the two splits are disjoint and reproducible.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import zlib

SPLITS = ("train", "eval")
_EVAL_PER_TEN = 2  # 20 % of keys go to "eval"


def _split_of(key: str) -> str:
    return "eval" if zlib.crc32(key.encode("utf-8")) % 10 < _EVAL_PER_TEN else "train"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


@functools.lru_cache(maxsize=None)
def _all_questions() -> tuple[str, ...]:
    import yaml

    spec = importlib.util.find_spec("chatterbot_corpus")
    if spec is None:
        raise ImportError("built-in prompts need the PyPI package chatterbot-corpus")
    root = os.path.join(list(spec.submodule_search_locations)[0], "data", "english")
    seen, out = set(), []
    for path in sorted(glob.glob(os.path.join(root, "*.yml"))):
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        for conv in data.get("conversations") or []:
            if not conv or not isinstance(conv[0], str):
                continue
            q = " ".join(conv[0].split())
            if len(q) < 8 or q.lower() in seen:
                continue
            seen.add(q.lower())
            q = q[0].upper() + q[1:]
            if q[-1] not in "?.!":
                q += "?" if q.split()[0].lower() in _QUESTION_WORDS else "."
            out.append(q)
    return tuple(out)


_QUESTION_WORDS = {"what", "who", "where", "when", "why", "how", "which", "do", "does", "did",
                   "is", "are", "can", "could", "would", "will", "should", "have", "has", "tell"}


def questions(split: str) -> list[str]:
    """Question-style prompts (plain strings, no chat template) of one split."""
    _check_split(split)
    return [q for q in _all_questions() if _split_of(q) == split]


@functools.lru_cache(maxsize=None)
def _all_passages(min_chars: int) -> tuple[tuple[str, str], ...]:
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        for para in topics[name].split("\n\n"):
            text = " ".join(para.split())
            # Prose only: skip headings, grammar productions and code listings.
            if len(text) >= min_chars and text.count("::=") == 0 and text[0].isalpha():
                out.append((name, text))
    return tuple(out)


def passages(split: str, min_chars: int = 300) -> list[str]:
    """Prose paragraphs of the Python docs (one string each) of one split."""
    _check_split(split)
    return [t for name, t in _all_passages(min_chars) if _split_of(name) == split]


def text_prompt(passage: str, max_chars: int = 240) -> str:
    """The start of a passage cut at a word boundary: a plain continuation prompt."""
    if len(passage) <= max_chars:
        return passage
    return passage[:max_chars].rsplit(" ", 1)[0]
