"""Metrics against brute-force definitions; save/load of every detector kind."""

import json

import jax
import numpy as np
import pytest
from scipy import stats as sps

import wmspec_jax.detect as det
from tests.detect import conftest as c
from wmspec_jax import prf
from wmspec_jax.detect import metrics


def test_tpr_at_fpr_threshold_from_negatives():
    rng = np.random.default_rng(0)
    for n_neg in (50, 100, 1000, 1234):
        neg = np.round(rng.normal(size=n_neg), 1)  # ties
        pos = np.round(rng.normal(1.0, size=300), 1)
        for fpr in (0.01, 0.05, 0.2):
            tpr, thr = metrics.tpr_at_fpr(pos, neg, fpr)
            assert np.mean(neg > thr) <= fpr + 1e-12  # the empirical FPR never exceeds the target
            assert tpr == pytest.approx(np.mean(pos > thr))
            # the threshold is the smallest observed negative score with that guarantee
            smaller = neg[neg < thr]
            if smaller.size:
                assert np.mean(neg > smaller.max()) > fpr


def test_roc_and_auc_against_pairwise_definitions():
    rng = np.random.default_rng(1)
    pos = np.round(rng.normal(0.7, size=200), 1)
    neg = np.round(rng.normal(size=300), 1)
    brute = np.mean(pos[:, None] > neg[None]) + 0.5 * np.mean(pos[:, None] == neg[None])
    assert metrics.auc(pos, neg) == pytest.approx(brute)
    fpr, tpr, thr = metrics.roc_curve(pos, neg)
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    assert (np.diff(fpr) >= 0).all() and (np.diff(tpr) >= 0).all()
    for k in range(1, len(thr), 7):
        assert tpr[k] == pytest.approx(np.mean(pos >= thr[k])) and fpr[k] == pytest.approx(np.mean(neg >= thr[k]))
    assert np.trapezoid(tpr, fpr) == pytest.approx(brute)


def test_bootstrap_intervals():
    rng = np.random.default_rng(2)
    pos, neg = rng.normal(2.0, size=500), rng.normal(size=2000)
    est = metrics.bootstrap_tpr_at_fpr(pos, neg, 0.01, jax.random.key(0), num_resamples=500)
    assert est.lower <= est.value <= est.upper and 0 < est.upper - est.lower < 0.3
    same = metrics.bootstrap_tpr_at_fpr(pos, neg, 0.01, jax.random.key(0), num_resamples=500)
    assert same == est  # reproducible given the key
    # p-value based TPR: a binomial proportion; its bootstrap CI is close to Clopper-Pearson
    lp = np.log(rng.random(4000)) - 2.0 * rng.random(4000)
    est = metrics.bootstrap_tpr_at_alpha(lp, 0.05, jax.random.key(1), num_resamples=2000)
    cp = metrics.clopper_pearson(int(np.sum(lp <= np.log(0.05))), lp.size)
    assert est.value == pytest.approx(cp.value)
    assert abs(est.lower - cp.lower) < 0.005 and abs(est.upper - cp.upper) < 0.005
    a = metrics.bootstrap_auc(pos[:100], neg[:100], jax.random.key(2), num_resamples=100)
    assert a.lower <= a.value <= a.upper


def test_tpr_by_length_and_paired_comparison():
    rng = np.random.default_rng(3)
    neg = [rng.normal(size=1000) for _ in range(3)]
    pos = [rng.normal(mu, size=800) for mu in (0.5, 1.5, 3.0)]
    curve = metrics.tpr_by_length(pos, neg, fpr=0.01, rng=jax.random.key(0), num_resamples=200)
    assert curve[0].value < curve[1].value < curve[2].value
    a = np.array([True] * 30 + [False] * 70)
    b = np.array([True] * 10 + [False] * 90)
    cmp = metrics.paired_comparison(a, b)
    assert (cmp.only_a, cmp.only_b) == (20, 0)
    assert cmp.p_a_better == pytest.approx(sps.binom.sf(19, 20, 0.5)) and cmp.p_b_better == 1.0


def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        metrics.auc(np.array([1.0, np.nan]), np.array([0.0]))
    with pytest.raises(ValueError, match="non-empty"):
        metrics.tpr_at_fpr(np.array([]), np.array([0.0]), 0.01)
    with pytest.raises(ValueError, match="FPR"):
        metrics.tpr_at_fpr(np.array([1.0]), np.array([0.0]), 1.5)


# ---------------------------------------------------------------------------
# Save / load
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_stats(gumbel_pos):
    """Watermarked toy-pair generations (shared session fixture; compiled shapes are reused)."""
    run = gumbel_pos[0]
    rec = det.records_from_generation(run.result)
    st = det.gumbel_statistics(rec.tokens, run.keys, lengths=rec.lengths, starts=rec.starts, vocab_size=c.VOCAB)
    return st, rec.source


def test_gumbel_detectors_save_and_load(tmp_path, toy_stats):
    st, src = toy_stats
    for detector in (det.fit_ars_tau(st), det.ars_prior_detector(0.4), det.fit_soft(st, src)):
        path = det.save_detector(tmp_path / detector.kind, detector)
        loaded = det.load_detector(path)
        assert loaded.kind == detector.kind and loaded.config == json.loads(json.dumps(detector.config))
        for k, v in detector.params.items():
            np.testing.assert_array_equal(loaded.params[k], v)
        a = det.score(detector, st)
        b = det.score(loaded, st)
        np.testing.assert_array_equal(np.asarray(a.log_pvalue), np.asarray(b.log_pvalue))
        # the archive holds no key material
        with np.load(path) as data:
            assert set(data.files) == {"__meta__"} | {f"param:{k}" for k in detector.params}


def test_save_refuses_keys_and_load_checks_the_version(tmp_path):
    bad = det.ArsPrior(det.Provenance("gumbel"), 0.5, info={"key": prf.WatermarkKey("s")})
    with pytest.raises(TypeError, match="key material"):
        det.save_detector(tmp_path / "bad", bad)
    path = det.save_detector(tmp_path / "old", det.ars_prior_detector(0.5))
    with np.load(path) as data:
        meta = json.loads(bytes(data["__meta__"]).decode())
    meta["config"]["prf_version"] = "wmspec-prf-v0"
    np.savez(tmp_path / "old.npz", __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(ValueError, match="PRF"):
        det.load_detector(tmp_path / "old.npz")
    np.savez(tmp_path / "junk.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a wmspec detector"):
        det.load_detector(tmp_path / "junk.npz")


def test_mean_ci_matches_t_interval():
    x = np.random.default_rng(0).normal(size=50)
    m, h = metrics.mean_ci(x)
    lo, hi = sps.t.interval(0.95, 49, loc=x.mean(), scale=sps.sem(x))
    assert np.isclose(m, x.mean()) and np.isclose(h, (hi - lo) / 2)
    assert np.isnan(metrics.mean_ci([])[0]) and np.isnan(metrics.mean_ci([1.0])[1])
