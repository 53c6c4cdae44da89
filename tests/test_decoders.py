"""Unbiased decoders (Sec. 2, Eq. 2-4, 9), the sampler, logits processing."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from wmspec_jax import decoders, prf

P6 = np.array([0.35, 0.25, 0.2, 0.1, 0.07, 0.03], np.float32)
N = 100_000


@pytest.fixture(scope="module")
def seeds():
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, 2**31, size=(N, 4))
    return prf.context_seeds(prf.stream_keys(b"decoder-tests")[prf.Stream.TARGET], ctx)


def test_gumbel_max_is_unbiased_point_mass(seeds):
    u = prf.vocab_uniforms(seeds, P6.size)
    out = jax.vmap(decoders.gumbel_max, in_axes=(None, 0))(P6, u)
    assert np.all(np.asarray(out).sum(-1) == 1) and np.all(np.asarray(out).max(-1) == 1)
    counts = np.asarray(out).sum(0)
    stats.assert_counts_match(counts, P6, "Gumbel-max token frequencies")


def test_gumbel_max_never_picks_zero_probability_token(seeds):
    p = np.array([0.0, 0.5, 0.0, 0.5], np.float32)
    tok = decoders.gumbel_max_token(jnp.log(p), prf.vocab_uniforms(seeds[:5000], 4))
    assert set(np.unique(np.asarray(tok)).tolist()) == {1, 3}


def test_synthid_unbiased_exactly_by_enumeration():
    p = np.array([0.5, 0.3, 0.2], np.float32)
    m, v = 2, 3
    gs = np.array(list(itertools.product((0, 1), repeat=m * v)), np.float32).reshape(-1, m, v)
    out = np.asarray(jax.vmap(decoders.synthid, in_axes=(None, 0))(p, gs))
    assert np.allclose(out.sum(-1), 1, atol=1e-6)
    assert np.allclose(out.mean(0), p, atol=1e-6)


def test_synthid_sampled_tokens_follow_p(seeds):
    m = 5
    g = prf.vocab_gbits(seeds, P6.size, m)
    pz = jax.vmap(decoders.synthid, in_axes=(None, 0))(P6, g)
    # the decoder output averages to P ...
    for w in range(P6.size):
        stats.assert_mean_close(np.asarray(pz[:, w]), P6[w], f"E[P_zeta][{w}]")
    # ... and the full pipeline (decoder + same-stream sampler uniform) emits P
    tok = decoders.sample_token(pz, prf.position_uniforms(seeds))
    stats.assert_counts_match(np.bincount(np.asarray(tok), minlength=P6.size), P6, "SynthID tokens")


def test_synthid_tournament_matches_two_candidate_match():
    # T_g(P) is the law of the winner of a two-candidate match (Sec. 2)
    p = np.array([0.6, 0.3, 0.1])
    g = np.array([0.0, 1.0, 1.0])
    want = np.zeros(3)
    for a, b in itertools.product(range(3), repeat=2):
        if g[a] == g[b]:
            want[a] += 0.5 * p[a] * p[b]
            want[b] += 0.5 * p[a] * p[b]
        else:
            want[a if g[a] > g[b] else b] += p[a] * p[b]
    got = decoders.synthid(p.astype(np.float32), g[None, :])
    assert np.allclose(np.asarray(got), want, atol=1e-6)


def test_synthid_limit_is_degenerate(seeds):
    g = prf.vocab_gbits(seeds[:100], P6.size, 30)
    out = np.asarray(jax.vmap(decoders.synthid_limit, in_axes=(None, 0))(P6, g))
    assert np.all(out.max(-1) == 1) and np.all(out.sum(-1) == 1)


def test_identity_and_linear_mixture():
    q = np.array([0, 1, 0, 0, 0, 0], np.float32)
    assert np.array_equal(np.asarray(decoders.identity(P6)), P6)
    mix = np.asarray(decoders.linear_mixture(P6, q, 0.25))
    assert np.allclose(mix, 0.75 * P6 + 0.25 * q)
    batch = np.asarray(decoders.linear_mixture(np.stack([P6, P6]), np.stack([q, q]), np.array([0.0, 1.0])))
    assert np.allclose(batch[0], P6) and np.allclose(batch[1], q)


def test_sample_token_inverse_cdf():
    p = np.array([0.0, 0.25, 0.0, 0.75, 0.0], np.float32)
    u = np.array([1e-7, 0.2499, 0.2501, 0.999999, 1 - 2.0**-24], np.float32)
    assert np.asarray(decoders.sample_token(np.broadcast_to(p, (5, 5)), u)).tolist() == [1, 1, 3, 3, 3]
    rng = np.random.default_rng(0)
    toks = decoders.sample_token(P6, rng.random(N, dtype=np.float32))
    stats.assert_counts_match(np.bincount(np.asarray(toks), minlength=6), P6, "inverse CDF")
    # unnormalised weights behave the same
    assert np.array_equal(np.asarray(decoders.sample_token(p * 7, u)), np.asarray(decoders.sample_token(p, u)))


def test_process_logits_temperature_topk_greedy():
    logits = jnp.array([[2.0, 1.0, 0.5, -1.0]])
    lp = decoders.process_logits(logits, 1.0)
    assert np.allclose(np.asarray(jnp.exp(lp)).sum(), 1, atol=1e-6)
    hot = decoders.process_logits(logits, 0.5)
    assert np.allclose(np.asarray(hot), np.asarray(jax.nn.log_softmax(logits * 2)), atol=1e-6)
    top2 = np.asarray(jnp.exp(decoders.process_logits(logits, 1.0, top_k=2)))
    assert top2[0, 2] == 0 and top2[0, 3] == 0 and np.isclose(top2.sum(), 1)
    greedy = np.asarray(decoders.process_logits(logits, 0.0))
    assert greedy[0, 0] == 0 and np.all(np.isneginf(greedy[0, 1:]))
    with pytest.raises(ValueError, match="temperature"):
        decoders.process_logits(logits, -1.0)
    with pytest.raises(ValueError, match="top_k"):
        decoders.process_logits(logits, 1.0, top_k=9)


def test_decoder_config_validation():
    assert decoders.WatermarkDecoder("synthid", 30).label == "SynthID(m=30)"
    with pytest.raises(ValueError, match="decoder kind"):
        decoders.WatermarkDecoder("aar")
    with pytest.raises(ValueError, match="num_layers"):
        decoders.WatermarkDecoder("synthid", 0)


@pytest.mark.parametrize(
    "probs, match",
    [
        (np.array([0.5, -0.1, 0.6]), "negative"),
        (np.array([0.5, np.nan, 0.5]), "NaN"),
        (np.array([0.5, 0.4, 0.0]), "sum to 1"),
    ],
)
def test_bad_probabilities_are_rejected(probs, match):
    with pytest.raises(ValueError, match=match):
        decoders.gumbel_max(probs, np.full(3, 0.5))
    with pytest.raises(ValueError, match=match):
        decoders.synthid(probs, np.zeros((2, 3)))


def test_shape_and_value_errors():
    with pytest.raises(ValueError, match="shape"):
        decoders.gumbel_max(P6, np.full(5, 0.5))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        decoders.gumbel_max(P6, np.full(6, 1.0))
    with pytest.raises(ValueError, match="g_values"):
        decoders.synthid(P6, np.zeros((2, 5)))
    with pytest.raises(ValueError, match="0 or 1"):
        decoders.synthid(P6, np.full((2, 6), 0.5))


@pytest.mark.parametrize("temperature", [np.float32(-0.5), jnp.float32(-1.0), np.int64(-2), float("nan"), float("inf")])
def test_process_logits_refuses_bad_temperature_of_any_scalar_type(temperature):
    with pytest.raises(ValueError, match="temperature"):
        decoders.process_logits(jnp.ones((1, 4)), temperature)


def test_process_logits_accepts_numpy_and_jax_scalars():
    logits = jnp.array([[2.0, 1.0, 0.5, -1.0]])
    want = np.asarray(decoders.process_logits(logits, 0.5))
    for t in (np.float32(0.5), jnp.float32(0.5), np.float64(0.5)):
        np.testing.assert_allclose(np.asarray(decoders.process_logits(logits, t)), want, atol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        decoders.process_logits(logits, 1.0, top_k=-1)
    with pytest.raises(TypeError, match="top_k"):
        decoders.process_logits(logits, 1.0, top_k=True)


@pytest.mark.parametrize(
    "weights, u, match",
    [
        (np.array([0.5, np.nan, 0.5]), 0.3, "NaN"),
        (np.array([0.5, -0.1, 0.6]), 0.3, "negative"),
        (np.zeros(3), 0.3, "sums to zero"),
        (np.array([0.5, 0.5, 0.0]), 1.0, r"\[0, 1\)"),
        (np.array([0.5, 0.5, 0.0]), -0.1, r"\[0, 1\)"),
        (np.array([0.5, 0.5, 0.0]), np.nan, r"\[0, 1\)"),
    ],
)
def test_sample_token_refuses_bad_weights_and_uniforms(weights, u, match):
    with pytest.raises(ValueError, match=match):
        decoders.sample_token(weights, u)


def test_linear_mixture_refuses_theta_outside_unit_interval():
    q = np.eye(6, dtype=np.float32)[1]
    for theta in (-0.1, 1.5, np.array([0.5, 2.0])):
        with pytest.raises(ValueError, match=r"theta must lie in \[0, 1\]"):
            decoders.linear_mixture(P6, q, theta)


def test_square_g_values_need_an_explicit_layout():
    p = np.array([0.5, 0.3, 0.2], np.float32)
    g = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0]], np.float32)  # m = V = 3: [m, V] or [V, m]?
    with pytest.raises(ValueError, match="ambiguous"):
        decoders.synthid(p, g)
    layers_first = np.asarray(decoders.synthid(p, g, layers_axis=-2))
    np.testing.assert_allclose(np.asarray(decoders.synthid(p, g.T, layers_axis=-1)), layers_first)
    assert not np.allclose(np.asarray(decoders.synthid(p, g, layers_axis=-1)), layers_first)
    with pytest.raises(ValueError, match="g_values must be"):
        decoders.synthid(P6, np.zeros((6, 2)))  # transposed layout, m != V: refused by shape


def test_one_decoder_description_for_generation_and_tradeoff():
    from wmspec_jax import tradeoff

    assert tradeoff.synthid(30) == decoders.WatermarkDecoder("synthid", 30)
    assert tradeoff.gumbel() == decoders.WatermarkDecoder("gumbel", 7)  # m is meaningless for Gumbel-max
    assert decoders.WatermarkDecoder("synthid_limit", 30).label == "SynthID(m=∞)"
    assert decoders.WatermarkDecoder("synthid", np.int64(5)).num_layers == 5
    with pytest.raises(ValueError, match="num_layers"):
        decoders.WatermarkDecoder("synthid", True)


# ---------------------------------------------------------------------------
# Inverse transform and DiPmark / γ-reweight (beyond the paper)
# ---------------------------------------------------------------------------

INVERSE = decoders.WatermarkDecoder("inverse_transform")
DIPMARK = decoders.WatermarkDecoder("dipmark", alpha=0.3)
GAMMA = decoders.WatermarkDecoder("gamma_reweight")


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.45, 0.5])
def test_dipmark_is_unbiased_exactly_over_every_permutation(alpha):
    p = np.array([0.5, 0.3, 0.15, 0.05], np.float32)
    orders = np.array(list(itertools.permutations(range(4))), np.float32)
    out = np.asarray(jax.vmap(decoders.dipmark, in_axes=(None, 0, None))(p, orders, alpha))
    assert np.allclose(out.sum(-1), 1, atol=1e-6) and (out >= 0).all()
    assert np.allclose(out.mean(0), p, atol=1e-6)
    if alpha > 0:  # it is a watermark: some permutation moves mass
        assert np.abs(out - p).max() > 0.1


def test_dipmark_moves_the_first_alpha_of_mass_to_the_last():
    p = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    order = np.array([0.1, 0.2, 0.3, 0.4], np.float32)  # π = identity
    # F = (0.4, 0.7, 0.9, 1.0); g(x) = max(x - 0.5, 0) * 2 for α = 1/2
    assert np.allclose(decoders.dipmark(p, order, 0.5), [0.0, 0.4, 0.4, 0.2], atol=1e-6)
    assert np.allclose(decoders.dipmark(p, order, 0.0), p, atol=1e-6)


def test_inverse_transform_follows_p_for_every_permutation():
    """Over u ~ U(0, 1) the token's law is P whatever π is (a grid of u in place of the integral)."""
    p = np.array([0.5, 0.3, 0.15, 0.05], np.float32)
    grid = (np.arange(2000) + 0.5) / 2000
    for order in itertools.permutations(range(4)):
        tok = jax.vmap(decoders.inverse_transform_index, in_axes=(None, None, 0))(
            p, np.asarray(order, np.float32), grid)
        assert np.allclose(np.bincount(np.asarray(tok), minlength=4) / grid.size, p, atol=1e-3)
    one_hot = np.asarray(decoders.inverse_transform(p, np.arange(4, dtype=np.float32), 0.6))
    assert one_hot.tolist() == [0.0, 1.0, 0.0, 0.0]  # π = identity: F = (0.5, 0.8, ...) holds 0.6 in token 1


