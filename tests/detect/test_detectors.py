"""Detectors as typed objects: the registry (names, make, errors), one ``score`` for all, save / load of
every kind (files written before the objects existed too), Ars-Prior's keyed coins (deterministic, exact
null, frequency p among accepted drafts)."""

import dataclasses
import json

import jax
import numpy as np
import pytest

import wmspec_jax.detect as det
from wmspec_jax import keys, prf, sampling

V = 24
SECRET = keys.Secret("detectors-test")


@pytest.fixture(scope="module")
def stats():
    toks = np.random.default_rng(0).integers(0, V, (5, 30)).astype(np.int32)
    k = keys.text_keys(SECRET, range(5), run="r")
    return (det.gumbel_statistics(toks, k, vocab_size=V), det.synthid_statistics(toks, k, 4, vocab_size=V),
            np.where(np.arange(30)[None] >= 4, np.arange(30)[None] % 3, -1).repeat(5, 0).astype(np.int8))


@pytest.fixture(scope="module")
def by_family(stats):
    """The statistics each family of detectors scores: Gumbel-max's, SynthID's, KGW's."""
    from wmspec_jax import decoders

    gs, ss, _ = stats
    toks = np.random.default_rng(0).integers(0, V, (5, 30)).astype(np.int32)
    ks = det.statistics(decoders.WatermarkDecoder("kgw"), toks, keys.text_keys(SECRET, range(5), run="r"),
                        vocab_size=V)
    return {"gumbel": gs, "synthid": ss, "kgw": ks}


def test_every_key_only_name_builds_a_detector_that_scores(stats, by_family):
    gs, ss, src = stats
    for name in det.registry.names(buildable=True):
        e = det.registry.entry(name)
        st = by_family[e.decoder]
        d = det.make(name, st.provenance, **({"vocab_size": V} if "vocab_size" in e.options else {}))
        assert isinstance(d, det.Detector) and d.decoder == e.decoder and det.registry.name_of(d) == name
        sc = d.score(st, source=src)
        assert sc.score.shape == (5,) and (np.asarray(sc.num_scored) > 0).all()
        assert np.isfinite(np.asarray(sc.log_pvalue)).all() == d.calibrated
        np.testing.assert_array_equal(np.asarray(det.score(d, st, source=src).score),
                                      np.asarray(sc.score))
    # the same tests as the functions of the package
    np.testing.assert_array_equal(np.asarray(det.make("ars-tau", gs.provenance, tau=0.3).score(gs).log_pvalue),
                                  np.asarray(det.score_ars_tau(gs, 0.3).log_pvalue))
    np.testing.assert_array_equal(np.asarray(det.make("oracle", gs.provenance).score(gs, source=src).log_pvalue),
                                  np.asarray(det.score_oracle(gs, src).log_pvalue))
    np.testing.assert_array_equal(np.asarray(det.make("synthid-mean", ss.provenance).score(ss).log_pvalue),
                                  np.asarray(det.mean_test(det.synthid.both_g(ss), ss.mask).log_pvalue))
    assert det.DEFAULTS == {"gumbel": "ars-prior", "synthid": "synthid-mean", "kgw": "kgw-green"}


def test_registry_errors_are_clear(stats):
    gs, ss, _ = stats
    with pytest.raises(ValueError, match="unknown detector 'nope'"):
        det.make("nope", gs.provenance)
    with pytest.raises(ValueError, match="fitted on training data"):
        det.make("bayes-mlp", ss.provenance)
    with pytest.raises(ValueError, match="gumbel detector; the statistics are synthid"):
        det.make("ars-tau", ss.provenance)
    with pytest.raises(ValueError, match="takes options"):
        det.make("single", gs.provenance, tau=0.5)
    with pytest.raises(ValueError, match="tau must lie"):
        det.make("ars-tau", gs.provenance, tau=1.5)
    with pytest.raises(ValueError, match="needs the token sources"):
        det.make("oracle", gs.provenance).score(gs)
    with pytest.raises(TypeError, match="GumbelStats"):
        det.make("single", gs.provenance).score(ss)
    with pytest.raises(det.ProvenanceMismatch, match="another secret"):
        other = det.gumbel_statistics(np.asarray(gs.mask, np.int32) + 1, keys.text_keys("x", range(5), run="r"),
                                      vocab_size=V)
        det.make("single", gs.provenance).score(other)
    with pytest.raises(TypeError, match="detector object"):
        det.score(("ars_tau", {}), gs)


