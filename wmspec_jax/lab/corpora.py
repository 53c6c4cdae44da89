"""Human test corpora that repeat themselves, built deterministically from a seed (no network).

Calibration of key-only detection is a statement over the key: one text's p-value is exactly uniform
over secrets. A deployment instead scores many texts under *one* secret, and texts that share
(context, token) windows share their keyed values, so the number of false positives over a corpus is
then not binomial (``docs/repetitive_text.md``). These corpora make that case measurable:

==========================  ===========================================================================
name                        what repeats
==========================  ===========================================================================
``form_letters``            one template of a form letter, slots (names, dates, products, amounts,
                            reference numbers) filled from small word lists: most windows are shared
                            by every text
``repeated_paragraphs``     inside each text: a refrain between verses, each a sentence of the built-in
                            prose drawn without replacement (across texts nothing is shared until the
                            pool is used up)
``source_code``             windows of lines of the installed Python standard library's ``.py`` files
                            (read from disk): imports, ``self.``, ``def``, docstring conventions
``lists_and_tables``        Markdown tables, numbered and bulleted lists, CSV: headers, separators and
                            items from small word lists
``prose``                   the control: the built-in human texts (:mod:`.data`: the ``builtin-c4``
                            paragraphs and the longer ``builtin-eli5`` answers), one unit per text
==========================  ===========================================================================

Every builder is ``builder(num_texts, seed) -> Corpus``, a pure function of its arguments and of the
installed packages' files (the standard library's sources differ between Python versions; the
corpus records the version). :func:`tokenize` turns a corpus into the padded token ids detection
takes, with the built-in tokenizer (SmolLM2's, the one ``wmspec-detect`` uses by default) after the
tools' text normalisation (:func:`wmspec_jax.textnorm.normalize_text`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
import sysconfig
from typing import Callable, Optional, Sequence

import numpy as np

from wmspec_jax.textnorm import normalize_text


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A named list of human texts.

    Attributes:
      name: the builder's name (:data:`BUILDERS`).
      texts: the texts, in order.
      seed: the seed they were built from.
      source: where the material came from (for the record: word lists, a package, a Python version).
    """

    name: str
    texts: tuple
    seed: int
    source: str

    def __len__(self) -> int:
        return len(self.texts)


@dataclasses.dataclass(frozen=True)
class TokenizedCorpus:
    """Token ids of a corpus as detection takes them.

    Attributes:
      tokens: int32[B, L] ids, right-padded with 0.
      lengths: int32[B] the number of ids of each text (at most ``max_tokens`` of :func:`tokenize`).
      vocab_size: V of the tokenizer (detection's ``vocab_size``).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    vocab_size: int


def _check_count(num_texts) -> int:
    if isinstance(num_texts, bool) or not isinstance(num_texts, (int, np.integer)) or num_texts < 1:
        raise ValueError(f"num_texts must be an int >= 1, got {num_texts!r}")
    return int(num_texts)


# ---------------------------------------------------------------------------
# Form letters
# ---------------------------------------------------------------------------

SURNAMES = ("Smith", "Jones", "Taylor", "Brown", "Williams", "Wilson", "Johnson", "Davies", "Robinson", "Wright",
            "Thompson", "Evans", "Walker", "White", "Roberts", "Green", "Hall", "Wood", "Jackson", "Clarke",
            "Patel", "Khan", "Lewis", "Harris", "Martin", "Cooper", "King", "Lee", "Baker", "Morgan")
TITLES = ("Mr.", "Ms.", "Mrs.", "Dr.")
FIRST_NAMES = ("Anna", "James", "Maria", "David", "Laura", "Peter", "Sofia", "Thomas", "Emma", "Daniel", "Olivia",
               "Samuel", "Grace", "Henry", "Chloe", "Lucas")
COMPANIES = ("Northwind Supplies", "Bluebird Home Goods", "Summit Outdoor", "Harbor Electronics", "Maple & Co.",
             "Crescent Books", "Riverside Kitchenware", "Pioneer Garden Centre")
PRODUCTS = ("coffee grinder", "desk lamp", "pair of hiking boots", "wireless speaker", "rain jacket",
            "cast-iron pan", "bookshelf", "garden hose", "electric kettle", "backpack", "office chair",
            "set of towels", "bicycle helmet", "table fan", "wall clock")
CITIES = ("Leeds", "Bristol", "Glasgow", "Cardiff", "Dublin", "Manchester", "York", "Belfast", "Norwich",
          "Aberdeen", "Exeter", "Oxford")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")

FORM_LETTER = """Dear {title} {surname},