def private_uniforms(n, seed=5):
    """The true-random uniforms a generation loop gives a private-randomness decoder's draws."""
    return jnp.asarray(np.random.default_rng(seed).random(n, dtype=np.float32))


@pytest.mark.parametrize("decoder", [INVERSE, DIPMARK, GAMMA], ids=lambda d: d.name)
def test_keyed_tokens_follow_p(seeds, decoder):
    """The generation path (one hash per candidate, π from the scheme's lane, u from the position lane or,
    for DiPmark, the private uniform): token frequencies over 100k contexts are P, with zero-probability
    tokens never emitted."""
    p = np.append(P6, 0.0).astype(np.float32)
    tok = np.asarray(decoder.watermark_index(jnp.broadcast_to(p, (N, p.size)), None, seeds, private_uniforms(N)))
    assert (tok != p.size - 1).all()
    stats.assert_counts_match(np.bincount(tok, minlength=p.size)[:-1], P6, f"{decoder.label} tokens")


@pytest.mark.parametrize("decoder", [INVERSE, DIPMARK], ids=lambda d: d.name)
def test_candidates_and_the_whole_vocabulary_give_the_same_token(seeds, decoder):
    """With candidate ids (top-k) π is the order of the candidates' own hashes: the same token as the
    dense path on the same distribution."""
    p = np.array([0.0, 0.4, 0.0, 0.35, 0.25, 0.0], np.float32)
    u = private_uniforms(2000)
    dense = decoder.watermark_index(jnp.broadcast_to(p, (2000, 6)), None, seeds[:2000], u)
    ids = np.array([3, 1, 4], np.int32)
    sparse = decoder.watermark_index(jnp.broadcast_to(p[ids], (2000, 3)), jnp.broadcast_to(ids, (2000, 3)),
                                     seeds[:2000], u)
    assert np.array_equal(ids[np.asarray(sparse)], np.asarray(dense))


