"""transformers' SynthID-Text watermark reproduced bit for bit (:mod:`wmspec_jax.interop.hf_synthid`).

Every comparison runs transformers' own code (torch on the CPU) on the same inputs: the sampling
table, the n-gram keys and g-values, the repetition and end-of-sequence masks, the processor's calls
with its state, and ``generate`` with a tiny random Llama, whose texts the exact test then detects;
texts that our ``process_scores`` watermarks, scored by transformers' own g-values and masks.
"""

import json
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from wmspec_jax.interop import hf_synthid as hs

KEYS30 = tuple(int(k) for k in np.random.default_rng(2024).integers(0, 1000, 30))  # like transformers' example
KEYS_WIDE = tuple(int(k) for k in np.random.default_rng(7).integers(-2 ** 63, 2 ** 63 - 1, 12, dtype=np.int64))


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return torch


def _processor(cfg: hs.HFSynthIDConfig):
    from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

    return SynthIDTextWatermarkLogitsProcessor(
        ngram_len=cfg.ngram_len, keys=list(cfg.keys), sampling_table_size=cfg.sampling_table_size,
        sampling_table_seed=cfg.sampling_table_seed, context_history_size=cfg.context_history_size,
        device="cpu", skip_first_ngram_calls=cfg.skip_first_ngram_calls)


