"""The repetitive human corpora: deterministic from a seed, what each repeats, their tokenisation, and
the shared-context warning on them with the built-in tokenizer (it fires on templated text, not on
ordinary prose)."""

from __future__ import annotations

import numpy as np
import pytest

from wmspec_jax import detect
from wmspec_jax.detect import corpus
from wmspec_jax.lab import corpora

MAX_TOKENS = 128


@pytest.mark.parametrize("name", sorted(corpora.BUILDERS))
def test_corpora_are_deterministic_given_the_seed(name):
    a, b, other = corpora.build(name, 20, 3), corpora.build(name, 20, 3), corpora.build(name, 20, 4)
    assert a == b and len(a) == 20 and a.name == name and a.seed == 3
    assert a.texts != other.texts
    assert all(isinstance(t, str) and len(t.strip()) >= 40 for t in a.texts)


def test_form_letters_fill_every_slot_of_one_template():
    c = corpora.form_letters(50, seed=0)
    assert len(set(c.texts)) == 50
    assert all(t.startswith("Dear ") and "{" not in t and "Yours sincerely" in t for t in c.texts)
    fixed = corpora.FORM_LETTER.split("{")[1].split("}")[1][:40]  # template text after the first slot
    assert all(fixed in t for t in c.texts)


def test_repeated_paragraphs_repeat_a_refrain_inside_each_text_and_share_nothing_across_texts():
    c = corpora.repeated_paragraphs(100, seed=1)
    seen = set()
    for text in c.texts:
        paragraphs = text.split("\n\n")
        verse1, refrain, verse2 = paragraphs[:3]
        assert paragraphs[3:] == [refrain] * (corpora.REFRAIN_REPEATS - 1)
        assert not {verse1, refrain, verse2} & seen  # drawn without replacement
        seen |= {verse1, refrain, verse2}


def test_source_code_takes_windows_of_the_installed_sources(tmp_path):
    lines = [f"def function_{i}(x):\n    return x * {i} + 1  # a line long enough\n" for i in range(60)]
    for k in range(3):
        (tmp_path / f"module_{k}.py").write_text("".join(lines[k * 20:]))
    (tmp_path / "notes.txt").write_text("not a source")
    c = corpora.source_code(2, seed=0, root=str(tmp_path))
    files = [p.read_text() for p in tmp_path.glob("*.py")]
    assert all(any(text in f for f in files) for text in c.texts)
    assert all(text.count("\n") < corpora.CODE_LINES for text in c.texts)
    stdlib = corpora.source_code(5, seed=0)
    assert "standard library" in stdlib.source and all("\n" in t for t in stdlib.texts)
    with pytest.raises(ValueError, match="no .py files"):
        corpora.source_code(2, root=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="usable source windows"):
        corpora.source_code(10, root=str(tmp_path))


def test_lists_and_tables_hold_every_kind():
    texts = corpora.lists_and_tables(60, seed=2).texts
    assert any(t.startswith("Order summary") and "| --- |" in t for t in texts)
    assert any(t.startswith("Agenda for the meeting") for t in texts)
    assert any(t.startswith("Shopping list:") for t in texts)
    assert any(t.startswith("name,age,city") for t in texts)


def test_prose_is_distinct_built_in_text_and_refuses_more_than_it_has():
    units = corpora.prose_units()
    c = corpora.prose(100, seed=0)
    assert len(set(c.texts)) == 100 and set(c.texts) <= set(units)
    with pytest.raises(ValueError, match=f"has {len(units)} texts"):
        corpora.prose(len(units) + 1)
    with pytest.raises(ValueError, match="unknown corpus"):
        corpora.build("poems", 3)
    with pytest.raises(ValueError, match="num_texts"):
        corpora.form_letters(0)