def test_every_kind_saves_and_loads_as_its_typed_object(tmp_path, stats, by_family):
    gs, ss, src = stats
    data = det.make_dataset(det.take(ss, [0, 1, 2]), det.take(ss, [3, 4]))
    bayes, _ = det.train_bayes(det.BayesConfig("mlp", 4, mlp_hidden=(4, 4)), data, data,
                               det.TrainConfig(epochs=2, batch_size=5, l2_grid=(0.0,)))
    objects = [det.make(n, by_family[det.registry.entry(n).decoder].provenance,
                        **({"vocab_size": V} if "vocab_size" in det.registry.entry(n).options else {}))
               for n in det.registry.names(buildable=True)]
    objects += [det.fit_ars_tau(gs), det.fit_soft(gs, src), det.fit_soft(gs, src).with_oracle(), bayes]
    assert {d.kind for d in objects} == set(det.registry.CLASSES)
    for i, d in enumerate(objects):
        st = by_family[d.decoder]
        loaded = det.load_detector(det.save_detector(tmp_path / f"d{i}", d))
        assert type(loaded) is type(d) and loaded.config == json.loads(json.dumps(d.config))
        assert loaded.provenance == d.provenance and det.registry.name_of(loaded) == det.registry.name_of(d)
        a = d.score(st, source=src)
        b = loaded.score(st, source=src)
        np.testing.assert_array_equal(np.asarray(a.score), np.asarray(b.score))


def _write_v2(path, kind, config, arrays):
    meta = {"format": "wmspec-detector-v2", "kind": kind, "config": config}
    np.savez(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             **{f"param:{k}": v for k, v in arrays.items()})
    return path


def test_files_written_before_the_typed_objects_still_load(tmp_path, stats):
    """``wmspec-detector-v2`` files as the dict-based ``Detector(kind, config, params)`` wrote them."""
    gs, ss, _ = stats
    prov = gs.provenance.to_dict()
    base = {"prf_version": prf.PRF_VERSION, "context_width": 4, "decoder": "gumbel", "provenance": prov}
    tau = det.load_detector(_write_v2(tmp_path / "tau.npz", "ars_tau",
                                      {**base, "tau": 0.37, "target_fpr": 0.01, "calibration": "exact-null"},
                                      {"taus": np.linspace(0, 1, 3, dtype=np.float32),
                                       "train_tpr": np.ones(3, np.float32)}))
    assert isinstance(tau, det.ArsTau) and tau.tau == pytest.approx(0.37) and tau.calibration == "exact-null"
    np.testing.assert_array_equal(np.asarray(tau.score(gs).log_pvalue), np.asarray(det.score_ars_tau(gs, 0.37).log_pvalue))
    prior = det.load_detector(_write_v2(tmp_path / "prior.npz", "ars_prior", {**base, "draft_fraction": 0.3}, {}))
    assert isinstance(prior, det.ArsPrior) and prior.draft_fraction == pytest.approx(0.3)
    # files of the random coins saved their seed: they load, the seed is dropped (the coins are keyed)
    seeded = det.load_detector(_write_v2(tmp_path / "seeded.npz", "ars_prior",
                                         {**base, "draft_fraction": 0.3, "seed": 7}, {}))
    assert isinstance(seeded, det.ArsPrior) and "seed" not in seeded.settings() and "seed" not in seeded.config
    np.testing.assert_array_equal(np.asarray(seeded.score(gs).score), np.asarray(prior.score(gs).score))
    cfg = det.BayesConfig("prior", 4)
    sconf = {"prf_version": prf.PRF_VERSION, "context_width": 4, "decoder": "synthid",
             "provenance": ss.provenance.to_dict(), **{k: v for k, v in cfg.to_dict().items() if k != "context_width"},
             "l2": 0.01, "best_epoch": 3, "val_tpr": 0.5, "target_fpr": 0.01}
    arrays = {f"{s}/{p}": np.zeros((4,) if p == "beta" else (4, 4), np.float32) for s in ("draft", "target")
              for p in ("beta", "delta")}
    bayes = det.load_detector(_write_v2(tmp_path / "bayes.npz", "bayes", sconf, arrays))
    assert isinstance(bayes, det.Bayes) and bayes.bayes_config == cfg and bayes.info["l2"] == 0.01
    assert bayes.config == json.loads(json.dumps(sconf))
    assert np.isfinite(np.asarray(bayes.score(ss).score)).all()