def _softmax64(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ------------------------------------------------------------------------------------------------ integers


@pytest.mark.parametrize("seed,size", [(0, 2 ** 16), (1, 1000), (2 ** 32 + 5, 777), (0xDEADBEEF, 10007), (2 ** 40, 1),
                                       (2 ** 64 - 1, 2000), (-(2 ** 63), 2000)])
def test_sampling_table_is_torchs_cpu_table(seed, size):
    torch = _torch()
    ref = torch.randint(0, 2, (size,), generator=torch.Generator(device="cpu").manual_seed(seed)).numpy()
    cfg = hs.HFSynthIDConfig(ngram_len=3, keys=(1,), sampling_table_seed=seed, sampling_table_size=size)
    table = hs.sampling_table(cfg)
    assert table.dtype == np.int64 and table.shape == (size,)
    np.testing.assert_array_equal(table, ref)


@pytest.mark.parametrize("vocab,ngram_len,size,keys", [
    (1000, 5, 2 ** 16, KEYS30),
    (32000, 3, 2 ** 16, KEYS30),
    (32000, 4, 10007, KEYS30),      # not a power of two: the floor modulo of the signed int64
    (50000, 5, 2 ** 16, KEYS_WIDE),  # keys over the whole int64 range: every product wraps
])
def test_g_values_equal_transformers(vocab, ngram_len, size, keys):
    torch = _torch()
    cfg = hs.HFSynthIDConfig(ngram_len=ngram_len, keys=keys, sampling_table_size=size, sampling_table_seed=3)
    proc = _processor(cfg)
    ids = np.random.default_rng(vocab + ngram_len).integers(0, vocab, (8, 200))
    t = torch.tensor(ids)
    ours = hs.g_values(cfg, ids)
    ref = proc.compute_g_values(t).numpy()
    assert ours.shape == ref.shape == (8, 200 - ngram_len + 1, len(keys))  # >= 1,500 contexts
    np.testing.assert_array_equal(ours, ref)
    assert 0.4 < ours.mean() < 0.6
    # the int64 bits themselves: accumulate_hash and compute_ngram_keys
    ngrams = t.unfold(dimension=1, size=ngram_len, step=1)
    np.testing.assert_array_equal(hs.ngram_keys(cfg, ngrams.numpy()), proc.compute_ngram_keys(ngrams).numpy())
    h = torch.full((8,), -(2 ** 62) + 12345, dtype=torch.long)
    np.testing.assert_array_equal(hs.accumulate_hash(h.numpy(), ids[:, :7]), proc.accumulate_hash(h, t[:, :7]).numpy())
    keys_ = proc.compute_ngram_keys(ngrams)
    np.testing.assert_array_equal(hs.sample_g_values(cfg, keys_.numpy()), proc.sample_g_values(keys_).numpy())


@pytest.mark.parametrize("ngram_len,history", [(5, 1024), (3, 8), (2, 1), (4, 0), (1, 4)])
def test_masks_equal_transformers(ngram_len, history):
    torch = _torch()
    cfg = hs.HFSynthIDConfig(ngram_len=ngram_len, keys=KEYS30[:5], context_history_size=history)
    proc = _processor(cfg)
    rng = np.random.default_rng(ngram_len * 31 + history)
    ids = rng.integers(0, 3, (16, 150))  # three tokens: contexts repeat all the time
    ids[8:] = rng.integers(0, 1000, (8, 150))
    ids[12:, 40:90] = ids[12:, 0:50]  # long repeats in a large vocabulary
    t = torch.tensor(ids)
    ref = proc.compute_context_repetition_mask(t).numpy()
    ours = hs.context_repetition_mask(cfg, ids)
    np.testing.assert_array_equal(ours, ref)
    assert 0 < ref.mean() <= 1
    if history > 0:
        assert not ref.all()
    eos_ids = ids.copy()
    eos_ids[3, 17] = eos_ids[3, 60] = eos_ids[5, 0] = 999
    np.testing.assert_array_equal(hs.eos_token_mask(eos_ids, 999),
                                  proc.compute_eos_token_mask(torch.tensor(eos_ids), 999).numpy().astype(bool))


def test_a_context_hashing_to_zero_counts_as_seen_while_the_initial_zeros_last():
    """The processor's history starts as zeros, so a context whose int64 hash is 0 is 'repeated'
    until context_history_size contexts have pushed the zeros out."""
    torch = _torch()
    inverse = pow(hs.MULTIPLIER, -1, 2 ** 64)
    zero_token = (-inverse - 1) % 2 ** 64  # accumulate_hash(1, [zero_token]) == 0
    assert zero_token < 2 ** 63
    assert hs.accumulate_hash(np.ones(1, np.int64), np.array([[zero_token]], np.int64))[0] == 0
    ids = np.array([[5, zero_token, 7, 8, 9, 10, 11, zero_token, 12, 13]], np.int64)
    for history in (1, 4, 16):
        cfg = hs.HFSynthIDConfig(ngram_len=2, keys=(1, 2), context_history_size=history)
        ref = _processor(cfg).compute_context_repetition_mask(torch.tensor(ids)).numpy()
        np.testing.assert_array_equal(hs.context_repetition_mask(cfg, ids), ref)
        assert ref[0, 1] == (history == 1)  # a first occurrence, masked while zeros remain (j = 1 < history)
    np.testing.assert_array_equal(ref, [[True, False, True, True, True, True, True, False, True]])


def test_short_texts_give_empty_arrays():
    cfg = hs.HFSynthIDConfig(ngram_len=5, keys=KEYS30)
    ids = np.arange(12).reshape(3, 4)
    assert hs.g_values(cfg, ids).shape == (3, 0, 30)
    assert hs.context_repetition_mask(cfg, ids).shape == (3, 0)
    s = hs.score(cfg, ids)
    np.testing.assert_array_equal(s.num_scored, 0)
    np.testing.assert_array_equal(s.p_value, 1.0)
    assert np.isnan(s.mean_score).all()


# ------------------------------------------------------------------------------------------------ JAX


@pytest.mark.parametrize("ngram_len,size,keys", [(5, 2 ** 16, KEYS30), (3, 10007, KEYS_WIDE), (1, 2 ** 12, KEYS30),
                                                 (4, 3 * 2 ** 18 + 7, KEYS_WIDE)])
def test_vocab_g_values_equal_numpy_at_every_candidate(ngram_len, size, keys):
    cfg = hs.HFSynthIDConfig(ngram_len=ngram_len, keys=keys, sampling_table_size=size, sampling_table_seed=11)
    vocab = 3001
    contexts = np.random.default_rng(size).integers(0, 2 ** 31 - 1, (5, ngram_len - 1))
    contexts[0] = 0  # the processor's initial context
    ours = np.asarray(jax.jit(lambda c: hs.vocab_g_values(cfg, c, vocab))(jnp.asarray(contexts, jnp.int32)))
    assert ours.shape == (5, vocab, len(keys)) and ours.dtype == np.int32
    ngrams = np.concatenate([np.repeat(contexts[:, None, :], vocab, axis=1),
                             np.broadcast_to(np.arange(vocab)[None, :, None], (5, vocab, 1))], axis=2)
    ref = hs.g_values(cfg, ngrams.reshape(5 * vocab, ngram_len)).reshape(5, vocab, len(keys))
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(np.asarray(hs.vocab_g_values(cfg, contexts, vocab)), ref)


def test_watermarked_log_probs_equal_transformers_update_scores():
    torch = _torch()
    cfg = hs.HFSynthIDConfig(ngram_len=5, keys=KEYS30)
    proc = _processor(cfg)
    rng = np.random.default_rng(5)
    vocab = 1000
    contexts = rng.integers(0, vocab, (6, 4))
    logits = (rng.normal(size=(6, vocab)) * 2).astype(np.float32)
    logits[:, :100] = -np.inf  # as after top-k
    keys_, _ = proc._compute_keys(torch.tensor(contexts), torch.arange(vocab).expand(6, -1))
    ref_g = proc.sample_g_values(keys_)
    ref = proc.update_scores(torch.tensor(logits), ref_g).numpy()
    np.testing.assert_array_equal(np.asarray(hs.vocab_g_values(cfg, contexts, vocab)), ref_g.numpy())
    ours = np.asarray(hs.watermarked_log_probs(cfg, contexts, logits))
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours[:, :100], np.finfo(np.float32).min)  # transformers' -inf replacement
    np.testing.assert_array_equal(ref[:, :100], np.finfo(np.float32).min)
    np.testing.assert_allclose(ours[:, 100:], ref[:, 100:], rtol=1e-5, atol=2e-5)
    # a fresh processor's first call uses the all-zeros context, whatever the prompt
    first = proc(torch.tensor(rng.integers(0, vocab, (6, 9))), torch.tensor(logits)).numpy()
    np.testing.assert_allclose(np.asarray(hs.watermarked_log_probs(cfg, np.zeros((6, 4), int), logits)), first,
                               rtol=1e-5, atol=2e-5)
    # the watermark moves mass towards g = 1 tokens
    g1 = ref_g.numpy()[..., 0] == 1
    base = _softmax64(logits)
    assert (_softmax64(ours)[g1].sum() > base[g1].sum())


