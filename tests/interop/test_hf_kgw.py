"""transformers' KGW watermark reproduced without torch (:mod:`wmspec_jax.interop.hf_kgw`).

Pins, against torch / transformers themselves: mt19937 + ``torch.randperm``, the green lists of
``WatermarkLogitsProcessor._get_greenlist_ids`` (both seeding schemes, context widths 1 and 3, keys
that exercise the mod 2^64 − 1 fold and the int64 wrap), ``__call__``'s output, and detection of
texts a tiny random Llama generates with ``watermarking_config`` (TPR, FPR band, agreement with
``WatermarkDetector``). Fixed seeds throughout.
"""

from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from wmspec_jax.interop import hf_kgw as H

V_SMALL = 1000
BIG_LEFT_KEY = 2**64 - 5          # key * token >= 2^64 - 1: the modulo fold matters
BIG_SELF_KEY = 2**62 + 12345      # key * a * b wraps around int64


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return torch


@pytest.fixture
def one_thread():
    torch = _torch()
    old = torch.get_num_threads()
    torch.set_num_threads(1)   # 2 shared cores: threads only add contention
    yield torch
    torch.set_num_threads(old)


def _processor(cfg: H.HFKGWConfig, vocab_size: int):
    _torch()
    from transformers.generation.logits_process import WatermarkLogitsProcessor

    return WatermarkLogitsProcessor(vocab_size, "cpu", **cfg.to_transformers_dict())


# --------------------------------------------------------------------------- generator


def test_randperm_matches_torch():
    torch = _torch()
    seeds = [0, 1, 5489, 15485863, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 7, 2**63 - 1, 2**63 + 5,
             2**64 - 2, 2**64 - 1, -1, -(2**63), 15485863 * 31999, (BIG_LEFT_KEY * 999) % (2**64 - 1)]
    seeds += [int(s) for s in np.random.default_rng(0).integers(0, 2**63, size=8, dtype=np.int64)]
    for n in (8, 1000, 32000):
        for s in seeds:
            ref = torch.randperm(n, generator=torch.Generator().manual_seed(s)).numpy()
            np.testing.assert_array_equal(H.randperm(n, s), ref, err_msg=f"n={n} seed={s}")


def test_mt19937_is_torch_and_numpy_stream():
    torch = _torch()
    seeds = [0, 7, 2**32 - 1, 2**40 + 3]
    raw = H.mt19937(seeds, 1500)
    for s, row in zip(seeds, raw):
        legacy = np.random.RandomState(s % 2**32).randint(0, 2**32, size=1500, dtype=np.uint32)
        np.testing.assert_array_equal(row, legacy)
        g = torch.Generator().manual_seed(s)
        # randperm(2) consumes one draw: r = [0, 1] swapped iff draw is odd
        assert torch.randperm(2, generator=g).tolist() == ([1, 0] if row[0] % 2 else [0, 1])


def test_seed_formulas_match_python_ints():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 2**31 - 1, size=4000)
    for key in (15485863, BIG_LEFT_KEY, 2**63 + 999, -987654321, 2**64 - 1):
        cfg = H.HFKGWConfig(hashing_key=key)
        ref = np.array([((key * int(t)) % (2**64 - 1)) % 2**32 for t in tokens], np.uint32)
        np.testing.assert_array_equal(H.mt_seeds(cfg, tokens[:, None]), ref)
        jit_seed = jax.jit(lambda kw, t: H._lefthash_seed32(jnp, kw[0], kw[1], t))
        got = jit_seed(H._key_array(cfg), jnp.asarray(tokens.astype(np.uint32)))
        np.testing.assert_array_equal(np.asarray(got), ref)