def dipmark_reference(p, order_hashes, alpha, u):
    """Wu et al. (2024)'s DiPmark written out in float64 for one position: π sorts the tokens by their
    keyed hash, the π-ordered CDF F is reweighted to g(F) = max(F − α, 0) + max(F − (1 − α), 0), and the
    token is drawn from the reweighted distribution by inverse CDF at the private uniform u."""
    perm = np.argsort(order_hashes, kind="stable")
    cdf = np.cumsum(np.asarray(p, np.float64)[perm])
    g = np.maximum(cdf - alpha, 0.0) + np.maximum(cdf - (1.0 - alpha), 0.0)
    mass = np.diff(np.concatenate([[0.0], g]))
    return int(perm[np.searchsorted(np.cumsum(mass), u * mass.sum(), side="right")])


def test_keyed_permutation_decoders_are_pinned_by_golden_vectors():
    """Inverse transform's tokens are pinned; DiPmark's equal the published rule written out in NumPy at
    every (context, private uniform) and depend on the private uniform (not degenerate), and both read
    lanes of their own (PRF v2), not Gumbel-max's token lane."""
    from wmspec_jax import prf_numpy as pn

    p = np.array([0.3, 0.05, 0.2, 0.15, 0.1, 0.12, 0.08], np.float32)
    gold = np.arange(48).reshape(12, 4)
    seeds = prf.context_seeds(prf.stream_keys(b"wmspec-golden")[prf.Stream.TARGET], gold)
    weights = jnp.broadcast_to(p, (12, 7))
    inverse = np.asarray(INVERSE.watermark_index(weights, None, seeds)).tolist()
    assert inverse == [2, 3, 0, 2, 2, 1, 6, 0, 4, 5, 4, 2]
    # Kuditipudi et al.'s rule written out: the π-ordered CDF's interval that holds u
    order = pn.hash_values(np.asarray(seeds)[:, None, :], np.arange(7), prf.Lane.INVERSE_ORDER)
    u = pn.position_uniforms(np.asarray(seeds)).astype(np.float64)
    assert inverse == [dipmark_reference(p, order[i], 0.0, u[i]) for i in range(12)]  # α = 0: no reweighting
    dip = decoders.WatermarkDecoder("dipmark", alpha=0.45)
    hashes = pn.hash_values(np.asarray(seeds)[:, None, :], np.arange(7), prf.Lane.DIPMARK_ORDER)
    tokens = {}
    for u in (0.0517, 0.3791, 0.9413):  # off every boundary of these two-decimal CDFs
        got = np.asarray(dip.watermark_index(weights, None, seeds, jnp.full(12, u, jnp.float32))).tolist()
        assert got == [dipmark_reference(p, hashes[i], 0.45, u) for i in range(12)], u
        tokens[u] = got
    assert tokens[0.0517] != tokens[0.9413]  # the private uniform moves the token
    with pytest.raises(ValueError, match="private randomness"):
        dip.watermark_index(weights, None, seeds)
    # the order is not Gumbel-max's: its token lane's order gives other tokens
    v1 = pn.hash_values(np.asarray(seeds)[:, None, :], np.arange(7), prf.Lane.TOKEN_UNIFORM)
    assert [dipmark_reference(p, v1[i], 0.45, 0.3791) for i in range(12)] != tokens[0.3791]


