"""Prompt sets: built-in stand-ins and local ELI5 / C4 files through `datasets`."""

import json

import numpy as np
import pytest

from wmspec_jax import text_data as data
from wmspec_jax.models import pairs


def test_builtin_questions_are_questions_with_answers():
    qs = data.builtin_questions()
    assert qs.kind == "question" and len(qs) > 300
    assert all(p.endswith("?") and not p[0].islower() for p in qs.prompts)
    assert len(set(p.lower() for p in qs.prompts)) == len(qs)
    assert len(qs.human_texts) > 0.9 * len(qs)


def test_builtin_splits_are_disjoint_stable_and_cover_everything():
    for make in (data.builtin_questions, lambda split=None: data.builtin_openings(split=split)):
        every, train, held_out = make(), make("train"), make("eval")
        assert len(train) + len(held_out) == len(every)
        assert not set(train.prompts) & set(held_out.prompts)
        assert 0.1 * len(every) < len(held_out) < 0.35 * len(every)
        whole_train = {e.prompt + e.human for e in train.examples}
        assert not any(e.prompt + e.human in whole_train for e in held_out.examples)
    assert data.split_of("What is a watermark?") == data.split_of("What is a watermark?")
    assert data.load_prompt_set("builtin-eli5").prompts == data.builtin_questions("eval").prompts
    assert len(data.load_prompt_set("builtin-c4:all")) == len(data.builtin_openings())
    with pytest.raises(ValueError, match="split"):
        data.load_prompt_set("builtin-eli5:test")
    with pytest.raises(ValueError, match="split"):
        data.builtin_questions("validation")


def test_builtin_openings_are_cut_at_word_boundaries(tmp_path):
    fortunes = tmp_path / "fortunes"
    fortunes.mkdir()
    entry = "A fortune that is long enough to be kept as a text opening. " * 5
    (fortunes / "wisdom").write_text(f"{entry}\n%\nshort one\n%\n{entry.upper()}\n")
    (fortunes / "wisdom.dat").write_bytes(b"\x00binary index")
    base = data.builtin_openings()
    with_fortunes = data.builtin_openings(fortunes_dir=str(fortunes))
    assert len(with_fortunes) == len(base) + 2
    assert len(base) > 200
    for ex in with_fortunes.examples:
        assert len(ex.prompt) <= data.C4_PROMPT_CHARS and not ex.prompt.endswith(" ")
        assert ex.human


def test_parse_fortunes(tmp_path):
    f = tmp_path / "f"
    f.write_text("one\nline two\n%\n\n%\nthree\n")
    assert data.parse_fortunes(str(f)) == ["one\nline two", "three"]


def test_local_eli5_and_c4_files(tmp_path):
    eli5 = tmp_path / "eli5.jsonl"
    rows = [
        {"title": "why is the sky blue", "answers": {"text": ["Rayleigh scattering.", "other"]}},
        {"title": "How do magnets work?", "answers": {"text": []}},
    ]
    eli5.write_text("\n".join(json.dumps(r) for r in rows))
    ps = data.load_prompt_set(f"eli5:{eli5}")
    assert ps.prompts == ["Why is the sky blue?", "How do magnets work?"]
    assert ps.human_texts == ["Rayleigh scattering."]
    c4 = tmp_path / "c4.json"
    c4.write_text(json.dumps({"text": "word " * 60}) + "\n" + json.dumps({"text": "too short"}))
    cs = data.load_prompt_set(f"c4:{c4}")
    assert len(cs) == 1 and len(cs.prompts[0]) <= 100 and cs.examples[0].human.startswith("word")


def test_bad_specs_and_files(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset spec"):
        data.load_prompt_set("squad")
    with pytest.raises(FileNotFoundError):
        data.load_prompt_set(f"eli5:{tmp_path / 'missing.jsonl'}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"body": "x"}))
    with pytest.raises(ValueError, match="'title' or 'question'"):
        data.load_prompt_set(f"eli5:{bad}")
    with pytest.raises(ValueError, match="'text'"):
        data.load_prompt_set(f"c4:{bad}")
    (tmp_path / "x.txt").write_text("a")
    with pytest.raises(ValueError, match="unsupported"):
        data.load_prompt_set(f"c4:{tmp_path / 'x.txt'}")
    # the same checks without loading anything (experiments run them before any work)
    with pytest.raises(ValueError, match="unsupported"):
        data.parse_dataset_spec(f"c4:{tmp_path / 'x.txt'}")
    with pytest.raises(FileNotFoundError):
        data.parse_dataset_spec(f"eli5:{tmp_path / 'missing.jsonl'}")
    with pytest.raises(ValueError, match="unknown split"):
        data.parse_dataset_spec("builtin-eli5:test")
    assert data.parse_dataset_spec("builtin-c4") == ("builtin-c4", "eval")


def test_pack_prompts_and_take():
    toks, lens = pairs.pack_prompts([[5, 6, 7], [1], [1, 2, 3, 4, 5]], max_length=4, pad_id=0, too_long="keep_last")
    assert toks.tolist() == [[5, 6, 7, 0], [1, 0, 0, 0], [2, 3, 4, 5]] and lens.tolist() == [3, 1, 4]
    first, _ = pairs.pack_prompts([[1, 2, 3, 4, 5]], max_length=4, too_long="keep_first")
    assert first.tolist() == [[1, 2, 3, 4]]
    with pytest.raises(ValueError, match="empty prompt"):
        pairs.pack_prompts([[1], []], 4)
    # the default refuses to cut: cutting from the left would drop BOS and the chat header
    with pytest.raises(ValueError, match=r"1 prompt\(s\) are longer than max_length=4 .*items \[2\] have \[5\]"):
        pairs.pack_prompts([[5, 6, 7], [1], [1, 2, 3, 4, 5]], max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        pairs.pack_prompts([[1]], 0)
    qs = data.builtin_questions()
    a, b = qs.take(10, seed=1), qs.take(10, seed=1, offset=10)
    assert len(a) == 10 and not set(a.prompts) & set(b.prompts)
    assert a.prompts == qs.take(10, seed=1).prompts
    enc = data.encode_texts(lambda s: [len(w) for w in s.split()], ["ab c", "d"], 8)
    assert enc[0].tolist() == [[2, 1], [1, 0]]
