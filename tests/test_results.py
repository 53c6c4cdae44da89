"""Result files: atomic writes, resumable JSONL (torn lines), confidence intervals."""

import json

import numpy as np
from scipy import stats as sstats

from wmspec_jax import results


def test_jsonl_store_resumes_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "runs" / "texts.jsonl"
    store = results.JsonlStore(path)
    store.add([{"id": 1, "x": np.float32(0.5)}, {"id": "b", "x": [1, 2]}])
    with open(path, "a") as f:
        f.write('{"id": 3, "x":')  # killed mid-write
    again = results.JsonlStore(path)
    assert len(again) == 2 and 1 in again and "b" in again and 3 not in again
    again.add([{"id": 3, "x": 1}])
    lines = path.read_text().splitlines()
    assert [json.loads(l)["id"] for l in lines] == [1, "b", 3]


def test_atomic_json(tmp_path):
    results.atomic_write_json(tmp_path / "a" / "s.json", {"v": np.arange(3), "f": np.float64(1.5)})
    assert json.loads((tmp_path / "a" / "s.json").read_text()) == {"v": [0, 1, 2], "f": 1.5}
    assert not list((tmp_path / "a").glob("*.tmp"))


def test_mean_ci_matches_t_interval():
    x = np.random.default_rng(0).normal(size=50)
    m, h = results.mean_ci(x)
    lo, hi = sstats.t.interval(0.95, 49, loc=x.mean(), scale=sstats.sem(x))
    assert np.isclose(m, x.mean()) and np.isclose(h, (hi - lo) / 2)
    assert np.isnan(results.mean_ci([])[0]) and np.isnan(results.mean_ci([1.0])[1])