# ---------------------------------------------------------------------------
# Ars-Prior's keyed coins
# ---------------------------------------------------------------------------


def _prior_texts():
    rng = np.random.default_rng(2)
    toks = rng.integers(0, V, (6, 40)).astype(np.int32)
    lengths = np.array([40, 33, 25, 40, 12, 30])
    return toks, lengths, keys.text_keys(SECRET, range(6))


def test_ars_prior_coins_are_a_function_of_key_and_tokens():
    """A text's Ars-Prior score is the same bit for bit alone, in a batch (any row), padded, and with
    tokens appended after the scored ones; its coins at a position do not depend on anything else."""
    toks, lengths, k = _prior_texts()
    st = det.gumbel_statistics(toks, k, vocab_size=V, lengths=lengths)
    d = det.make("ars-prior", st.provenance, draft_fraction=0.4)
    full = d.score(st)
    coins = np.asarray(d.choose_draft(st, None))
    for i in (1, 4):  # each shape compiles anew: two texts shorter than the batch width
        alone = det.gumbel_statistics(toks[i:i + 1, : lengths[i]], k[i:i + 1], vocab_size=V)
        one = d.score(alone)
        assert float(one.log_pvalue[0]) == float(full.log_pvalue[i]) and float(one.score[0]) == float(full.score[i])
        np.testing.assert_array_equal(np.asarray(d.choose_draft(alone, None))[0], coins[i, : lengths[i]])
    # the rows in reverse order, padded wider
    wide = np.zeros((6, 64), np.int32)
    wide[:, :40] = toks[::-1]
    moved = d.score(det.gumbel_statistics(wide, k[::-1], vocab_size=V, lengths=lengths[::-1]))
    np.testing.assert_array_equal(np.asarray(moved.score)[::-1], np.asarray(full.score))
    np.testing.assert_array_equal(np.asarray(moved.log_pvalue)[::-1], np.asarray(full.log_pvalue))
    # tokens appended after the scored ones change nothing before them (a trailing newline, say)
    longer = np.concatenate([toks[4:5, :12], np.array([[3, 1, 4, 1, 5]], np.int32)], axis=1)
    grown = det.gumbel_statistics(longer, k[4:5], vocab_size=V)
    n = int(full.num_scored[4])
    cut = d.score(det.truncate(grown, n))
    assert int(cut.num_scored[0]) == n and float(cut.log_pvalue[0]) == float(full.log_pvalue[4])
    np.testing.assert_array_equal(np.asarray(d.choose_draft(grown, None))[0, :12], coins[4, :12])


def test_ars_prior_coins_change_with_the_secret():
    toks, lengths, k = _prior_texts()
    st = det.gumbel_statistics(toks, k, vocab_size=V, lengths=lengths)
    other = det.gumbel_statistics(toks, keys.text_keys(keys.Secret("another-secret"), range(6)), vocab_size=V,
                                  lengths=lengths)
    d = det.ArsPrior(st.provenance, 0.4)
    mask = np.asarray(st.mask)
    a = np.asarray(d.choose_draft(st, None))[mask]
    b = np.asarray(dataclasses.replace(d, provenance=other.provenance).choose_draft(other, None))[mask]
    # independent Bernoulli(0.4) coins disagree at 48 % of the ~170 scored positions; 25 % is 6.5 SD below
    assert np.mean(a != b) > 0.25