@pytest.mark.parametrize("ngram_len,history,skip,size", [(4, 8, False, 2 ** 16), (3, 1024, True, 999),
                                                         (2, 0, False, 2 ** 12), (1, 4, False, 10007)])
def test_process_scores_equals_the_processor_call_by_call(ngram_len, history, skip, size):
    torch = _torch()
    cfg = hs.HFSynthIDConfig(ngram_len=ngram_len, keys=KEYS_WIDE, context_history_size=history,
                             skip_first_ngram_calls=skip, sampling_table_size=size)
    proc = _processor(cfg)
    rng = np.random.default_rng(ngram_len + history)
    batch, vocab = 6, 40
    seq = torch.tensor(rng.integers(0, vocab, (batch, 3)))
    state = hs.init_state(cfg, batch)
    step = jax.jit(lambda s, t, x: hs.process_scores(cfg, s, t, x))
    passed_through = 0
    for call in range(40):
        scores = (rng.normal(size=(batch, vocab)) * 2).astype(np.float32)
        if call % 3 == 0:
            scores[:, :10] = -np.inf
        ref = proc(seq, torch.tensor(scores)).numpy()
        ours, state = step(state, jnp.asarray(seq[:, -1].numpy(), jnp.int32), jnp.asarray(scores))
        ours = np.asarray(ours)
        same = (ref == scores).all(axis=1)  # rows the processor left alone (repeated context, skipped call)
        passed_through += int(same.sum())
        np.testing.assert_array_equal(ours[same], scores[same])
        np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(ref))
        np.testing.assert_allclose(_softmax64(ours), _softmax64(ref), atol=1e-6)
        big = _softmax64(ref) > 1e-4
        np.testing.assert_allclose(ours[big], ref[big], atol=1e-4)
        seq = torch.cat([seq, torch.tensor(rng.integers(0, 3, (batch, 1)))], dim=1)  # a 3-token alphabet: repeats
    assert int(state.num_calls) == 40
    assert passed_through > 0 or (history == 0 and not skip)
    assert passed_through < 40 * batch or ngram_len == 1


