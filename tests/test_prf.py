"""Pseudorandom streams: exact bits, key handling, and statistical quality."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import stats
from wmspec_jax import prf
from wmspec_jax import prf_numpy as pn

GOLDEN_KEY = b"wmspec-golden"
GOLDEN_CONTEXTS = np.array([[1, 2, 3, 4], [-1, -1, -1, 7], [49151, 0, 0, 1]])
GOLDEN_TOKENS = np.array([0, 1, 2, 49151])
# Pinned output of PRF_VERSION "wmspec-prf-v1". If these change, detection of
# all previously watermarked text breaks: bump the version instead.
GOLDEN = {
    "keys": [[3600149705, 3315004881], [2507446515, 2534671331], [3677042966, 1137743407]],
    "seeds": [[3988846879, 3660143206], [3152621715, 262584233], [536100201, 2212230511]],
    "token_values": [
        [3519178722, 1655718911, 4215445746, 2748739296],
        [675304455, 2432315161, 3465155301, 3000056512],
        [2896764407, 1773449021, 599745929, 362265715],
    ],
    "position_values": [2073221919, 3530871618, 1977359629],
    "gbit_values_token5": [1955174933, 1352081967, 3487922742],
}


def test_version_is_public():
    assert prf.PRF_VERSION == "wmspec-prf-v2" and prf.PRF_VERSIONS == ("wmspec-prf-v1", "wmspec-prf-v2")
    assert prf.DEFAULT_CONTEXT_WIDTH == 4
    # v2 left the key words and Gumbel-max's and SynthID's values as they were (GOLDEN is v1's)
    assert prf.same_construction("gumbel", "wmspec-prf-v1") == prf.PRF_VERSION
    assert prf.same_construction("kgw", "wmspec-prf-v1") == "wmspec-prf-v1"
    with pytest.raises(ValueError, match="wmspec-prf-v0"):
        prf.check_prf_version("wmspec-prf-v0")


# Pinned v2 values: KGW's keyed permutation of a 1000-token vocabulary at the golden draft seeds.
GOLDEN_PERMUTATION_FIRST8 = [[907, 835, 582, 726, 699, 985, 300, 31], [703, 682, 529, 244, 678, 657, 990, 367],
                             [47, 880, 922, 265, 905, 267, 564, 629]]


def test_keyed_permutation_is_a_pinned_bijection_of_every_vocabulary_size():
    seeds = pn.context_seeds(prf.stream_keys(GOLDEN_KEY)[prf.Stream.DRAFT], GOLDEN_CONTEXTS)
    perm = np.asarray(prf.keyed_permutation(jnp.asarray(seeds)[:, None, :], jnp.arange(1000), 1000))
    assert perm[:, :8].tolist() == GOLDEN_PERMUTATION_FIRST8
    assert np.array_equal(perm, pn.keyed_permutation(seeds[:, None, :], np.arange(1000), 1000))
    assert np.array_equal(perm, np.asarray(prf.vocab_keyed_permutation(jnp.asarray(seeds), 1000)))
    for v, k in ((2, 1), (5, 4), (1025, 256)):  # 1025: one past the block size of the one-token form
        p = np.asarray(prf.keyed_permutation(jnp.asarray(seeds)[:, None, :], jnp.arange(v), v))
        assert all(sorted(row) == list(range(v)) for row in p.tolist()), v
        assert np.array_equal(p, np.asarray(prf.vocab_keyed_permutation(jnp.asarray(seeds), v)))
        # the green-list form: exactly the first k places
        assert np.array_equal(np.asarray(prf.first_in_permutation(jnp.asarray(seeds), v, k)), p < k), (v, k)
    # one token's place needs the whole vocabulary's hashes but returns one value per token
    one = prf.keyed_permutation(jnp.asarray(seeds), jnp.asarray([17, 999, 3]), 1000)
    assert np.asarray(one).tolist() == perm[np.arange(3), [17, 999, 3]].tolist()


def test_keyed_permutation_places_tokens_uniformly(random_contexts):
    """Over contexts, the places (π(3), π(7)) in a vocabulary of 10 are uniform over the 90 ordered pairs
    (chi-square), so a green list of k tokens is uniform over the k-subsets."""
    seeds = prf.context_seeds(prf.stream_keys(b"perm")[prf.Stream.TARGET], random_contexts)
    places = np.asarray(prf.keyed_permutation(seeds[:, None, :], jnp.asarray([3, 7]), 10))
    assert (places[:, 0] != places[:, 1]).all()
    pairs = np.bincount(places[:, 0] * 10 + places[:, 1], minlength=100)
    stats.assert_counts_match(pairs[np.arange(100) // 10 != np.arange(100) % 10], np.full(90, 1 / 90),
                              "(π(3), π(7))")


def test_lanes_never_collide_below_a_hundred_million_tokens():
    """value(token, lane) hashes token * A + lane * B: distinct (token, lane) pairs give distinct inputs
    for every vocabulary below 1.3e8, so the schemes' lanes are separate streams."""
    a_inv = pow(prf._MUL_TOKEN, -1, 2**32)
    lanes = sorted({int(x) for x in prf.Lane} | {prf.Lane.GBITS + b for b in range(8)})
    gaps = [min(d, 2**32 - d) for i in lanes for j in lanes if i < j
            for d in [((j - i) * prf._MUL_LANE * a_inv) % 2**32]]
    assert min(gaps) > 1.3e8


