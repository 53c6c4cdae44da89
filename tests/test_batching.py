"""The one path from prompts to texts: batches, padding, per-index keys, the typed text record."""

import numpy as np
import pytest

from wmspec_jax import batching, decoders, keys, sampling, speculative, text_record, toy
from wmspec_jax.speculative import SpeculativeConfig

V = 6
P_TAB, Q_TAB = toy.markov_pair(V, 0.3, concentration=2.0, seed=1)
MODEL = toy.markov_model(V)
TARGET, DRAFT = toy.log_table(P_TAB), toy.log_table(Q_TAB)
SECRET = keys.Secret("batching-test-secret-0123456789")
CONFIG = SpeculativeConfig(method="pseudorandom", decoder=decoders.WatermarkDecoder("gumbel"), lookahead=2,
                           max_new_tokens=4, context_width=2, eos_id=5)
INDICES = [9, 2, 40, 7, 3, 11, 0]  # not contiguous, not sorted: keys and randomness follow the index
RNG = np.random.default_rng(0)
PROMPTS = RNG.integers(0, 5, size=(len(INDICES), 5)).astype(np.int32)
LENGTHS = np.array([5, 3, 4, 5, 2, 5, 1], np.int32)


def stream_keys(idx):
    return keys.text_keys(SECRET, idx, run="r")


def rngs(idx):
    return sampling.text_rngs(3, idx, run="r")


def in_batches(batch_size, **kw):
    return list(batching.generate_in_batches(MODEL, TARGET, PROMPTS, LENGTHS, INDICES, CONFIG,
                                             stream_keys=stream_keys, rngs=rngs, batch_size=batch_size,
                                             draft=MODEL, draft_params=DRAFT, **kw))


@pytest.fixture(scope="module")
def one_call():
    return speculative.generate(MODEL, TARGET, PROMPTS, LENGTHS, stream_keys(INDICES), rngs(INDICES), CONFIG,
                                draft=MODEL, draft_params=DRAFT)


def test_texts_do_not_depend_on_the_batch_size_and_match_one_call(one_call):
    compiled = []
    batches = in_batches(3, on_compiled=compiled.append)
    assert len(compiled) == 1 and [len(b.texts) for b in batches] == [3, 3, 1]
    assert all(b.rows == 3 and all(b.local) and b.seconds > 0 for b in batches)
    texts = [t for b in batches for t in b.texts]
    assert [t.index for t in texts] == INDICES
    tokens, plen, length = (np.asarray(x) for x in (one_call.tokens, one_call.prompt_lengths, one_call.lengths))
    source, steps = np.asarray(one_call.source), np.asarray(one_call.num_steps)
    ppl = one_call.log_perplexity()
    for row, t in enumerate(texts):
        p, e = int(plen[row]), int(length[row])
        assert t.prompt_length == p and list(t.tokens) == tokens[row, p:e].tolist()
        assert list(t.source) == source[row, p:e].tolist() and t.num_steps == int(steps[row])
        assert t.logppl == pytest.approx(float(ppl[row]), rel=1e-6, abs=1e-6)
        assert t.stopped == ("eos" if t.tokens and t.tokens[-1] == 5 else "length")
        assert t.watermarked_tokens <= len(t.tokens)
    assert any(t.stopped == "eos" for t in texts) and any(t.stopped == "length" for t in texts)
    for size in (1, 7):
        assert [t for b in in_batches(size) for t in b.texts] == texts
    # the padded copies of the last batch are generated (work done) but not returned
    last = batches[-1]
    assert last.new_tokens == 3 * len(last.texts[0].tokens)


def test_the_record_round_trips_and_bad_records_are_named():
    text = in_batches(7)[0].texts[0]
    rec = text.record()
    assert tuple(rec) == text_record.TEXT_FIELDS
    assert text_record.GeneratedText.from_record({"id": "x", **rec, "extra": 1}) == text
    assert rec["aatps"] == len(text.tokens) / text.num_steps
    with pytest.raises(ValueError, match="'source'"):
        text_record.GeneratedText.from_record({k: v for k, v in rec.items() if k != "source"})
    with pytest.raises(ValueError, match="tokens but"):
        text_record.GeneratedText.from_record({**rec, "source": rec["source"] + [0]})
    with pytest.raises(ValueError, match="'index'"):
        text_record.GeneratedText.from_record({**rec, "index": True})
    with pytest.raises(ValueError, match="stopped"):
        text_record.GeneratedText.from_record({**rec, "stopped": "eof"})


def test_one_line_per_text_with_its_format_version_older_lines_read_newer_refused():
    text = in_batches(7)[0].texts[1]
    line = text_record.generation_line(text, "r1", batch_seconds=0.5, batch_tokens=9, batch=0, batch_rows=3)
    assert line["format_version"] == text_record.FORMAT_VERSION == 3
    assert line["id"] == "r1/%d" % text.index and line["run"] == "r1"
    assert {k: line[k] for k in text_record.TEXT_FIELDS} == text.record()
    assert text_record.GeneratedText.from_record(line) == text
    assert text_record.is_complete(line, "r1", text.index)
    assert not text_record.is_complete(line, "r2", text.index) and not text_record.is_complete(line, "r1", 99)
    assert not text_record.is_complete({k: v for k, v in line.items() if k != "batch_tokens"}, "r1", text.index)
    older = {k: v for k, v in line.items() if k != "format_version"}  # format 1: the lines written before
    assert text_record.check_format(older) == 1 and text_record.GeneratedText.from_record(older) == text
    assert text_record.is_complete(older, "r1", text.index)
    for bad, message in ((text_record.FORMAT_VERSION + 1, "newer"), ("2", "must be an int"), (0, "must be an int"), (True, "must be an int")):
        with pytest.raises(text_record.FormatError, match=message):
            text_record.GeneratedText.from_record({**line, "format_version": bad})
        with pytest.raises(text_record.FormatError, match=message):
            text_record.is_complete({**line, "format_version": bad}, "r1", text.index)
    with pytest.raises(ValueError, match="replace"):  # a writer cannot overwrite the text's own fields
        text_record.generation_line(text, "r1", tokens=[1, 2])
    assert text_record.generation_line(text, "r1", text="the decoded answer")["text"] == "the decoded answer"


def test_arguments_are_checked_before_any_work():
    with pytest.raises(ValueError, match="indices"):
        list(batching.generate_in_batches(
            MODEL, TARGET, PROMPTS, LENGTHS, INDICES[:-1], CONFIG, stream_keys=stream_keys, rngs=rngs,
            batch_size=2))
    with pytest.raises(ValueError, match="batch_size"):
        in_batches(0)
    assert list(batching.generate_in_batches(MODEL, TARGET, PROMPTS[:0], LENGTHS[:0], [], CONFIG,
                                             stream_keys=stream_keys, rngs=rngs, batch_size=2)) == []


def test_a_method_without_a_draft_ignores_the_draft():
    plain = SpeculativeConfig(method="basic", decoder=decoders.WatermarkDecoder("gumbel"), lookahead=0, max_new_tokens=4,
                              context_width=2)
    out = list(batching.generate_in_batches(MODEL, TARGET, PROMPTS, LENGTHS, INDICES, plain, stream_keys=stream_keys,
                                            rngs=rngs, batch_size=4, draft=MODEL, draft_params=DRAFT))
    assert all(len(t.tokens) == 4 and t.num_steps == 4 for b in out for t in b.texts)