# ------------------------------------------------------------------------------------------------ exact null


def test_null_law_is_the_law_over_all_keys():
    """With S = 4096, transformers' g-values for all 4096 key residues give one layer's sum for every
    key: their histogram IS the layer law, and the p-value is its depth-fold convolution's tail."""
    torch = _torch()
    size = 4096
    ids = np.random.default_rng(9).integers(0, 500, (2, 60))
    ids[1, 30:45] = ids[1, 0:15]
    every = hs.HFSynthIDConfig(ngram_len=4, keys=tuple(range(size)), sampling_table_size=size, sampling_table_seed=1)
    proc = _processor(every)
    t = torch.tensor(ids)
    mask = proc.compute_context_repetition_mask(t).numpy()
    per_key = (proc.compute_g_values(t).numpy() * mask[..., None]).sum(axis=1)  # [2, 4096]
    cfg = hs.HFSynthIDConfig(ngram_len=4, keys=KEYS30, sampling_table_size=size, sampling_table_seed=1)
    laws = hs.null_distribution(cfg, ids)
    result = hs.score(cfg, ids)
    for r in range(2):
        n = int(mask[r].sum())
        assert result.num_scored[r] == n and len(laws[r]) == n + 1
        counts = np.bincount(per_key[r], minlength=n + 1)
        np.testing.assert_array_equal(laws[r] * size, counts)
        # exact rational tail of the 30-fold convolution, in integers
        total = np.array([1], dtype=object)
        for _ in range(30):
            total = np.convolve(total, counts.astype(object))
        observed = int(round(result.mean_score[r] * n * 30))
        exact = Fraction(int(total[observed:].sum()), size ** 30)
        assert result.p_value[r] == pytest.approx(float(exact), rel=1e-9)
        for s in range(0, 30 * n + 1, 97):  # the whole range, tails of ~1e-100 included
            want = Fraction(int(total[s:].sum()), size ** 30)
            assert hs._sum_tail(laws[r], 30, s) == pytest.approx(float(want), rel=1e-9, abs=1e-300)
    # the idealised binomial null is close to the exact one on these texts
    binom = hs.score(cfg, ids, null="binomial")
    np.testing.assert_allclose(binom.p_value, result.p_value, atol=0.02)
    np.testing.assert_array_equal(binom.mean_score, result.mean_score)
    with pytest.raises(ValueError, match="power-of-two"):
        hs.score(hs.HFSynthIDConfig(ngram_len=4, keys=KEYS30, sampling_table_size=1000), ids, null="keys")


# ------------------------------------------------------------------------------------------------ generate


PROMPT_LEN, NEW_TOKENS, BATCH, VOCAB, EOS = 8, 128, 40, 256, 2


@pytest.fixture(scope="module")
def generated():
    """40 texts of 128 tokens from a tiny random Llama, with and without transformers' watermark."""
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM, SynthIDTextWatermarkingConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 64-wide model: threads only contend on a shared 2-core machine
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, bos_token_id=1, eos_token_id=EOS, pad_token_id=0)).eval()
    watermark = SynthIDTextWatermarkingConfig(keys=list(KEYS30), ngram_len=5)
    prompts = torch.tensor(np.random.default_rng(0).integers(3, VOCAB, (BATCH, PROMPT_LEN)))
    common = dict(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                  max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, temperature=0.7)  # top_k: 50 by default
    torch.manual_seed(1)
    marked = model.generate(**common, watermarking_config=watermark, return_dict_in_generate=True,
                            output_scores=True, output_logits=True)
    torch.manual_seed(2)
    plain = model.generate(**common)
    torch.set_num_threads(threads)
    return watermark, marked, plain.numpy(), model