def test_golden_vectors_numpy_and_jax_bit_exact():
    keys = prf.stream_keys(GOLDEN_KEY)
    assert keys.dtype == np.uint32 and keys.tolist() == GOLDEN["keys"]
    draft_key = keys[prf.Stream.DRAFT]
    seeds_np = pn.context_seeds(draft_key, GOLDEN_CONTEXTS)
    seeds_jx = np.asarray(jax.jit(prf.context_seeds)(draft_key, GOLDEN_CONTEXTS))
    assert seeds_np.tolist() == GOLDEN["seeds"] and seeds_jx.tolist() == GOLDEN["seeds"]

    vals_np = pn.hash_values(seeds_np[:, None, :], GOLDEN_TOKENS, prf.Lane.TOKEN_UNIFORM)
    vals_jx = prf.hash_values(jnp.asarray(seeds_np)[:, None, :], GOLDEN_TOKENS, prf.Lane.TOKEN_UNIFORM)
    assert vals_np.tolist() == GOLDEN["token_values"]
    assert np.asarray(vals_jx).tolist() == GOLDEN["token_values"]

    pos = pn.hash_values(seeds_np, 0, prf.Lane.POSITION_UNIFORM)
    assert pos.tolist() == GOLDEN["position_values"]
    assert np.asarray(prf.hash_values(seeds_np, 0, prf.Lane.POSITION_UNIFORM)).tolist() == GOLDEN["position_values"]
    assert pn.hash_values(seeds_np, 5, prf.Lane.GBITS).tolist() == GOLDEN["gbit_values_token5"]

    # Derived values agree bit for bit too (uniform conversion, bits, vocab form).
    u_np = pn.token_uniforms(seeds_np[:, None, :], np.arange(50))
    u_jx = np.asarray(prf.vocab_uniforms(jnp.asarray(seeds_np), 50))
    assert u_np.tobytes() == u_jx.tobytes()
    g_np = pn.token_gbits(seeds_np[:, None, :], np.arange(50), 40)
    g_jx = np.asarray(prf.vocab_gbits(jnp.asarray(seeds_np), 50, 40))
    assert np.array_equal(np.swapaxes(g_np, -1, -2), g_jx)
    assert np.array_equal(pn.position_uniforms(seeds_np), np.asarray(prf.position_uniforms(seeds_np)))