def test_trade_off_zeta_and_generation_agree(seeds):
    """The Monte Carlo's ζ (vocab_zeta) and S(P, ζ) give the generation path's token (inverse transform)
    and an unbiased distribution (DiPmark)."""
    p = jnp.asarray(P6)
    z = INVERSE.vocab_zeta(seeds[:3000], P6.size)
    assert z.shape == (3000, P6.size + 1)
    gen = INVERSE.watermark_index(jnp.broadcast_to(p, (3000, P6.size)), None, seeds[:3000])
    assert np.array_equal(np.asarray(INVERSE.point(p, z)), np.asarray(gen))
    assert np.array_equal(np.asarray(INVERSE.apply(p, z)).argmax(-1), np.asarray(gen))
    out = np.asarray(DIPMARK.apply(p, DIPMARK.vocab_zeta(seeds, P6.size)))
    for w in range(P6.size):
        stats.assert_mean_close(out[:, w], P6[w], f"DiPmark E[P_π][{w}]")
    with pytest.raises(ValueError, match="not degenerate"):
        DIPMARK.point(p, DIPMARK.vocab_zeta(seeds[:4], P6.size))


def test_permutation_decoders_settings_and_names():
    assert INVERSE.degenerate and not DIPMARK.degenerate and not GAMMA.degenerate
    assert (INVERSE.num_layers, INVERSE.alpha) == (0, 0.0)
    assert GAMMA == decoders.WatermarkDecoder("dipmark", alpha=0.5) == decoders.WatermarkDecoder.from_name(
        "gamma_reweight")
    assert (GAMMA.kind, GAMMA.name, GAMMA.label) == ("dipmark", "gamma_reweight", "γ-reweight")
    assert (DIPMARK.name, DIPMARK.label) == ("dipmark_a0.3", "DiPmark(α=0.3)")
    assert decoders.WatermarkDecoder.from_name("dipmark").alpha == decoders.DEFAULT_DIPMARK_ALPHA
    assert {d.statistic for d in (INVERSE, DIPMARK, GAMMA)} == {"inverse_transform", "dipmark"}
    assert {d.family for d in (INVERSE, DIPMARK, GAMMA)} == {"gumbel"}
    assert decoders.WatermarkDecoder("synthid_limit", 5).statistic == "synthid"
    assert decoders.WatermarkDecoder("gumbel", alpha=0.3) == decoders.gumbel()  # α means nothing there
    for bad in (-0.1, 0.6, float("nan"), True):
        with pytest.raises(ValueError, match="alpha"):
            decoders.WatermarkDecoder("dipmark", alpha=bad)
    with pytest.raises(ValueError, match="order shape"):
        decoders.dipmark(P6, np.zeros(3, np.float32), 0.3)
    with pytest.raises(ValueError, match="alpha"):
        decoders.dipmark(P6, np.zeros(6, np.float32), 0.7)
    with pytest.raises(ValueError, match="uniform"):
        decoders.inverse_transform(P6, np.zeros(6, np.float32), 1.0)
    with pytest.raises(ValueError, match="sum to 1"):
        decoders.inverse_transform(P6 * 2, np.zeros(6, np.float32), 0.5)