@pytest.mark.slow
def test_generate_applies_the_processor_after_temperature_and_top_k(generated):
    """Our state machine fed transformers' raw logits, with min-new-tokens, temperature and top-k
    (generate's order) applied before it, gives generate's final scores at all 128 steps."""
    _torch()
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    watermark, marked, _, _ = generated
    cfg = hs.HFSynthIDConfig.from_transformers(watermark)
    temperature, top_k = TemperatureLogitsWarper(0.7), TopKLogitsWarper(50)
    state = hs.init_state(cfg, BATCH)
    assert len(marked.logits) == len(marked.scores) == NEW_TOKENS
    for i, (logits, final) in enumerate(zip(marked.logits, marked.scores)):
        ids = marked.sequences[:, : PROMPT_LEN + i]
        logits = logits.clone()
        logits[:, EOS] = -float("inf")  # MinNewTokensLengthLogitsProcessor, which runs first
        warped = top_k(ids, temperature(ids, logits)).numpy()
        ours, state = hs.process_scores(cfg, state, ids[:, -1].numpy(), warped)
        np.testing.assert_allclose(_softmax64(ours), _softmax64(final.numpy()), atol=2e-6)


@pytest.mark.slow
def test_score_detects_transformers_texts_and_keeps_its_false_positive_rate(generated):
    watermark, marked, plain, _ = generated
    cfg = hs.HFSynthIDConfig.from_transformers(watermark)
    texts = marked.sequences[:, PROMPT_LEN:].numpy()
    assert texts.shape == (BATCH, NEW_TOKENS) and not (texts == EOS).any()
    alpha = 0.01
    # at most k_max of 40 null p-values below alpha: exceeded with probability < 1e-4
    k_max = int(stats.binom.ppf(1 - 1e-4, BATCH, alpha))
    assert stats.binom.sf(k_max, BATCH, alpha) < 1e-4

    hit = hs.score(cfg, texts, eos_token_id=EOS)
    assert (hit.num_scored == NEW_TOKENS - 4).sum() >= BATCH - 5  # repeated contexts are rare here
    tpr = float((hit.p_value <= alpha).mean())
    assert tpr >= 0.9, tpr
    assert hit.mean_score.mean() > 0.6
    start = hs.score(cfg, texts, eos_token_id=EOS, generation_start=True)
    assert (start.num_scored > hit.num_scored).all()
    assert (start.p_value <= alpha).mean() >= tpr
    weighted = hs.weighted_mean_score(cfg, texts, eos_token_id=EOS)
    assert weighted.mean() > hit.mean_score.mean()  # the first layers carry more of the watermark

    # H0 twice: unwatermarked texts under the true keys; watermarked texts, each under its own
    # independent random key list (the p-values are then independent and each exact over its keys;
    # ONE fixed wrong list would couple them: every list reads the same table, see score's docstring)
    null_same_keys = hs.score(cfg, plain[:, PROMPT_LEN:], eos_token_id=EOS)
    rng = np.random.default_rng(99)
    own = [hs.score(hs.HFSynthIDConfig(ngram_len=5, keys=tuple(int(k) for k in rng.integers(0, 2 ** 63 - 1, 30))),
                    texts[i: i + 1], eos_token_id=EOS) for i in range(BATCH)]
    null_wrong_keys = hs.SynthIDScores(*(np.concatenate(field) for field in zip(*own)))
    for null in (null_same_keys, null_wrong_keys):
        assert int((null.p_value <= alpha).sum()) <= k_max
        assert abs(np.nanmean(null.mean_score) - 0.5) < 0.02
        assert 0.2 < np.median(null.p_value) < 0.8


