"""Detectors as typed objects: the registry (names, make, errors), one ``score`` for all, save / load of
every kind (files written before the objects existed too), per-text Ars-Prior keys (batch invariance)."""

import dataclasses
import json

import jax
import numpy as np
import pytest

import wmspec_jax.detect as det
from wmspec_jax import keys, prf

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
        d = det.make(name, st.provenance)
        assert isinstance(d, det.Detector) and d.decoder == e.decoder and det.registry.name_of(d) == name
        sc = d.score(st, source=src, rng=jax.random.key(0))
        assert sc.score.shape == (5,) and (np.asarray(sc.num_scored) > 0).all()
        assert np.isfinite(np.asarray(sc.log_pvalue)).all() == d.calibrated
        np.testing.assert_array_equal(np.asarray(det.score(d, st, source=src, rng=jax.random.key(0)).score),
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
    objects = [det.make(n, by_family[det.registry.entry(n).decoder].provenance)
               for n in det.registry.names(buildable=True)]
    objects += [det.fit_ars_tau(gs), det.fit_soft(gs, src), det.fit_soft(gs, src).with_oracle(), bayes]
    assert {d.kind for d in objects} == set(det.registry.CLASSES)
    for i, d in enumerate(objects):
        st = by_family[d.decoder]
        loaded = det.load_detector(det.save_detector(tmp_path / f"d{i}", d))
        assert type(loaded) is type(d) and loaded.config == json.loads(json.dumps(d.config))
        assert loaded.provenance == d.provenance and det.registry.name_of(loaded) == det.registry.name_of(d)
        a = d.score(st, source=src, rng=jax.random.key(1))
        b = loaded.score(st, source=src, rng=jax.random.key(1))
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
    assert isinstance(prior, det.ArsPrior) and prior.draft_fraction == pytest.approx(0.3) and prior.seed == 0
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


def test_ars_prior_with_per_text_keys_is_batch_invariant():
    """A text's Ars-Prior coins depend on its key and positions only: alone or in a batch, padded or not."""
    rng = np.random.default_rng(2)
    toks = rng.integers(0, V, (6, 40)).astype(np.int32)
    lengths = np.array([40, 33, 25, 40, 12, 30])
    k = keys.text_keys(SECRET, range(6))
    st = det.gumbel_statistics(toks, k, vocab_size=V, lengths=lengths)
    d = det.ArsPrior(st.provenance, 0.4)
    full = d.score(st, rng=det.text_rngs(7, range(6)))
    for i in (1, 4):  # each shape compiles anew: two texts shorter than the batch width
        alone = det.gumbel_statistics(toks[i:i + 1, : lengths[i]], k[i:i + 1], vocab_size=V)
        one = d.score(alone, rng=det.text_rngs(7, [i]))
        assert float(one.log_pvalue[0]) == float(full.log_pvalue[i])
    other = d.score(st, rng=det.text_rngs(8, range(6)))
    assert not np.array_equal(np.asarray(other.score), np.asarray(full.score))
    with pytest.raises(ValueError, match="one per text"):
        d.score(st, rng=det.text_rngs(7, range(5)))
    # without keys: jax.random.key(seed), reproducible
    np.testing.assert_array_equal(np.asarray(d.score(st).score), np.asarray(d.score(st).score))
    assert dataclasses.replace(d, seed=3).config["seed"] == 3
