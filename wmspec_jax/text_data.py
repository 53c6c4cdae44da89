"""Prompts and human-written text: ELI5 / C4 from local files, or built-in stand-ins.

The paper prompts with ELI5 questions (question answering) and the first
~100 characters of C4 realnewslike documents (open-ended generation), and
uses human ELI5 answers as unwatermarked negatives. Without a dataset hub
this module reads those datasets from local files through ``datasets``, and
otherwise falls back to built-in sets that ship with the Python environment:

* ``builtin-eli5``: question-style prompts from the ``chatterbot-corpus``
  package (English YAML conversations: first turn = question, second = the
  human answer);
* ``builtin-c4``: text openings from CPython's ``pydoc_data.topics``
  (paragraphs of the language reference) and, when installed, Debian's
  ``fortunes`` files (``apt-get install fortunes``: entries separated by
  ``%`` lines under ``/usr/share/games/fortunes``).

Built-in sets are split into ``"train"`` (80 %) and ``"eval"`` (20 %) by a
stable hash of each item's key (the normalised question; the pydoc topic
name, so paragraphs of one topic never straddle the split; the fortune
text). The built-in draft was distilled on ``"train"`` only, so experiments
prompt with ``"eval"`` (the default of :func:`load_prompt_set`).

Dataset specs (the experiments' ``--dataset`` flag):
``builtin-eli5[:SPLIT]``, ``builtin-c4[:SPLIT]`` (SPLIT: ``eval`` (default),
``train`` or ``all``), ``eli5:PATH``, ``c4:PATH`` where PATH is a
JSON/JSONL/CSV/Parquet file (or a directory saved with
``Dataset.save_to_disk``). ELI5 rows need a question field (``title`` or
``question``) and may carry human answers (``answers.text`` list,
``answers`` list or ``answer`` string); C4 rows need ``text``.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import re
import zlib
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

FORTUNES_DIR = "/usr/share/games/fortunes"
SPLITS = ("train", "eval")
_EVAL_PER_TEN = 2  # 20 % of keys go to "eval"
C4_PROMPT_CHARS = 100
_QUESTION_START = re.compile(
    r"^(what|why|how|who|whom|whose|when|where|which|is|are|was|were|do|does|did|can|could|"
    r"would|should|will|have|has|tell|explain|describe)\b",
    re.IGNORECASE,
)


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One prompt and, where known, a human continuation/answer (for negatives)."""

    prompt: str
    human: str = ""


@dataclasses.dataclass(frozen=True)
class PromptSet:
    """A named list of examples; ``kind`` is ``"question"`` or ``"text"``."""

    name: str
    kind: str
    examples: tuple

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def prompts(self) -> list[str]:
        return [e.prompt for e in self.examples]

    @property
    def human_texts(self) -> list[str]:
        return [e.human for e in self.examples if e.human.strip()]

    def take(self, n: int, seed: Optional[int] = None, offset: int = 0) -> "PromptSet":
        """A deterministic subset: shuffled with ``seed`` (if given), then [offset, offset + n)."""
        order = np.arange(len(self.examples))
        if seed is not None:
            order = np.random.default_rng(seed).permutation(order)
        chosen = order[offset : offset + n]
        return dataclasses.replace(self, examples=tuple(self.examples[i] for i in chosen))


# ---------------------------------------------------------------------------
# Built-in sets
# ---------------------------------------------------------------------------


def split_of(key: str) -> str:
    """``"train"`` or ``"eval"``: a stable 80/20 hash split (crc32 of ``key``)."""
    return "eval" if zlib.crc32(key.encode("utf-8")) % 10 < _EVAL_PER_TEN else "train"


def _in_split(key: str, split: Optional[str]) -> bool:
    if split is None or split == "all":
        return True
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or 'all', got {split!r}")
    return split_of(key) == split


_SPLIT_QUESTION_WORDS = {"what", "who", "where", "when", "why", "how", "which", "do", "does", "did",
                         "is", "are", "can", "could", "would", "will", "should", "have", "has", "tell"}


def _question_split_key(first_turn: str) -> str:
    # The exact normalisation the built-in draft's distillation split on, so
    # that "eval" questions stay unseen by the shipped draft adapters.
    q = " ".join(first_turn.split())
    q = q[0].upper() + q[1:]
    if q[-1] not in "?.!":
        q += "?" if q.split()[0].lower() in _SPLIT_QUESTION_WORDS else "."
    return q


def _as_question(text: str) -> str:
    text = " ".join(str(text).split())
    text = text[:1].upper() + text[1:]
    return text if text.endswith("?") else text.rstrip(".!") + "?"


