"""Distributions on their candidates: the same distribution as the full-vocabulary path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from wmspec_jax import candidates, decoders, prf, sampling, theory

V = 512
B = 400


def dist(logp, ids=None):
    """Candidates of normalised log-probabilities (lse = 0)."""
    logp = jnp.asarray(logp, jnp.float32)
    return candidates.Candidates(logp, jnp.zeros(logp.shape[:-1], jnp.float32), ids)


@pytest.fixture(scope="module")
def logits():
    # integer-valued logits: many ties at the k-th value exercise the tie-break
    x = np.round(np.random.default_rng(0).normal(size=(B, V)) * 2.0).astype(np.float32)
    return jnp.asarray(x)


@pytest.fixture(scope="module")
def seeds():
    ctx = np.random.default_rng(1).integers(0, 2**31, size=(B, 4))
    return prf.context_seeds(prf.stream_keys(b"candidates")[prf.Stream.TARGET], ctx)


@pytest.mark.parametrize("temperature,top_k", [(0.7, None), (0.7, 1), (0.7, 37), (1.0, V), (0.0, None), (0.0, 5)])
def test_candidates_hold_the_processed_distribution(logits, temperature, top_k):
    c = candidates.from_logits(logits, temperature, top_k)
    dense = np.exp(np.asarray(decoders.process_logits(logits, temperature, top_k)))
    got = np.asarray(candidates.to_dense(c, V))
    np.testing.assert_allclose(got, dense, atol=2e-6)
    assert np.array_equal(got > 0, dense > 0)  # the same support, ties broken alike
    if c.ids is not None:
        ids = np.asarray(c.ids)
        assert (np.diff(ids, axis=-1) > 0).all()  # ascending token ids
        assert ids.shape[-1] == (1 if temperature == 0 else top_k)


def test_top_k_ties_go_to_lower_ids():
    x = jnp.asarray([[0.0, 2.0, 1.0, 2.0, 1.0, 1.0]])
    c = candidates.from_logits(x, 1.0, 3)
    assert np.asarray(c.ids).tolist() == [[1, 2, 3]]
    assert np.isneginf(np.asarray(decoders.process_logits(x, 1.0, 3))[0, [0, 4, 5]]).all()


def test_log_prob_lookup_on_and_off_the_support(logits):
    c = candidates.from_logits(logits, 0.7, 20)
    dense = np.asarray(decoders.process_logits(logits, 0.7, 20))
    tokens = np.random.default_rng(2).integers(0, V, size=(B, 6))
    tokens[:, 0] = np.asarray(c.ids)[:, 3]  # surely on the support
    got = np.asarray(candidates.log_prob(c, tokens))
    want = np.take_along_axis(dense, tokens, axis=-1)
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=2e-6)


def test_residual_on_candidates_equals_the_dense_residual(logits):
    q_logits = logits + jnp.asarray(np.random.default_rng(3).normal(size=(B, V)), jnp.float32)
    for top_k in (None, 25):
        p, q = candidates.from_logits(logits, 0.8, top_k), candidates.from_logits(q_logits, 0.8, top_k)
        want = np.asarray(theory.residual(candidates.to_dense(p, V), candidates.to_dense(q, V)))
        got = np.asarray(candidates.to_dense(dist(jnp.log(candidates.residual(p, q)), p.ids), V))
        np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize("kind", ["gumbel", "synthid", "synthid_limit"])
def test_decoders_on_the_support_match_the_full_vocabulary(logits, seeds, kind):
    """With top-k, hashing and decoding the k candidates gives the full-vocabulary
    decoder's output restricted to the support: the same token for Gumbel-max and
    the m = ∞ SynthID (argmax), and the same probabilities up to float32 rounding
    of the tournament's sums (then the same token) for SynthID(m)."""
    dec = decoders.WatermarkDecoder(kind, 30)
    c = candidates.from_logits(logits, 0.7, 40)
    weights = candidates.probs(c)
    dense = candidates.to_dense(c, V)
    sparse_token = candidates.token_ids(c, sampling.watermark_index(dec, weights, c.ids, seeds))
    dense_token = sampling.watermark_index(dec, dense, None, seeds)
    assert np.array_equal(np.asarray(sparse_token), np.asarray(dense_token))
    if kind == "synthid":
        words = lambda ids: prf.hash_values(seeds[:, None, :], ids, prf.Lane.GBITS)[..., None]  # noqa: E731
        sparse = decoders.tournament_packed(weights, words(c.ids.astype(jnp.uint32)), 30)
        full = decoders.tournament_packed(dense, words(jnp.arange(V, dtype=jnp.uint32)), 30)
        on_support = np.take_along_axis(np.asarray(full), np.asarray(c.ids), axis=-1)
        np.testing.assert_allclose(np.asarray(sparse), on_support, atol=2e-6, rtol=1e-5)
        off = np.asarray(full).copy()
        np.put_along_axis(off, np.asarray(c.ids), 0.0, axis=-1)
        assert (off == 0).all()  # nothing outside the support


