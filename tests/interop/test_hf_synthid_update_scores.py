"""``hf_synthid.update_scores`` against transformers' ``SynthIDTextWatermarkLogitsProcessor.update_scores``.

The public function takes g-values the caller computed (here transformers' own, from its n-gram keys), so
it is compared on its own, apart from :func:`hf_synthid.watermarked_log_probs`, which computes them.
"""

import numpy as np
import pytest

from wmspec_jax.interop import hf_synthid as hs

KEYS = tuple(int(k) for k in np.random.default_rng(11).integers(0, 1000, 12))


def _reference_g(proc, torch, contexts, vocab: int):
    """transformers' g-values of every candidate after each context: int64[B, vocab, depth] (torch)."""
    batch = contexts.shape[0]
    keys, _ = proc._compute_keys(torch.tensor(contexts), torch.arange(vocab).expand(batch, -1))
    return proc.sample_g_values(keys)


@pytest.mark.parametrize("seed,batch,vocab,ngram_len", [(0, 4, 300, 5), (1, 3, 1000, 3), (2, 5, 64, 2)])
def test_update_scores_equals_transformers(seed, batch, vocab, ngram_len):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

    cfg = hs.HFSynthIDConfig(ngram_len=ngram_len, keys=KEYS)
    proc = SynthIDTextWatermarkLogitsProcessor(
        ngram_len=cfg.ngram_len, keys=list(cfg.keys), sampling_table_size=cfg.sampling_table_size,
        sampling_table_seed=cfg.sampling_table_seed, context_history_size=cfg.context_history_size,
        device="cpu", skip_first_ngram_calls=cfg.skip_first_ngram_calls)
    rng = np.random.default_rng(seed)
    contexts = rng.integers(0, vocab, (batch, ngram_len - 1))
    scores = (rng.normal(size=(batch, vocab)) * 2).astype(np.float32)
    # row 0 as a top-k warper leaves it: all but its 10 largest logits at -inf
    masked = np.argsort(scores[0])[:-10]
    scores[0, masked] = -np.inf
    g = _reference_g(proc, torch, contexts, vocab)
    ref = proc.update_scores(torch.tensor(scores), g).numpy()

    ours = np.asarray(hs.update_scores(scores, g.numpy()))
    assert ours.shape == (batch, vocab) and ours.dtype == np.float32
    # p = 0 gives log p = -inf, which both replace by the smallest float32
    np.testing.assert_array_equal(ours[0, masked], np.finfo(np.float32).min)
    np.testing.assert_array_equal(ref[0, masked], np.finfo(np.float32).min)
    _assert_same_law(ours, ref)
    # the g-values this package computes give the same scores
    ours_g = hs.vocab_g_values(cfg, contexts, vocab)
    _assert_same_law(np.asarray(hs.update_scores(scores, ours_g)), ref)


def _assert_same_law(ours, ref):
    """The same sampling law: probabilities within 1e-7 (or 1e-5 relative), log-probabilities within 2e-5
    where p > 1e-6. Each depth multiplies p by 1 + g - mass; where the mass of the g = 1 tokens nears 1
    the factor of a g = 0 token cancels, and summing that mass in another order (torch's, XLA's on another
    processor) moves the log of a token of p ~ 1e-10 by about 1e-3: a difference no sampler sees."""
    np.testing.assert_allclose(np.exp(ours.astype(np.float64)), np.exp(ref.astype(np.float64)), rtol=1e-5, atol=1e-7)
    large = ref > np.log(1e-6)
    np.testing.assert_allclose(ours[large], ref[large], rtol=1e-5, atol=2e-5)


def test_update_scores_checks_shapes():
    scores = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="g_values"):
        hs.update_scores(scores, np.zeros((2, 7, 3), np.int32))
    with pytest.raises(ValueError, match="g_values"):
        hs.update_scores(scores, np.zeros((2, 8), np.int32))