def _transformers_mean_scores(cfg: hs.HFSynthIDConfig, texts: np.ndarray) -> np.ndarray:
    """float64[B]: the mean g-value of each text by transformers' own code, as its detector masks it
    (``compute_g_values``, ``compute_context_repetition_mask``, ``compute_eos_token_mask``)."""
    torch = _torch()
    proc = _processor(cfg)
    ids = torch.tensor(texts)
    g = proc.compute_g_values(ids).numpy().astype(np.float64)  # [B, T - n + 1, depth]
    mask = (proc.compute_context_repetition_mask(ids)
            * proc.compute_eos_token_mask(ids, EOS)[:, cfg.ngram_len - 1:]).numpy().astype(np.float64)
    return (g * mask[..., None]).sum((1, 2)) / (mask.sum(1) * g.shape[-1])


@pytest.mark.slow
def test_texts_watermarked_here_are_detected_by_transformers_own_g_values(generated):
    """The reverse direction: the same model's logits, watermarked by our ``process_scores`` (after
    min-new-tokens, temperature and top-k, generate's order) and sampled here with NumPy, give texts
    that transformers' g-values and masks score as watermarked (mean g-value far above 1/2, as on
    transformers' own texts) while the unwatermarked texts stay at 1/2; the exact test agrees."""
    torch = _torch()
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    watermark, marked, plain, model = generated
    cfg = hs.HFSynthIDConfig.from_transformers(watermark)
    temperature, top_k = TemperatureLogitsWarper(0.7), TopKLogitsWarper(50)
    rng = np.random.default_rng(5)
    ids = torch.tensor(np.random.default_rng(1).integers(3, VOCAB, (BATCH, PROMPT_LEN)))
    state = hs.init_state(cfg, BATCH)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(ids).logits[:, -1].clone()
            logits[:, EOS] = -float("inf")  # min_new_tokens, as in the fixture's generate
            warped = top_k(ids, temperature(ids, logits)).numpy()
            scores, state = hs.process_scores(cfg, state, ids[:, -1].numpy(), warped)
            probs = _softmax64(scores)
            nxt = (probs.cumsum(-1) < rng.random((BATCH, 1))).sum(-1).clip(0, VOCAB - 1)
            ids = torch.cat([ids, torch.tensor(nxt)[:, None]], dim=1)
    torch.set_num_threads(threads)
    ours = ids[:, PROMPT_LEN:].numpy()
    theirs = _transformers_mean_scores(cfg, marked.sequences[:, PROMPT_LEN:].numpy())
    ours_mean, null_mean = _transformers_mean_scores(cfg, ours), _transformers_mean_scores(cfg, plain[:, PROMPT_LEN:])
    # tolerances from the 40 texts' own spread: the texts are independent, so each set's average has
    # standard error sd / sqrt(40), and 5 standard errors are exceeded with probability ~1e-6 (normal)
    def stderr(x):
        return x.std(ddof=1) / np.sqrt(len(x))

    assert abs(null_mean.mean() - 0.5) < 5 * stderr(null_mean)
    assert ours_mean.mean() > 0.6
    assert abs(ours_mean.mean() - theirs.mean()) < 5 * np.hypot(stderr(ours_mean), stderr(theirs)), \
        (ours_mean.mean(), theirs.mean())
    assert ours_mean.min() > null_mean.max()
    result = hs.score(cfg, ours, eos_token_id=EOS)
    np.testing.assert_allclose(result.mean_score, ours_mean, rtol=1e-12)
    assert (result.p_value <= 0.01).mean() >= 0.9


# ------------------------------------------------------------------------------------------------ config


