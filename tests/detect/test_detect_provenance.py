"""Provenance of statistics and detectors: scoring refuses a mismatch (h, decoder, m, PRF, key) with a
clear error; saved detectors carry it and never any secret-derived material; bad inputs of the
fitting functions are errors."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wmspec_jax.detect as det
from wmspec_jax import keys, prf

V = 20
SECRET = keys.Secret("provenance-test-secret")


@pytest.fixture(scope="module")
def texts():
    return np.random.default_rng(0).integers(0, V, size=(6, 24)).astype(np.int32)


def test_statistics_record_settings_and_key_fingerprint(texts):
    k = keys.text_keys(SECRET, range(6), run="r")
    st = det.gumbel_statistics(texts, k, vocab_size=V, context_width=3)
    assert st.provenance == det.Provenance("gumbel", 0, 3, prf.PRF_VERSION, SECRET.fingerprint, keys.KEY_DERIVATION)
    assert det.gumbel_statistics(texts, k, vocab_size=V, siblings=2).provenance.siblings == 2
    # a provenance saved before multi-draft statistics existed is one chain's
    old = {k_: v for k_, v in st.provenance.to_dict().items() if k_ != "siblings"}
    assert det.Provenance.from_dict(old) == st.provenance and st.provenance.siblings == 1
    sy = det.synthid_statistics(texts, k, 5, vocab_size=V)
    assert (sy.provenance.decoder, sy.provenance.num_layers, sy.provenance.context_width) == ("synthid", 5, 4)
    # kept through take / truncate / concat; jitted code sees arrays only (one compilation for any key)
    assert det.take(st, [1, 2]).provenance == st.provenance == det.truncate(st, 5).provenance
    other = det.gumbel_statistics(texts, keys.text_keys("x", range(6)), vocab_size=V, context_width=3)
    merged = det.streams.concat([st, other]).provenance
    assert merged.key_fingerprint is None and merged.context_width == 3
    with pytest.raises(det.ProvenanceMismatch, match="context_width"):
        det.streams.concat([st, det.gumbel_statistics(texts, k, vocab_size=V)])


def test_scoring_refuses_statistics_of_other_settings_or_keys(texts):
    k = keys.text_keys(SECRET, range(6))
    st = det.gumbel_statistics(texts, k, vocab_size=V)
    src = np.where(np.asarray(st.mask), 0, -1).astype(np.int8)
    detectors = [det.fit_ars_tau(st), det.fit_soft(st, src), det.ars_prior_detector(0.3, provenance=st.provenance)]
    mismatches = {
        "context_width": det.gumbel_statistics(texts, k, vocab_size=V, context_width=3),
        "another secret": det.gumbel_statistics(texts, keys.text_keys("other", range(6)), vocab_size=V),
        "key_derivation": det.gumbel_statistics(texts, SECRET, vocab_size=V),
        "siblings": det.gumbel_statistics(texts, k, vocab_size=V, siblings=3),  # multi-draft texts
    }
    for d in detectors:
        det.score(d, st)
        for what, bad in mismatches.items():
            with pytest.raises(det.ProvenanceMismatch, match=what):
                det.score(d, bad)
    with pytest.raises(det.ProvenanceMismatch, match="context_width"):
        det.score_soft(detectors[1], mismatches["context_width"])
    # statistics from raw stream words have an unknown key: only the settings are checked
    det.score(detectors[0], det.gumbel_statistics(texts, np.asarray(k), vocab_size=V))
    with pytest.raises(det.ProvenanceMismatch, match="h=4"):
        det.fit_ars_tau(st, context_width=3)


def test_synthid_detectors_check_m_and_the_key(texts):
    k = keys.text_keys(SECRET, range(6))
    sy = det.synthid_statistics(texts, k, 4, vocab_size=V)
    cfg = det.BayesConfig("prior", 4)
    data = det.make_dataset(det.take(sy, [0, 1, 2]), det.take(sy, [3, 4, 5]))
    assert data.provenance == sy.provenance
    d, _ = det.train_bayes(cfg, data, data, det.TrainConfig(epochs=2, batch_size=6, l2_grid=(0.0,)))
    assert d.provenance == sy.provenance
    det.score(d, sy)
    with pytest.raises(det.ProvenanceMismatch, match="another secret"):
        det.score(d, det.synthid_statistics(texts, keys.text_keys("other", range(6)), 4, vocab_size=V))
    with pytest.raises(det.ProvenanceMismatch, match="num_layers: statistics 5, detector 4"):
        det.score(d, det.synthid_statistics(texts, k, 5, vocab_size=V))
    with pytest.raises(det.ProvenanceMismatch, match="context_width"):
        det.score(d, det.synthid_statistics(texts, k, 4, vocab_size=V, context_width=2))


def test_saved_detectors_carry_provenance_and_no_key_material(tmp_path, texts):
    k = keys.text_keys(SECRET, range(6))
    st = det.gumbel_statistics(texts, k, vocab_size=V)
    tau = det.fit_ars_tau(st)
    path = det.save_detector(tmp_path / "tau", tau)
    loaded = det.load_detector(path)
    assert loaded.provenance == tau.provenance and loaded.provenance.key_fingerprint == SECRET.fingerprint
    raw = open(path, "rb").read()
    for w in np.asarray(k).reshape(-1, 2):  # no stream key words (as bytes) in the archive
        assert w.astype("<u4").tobytes() not in raw
    for bad in (SECRET, k, prf.WatermarkKey("s"), b"secret-bytes", np.asarray(k), jnp.asarray(np.asarray(k)),
                jax.random.key(0), [1, keys.Secret("in-a-list")]):
        with pytest.raises(TypeError, match="key|not JSON"):
            det.save_detector(tmp_path / "bad", dataclasses.replace(tau, info={"extra": bad}))
    for bad in (np.asarray(k), jax.random.key(0), np.array([1, 2], np.uint32)):
        with pytest.raises(TypeError, match="key"):
            det.save_detector(tmp_path / "bad", dataclasses.replace(tau, taus=bad))
    assert not list(tmp_path.glob("bad*"))  # nothing written, not even a temporary file


def test_load_detector_errors_are_clear(tmp_path, texts):
    (tmp_path / "notes.txt").write_text("not a detector")
    with pytest.raises(ValueError, match="not a wmspec detector archive") as e:
        det.load_detector(tmp_path / "notes.txt")
    assert "allow_pickle" not in str(e.value)
    np.save(tmp_path / "array.npy", np.zeros(3))
    with pytest.raises(ValueError, match="not a wmspec detector archive"):
        det.load_detector(tmp_path / "array.npy")
    # a v1 archive (before provenance) loads with an unknown key, its MLP converted to the TauMLP layout
    cfg = det.BayesConfig("mlp", 3, mlp_hidden=(4, 5))
    v1_config = {"prf_version": prf.PRF_VERSION, "context_width": 4, "decoder": "synthid", **cfg.to_dict()}
    v1_config.pop("mixture")
    meta = {"format": "wmspec-detector-v1", "kind": "bayes", "config": v1_config}
    arrays = {"param:mlp/#0/w": np.ones((6, 4), np.float32), "param:mlp/#0/b": np.zeros(4, np.float32),
              "param:mlp/#1/w": np.ones((4, 5), np.float32), "param:mlp/#1/b": np.zeros(5, np.float32),
              "param:mlp/#2/w": np.ones((5, 1), np.float32), "param:mlp/#2/b": np.zeros(1, np.float32)}
    for s in ("draft", "target"):
        arrays[f"param:{s}/beta"] = np.zeros(3, np.float32)
        arrays[f"param:{s}/delta"] = np.zeros((3, 3), np.float32)
    np.savez(tmp_path / "v1.npz", __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    old = det.load_detector(tmp_path / "v1.npz")
    assert old.provenance.key_fingerprint is None and set(old.params["mlp"]) == {"hidden1", "hidden2", "output"}
    sy = det.synthid_statistics(texts, keys.text_keys(SECRET, range(6)), 3, vocab_size=V)
    assert np.isfinite(np.asarray(det.score(old, sy).score)).all()


def test_fitting_on_nothing_scored_is_an_error(texts):
    short = det.gumbel_statistics(texts[:, :4], "k", vocab_size=V)  # no position after the first h = 4
    assert not np.asarray(short.mask).any()
    with pytest.raises(ValueError, match="no scored token in the positives"):
        det.fit_ars_tau(short)
    with pytest.raises(ValueError, match="no scored"):
        det.fit_soft(short, np.zeros(short.mask.shape, np.int8))
    ok = det.gumbel_statistics(texts, "k", vocab_size=V)
    with pytest.raises(ValueError, match="no scored token in the negatives"):
        det.fit_ars_tau(ok, negatives=short)
