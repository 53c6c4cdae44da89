"""Experiment runs under a mesh (``pairs.load_pair(mesh=)`` + ``runs.generate_run``) and the
per-process results files of a multi-process run (``runs.open_generations`` / ``merge_generations``).

The 8-device run needs XLA_FLAGS before jax starts, so it runs in a subprocess
(tests/multidevice.py).
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.multidevice import run_on_devices, xla_flags_with_devices
from wmspec_jax import storage
from wmspec_jax.lab import runs
from wmspec_jax.models import pairs

SCRIPT = textwrap.dedent(
    """
    import json, os, pathlib, sys, jax, numpy as np
    from tests.models.test_checkpoints import CFG, WORDS, write_checkpoint
    from wmspec_jax import sharding
    from wmspec_jax.lab import runs
    from wmspec_jax.models import pairs
    assert jax.device_count() == 8
    root = pathlib.Path(sys.argv[1])
    # 4 query / 2 kv heads, MLP 24 units, vocabulary 40: split over model=2 (kv heads replicated on 4).
    cfg = CFG.replace(num_heads=4, num_kv_heads=2, hidden_size=32)
    write_checkpoint(root / "target", cfg, words=WORDS)
    write_checkpoint(root / "draft", cfg.replace(num_layers=1), seed=1, words=WORDS)
    prompts = np.random.default_rng(0).integers(1, 40, (6, 5)).astype(np.int32)
    lengths = np.array([5, 3, 4, 5, 2, 4], np.int32)
    out = {}
    for spec in ("", "data=2,model=4"):
        mesh = sharding.make_mesh(spec) if spec else None
        pair = pairs.load_pair(str(root / "target"), str(root / "draft"), mesh=mesh)
        d = root / ("out-" + (spec or "one"))
        with runs.open_generations(str(d)) as store:
            recs = []
            for method in ("pseudorandom",):
                run = runs.RunSpec(method, "gumbel", 2, 0.7)
                recs += runs.generate_run(run, pair, prompts, lengths, store, secret="s", seed=0,
                                          max_new_tokens=6, batch_size=4)
        out[spec or "one"] = {
            "tokens": [r["tokens"] for r in recs], "source": [r["source"] for r in recs],
            "logppl": [r["logppl"] for r in recs],
            "wq": list(pair.target_params["layers"][0]["wq"].sharding.spec) if mesh else None,
            "files": sorted(os.listdir(d)),
        }
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def sharded_report(tmp_path_factory):
    return run_on_devices(SCRIPT, 8, tmp_path_factory.mktemp("sharded_runs"))


def test_runs_under_a_mesh_write_the_same_records_as_one_device(sharded_report):
    ref = sharded_report["one"]
    assert len(ref["tokens"]) == 6 and any(len(t) > 1 for t in ref["tokens"])
    for spec in ("data=2,model=4",):
        got = sharded_report[spec]
        assert got["tokens"] == ref["tokens"] and got["source"] == ref["source"], spec
        # log-perplexities come from split contractions: equal up to float32 reassociation
        np.testing.assert_allclose(got["logppl"], ref["logppl"], atol=1e-5)
        assert "model" in got["wq"], got["wq"]  # the weights really are split
        assert got["files"] == ref["files"] == [".lock", "generations.jsonl"]


def _records(prefix, indices):
    return [{"id": f"{prefix}/{i}", "run": prefix, "index": i} for i in indices]


def test_each_process_writes_its_own_file_and_all_agree_on_what_is_done(tmp_path):
    d = str(tmp_path)
    # Process 0 and 1 of one run: each writes its rows, knows the other's rows.
    p0 = runs.open_generations(d, process_index=0, process_count=2)
    p1 = runs.open_generations(d, process_index=1, process_count=2)  # its own lock: no refusal
    p0.add(_records("r", [0, 1]))
    p0.note(_records("r", [2, 3]))
    p1.add(_records("r", [2, 3]))
    p1.note(_records("r", [0, 1]))
    assert set(os.listdir(d)) == {".lock.0", ".lock.1", "generations.0.jsonl", "generations.1.jsonl"}
    assert sorted(p0.records) == sorted(p1.records) == ["r/0", "r/1", "r/2", "r/3"]
    assert runs.merge_generations(p0, d) == 4
    assert runs.merge_generations(p0, d) == 0  # appends only what is missing
    p0.close(), p1.close()
    with open(os.path.join(d, "generations.jsonl")) as f:
        assert [json.loads(line)["id"] for line in f] == ["r/0", "r/1", "r/2", "r/3"]

    # A resumed multi-process run sees every shard (a process's own file may be gone).
    os.remove(os.path.join(d, "generations.0.jsonl"))
    again = runs.open_generations(d, process_index=0, process_count=2)
    assert sorted(again.records) == ["r/0", "r/1", "r/2", "r/3"] and not again.path.exists()
    again.close()