def test_ars_prior_has_no_seed_to_draw_again():
    """A ``jax.random`` key, passed the ways the random coins took it, changes nothing (a
    DeprecationWarning says it is ignored); the detector has no seed field or option."""
    from wmspec_jax.detect import windows

    toks, lengths, k = _prior_texts()
    st = det.gumbel_statistics(toks, k, vocab_size=V, lengths=lengths)
    d = det.make("ars-prior", st.provenance, draft_fraction=0.4)
    base = np.asarray(d.score(st).log_pvalue)
    assert "seed" not in det.registry.entry("ars-prior").options and "keyed" in det.registry.entry("ars-prior").summary
    assert "seed" not in d.config
    with pytest.raises(TypeError):
        det.ArsPrior(st.provenance, 0.4, seed=3)
    for rng in (jax.random.key(0), jax.random.key(1), sampling.text_rngs(7, range(6)), sampling.text_rngs(8, range(6))):
        with pytest.warns(DeprecationWarning, match="rng is ignored"):
            np.testing.assert_array_equal(np.asarray(d.score(st, rng=rng).log_pvalue), base)
        with pytest.warns(DeprecationWarning, match="rng is ignored"):
            np.testing.assert_array_equal(np.asarray(det.score(d, st, rng=rng).log_pvalue), base)
        with pytest.warns(DeprecationWarning, match="rng is ignored"):
            np.testing.assert_array_equal(np.asarray(windows.score_windows(d, st, rng=rng).log_pvalue),
                                          np.asarray(windows.score_windows(d, st).log_pvalue))
        with pytest.warns(DeprecationWarning, match="rng is ignored"):
            np.testing.assert_array_equal(np.asarray(det.score_ars_prior(st, 0.4, rng).log_pvalue), base)
    with pytest.raises(ValueError, match="takes options"):  # no seed option to set
        det.make("ars-prior", st.provenance, draft_fraction=0.4, seed=5)
    assert all(n == "ars-prior" or "random" not in det.registry.entry(n).summary for n in det.DEFAULTS.values())


def test_ars_prior_null_is_exact_with_keyed_coins():
    """Under H0 (i.i.d. random tokens, each text under its own key) Ars-Prior's p-values are U(0, 1)
    (KS) and its coins come up 1 for a share p of the scored tokens (binomial); each check fails a
    correct implementation with probability 1e-6 (``tests/stats.py``).

    Mutations: coins that read the y's (y^D iff y^D > y^T) fail the KS test; coins taken as u < p
    (the threshold Ars-τ applies) pass both checks here — they are still a function of u alone —
    and fail :func:`test_ars_prior_coins_have_frequency_p_among_accepted_drafts`.
    """
    from tests import stats as st_tests

    from tests.detect import conftest as c

    n_texts, length, vocab = c.BATCH, c.PROMPT_LEN + c.GUMBEL_NEW, 1000  # the toy texts' shape: compiled once
    toks = np.random.default_rng(11).integers(0, vocab, (n_texts, length)).astype(np.int32)
    st = det.gumbel_statistics(toks, keys.text_keys(keys.Secret("prior-null"), range(n_texts), run="null"),
                               vocab_size=vocab)
    assert (np.asarray(st.mask).sum(axis=1) > 0).all()
    for p in (0.3, 0.7):
        d = det.ArsPrior(st.provenance, p)
        st_tests.assert_uniform(np.asarray(d.score(st).pvalue), f"Ars-Prior p-values under H0 (p={p})")
        coins = np.asarray(d.choose_draft(st, None))[np.asarray(st.mask)]
        st_tests.assert_binomial_rate(int(coins.sum()), coins.size, p, f"Ars-Prior coins under H0 (p={p})")


def test_ars_prior_coins_have_frequency_p_among_accepted_drafts(gumbel_pos):
    """On watermarked Alg. 1 texts of the toy pair the coins are 1 for a share p of the accepted draft
    tokens and of the other scored tokens (binomial tests at 1e-6), as random coins are: the keyed coins
    do not follow u's magnitude. Mutation: coins u < p come up 1 for about 60 % of the accepted drafts
    at p = 0.3 (they have u below their acceptance ratio) and fail."""
    from tests import stats as st_tests
    from tests.detect import conftest as c

    run = gumbel_pos[0]
    rec = det.records_from_generation(run.result)
    st = det.gumbel_statistics(rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
    mask = np.asarray(st.mask)
    draft = mask & (rec.source == det.streams.SOURCE_DRAFT)
    assert draft.sum() > 10000 and (mask & ~draft).sum() > 10000
    p = 0.3
    coins = np.asarray(det.ArsPrior(st.provenance, p).choose_draft(st, None))
    st_tests.assert_binomial_rate(int(coins[draft].sum()), int(draft.sum()), p, "coins of accepted draft tokens")
    st_tests.assert_binomial_rate(int(coins[mask & ~draft].sum()), int((mask & ~draft).sum()), p,
                                  "coins of the other scored tokens")