def builtin_questions(split: Optional[str] = None) -> PromptSet:
    """Question/answer pairs from chatterbot-corpus (English), deduplicated.

    ``split``: ``None``/``"all"``, ``"train"`` or ``"eval"`` (module doc).
    """
    import yaml
    import chatterbot_corpus

    root = pathlib.Path(chatterbot_corpus.__file__).parent / "data" / "english"
    seen, examples = set(), []
    for path in sorted(root.glob("*.yml")):
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
        for conv in doc.get("conversations") or []:
            if not conv or not isinstance(conv[0], str):
                continue
            first = conv[0].strip()
            if not (first.endswith("?") or _QUESTION_START.match(first)):
                continue
            question = _as_question(first)
            if question.lower() in seen or not _in_split(_question_split_key(first), split):
                continue
            seen.add(question.lower())
            answer = " ".join(str(t) for t in conv[1:] if isinstance(t, str))
            examples.append(TextExample(question, " ".join(answer.split())))
    if not examples:
        raise RuntimeError(f"no questions found under {root}")
    return PromptSet("builtin-eli5" + (f":{split}" if split else ""), "question", tuple(examples))


def _opening(text: str, chars: int) -> str:
    """The first ~``chars`` characters, cut at a word boundary."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    cut = text.rfind(" ", 0, chars + 1)
    return text[: cut if cut > chars // 2 else chars]


def parse_fortunes(path: str) -> list[str]:
    """Entries of one fortune file (separated by lines holding only ``%``)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    return [e.strip() for e in re.split(r"^%\s*$", raw, flags=re.MULTILINE) if e.strip()]


def builtin_openings(
    chars: int = C4_PROMPT_CHARS,
    min_length: int = 200,
    fortunes_dir: str = FORTUNES_DIR,
    split: Optional[str] = None,
) -> PromptSet:
    """Text openings (C4 stand-in): pydoc_data paragraphs, plus fortunes if installed.

    The first ~``chars`` characters are the prompt, the rest the human
    continuation. ``split``: ``None``/``"all"``, ``"train"`` or ``"eval"``.
    """
    import pydoc_data.topics

    _in_split("", split)  # validates ``split``
    topics_of: dict[str, list[str]] = {}  # pydoc repeats paragraphs across topics
    for name in sorted(pydoc_data.topics.topics):
        for para in pydoc_data.topics.topics[name].split("\n\n"):
            if len(para) >= min_length and not para.startswith((" ", "*", "-")):
                topics_of.setdefault(" ".join(para.split()), []).append(name)
    texts = []
    for text, names in topics_of.items():
        # A paragraph is "eval" only if every topic holding it is, so no
        # "eval" text was ever seen in training.
        paragraph_split = "eval" if all(split_of(n) == "eval" for n in names) else "train"
        if split in (None, "all") or paragraph_split == split:
            texts.append(text)
    if os.path.isdir(fortunes_dir):
        for path in sorted(glob.glob(os.path.join(fortunes_dir, "*"))):
            if os.path.isfile(path) and "." not in os.path.basename(path):
                texts.extend(" ".join(e.split()) for e in parse_fortunes(path)
                             if len(e) >= min_length and _in_split(e, split))
    examples, seen = [], set()
    for text in texts:
        prompt = _opening(text, chars)
        if prompt in seen:
            continue
        seen.add(prompt)
        examples.append(TextExample(prompt, text[len(prompt) :].strip()))
    return PromptSet("builtin-c4" + (f":{split}" if split else ""), "text", tuple(examples))


# ---------------------------------------------------------------------------
# Local datasets through `datasets`
# ---------------------------------------------------------------------------


_FILE_BUILDERS = {"jsonl": "json", "json": "json", "csv": "csv", "parquet": "parquet"}


def _load_local(path: str):
    import datasets

    if os.path.isdir(path):
        ds = datasets.load_from_disk(path)
        return ds[next(iter(ds))] if isinstance(ds, datasets.DatasetDict) else ds
    if not os.path.exists(path):
        raise FileNotFoundError(f"dataset file not found: {path}")
    ext = pathlib.Path(path).suffix.lower().lstrip(".")
    builder = _FILE_BUILDERS.get(ext)
    if builder is None:
        raise ValueError(f"unsupported dataset file type {ext!r}: use json, jsonl, csv, parquet or a saved dataset dir")
    return datasets.load_dataset(builder, data_files=path, split="train")


def _answers(row) -> str:
    ans = row.get("answers", row.get("answer", ""))
    if isinstance(ans, dict):
        ans = ans.get("text", [])
    if isinstance(ans, (list, tuple)):
        ans = ans[0] if ans else ""
    return " ".join(str(ans or "").split())