Thank you for contacting {company} about your order {order} placed on {date}. We are sorry to hear that the {product} you received did not meet your expectations. Our records show that the item was shipped from our {city} warehouse and delivered on {date2}.

We have issued a refund of {amount} to your original method of payment. Please allow five to seven business days for the refund to appear on your statement. You do not need to return the {product}; if you would like a replacement instead, simply reply to this message and quote your order number.

If you have any further questions, please call our customer care team on {phone}, Monday to Friday between 9 am and 5 pm, or write to us at the address below.

We value your custom and look forward to serving you again.

Yours sincerely,

{first} {sender}
Customer Care Team, {company}"""
"""The form letter's template (``str.format`` slots)."""


def _date(rng: np.random.Generator) -> str:
    return f"{int(rng.integers(1, 29))} {MONTHS[int(rng.integers(12))]} {int(rng.integers(2019, 2026))}"


def form_letters(num_texts: int, seed: int = 0) -> Corpus:
    """Letters from one template (:data:`FORM_LETTER`), slots filled from the word lists above and
    random numbers (order and phone numbers, amounts, dates)."""
    n = _check_count(num_texts)
    rng = np.random.default_rng(seed)
    pick = lambda words: words[int(rng.integers(len(words)))]  # noqa: E731
    texts = []
    for _ in range(n):
        texts.append(FORM_LETTER.format(
            title=pick(TITLES), surname=pick(SURNAMES), company=pick(COMPANIES),
            order=f"#{int(rng.integers(100000, 999999))}", date=_date(rng), product=pick(PRODUCTS),
            city=pick(CITIES), date2=_date(rng), amount=f"£{int(rng.integers(8, 400))}.{int(rng.integers(100)):02d}",
            phone=f"0{int(rng.integers(100, 999))} {int(rng.integers(100, 999))} {int(rng.integers(1000, 9999))}",
            first=pick(FIRST_NAMES), sender=pick(SURNAMES)))
    return Corpus("form_letters", tuple(texts), int(seed), "one template, slots from word lists")


# ---------------------------------------------------------------------------
# Prose units (the control and the repeated-paragraph corpus)
# ---------------------------------------------------------------------------

MIN_PROSE_CHARS = 120
"""Shortest built-in answer taken as a prose unit (shorter ones are single short sentences)."""


@functools.lru_cache(maxsize=1)
def prose_units() -> tuple:
    """The built-in human texts as prose units, deduplicated, in a fixed order: the ``builtin-c4``
    texts (opening + continuation: pydoc paragraphs, and fortunes where installed) and the
    ``builtin-eli5`` answers of at least :data:`MIN_PROSE_CHARS` characters. (Cached: parsing the
    built-in sets takes seconds.)"""
    from wmspec_jax import text_data as data

    units, seen = [], set()
    for e in data.builtin_openings().examples:
        units.append(" ".join((e.prompt + " " + e.human).split()))
    units += [t for t in data.builtin_questions().human_texts if len(t) >= MIN_PROSE_CHARS]
    out = []
    for u in units:
        if u not in seen:
            seen.add(u)
            out.append(u)
    return tuple(out)


def _draw_units(units: Sequence[str], count: int, rng: np.random.Generator) -> list:
    """``count`` units without replacement, a fresh permutation each time the pool is used up."""
    out: list = []
    while len(out) < count:
        order = rng.permutation(len(units))
        out += [units[i] for i in order[: count - len(out)]]
    return out


def prose(num_texts: int, seed: int = 0) -> Corpus:
    """The control: ``num_texts`` distinct built-in human texts (:func:`prose_units`), shuffled with
    ``seed``. Raises ValueError when more are asked for than there are."""
    n = _check_count(num_texts)
    units = prose_units()
    if n > len(units):
        raise ValueError(f"the built-in prose has {len(units)} texts; {n} asked for")
    order = np.random.default_rng(seed).permutation(len(units))[:n]
    return Corpus("prose", tuple(units[i] for i in order), int(seed), "built-in human texts (builtin-c4, builtin-eli5)")


REFRAIN_REPEATS = 3
"""How often each repeated-paragraph text holds its refrain."""

MIN_SENTENCE_CHARS = 40
"""Shortest sentence of the prose taken as a paragraph of :func:`repeated_paragraphs`."""