def test_config_hides_the_keys_and_round_trips_transformers_dicts():
    pytest.importorskip("transformers")
    from transformers import SynthIDTextWatermarkingConfig

    keys = [123456789012, 987654321098, 555555555551, -777777777777]
    ref = SynthIDTextWatermarkingConfig(keys=keys, ngram_len=4, context_history_size=512, sampling_table_seed=9,
                                        sampling_table_size=2 ** 12, skip_first_ngram_calls=True)
    cfg = hs.HFSynthIDConfig.from_dict(json.loads(json.dumps(ref.to_dict())))
    assert cfg == hs.HFSynthIDConfig.from_transformers(ref)
    assert cfg.keys == tuple(keys) and cfg.ngram_len == 4 and cfg.context_history_size == 512
    assert cfg.sampling_table_seed == 9 and cfg.sampling_table_size == 2 ** 12 and cfg.skip_first_ngram_calls
    assert cfg.to_dict() == ref.to_dict()
    assert SynthIDTextWatermarkingConfig(**cfg.to_dict()).to_dict() == ref.to_dict()
    record = json.dumps(cfg.record())
    for text in (repr(cfg), str(cfg), f"{cfg}", record):
        assert not any(str(abs(k)) in text for k in keys), text
        assert cfg.keys_fingerprint in text
    assert len(cfg.keys_fingerprint) == 16
    assert cfg.keys_fingerprint != hs.HFSynthIDConfig(ngram_len=4, keys=keys[::-1]).keys_fingerprint
    defaults = hs.HFSynthIDConfig.from_dict({"ngram_len": 5, "keys": [1, 2]})
    assert (defaults.context_history_size, defaults.sampling_table_seed, defaults.sampling_table_size) == (
        1024, 0, 2 ** 16)


@pytest.mark.parametrize("kwargs,match", [
    (dict(ngram_len=5, keys=()), "empty"),
    (dict(ngram_len=0, keys=(1,)), "ngram_len"),
    (dict(ngram_len=5, keys=(1, 2.0)), "integers"),
    (dict(ngram_len=5, keys=(1, True)), "integers"),
    (dict(ngram_len=5, keys="123"), "sequence"),
    (dict(ngram_len=5, keys=(2 ** 63,)), "int64"),
    (dict(ngram_len=5, keys=(1,), sampling_table_size=0), "sampling_table_size"),
    (dict(ngram_len=5, keys=(1,), sampling_table_size=2 ** 24 + 1), "sampling_table_size"),
    (dict(ngram_len=5, keys=(1,), context_history_size=-1), "context_history_size"),
    (dict(ngram_len=5, keys=(1,), skip_first_ngram_calls=1), "bool"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        hs.HFSynthIDConfig(**kwargs)


def test_boundary_validation():
    cfg = hs.HFSynthIDConfig(ngram_len=3, keys=(1, 2))
    with pytest.raises(ValueError, match="unknown"):
        hs.HFSynthIDConfig.from_dict({"ngram_len": 3, "keys": [1], "ngram_length": 3})
    with pytest.raises(ValueError, match="lacks"):
        hs.HFSynthIDConfig.from_dict({"ngram_len": 3})
    with pytest.raises(ValueError, match="integer token ids"):
        hs.g_values(cfg, np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="shape"):
        hs.g_values(cfg, np.zeros(5, int))
    with pytest.raises(ValueError, match="negative"):
        hs.score(cfg, -np.ones((2, 5), int))
    with pytest.raises(ValueError, match="shape"):
        hs.vocab_g_values(cfg, np.zeros((2, 3), int), 10)
    with pytest.raises(ValueError, match="eos_token_id"):
        hs.score(cfg, np.zeros((2, 5), int), eos_token_id=-1)
    with pytest.raises(ValueError, match="null"):
        hs.score(cfg, np.zeros((2, 5), int), null="normal")
    with pytest.raises(ValueError, match="-inf"):
        hs.watermarked_log_probs(cfg, np.zeros((1, 2), int), np.full((1, 4), -np.inf, np.float32))
    with pytest.raises(ValueError, match="HFSynthIDConfig"):
        hs.g_values({"ngram_len": 3, "keys": [1]}, np.zeros((1, 5), int))