def test_packed_tournament_equals_the_unpacked_one(seeds):
    p = jax.nn.softmax(jax.random.normal(jax.random.key(5), (B, 64)), axis=-1)
    words = jnp.stack([prf.hash_values(seeds[:, None, :], jnp.arange(64, dtype=jnp.uint32), prf.Lane.GBITS + b)
                       for b in range(2)], axis=-1)
    g = prf.vocab_gbits(seeds, 64, 40)  # [B, m, V] from the same lanes
    np.testing.assert_array_equal(np.asarray(decoders.tournament_packed(p, words, 40)),
                                  np.asarray(decoders.tournament(p, g)))


def test_inverse_cdf_two_level_is_unbiased_and_skips_zero_weights():
    n, size = 40_000, 600  # above the two-level threshold (256)
    rng = np.random.default_rng(6)
    p = rng.dirichlet(np.full(size, 0.3))
    p[rng.random(size) < 0.5] = 0.0  # zero-weight tokens, whole zero blocks among them
    p[:300] = 0.0  # whole zero blocks
    p /= p.sum()
    u = jnp.asarray(rng.random(n, dtype=np.float32))
    toks = np.asarray(decoders.inverse_cdf(jnp.broadcast_to(jnp.asarray(p, jnp.float32), (n, size)), u))
    assert (p[toks] > 0).all()
    stats.assert_counts_match(np.bincount(toks, minlength=size), p, "two-level inverse CDF")
    # the extreme uniforms land on the first and last tokens with mass
    edge = np.asarray(decoders.inverse_cdf(jnp.asarray(p[None], jnp.float32).repeat(2, 0),
                                           jnp.asarray([0.0, 1 - 2.0**-24], jnp.float32)))
    nz = np.flatnonzero(p)
    assert edge.tolist() == [nz[0], nz[-1]]


@pytest.mark.parametrize("top_k", [None, 3])
def test_nonfinite_logits_are_flagged_per_distribution(top_k):
    x = np.zeros((5, 40), np.float32)
    x[1, 7] = np.nan
    x[2, 3] = np.inf
    x[3] = -np.inf
    x[4, :30] = -np.inf  # partly -inf is a legitimate distribution
    for temperature in (0.0, 0.7):
        _, bad = candidates.process(jnp.asarray(x), temperature, top_k)
        assert np.asarray(bad).tolist() == [False, True, True, True, False], (temperature, top_k)


def test_one_hot_distributions_carry_no_watermark(seeds):
    onehot = jnp.zeros((B, 8)).at[:, 3].set(1.0)
    index, watermarked = sampling.draw(decoders.WatermarkDecoder("synthid", 4), onehot, None, seeds,
                                       jnp.full((B,), 0.5), jnp.ones((B,), bool))
    assert (np.asarray(index) == 3).all() and not np.asarray(watermarked).any()
    spread = jnp.full((B, 8), 1 / 8)
    _, watermarked = sampling.draw(decoders.WatermarkDecoder("gumbel"), spread, None, seeds,
                                   jnp.full((B,), 0.5), jnp.ones((B,), bool))
    assert np.asarray(watermarked).all()


@pytest.mark.parametrize("size,k", [(32000, 100), (10000, 1), (9000, 140)])
def test_two_stage_top_k_is_lax_top_k(size, k):
    rng = np.random.default_rng(size)
    x = np.round(rng.normal(size=(6, size)) * 3).astype(np.float32)  # heavy ties
    x[0] = 0.0  # every value tied
    x[1, :k + 5] = 50.0  # ties straddling the k-th place inside one block
    x[2, -3:] = 99.0  # maxima in the padded last block
    want_v, want_i = jax.lax.top_k(jnp.asarray(x), k)
    got_v, got_i = candidates.select_top_k(jnp.asarray(x), k)
    assert np.array_equal(np.asarray(got_i), np.asarray(want_i))
    assert np.array_equal(np.asarray(got_v), np.asarray(want_v))