def test_tokenize_normalises_and_cuts_texts():
    tc = corpora.tokenize(["Dear Ms. Lee,\r\nthank you.", "Dear Ms. Lee,\nthank you.", "word " * 400],
                          max_tokens=MAX_TOKENS)
    assert tc.tokens.dtype == np.int32 and tc.tokens.shape == (3, MAX_TOKENS) and tc.vocab_size == 49152
    np.testing.assert_array_equal(tc.tokens[0], tc.tokens[1])  # CRLF folded as the tools fold it
    assert tc.lengths[2] == MAX_TOKENS and (tc.tokens < tc.vocab_size).all()
    with pytest.raises(ValueError, match="vocab_size"):
        corpora.tokenize(["x"], encode=lambda t: [1])
    toy = corpora.tokenize(["abc"], encode=lambda t: list(t.encode()), vocab_size=256)
    np.testing.assert_array_equal(toy.tokens, [[97, 98, 99]])


def shared_windows(name: str, num_texts: int = 60):
    """The corpus state (window counts) and the deduped statistics of a corpus, built-in tokenizer."""
    tc = corpora.tokenize(corpora.build(name, num_texts, seed=0).texts, max_tokens=MAX_TOKENS)
    tokens = np.zeros((num_texts, MAX_TOKENS), np.int32)  # one shape for every corpus: one compilation
    tokens[:, : tc.tokens.shape[1]] = tc.tokens
    st = detect.gumbel_statistics(tokens, "corpora-test", vocab_size=tc.vocab_size, lengths=tc.lengths)
    deduped, windows = corpus.dedup_corpus(st, tokens)
    before, after = np.asarray(st.mask).sum(), np.asarray(deduped.mask).sum()
    assert before == windows.num_scored and after == windows.hashes.size  # one position per distinct window
    return windows, before, after


def test_the_shared_context_warning_fires_on_templated_corpora_and_not_on_prose():
    for name in ("form_letters", "lists_and_tables"):
        windows, before, after = shared_windows(name)
        assert windows.shared_fraction > 0.6, name  # 0.90 and 0.63 at 60 texts
        assert corpus.shared_context_warning(windows) is not None, name
        assert after < 0.6 * before, name  # dedup drops what the texts share
    for name in ("prose", "repeated_paragraphs"):
        windows, before, after = shared_windows(name)
        assert windows.shared_fraction < 0.2, name
        assert corpus.shared_context_warning(windows) is None, name
        assert after > 0.8 * before, name


def test_the_benchmark_scatters_each_distinct_window_to_the_statistics_of_the_texts():
    # lab.key_sweep (benchmarks.repetitive_fpr) hashes each distinct scored window once per key and scatters it back:
    # the scores equal those of detect.statistics on the texts, for each of several keys at once
    # (the shapes of the test above: its compiled programs serve)
    from wmspec_jax.lab import key_sweep as bench
    from wmspec_jax import decoders

    num_texts, num_keys = 60, 2
    tc = corpora.tokenize(corpora.form_letters(num_texts, seed=0).texts, max_tokens=MAX_TOKENS)
    tokens = np.zeros((num_texts, MAX_TOKENS), np.int32)
    tokens[:, : tc.tokens.shape[1]] = tc.tokens
    words = np.stack([bench.secret_words(i) for i in range(num_keys)])
    direct = [detect.gumbel_statistics(tokens, words[k], vocab_size=tc.vocab_size, lengths=tc.lengths)
              for k in range(num_keys)]
    table = bench.distinct_windows(tokens, np.asarray(direct[0].mask), 4)
    assert len(table[0]) < np.asarray(direct[0].mask).sum()  # the letters share windows
    scattered = bench.corpus_statistics(decoders.WatermarkDecoder.from_name("gumbel"), table, words, tokens.shape,
                                        tc.lengths, tc.vocab_size)
    detector = detect.make("ars-prior", scattered.provenance)
    for k in range(num_keys):
        mine = detect.take(scattered, np.arange(k * num_texts, (k + 1) * num_texts))
        np.testing.assert_array_equal(np.asarray(mine.mask), np.asarray(direct[k].mask))
        np.testing.assert_allclose(np.asarray(detector.score(mine).log_pvalue),
                                   np.asarray(detector.score(direct[k]).log_pvalue), rtol=1e-6)