def load_eli5(path: str) -> PromptSet:
    """ELI5-style questions (``title`` or ``question``) with human answers if present."""
    ds = _load_local(path)
    field = "title" if "title" in ds.column_names else "question" if "question" in ds.column_names else None
    if field is None:
        raise ValueError(f"ELI5 data needs a 'title' or 'question' column; found {ds.column_names}")
    examples = [TextExample(_as_question(row[field]), _answers(row)) for row in ds if str(row[field]).strip()]
    return PromptSet(f"eli5:{os.path.basename(path)}", "question", tuple(examples))


def load_c4(path: str, chars: int = C4_PROMPT_CHARS) -> PromptSet:
    """C4-style documents (``text``): the first ~``chars`` characters are the prompt."""
    ds = _load_local(path)
    if "text" not in ds.column_names:
        raise ValueError(f"C4 data needs a 'text' column; found {ds.column_names}")
    examples = []
    for row in ds:
        text = " ".join(str(row["text"]).split())
        if len(text) > chars:
            prompt = _opening(text, chars)
            examples.append(TextExample(prompt, text[len(prompt) :].strip()))
    return PromptSet(f"c4:{os.path.basename(path)}", "text", tuple(examples))


def parse_dataset_spec(spec: str) -> tuple:
    """Checks a ``--dataset`` spec without loading it: (kind, split or path).

    Raises:
      ValueError: unknown kind, split or file type; FileNotFoundError: a
        missing file (so an experiment fails before any work rather than
        after its first stage).
    """
    if not isinstance(spec, str):
        raise ValueError(f"dataset spec must be a string, got {type(spec).__name__}")
    kind, _, path = spec.partition(":")
    if kind in ("builtin-eli5", "builtin-c4"):
        split = path or "eval"
        if split not in SPLITS + ("all",):
            raise ValueError(f"unknown split {split!r} in {spec!r}: use eval, train or all")
        return kind, split
    if kind in ("eli5", "c4") and path:
        if not os.path.exists(path):
            raise FileNotFoundError(f"dataset {spec!r}: file not found: {path}")
        ext = pathlib.Path(path).suffix.lower().lstrip(".")
        if not os.path.isdir(path) and ext not in _FILE_BUILDERS:
            raise ValueError(f"unsupported dataset file type {ext!r}: use json, jsonl, csv, parquet or a saved "
                             "dataset dir")
        return kind, path
    raise ValueError(f"unknown dataset spec {spec!r}: use builtin-eli5[:split], builtin-c4[:split], "
                     "eli5:PATH or c4:PATH")


def load_prompt_set(spec: str) -> PromptSet:
    """``builtin-eli5[:SPLIT]`` | ``builtin-c4[:SPLIT]`` | ``eli5:PATH`` | ``c4:PATH``.

    Built-in sets default to the held-out ``eval`` split (module doc).
    """
    kind, arg = parse_dataset_spec(spec)
    if kind == "builtin-eli5":
        return builtin_questions(arg)
    if kind == "builtin-c4":
        return builtin_openings(split=arg)
    return load_eli5(arg) if kind == "eli5" else load_c4(arg)


# ---------------------------------------------------------------------------
# Tokenisation into the loop's static shapes
# ---------------------------------------------------------------------------


def encode_texts(encode: Callable[[str], Iterable[int]], texts: Sequence[str], max_length: int, pad_id: int = 0,
                 *, too_long: str = "keep_first"):
    """Tokenise texts with ``encode`` and pack them (:func:`wmspec_jax.models.pairs.pack_prompts`; long texts
    keep their start)."""
    from wmspec_jax.models.pairs import pack_prompts

    return pack_prompts([list(encode(t)) for t in texts], max_length, pad_id, too_long=too_long)


def write_human_texts(path: str) -> int:
    """Writes the built-in human texts (the ``builtin-eli5`` answers and ``builtin-c4`` openings) as JSONL
    (``{"id", "source", "text"}`` per line, atomically); returns how many."""
    from wmspec_jax import storage

    rows = [{"id": f"builtin-eli5/{i}", "source": "builtin-eli5 answer", "text": t}
            for i, t in enumerate(builtin_questions().human_texts)]
    rows += [{"id": f"builtin-c4/{i}", "source": "builtin-c4 opening", "text": e.human}
             for i, e in enumerate(builtin_openings().examples)]
    rows = [r for r in rows if r["text"].strip()]
    storage.atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


__all__ = ["C4_PROMPT_CHARS", "FORTUNES_DIR", "PromptSet", "SPLITS", "TextExample", "builtin_openings",
           "builtin_questions", "encode_texts", "load_c4", "load_eli5", "load_prompt_set", "parse_dataset_spec",
           "parse_fortunes", "split_of", "write_human_texts"]