@functools.lru_cache(maxsize=1)
def prose_sentences() -> tuple:
    """The distinct sentences of :func:`prose_units` of at least :data:`MIN_SENTENCE_CHARS` characters,
    in a fixed order (split after ``.``, ``!`` or ``?`` followed by a space)."""
    seen, out = set(), []
    for unit in prose_units():
        for sentence in re.split(r"(?<=[.!?])\s+", unit):
            if len(sentence) >= MIN_SENTENCE_CHARS and sentence not in seen:
                seen.add(sentence)
                out.append(sentence)
    return tuple(out)


def repeated_paragraphs(num_texts: int, seed: int = 0) -> Corpus:
    """Texts "verse, refrain, verse, refrain, refrain" (paragraphs separated by blank lines), each
    paragraph one sentence of the built-in prose (:func:`prose_sentences`), the refrain
    :data:`REFRAIN_REPEATS` times. Sentences are drawn without replacement, so texts share nothing
    until ``3 num_texts`` exceeds the pool (1,174 sentences: 391 texts; then a fresh permutation)."""
    n = _check_count(num_texts)
    rng = np.random.default_rng(seed)
    drawn = _draw_units(prose_sentences(), 3 * n, rng)
    texts = []
    for i in range(n):
        verse1, refrain, verse2 = drawn[3 * i: 3 * i + 3]
        texts.append("\n\n".join([verse1, refrain, verse2] + [refrain] * (REFRAIN_REPEATS - 1)))
    return Corpus("repeated_paragraphs", tuple(texts), int(seed), "built-in human texts, refrain repeated")


# ---------------------------------------------------------------------------
# Source code
# ---------------------------------------------------------------------------

CODE_LINES = 40
"""Lines per source-code text (a window of one file)."""