@pytest.mark.parametrize("key,token", [((4 * 2**64 - 4) // 5, 5), ((6 * 2**64 - 5) // 7, 7)])
def test_seed_fold_corner_cases(key, token):
    """key * token = hi 2^64 + lo with lo + hi = 2^64 - 1 (residue 0) and lo + hi = 2^64 (carry)."""
    torch = _torch()
    cfg = H.HFKGWConfig(hashing_key=key)
    hi, lo = divmod(key * token, 2**64)
    assert lo + hi >= 2**64 - 1
    ref = ((key * token) % (2**64 - 1)) % 2**32
    assert H.mt_seeds(cfg, [token]) == ref
    jit_seed = jax.jit(lambda kw, t: H._lefthash_seed32(jnp, kw[0], kw[1], t))
    assert int(jit_seed(H._key_array(cfg), jnp.asarray([token], jnp.uint32))[0]) == ref
    proc = _processor(cfg, V_SMALL)
    np.testing.assert_array_equal(H.greenlist(cfg, [3, token], V_SMALL),
                                  proc._get_greenlist_ids(torch.tensor([3, token])).numpy())
    mask = np.asarray(H.green_mask(cfg, np.array([[token]]), V_SMALL))[0]
    assert set(np.nonzero(mask)[0]) == set(proc._get_greenlist_ids(torch.tensor([token])).tolist())


def test_fixed_table_prefix_matches_processor():
    cfg = H.HFKGWConfig(hashing_key=BIG_SELF_KEY, seeding_scheme="selfhash")
    proc = _processor(cfg, V_SMALL)
    np.testing.assert_array_equal(H._fixed_table_prefix(cfg, 5000), proc.fixed_table[:5000].numpy())


# --------------------------------------------------------------------------- green lists


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
@pytest.mark.parametrize("cw", [1, 3])
def test_greenlists_match_processor(scheme, cw):
    torch = _torch()
    rng = np.random.default_rng(10 + cw)
    for key in (15485863, BIG_LEFT_KEY if scheme == "lefthash" else BIG_SELF_KEY):
        cfg = H.HFKGWConfig(greenlist_ratio=0.3, hashing_key=key, seeding_scheme=scheme, context_width=cw)
        proc = _processor(cfg, V_SMALL)
        ctx = rng.integers(0, V_SMALL, size=(1000, cw))
        ref = np.stack([proc._get_greenlist_ids(torch.tensor(c)).numpy() for c in ctx])
        assert ref.shape == (1000, 300)
        np.testing.assert_array_equal(H.greenlist(cfg, ctx, V_SMALL), ref)
        np.testing.assert_array_equal(H.greenlist(cfg, ctx[0], V_SMALL), ref[0])


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_greenlists_match_processor_full_vocab(scheme):
    torch = _torch()
    V = 32000
    cfg = H.HFKGWConfig(hashing_key=BIG_SELF_KEY, seeding_scheme=scheme, context_width=2)
    proc = _processor(cfg, V)
    ctx = np.random.default_rng(3).integers(0, V, size=(40, 2))
    ref = np.stack([proc._get_greenlist_ids(torch.tensor(c)).numpy() for c in ctx])
    np.testing.assert_array_equal(H.greenlist(cfg, ctx, V), ref)


@pytest.mark.parametrize("scheme,cw", [("lefthash", 1), ("lefthash", 3), ("selfhash", 1), ("selfhash", 3)])
def test_is_green_is_membership(scheme, cw):
    torch = _torch()
    V = 500
    cfg = H.HFKGWConfig(greenlist_ratio=0.25, hashing_key=BIG_SELF_KEY, seeding_scheme=scheme,
                        context_width=cw)
    proc = _processor(cfg, V)
    ids = np.random.default_rng(4).integers(0, V, size=(4, 60))
    got = H.is_green(cfg, ids, V)
    n = cw + 1 - (scheme == "selfhash")
    assert got.shape == (4, 60 - n + 1)
    ref = np.zeros_like(got)
    for b in range(4):
        for p in range(got.shape[1]):
            ngram = ids[b, p:p + n]
            prefix = ngram if scheme == "selfhash" else ngram[:-1]
            ref[b, p] = int(ngram[-1]) in set(proc._get_greenlist_ids(torch.tensor(prefix)).tolist())
    np.testing.assert_array_equal(got, ref)
    assert 0.1 < got.mean() < 0.4


@pytest.mark.parametrize("V,k,num_seeds", [(3000, 900, 50), (10, 3, 3000), (40, 39, 500)])
def test_track_green_agrees_with_full_lists(V, k, num_seeds):
    seeds = (np.arange(num_seeds, dtype=np.uint64) * 2654435761 % 2**32).astype(np.uint32)
    j = H._swap_targets_np(seeds, V, k)
    full = H._fy_prefix_np(j)
    rows = np.repeat(np.arange(num_seeds), min(V, 200))
    toks = np.random.default_rng(5).integers(0, V, size=rows.size)
    ref = (full[rows] == toks[:, None]).any(axis=1)
    np.testing.assert_array_equal(H._track_green(j, rows, toks, k), ref)
    np.testing.assert_array_equal(np.asarray(H._fy_green_set_jax(jnp.asarray(j), V)).sum(1), k)


@pytest.mark.parametrize("V,ratio", [(V_SMALL, 0.3), (32000, 0.25), (997, 0.5)])
def test_jax_green_mask_equals_numpy(V, ratio):
    cfg = H.HFKGWConfig(greenlist_ratio=ratio, hashing_key=BIG_LEFT_KEY, context_width=2)
    ctx = np.random.default_rng(6).integers(0, V, size=(64 if V < 10000 else 8, 2))
    mask = np.asarray(H.green_mask(cfg, ctx, V))
    ref = np.zeros((ctx.shape[0], V), bool)
    ref[np.arange(ctx.shape[0])[:, None], H.greenlist(cfg, ctx, V)] = True
    np.testing.assert_array_equal(mask, ref)
    assert (mask.sum(axis=1) == int(V * ratio)).all()


# --------------------------------------------------------------------------- the processor


@pytest.mark.parametrize("scheme,cw", [("lefthash", 1), ("lefthash", 2), ("selfhash", 1), ("selfhash", 2)])
def test_processor_call_and_biased_logits(scheme, cw):
    torch = _torch()
    V, W, B = 600, 640, 6
    cfg = H.HFKGWConfig(greenlist_ratio=0.25, bias=2.1, hashing_key=BIG_SELF_KEY,
                        seeding_scheme=scheme, context_width=cw)
    proc = _processor(cfg, V)
    g = torch.Generator().manual_seed(7)
    scores = torch.randn(B, W, generator=g) * 3
    scores[:, ::7] = -float("inf")                 # as after top-k / top-p
    ids = torch.randint(0, V, (B, 5), generator=g)
    ref = proc(ids, scores).numpy()
    got = H.processor_call(cfg, ids.numpy(), scores.numpy(), vocab_size=V)
    np.testing.assert_array_equal(got, ref)
    assert (ref != scores.numpy()).any()
    short = ids[:, :cw - 1]
    np.testing.assert_array_equal(H.processor_call(cfg, short.numpy(), scores.numpy(), V),
                                  proc(short, scores).numpy())
    if scheme == "lefthash":
        out = np.asarray(H.biased_logits(cfg, ids.numpy()[:, -cw:], scores.numpy(), vocab_size=V))
        np.testing.assert_array_equal(out, ref)
        same = np.asarray(H.biased_logits(cfg, ids.numpy()[:, -cw:][:, :cw - 1], scores.numpy(), V))
        np.testing.assert_array_equal(same, scores.numpy())
    else:
        with pytest.raises(ValueError, match="lefthash only"):
            H.biased_logits(cfg, ids.numpy()[:, -cw:], scores.numpy())


# --------------------------------------------------------------------------- detection


def _detector(cfg: H.HFKGWConfig, V: int, ignore_repeated: bool):
    from transformers import WatermarkDetector

    model_config = types.SimpleNamespace(bos_token_id=-1, is_encoder_decoder=False, vocab_size=V)
    return WatermarkDetector(model_config, "cpu", cfg.to_transformers_dict(),
                             ignore_repeated_ngrams=ignore_repeated)


def _check_against_detector(cfg, texts, V):
    torch = _torch()
    for ignore, dedup in ((False, "none"), (True, "ngram")):
        ref = _detector(cfg, V, ignore)(torch.as_tensor(texts), return_dict=True)
        ours = H.score(cfg, texts, V, dedup=dedup)
        np.testing.assert_array_equal(ours.n, ref.num_tokens_scored)
        np.testing.assert_array_equal(ours.green, ref.num_green_tokens)
        np.testing.assert_allclose(ours.z, ref.z_score, rtol=1e-12)


def _fpr_bound(num: int, alpha: float, fail: float = 1e-4) -> int:
    """Smallest c with P(Binomial(num, alpha) >= c) < fail."""
    c = 0
    while stats.binom.sf(c - 1, num, alpha) >= fail:
        c += 1
    return c


@pytest.fixture(scope="module")
def tiny_llama():
    torch = _torch()
    from transformers import LlamaConfig, LlamaForCausalLM

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    prompts = torch.randint(3, 512, (40, 8), generator=torch.Generator().manual_seed(1))
    yield torch, model, prompts
    torch.set_num_threads(old)


def _generate(torch, model, prompts, new_tokens, watermarking_config=None, seed=0):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              watermarking_config=watermarking_config).numpy()


def test_end_to_end_lefthash_generate_and_detect(tiny_llama):
    from transformers import WatermarkingConfig

    torch, model, prompts = tiny_llama
    V = 512
    wm = WatermarkingConfig(greenlist_ratio=0.3, bias=2.0, hashing_key=987654321,
                            seeding_scheme="lefthash", context_width=1)   # k / V = 153 / 512 != 0.3
    cfg = H.HFKGWConfig.from_transformers(wm)
    P = prompts.shape[1]
    marked = _generate(torch, model, prompts, 128, wm, seed=11)[:, P - 1:]     # context + 128 tokens
    plain = _generate(torch, model, prompts, 128, None, seed=12)[:, P - 1:]
    s_marked = H.score(cfg, marked, V)
    s_plain = H.score(cfg, plain, V)
    assert (s_marked.p_value <= 0.01).mean() >= 0.9
    assert (s_plain.p_value <= 0.01).sum() < _fpr_bound(40, 0.01)
    assert (s_plain.p_value <= 0.1).sum() < _fpr_bound(40, 0.1)
    for s in (s_marked, s_plain):
        np.testing.assert_allclose(s.p_value, stats.binom.sf(s.green - 1, s.n, 153 / 512), rtol=1e-9)
    _check_against_detector(cfg, marked, V)
    _check_against_detector(cfg, plain, V)
    # the other default-free rule, for completeness: more positions, still detected
    st = H.score(cfg, marked, V, dedup="seed_token")
    assert (st.n >= s_marked.n).all() and (st.p_value <= 0.01).mean() >= 0.9


def test_texts_watermarked_here_are_detected_by_transformers_detector(tiny_llama):
    """The reverse direction: the tiny Llama's logits after top-k 50 (generate's default, applied
    before the watermark as transformers 5.x does), biased by our jitted ``biased_logits`` and sampled
    here with NumPy, give texts that transformers' own ``WatermarkDetector`` flags (z above its
    threshold of 3), with green counts equal to ours; texts sampled without the bias are not flagged."""
    from transformers import WatermarkingConfig
    from transformers.generation.logits_process import TopKLogitsWarper

    torch, model, prompts = tiny_llama
    V, new_tokens = 512, 128
    cfg = H.HFKGWConfig.from_transformers(WatermarkingConfig(
        greenlist_ratio=0.3, bias=2.0, hashing_key=987654321, seeding_scheme="lefthash", context_width=1))
    top_k, rng = TopKLogitsWarper(50), np.random.default_rng(21)

    def sample(watermark: bool) -> np.ndarray:
        ids = prompts.clone()
        with torch.no_grad():
            for _ in range(new_tokens):
                logits = top_k(ids, model(ids).logits[:, -1].clone()).numpy()
                if watermark:
                    logits = np.asarray(H.biased_logits(cfg, ids[:, -1:].numpy(), logits, vocab_size=V))
                probs = np.exp(logits - logits.max(-1, keepdims=True))
                probs /= probs.sum(-1, keepdims=True)
                nxt = (probs.cumsum(-1) < rng.random((len(ids), 1))).sum(-1).clip(0, V - 1)
                ids = torch.cat([ids, torch.tensor(nxt)[:, None]], dim=1)
        return ids[:, prompts.shape[1] - 1:].numpy()   # context + generated tokens

    marked, plain = sample(True), sample(False)
    detector = _detector(cfg, V, ignore_repeated=False)
    theirs_marked = detector(torch.as_tensor(marked), return_dict=True)
    theirs_plain = detector(torch.as_tensor(plain), return_dict=True)
    assert np.mean(theirs_marked.prediction) >= 0.9, theirs_marked.z_score
    # the detector's z > 3 on n scored tokens is a green count above n γ + 3 sqrt(n γ (1 - γ)); with the
    # key independent of a text each token is green with probability k / V, so a text is flagged with
    # the exact binomial tail (0.0021 at n = 128, not the normal 0.00135)
    n = int(np.max(theirs_plain.num_tokens_scored))
    assert (theirs_plain.num_tokens_scored == n).all()
    flagged_at = int(np.floor(n * 0.3 + 3 * np.sqrt(n * 0.3 * 0.7))) + 1
    alpha = stats.binom.sf(flagged_at - 1, n, int(V * 0.3) / V)
    assert np.sum(theirs_plain.prediction) < _fpr_bound(40, alpha)
    _check_against_detector(cfg, marked, V)
    assert (H.score(cfg, marked, V).p_value <= 0.01).mean() >= 0.9


def test_end_to_end_selfhash_generate_and_detect(tiny_llama):
    from transformers import WatermarkingConfig

    torch, model, prompts = tiny_llama
    V = 512
    wm = WatermarkingConfig(greenlist_ratio=0.25, bias=2.0, hashing_key=BIG_SELF_KEY,
                            seeding_scheme="selfhash", context_width=2)
    cfg = H.HFKGWConfig.from_transformers(wm)
    P = prompts.shape[1]
    marked = _generate(torch, model, prompts[:8], 40, wm, seed=13)[:, P - 1:]   # window + 40 tokens
    s = H.score(cfg, marked, V)
    assert (s.n <= 40).all() and (s.n >= 30).all()
    assert (s.p_value <= 0.01).mean() >= 0.9
    _check_against_detector(cfg, marked, V)


def test_null_on_uniform_text_one_key():
    # lefthash with a fixed key: a uniform next token is green with probability exactly k / V
    V = 512
    cfg = H.HFKGWConfig(greenlist_ratio=0.3, hashing_key=424242, context_width=1)
    ids = np.random.default_rng(8).integers(0, V, size=(2000, 64))
    s = H.score(cfg, ids, V)
    g_eff = int(V * 0.3) / V
    z = (s.green.sum() - g_eff * s.n.sum()) / np.sqrt(s.n.sum() * g_eff * (1 - g_eff))
    assert abs(z) < 4.5
    for alpha in (0.01, 0.05):
        assert (s.p_value <= alpha).sum() < _fpr_bound(2000, alpha)


@pytest.mark.parametrize("scheme,cw", [("lefthash", 1), ("selfhash", 1), ("selfhash", 2)])
def test_null_over_keys(scheme, cw):
    """The null as stated: a fixed text, the key random. With dedup="seed" the p-values are valid
    on plain and on repetitive text; counting every position ("none") is not, on repetitive text."""
    V, num_keys = 512, 120
    rng = np.random.default_rng(9)
    texts = np.stack([rng.integers(0, V, size=64), np.tile(rng.integers(0, V, size=8), 8)])
    keys = rng.integers(1, 2**62, size=num_keys)
    g_eff = int(V * 0.3) / V
    seed_rule, none_rule = [], []
    for key in keys:
        cfg = H.HFKGWConfig(greenlist_ratio=0.3, hashing_key=int(key), seeding_scheme=scheme,
                            context_width=cw)
        seed_rule.append(H.score(cfg, texts, V))
        none_rule.append(H.score(cfg, texts[1:], V, dedup="none"))
    g = np.array([r.green for r in seed_rule])          # [keys, 2]
    n = np.array([r.n for r in seed_rule])
    p = np.array([r.p_value for r in seed_rule])
    z = (g.sum(0) - g_eff * n.sum(0)) / np.sqrt(n.sum(0) * g_eff * (1 - g_eff))
    assert (np.abs(z) < 4.5).all(), z
    for alpha in (0.01, 0.1):
        assert ((p <= alpha).sum(0) < _fpr_bound(num_keys, alpha)).all(), (alpha, (p <= alpha).sum(0))
    p_none = np.array([r.p_value[0] for r in none_rule])
    # 8 coins counted 8 times each: far more false positives than alpha allows
    assert (p_none <= 0.01).sum() >= _fpr_bound(num_keys, 0.01)


def test_dedup_rules():
    V = 100
    cfg = H.HFKGWConfig(context_width=2)
    # lefthash seeds with the last context token only: (5, 7, 9) and (6, 7, 9) share one coin
    ids = np.array([[5, 7, 9, 6, 7, 9, 3, 7, 4]])
    none, ngram = H.score(cfg, ids, V, dedup="none"), H.score(cfg, ids, V, dedup="ngram")
    seed_token, seed = H.score(cfg, ids, V, dedup="seed_token"), H.score(cfg, ids, V, dedup="seed")
    assert none.n[0] == 7
    assert ngram.n[0] == 7          # every trigram distinct
    assert seed_token.n[0] == 6     # (7 -> 9) twice
    assert seed.n[0] == 4           # previous tokens 7, 9, 6, 3
    masked = H.score(cfg, ids, V, mask=np.array([[True] * 6 + [False] * 3]), dedup="none")
    assert masked.n[0] == 4
    bos = H.score(cfg, np.concatenate([[[1]], ids], axis=1), V, dedup="none", bos_token_id=1)
    np.testing.assert_array_equal(bos.green, none.green)
    with pytest.raises(ValueError, match="BOS"):
        H.score(cfg, np.array([[1, 2, 3, 4], [2, 3, 4, 5]]), V, bos_token_id=1)
    with pytest.raises(ValueError, match="at least one token"):
        H.score(cfg, ids[:, :2], V)
    with pytest.raises(ValueError, match="outside"):
        H.score(cfg, ids + 100, V)
    with pytest.raises(ValueError, match="dedup"):
        H.score(cfg, ids, V, dedup="all")


# --------------------------------------------------------------------------- configuration


def test_config_hides_key_and_round_trips():
    _torch()
    from transformers import WatermarkingConfig

    key = 738291047561
    wm = WatermarkingConfig(greenlist_ratio=0.3, bias=1.5, hashing_key=key, seeding_scheme="selfhash",
                            context_width=2)
    cfg = H.HFKGWConfig.from_dict(wm.to_dict())
    assert cfg == H.HFKGWConfig.from_transformers(wm)
    assert cfg == H.HFKGWConfig(0.3, 1.5, key, "selfhash", 2)
    assert H.HFKGWConfig.from_dict(WatermarkingConfig(**cfg.to_transformers_dict()).to_dict()) == cfg
    for text in (repr(cfg), str(cfg), json.dumps(cfg.record()), f"{cfg}"):
        assert str(key) not in text and hex(key)[2:] not in text
    assert cfg.fingerprint in repr(cfg) and cfg.record()["hashing_key_fingerprint"] == cfg.fingerprint
    assert H.HFKGWConfig.from_dict({}) == H.HFKGWConfig()
    assert H.HFKGWConfig().greenlist_size(100) == 25 and H.HFKGWConfig(0.29).greenlist_size(100) == 28


@pytest.mark.parametrize("kwargs,match", [
    ({"greenlist_ratio": 0.0}, "greenlist_ratio"),
    ({"greenlist_ratio": 1.0}, "greenlist_ratio"),
    ({"bias": float("nan")}, "bias"),
    ({"seeding_scheme": "hash"}, "seeding_scheme"),
    ({"context_width": 0}, "context_width"),
    ({"hashing_key": True}, "hashing_key"),
    ({"hashing_key": 2**64}, "hashing_key"),
    ({"hashing_key": 2**63, "seeding_scheme": "selfhash"}, "hashing_key"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        H.HFKGWConfig(**kwargs)


def test_input_validation():
    cfg = H.HFKGWConfig()
    with pytest.raises(ValueError, match="unknown"):
        H.HFKGWConfig.from_dict({"keys": [1, 2], "ngram_len": 5})
    with pytest.raises(ValueError, match="empty green list"):
        H.greenlist(cfg, [1], 3)
    with pytest.raises(ValueError, match="outside"):
        H.green_mask(cfg, np.array([[5]]), 4)
    with pytest.raises(ValueError, match="HFKGWConfig"):
        H.is_green({"hashing_key": 1}, np.zeros((1, 4), int), 10)