def test_a_single_process_resume_after_a_multi_process_run_merges_the_shards(tmp_path):
    d = str(tmp_path)
    with runs.open_generations(d, 0, 2) as p0, runs.open_generations(d, 1, 2) as p1:
        p0.add(_records("r", [0]))
        p1.add(_records("r", [1]))
    store = runs.open_generations(d)  # one process: generations.jsonl, the directory lock
    assert sorted(store.records) == ["r/0", "r/1"] and store.noted == {"r/0", "r/1"}
    assert runs.merge_generations(store, d) == 2 and not store.noted
    store.close()
    assert sorted(runs.open_generations(d).records) == ["r/0", "r/1"]


def test_batch_size_must_split_evenly_over_the_data_axis():
    from wmspec_jax import sharding

    pair = pairs.load_pair("toy", "toy", mesh=sharding.make_mesh("data=1,model=1"))
    prompts, lengths = np.ones((2, 3), np.int32), np.full(2, 3, np.int32)
    store = storage.JsonlStore.__new__(storage.JsonlStore)  # never written: the check comes first
    store.records, store.noted = {}, set()

    class Mesh:  # a 2-way data axis without forcing 2 devices in this process
        shape = {"data": 2, "model": 1}

    with pytest.raises(ValueError, match="multiple of the mesh's data axis"):
        runs.generate_run(runs.RunSpec("standard", "gumbel", 2, 0.7), dataclasses.replace(pair, mesh=Mesh()),
                          prompts, lengths, store, secret="s", seed=0, max_new_tokens=4, batch_size=3)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_write_their_shards_and_merge_into_the_single_process_records(tmp_path):
    """A real multi-process run (jax.distributed on CPU, one device per process, --mesh=data=2) of
    experiments/speculative.py: each process writes its rows to its own file, process 0 alone writes the
    shared outputs and merges; the records equal a single-process run's."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = ["-m", "experiments.speculative"]
    args = ["--target=toy", "--draft=toy", "--num_prompts=4", "--batch_size=2", "--lookaheads=2",
            "--max_new_tokens=8", "--synthid_layers=4"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", WMSPEC_SECRET="multi-process-test")
    env["XLA_FLAGS"] = xla_flags_with_devices(None)
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, *script, *args, "--mesh=data=2", f"--output_dir={tmp_path / 'multi'}"],
                              cwd=root,
                              env=dict(env, JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                                       JAX_PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    single = subprocess.run([sys.executable, *script, *args, f"--output_dir={tmp_path / 'single'}"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=root)
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert single.returncode == 0, single.stderr[-2000:]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]

    def records(path):
        with open(path) as f:
            return {r["id"]: (r["tokens"], r["source"]) for r in map(json.loads, f)}

    multi = tmp_path / "multi"
    shards = [records(multi / f"generations.{i}.jsonl") for i in range(2)]
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])
    # Each batch of 2 rows is split over data=2: process i holds row i of every batch.
    assert {int(k.split("/")[1]) for k in shards[0]} == {0, 2}
    merged = records(multi / "generations.jsonl")
    assert merged == {**shards[0], **shards[1]} == records(tmp_path / "single" / "generations.jsonl")
    assert (multi / "speculative.json").exists() and sorted(p.name for p in multi.glob(".lock*")) == [".lock.0",
                                                                                                     ".lock.1"]


def test_mesh_setting_is_checked_when_built():
    from wmspec_jax import lab as experiment

    with pytest.raises(ValueError, match="--mesh"):
        experiment.Settings(mesh="data=2,tensor=4")
    with pytest.raises(ValueError, match="multiple of the mesh's data axis"):
        experiment.Settings(mesh="data=3", batch_size=8)
    assert experiment.Settings(mesh="data=2,model=4").mesh == "data=2,model=4"