def test_one_token_costs_one_hash_and_matches_vocab_vector():
    keys = prf.stream_keys(3)[prf.Stream.TARGET]
    seeds = prf.context_seeds(keys, np.array([[5, 6, 7, 8], [1, 1, 1, 1]]))
    full = prf.vocab_uniforms(seeds, 1000)
    tokens = np.array([17, 999])
    picked = prf.token_uniforms(seeds, tokens)
    assert np.array_equal(np.asarray(picked), np.asarray(full)[np.arange(2), tokens])
    gfull = prf.vocab_gbits(seeds, 1000, 30)
    gpicked = prf.token_gbits(seeds, tokens, 30)
    assert np.array_equal(np.asarray(gpicked), np.asarray(gfull)[np.arange(2), :, tokens])
    # the token form never materialises a vocabulary-sized array
    jaxpr = jax.make_jaxpr(lambda s, t: prf.token_uniforms(s, t))(seeds, tokens)
    shapes = [v.aval.shape for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars]
    assert shapes and all(1000 not in shape for shape in shapes)


def test_uniforms_in_open_interval_and_exact_float32():
    extremes = np.array([0, 255, 256, 2**32 - 1, 2**31], dtype=np.uint32)
    u = np.asarray(prf.to_uniform(extremes))
    assert (u > 0).all() and (u < 1).all()
    assert u[0] == 2.0**-24 and u[3] == 1 - 2.0**-24
    assert np.isfinite(np.log1p(-u)).all()


def test_key_types_and_errors():
    a, b, c = prf.stream_keys(1), prf.stream_keys("1"), prf.stream_keys(b"1")
    assert not np.array_equal(a, b) and not np.array_equal(b, c) and not np.array_equal(a, c)
    assert np.array_equal(prf.stream_keys(np.int64(12)), prf.stream_keys(12))
    assert np.array_equal(prf.stream_keys(bytearray(b"k")), prf.stream_keys(b"k"))
    # the streams of one master key are distinct
    k = prf.stream_keys("master")
    assert len({tuple(row) for row in k.tolist()}) == prf.NUM_STREAMS
    batch = prf.stream_keys([1, 2, 3])
    assert batch.shape == (3, prf.NUM_STREAMS, 2)
    for bad in (1.5, None, True, [b"x", 2.0]):
        with pytest.raises(TypeError, match="watermark key"):
            prf.stream_keys(bad)
    with pytest.raises(TypeError, match="true-randomness"):
        prf.stream_keys(jax.random.key(0))
    with pytest.raises(ValueError, match="non-negative"):
        prf.stream_keys(-3)
    with pytest.raises(ValueError, match="empty"):
        prf.stream_keys([])
    with pytest.raises(ValueError, match="context width"):
        prf.check_context_width(0)
    with pytest.raises(ValueError, match="shape"):
        prf.check_stream_keys(np.zeros((3, 3), np.uint32))
    with pytest.raises(TypeError, match="uint32"):
        prf.check_stream_keys(np.zeros((3, 2), np.int32))


def test_key_is_never_shown_or_pickled():
    import pickle

    key = prf.WatermarkKey("hunter2-secret")
    assert "hunter2" not in repr(key) and "hunter2" not in str(key)
    with pytest.raises(TypeError, match="never store"):
        pickle.dumps(key)


def test_gather_contexts_pads_before_start():
    tokens = jnp.array([[10, 11, 12, 13, 14]])
    ctx = prf.gather_contexts(tokens, jnp.array([[0, 1, 4]]), 3)
    assert ctx.tolist() == [[[-1, -1, -1], [-1, -1, 10], [11, 12, 13]]]


# ---------------------------------------------------------------------------
# Statistical quality
# ---------------------------------------------------------------------------

N_CONTEXTS = 4000


@pytest.fixture(scope="module")
def random_contexts():
    rng = np.random.default_rng(0)
    return rng.integers(0, 50_000, size=(N_CONTEXTS, 4))