KGW = decoders.WatermarkDecoder("kgw", gamma=0.25, delta=2.0)


def test_kgw_biases_a_fixed_size_green_list_and_is_pinned_by_a_golden_vector(seeds):
    """Exactly ⌊γV⌋ green tokens per position (transformers' ``int(V * greenlist_ratio)``), + δ on their raw
    logits, nothing at repeated contexts; the list is the first ⌊γV⌋ places of the keyed permutation, and
    over contexts every token is green with probability ⌊γV⌋ / V."""
    p = np.array([0.3, 0.05, 0.2, 0.15, 0.1, 0.12, 0.08], np.float32)
    gold = prf.context_seeds(prf.stream_keys(b"wmspec-golden")[prf.Stream.TARGET], np.arange(48).reshape(12, 4))
    z = jnp.log(jnp.broadcast_to(p, (12, 7)))
    biased = KGW.bias(z, gold, jnp.ones(12, bool))
    ranks = np.asarray(prf.vocab_keyed_permutation(gold, 7))
    green = ranks < 1  # ⌊0.25 · 7⌋ = 1
    assert green.sum(1).tolist() == [1] * 12
    assert np.argmax(green, 1).tolist() == [2, 5, 4, 3, 0, 2, 4, 1, 2, 5, 1, 2]
    assert np.allclose(np.asarray(biased - z), 2.0 * green)  # + δ on exactly the green tokens
    assert np.array_equal(np.asarray(KGW.bias(z, gold, jnp.zeros(12, bool))), np.asarray(z))  # repeated
    # the bias comes before temperature: at T = 2 the green tokens' odds grow by e^(δ/2)
    tempered = decoders.process_logits(biased, 2.0)
    plain = decoders.process_logits(z, 2.0)
    odds = np.asarray((tempered - plain) - (tempered - plain)[:, :1])
    assert np.allclose(odds, (green.astype(np.float32) - green[:, :1]) * 1.0, atol=1e-5)
    # the public function is the same distribution at T = 1
    dense = decoders.kgw(np.broadcast_to(p, (12, 7)), ranks, KGW.gamma, KGW.delta)
    assert np.allclose(np.asarray(dense), np.asarray(jax.nn.softmax(biased, axis=-1)), atol=1e-6)
    with pytest.raises(ValueError, match="private randomness"):
        KGW.watermark_index(jax.nn.softmax(biased, axis=-1), None, gold)
    g = np.asarray(prf.first_in_permutation(seeds[:20_000], 10, decoders.green_list_size(0.35, 10)))
    assert g.sum(1).tolist() == [3] * 20_000
    stats.assert_counts_match(g.sum(0), np.full(10, 0.1), "KGW green token over contexts")