def stdlib_sources(root: Optional[str] = None) -> list:
    """Sorted paths of the standard library's ``.py`` files (``root``: another folder of sources),
    leaving out its test suites and third-party packages (vendored, or installed into it)."""
    root = root or sysconfig.get_paths()["stdlib"]
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "lib2to3"}
    out = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in skip)
        out += [os.path.join(directory, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def source_code(num_texts: int, seed: int = 0, *, root: Optional[str] = None) -> Corpus:
    """Windows of :data:`CODE_LINES` lines of the standard library's sources (:func:`stdlib_sources`),
    one file per text, files drawn without replacement and the window's first line uniformly at random.
    Windows shorter than :data:`MIN_PROSE_CHARS` characters (short files) are skipped."""
    n = _check_count(num_texts)
    paths = stdlib_sources(root)
    if not paths:
        raise ValueError(f"no .py files under {root or 'the standard library'}")
    rng = np.random.default_rng(seed)
    texts: list = []
    for i in rng.permutation(len(paths)):  # until n usable windows: some files are short or unreadable
        path = paths[i]
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        first = int(rng.integers(0, max(1, len(lines) - CODE_LINES + 1)))
        window = "\n".join(lines[first: first + CODE_LINES]).strip()
        if len(window) >= MIN_PROSE_CHARS:
            texts.append(window)
        if len(texts) == n:
            break
    if len(texts) < n:
        raise ValueError(f"only {len(texts)} usable source windows under {root or 'the standard library'}; "
                         f"{n} asked for")
    where = root or f"Python {platform.python_version()} standard library"
    return Corpus("source_code", tuple(texts), int(seed), where)


# ---------------------------------------------------------------------------
# Lists and tables
# ---------------------------------------------------------------------------

GROCERIES = ("apples", "bananas", "bread", "butter", "carrots", "cheese", "coffee", "eggs", "flour", "lemons",
             "milk", "onions", "pasta", "potatoes", "rice", "salt", "sugar", "tea", "tomatoes", "yoghurt")
TASKS = ("Welcome and introductions", "Minutes of the last meeting", "Budget update", "Staffing",
         "Building maintenance", "Website redesign", "Summer event planning", "Health and safety",
         "Training schedule", "Any other business", "Date of the next meeting", "Supplier contracts")
UNITS = ("kg", "g", "l", "pack", "box", "bag")


def _markdown_table(rng: np.random.Generator) -> str:
    rows = ["| Item | Quantity | Unit | Price |", "| --- | --- | --- | --- |"]
    for i in rng.choice(len(GROCERIES), size=int(rng.integers(5, 11)), replace=False):
        rows.append(f"| {GROCERIES[i]} | {int(rng.integers(1, 13))} | {UNITS[int(rng.integers(len(UNITS)))]} | "
                    f"{int(rng.integers(0, 20))}.{int(rng.integers(100)):02d} |")
    return "Order summary\n\n" + "\n".join(rows)


def _agenda(rng: np.random.Generator) -> str:
    items = [TASKS[i] for i in rng.choice(len(TASKS), size=int(rng.integers(5, 10)), replace=False)]
    lines = [f"{k}. {item} ({int(rng.integers(1, 7)) * 5} minutes)" for k, item in enumerate(items, 1)]
    return (f"Agenda for the meeting of {_date(rng)}\n\n" + "\n".join(lines)
            + f"\n\nChair: {FIRST_NAMES[int(rng.integers(len(FIRST_NAMES)))]} {SURNAMES[int(rng.integers(len(SURNAMES)))]}")


def _shopping_list(rng: np.random.Generator) -> str:
    items = [GROCERIES[i] for i in rng.choice(len(GROCERIES), size=int(rng.integers(6, 14)), replace=False)]
    return "Shopping list:\n" + "\n".join(f"- {item}" for item in items)


def _csv(rng: np.random.Generator) -> str:
    rows = ["name,age,city,member_since"]
    for _ in range(int(rng.integers(6, 14))):
        rows.append(f"{FIRST_NAMES[int(rng.integers(len(FIRST_NAMES)))]} {SURNAMES[int(rng.integers(len(SURNAMES)))]},"
                    f"{int(rng.integers(18, 90))},{CITIES[int(rng.integers(len(CITIES)))]},{int(rng.integers(1995, 2026))}")
    return "\n".join(rows)


LIST_KINDS = (_markdown_table, _agenda, _shopping_list, _csv)


def lists_and_tables(num_texts: int, seed: int = 0) -> Corpus:
    """Texts of one of four kinds, chosen at random per text: a Markdown order table, a numbered
    meeting agenda, a bulleted shopping list, a CSV of people; items from small word lists."""
    n = _check_count(num_texts)
    rng = np.random.default_rng(seed)
    texts = tuple(LIST_KINDS[int(rng.integers(len(LIST_KINDS)))](rng) for _ in range(n))
    return Corpus("lists_and_tables", texts, int(seed), "tables and lists from word lists")


# ---------------------------------------------------------------------------
# Registry and tokenisation
# ---------------------------------------------------------------------------

BUILDERS: dict = {
    "form_letters": form_letters,
    "repeated_paragraphs": repeated_paragraphs,
    "source_code": source_code,
    "lists_and_tables": lists_and_tables,
    "prose": prose,
}
"""Corpus name -> ``builder(num_texts, seed) -> Corpus``."""


def build(name: str, num_texts: int, seed: int = 0) -> Corpus:
    """The corpus ``name`` (:data:`BUILDERS`) of ``num_texts`` texts."""
    if name not in BUILDERS:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(BUILDERS)}")
    return BUILDERS[name](num_texts, seed)


def tokenize(texts: Sequence[str], *, max_tokens: int = 256,
             encode: Optional[Callable[[str], Sequence[int]]] = None,
             vocab_size: Optional[int] = None) -> TokenizedCorpus:
    """Token ids of ``texts`` (normalised as the tools normalise them), each cut to its first
    ``max_tokens`` ids.

    Args:
      texts: B texts.
      max_tokens: L at most.
      encode: text -> ids (no special tokens); default the built-in SmolLM2 tokenizer.
      vocab_size: V of ``encode``'s tokenizer (required with ``encode``).

    Returns:
      :class:`TokenizedCorpus` with tokens int32[B, L], lengths int32[B].
    """
    from wmspec_jax import text_data as data

    if encode is None:
        from wmspec_jax.models import builtin

        tokenizer = builtin.builtin_tokenizer()
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
        vocab_size = len(tokenizer)
    elif vocab_size is None:
        raise ValueError("tokenize(encode=...) needs the tokenizer's vocab_size")
    tokens, lengths = data.encode_texts(lambda t: encode(normalize_text(t)), list(texts), int(max_tokens),
                                        too_long="keep_first")
    return TokenizedCorpus(tokens, lengths, int(vocab_size))


__all__ = ["BUILDERS", "Corpus", "FORM_LETTER", "TokenizedCorpus", "build", "form_letters", "lists_and_tables",
           "prose", "prose_sentences", "prose_units", "repeated_paragraphs", "source_code", "stdlib_sources", "tokenize"]