@pytest.fixture(scope="module")
def stream_seeds(random_contexts):
    keys = prf.stream_keys(b"stat-key")
    return {s: prf.context_seeds(keys[s], random_contexts) for s in prf.Stream}


def test_uniforms_are_uniform(stream_seeds):
    u = prf.vocab_uniforms(stream_seeds[prf.Stream.DRAFT], 64)  # 256k values
    stats.assert_uniform(u, "token uniforms")
    stats.assert_uniform(prf.position_uniforms(stream_seeds[prf.Stream.ACCEPT]), "acceptance uniforms")


def test_independent_across_streams(stream_seeds):
    d = prf.vocab_uniforms(stream_seeds[prf.Stream.DRAFT], 25)
    t = prf.vocab_uniforms(stream_seeds[prf.Stream.TARGET], 25)
    stats.assert_independent_uniforms(d, t, "draft vs target stream")
    a = prf.position_uniforms(stream_seeds[prf.Stream.ACCEPT])
    stats.assert_independent_uniforms(d[:, 0], a, "draft vs accept stream")
    stats.assert_independent_uniforms(t[:, 3], a, "target vs accept stream")


def test_independent_across_tokens_and_lanes(stream_seeds):
    u = prf.vocab_uniforms(stream_seeds[prf.Stream.TARGET], 41)
    stats.assert_independent_uniforms(u[:, :-1], u[:, 1:], "neighbouring tokens")
    pos = prf.position_uniforms(stream_seeds[prf.Stream.TARGET])
    stats.assert_independent_uniforms(u[:, 0], pos, "token lane vs position lane")


def test_independent_across_neighbouring_contexts(random_contexts):
    keys = prf.stream_keys(b"stat-key")[prf.Stream.DRAFT]
    shifted = random_contexts.copy()
    shifted[:, -1] += 1  # differ in one token by one
    older = random_contexts.copy()
    older[:, 0] ^= 1  # differ in the oldest token's lowest bit
    u = prf.vocab_uniforms(prf.context_seeds(keys, random_contexts), 20)
    stats.assert_independent_uniforms(u, prf.vocab_uniforms(prf.context_seeds(keys, shifted), 20), "ctx +1")
    stats.assert_independent_uniforms(u, prf.vocab_uniforms(prf.context_seeds(keys, older), 20), "ctx oldest bit")


def test_independent_across_keys(random_contexts):
    k1 = prf.stream_keys(1)[prf.Stream.DRAFT]
    k2 = prf.stream_keys(2)[prf.Stream.DRAFT]
    u1 = prf.vocab_uniforms(prf.context_seeds(k1, random_contexts), 20)
    u2 = prf.vocab_uniforms(prf.context_seeds(k2, random_contexts), 20)
    stats.assert_independent_uniforms(u1, u2, "keys 1 vs 2")


def test_gbits_fair_and_independent_across_layers(stream_seeds):
    g = np.asarray(prf.vocab_gbits(stream_seeds[prf.Stream.DRAFT], 25, 40)).astype(np.float64)  # [N, 40, 25]
    # SynthID-style check: mean 0.5 within a z-bound per layer (n = 1e5 each)
    layer_means = g.mean(axis=(0, 2))
    n = g.shape[0] * g.shape[2]
    assert np.all(np.abs(layer_means - 0.5) < stats.Z * 0.5 / np.sqrt(n) + 0.0), layer_means
    # independence of consecutive layers (incl. across the 32-bit hash block)
    # and of neighbouring tokens: uniform over the 4 joint outcomes
    for a, b, what in ((g[:, :-1, :], g[:, 1:, :], "layers"), (g[:, :, :-1], g[:, :, 1:], "tokens")):
        joint = (a * 2 + b).astype(int).ravel()
        stats.assert_counts_match(np.bincount(joint, minlength=4), np.full(4, 0.25), f"g-bits across {what}")