def test_kgw_settings_and_names():
    assert KGW.biased and not KGW.degenerate and KGW.family == KGW.statistic == "kgw"
    assert (KGW.name, KGW.label) == ("kgw_g0.25_d2", "KGW(γ=0.25, δ=2)")
    assert decoders.WatermarkDecoder.from_name("kgw", gamma=0.5, delta=1.0) == decoders.kgw_decoder(0.5, 1.0)
    assert not decoders.gumbel().biased and decoders.gumbel().gamma == 0.0
    for bad in (dict(gamma=0.0), dict(gamma=1.0), dict(delta=-1.0), dict(delta=float("inf")), dict(gamma=True)):
        with pytest.raises(ValueError, match="KGW needs"):
            decoders.WatermarkDecoder("kgw", **bad)
    with pytest.raises(ValueError, match="biased"):
        KGW.vocab_zeta(prf.context_seeds(prf.stream_keys(b"x")[0], np.zeros((2, 1))), 5)
    with pytest.raises(ValueError, match="ranks shape"):
        decoders.kgw(P6, np.zeros(3, np.int32), 0.25, 2.0)
    with pytest.raises(ValueError, match="permutation"):
        decoders.kgw(P6, np.zeros(6, np.int32), 0.25, 2.0)
    with pytest.raises(ValueError, match="between 1 and V − 1"):
        decoders.green_list_size(0.1, 5)
    assert decoders.green_list_size(0.25, 49152) == 12288 and decoders.green_list_size(0.5, 7) == 3
