"""The robustness experiment on the toy pair: complete outputs, 0 % edits reproduce the detection
experiment's TPR, cells resume, the script runs (and resumes) and refuses bad flags before any work."""

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from wmspec_jax import keys
from wmspec_jax import lab as experiment
from wmspec_jax.lab import detection_rows, edits
from wmspec_jax.lab import robustness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "robustness-test-secret"
# The sizes of tests/test_lab.py's SMALL (and of the robustness notebook's small configuration): the
# generation and training programs compiled by one of them are reused by the others.
SMALL = experiment.Settings(target="toy", draft="toy", num_prompts=6, num_detection_texts=12, num_detection_train=5,
                            max_new_tokens=20, batch_size=4, detection_batch_size=6, lookaheads=(2,), detect_lookahead=2,
                            synthid_layers=4, tpr_lengths=(8, 20), num_resamples=50, max_prompt_tokens=128,
                            secret=SECRET)  # TPR at the full length: the zero-edit check compares there
RS = robustness.RobustnessSettings(rates=(0.0, 0.5), num_auc_resamples=30)
FLAGS = ["--target=toy", "--draft=toy", "--num_prompts=6", "--num_detection_texts=12", "--num_detection_train=5",
         "--max_new_tokens=20", "--batch_size=4", "--detection_batch_size=6", "--lookaheads=2", "--detect_lookahead=2",
         "--synthid_layers=4", "--tpr_lengths=8,20", "--num_resamples=50", "--max_prompt_tokens=128",
         "--edit_rates=0,0.5", "--num_auc_resamples=30"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("robustness"))
    with experiment.Session(SMALL, out) as session:
        summary = robustness.run_robustness(session, RS)
    return out, summary


def test_outputs_are_complete(run):
    out, summary = run
    for name in ("robustness.json", "robustness.csv", "robustness.md", "robustness.png", "robustness_streams.png",
                 "detection.json", "robustness_cells.jsonl"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    assert json.load(open(os.path.join(out, "robustness.json")))["cells"].keys() == summary["cells"].keys()
    assert len(summary["cells"]) == 2 * len(edits.EDITS) * len(RS.rates)
    for cid, cell in summary["cells"].items():
        dec = cell["decoder"]
        labels = summary["decoders"][dec]["detectors"]
        for set_name in robustness.SETS:
            res = cell["sets"][set_name]
            assert set(res["tpr"]) == set(labels) == set(res["auc"])
            for v, lo, hi in list(res["tpr"].values()) + list(res["auc"].values()):
                assert 0 <= lo <= v <= hi <= 1, (cid, set_name)
            assert set(res["evidence"]) == {"draft", "target", "accept_u", "intact_fraction", "scored_fraction"}
            assert set(res["orderings"]) == {f"{a} vs {b}" for a, b in robustness.ORDERINGS[dec]}
        assert set(cell["fpr"]) == set(summary["decoders"][dec]["calibrated"])
    # unedited texts keep every token in its context; half of them substituted, few survive
    assert summary["cells"]["gumbel/substitute/0"]["sets"]["alg1"]["evidence"]["intact_fraction"][0] == 1.0
    assert summary["cells"]["gumbel/substitute/0.5"]["sets"]["alg1"]["evidence"]["intact_fraction"][0] < 0.3
    # the acceptance-u evidence of Alg. 1 (u tells which stream produced a token) is there before editing
    ev = summary["cells"]["gumbel/substitute/0"]["sets"]["alg1"]["evidence"]
    assert ev["draft"][0] > 0 and ev["accept_u"][0] > 0
    assert "| substitute | 0.5 |" in open(os.path.join(out, "robustness.md")).read()


def test_zero_edits_reproduce_the_detection_experiment(run):
    _, summary = run
    check = summary["zero_edit_check"]
    assert check["compared"] and check["length"] == SMALL.max_new_tokens
    assert set(check["detectors"]) == {"Ars-tau", "Ars-Prior", "Oracle", "single (target stream)", "soft (ours)"}
    assert check["all_equal"], check


def test_the_script_resumes_and_validates_its_flags(run, tmp_path):
    out, summary = run
    env = dict(os.environ, PYTHONPATH=ROOT, **{keys.ENV_VAR: SECRET})
    script = ["-m", "experiments.robustness"]
    cells = open(os.path.join(out, robustness.CELLS), "rb").read()
    proc = subprocess.run([sys.executable, *script, f"--output_dir={out}"] + FLAGS, env=env, capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "robustness: 0 of 20 cells to compute" in proc.stdout and "identical TPR" in proc.stdout
    assert "compiled" not in proc.stdout  # nothing generated either
    assert "reusing detection.json" in proc.stdout  # nor the detectors fitted again
    assert open(os.path.join(out, robustness.CELLS), "rb").read() == cells
    again = json.load(open(os.path.join(out, "robustness.json")))
    assert again["cells"] == json.loads(json.dumps(summary["cells"]))
    assert SECRET not in proc.stdout + proc.stderr
    for bad, message in (("--edits=swap", "--edits must be"), ("--edit_rates=0,2", "--edit_rates must be"),
                         ("--reorder_span=0", "--reorder_span")):
        proc = subprocess.run([sys.executable, *script, f"--output_dir={tmp_path / 'x'}", bad] + FLAGS[:-2], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and message in proc.stderr, (bad, proc.stderr[-2000:])
        assert not (tmp_path / "x").exists()


def test_detection_is_reused_only_with_the_same_settings_and_detectors(run, tmp_path):
    out, _ = run
    pair = types.SimpleNamespace(name=json.load(open(os.path.join(out, "detection.json")))["pair"])
    session = lambda s, d=out: types.SimpleNamespace(output_dir=d, settings=s, pair=pair)  # noqa: E731
    assert robustness.saved_detection(session(SMALL)) is not None
    other = experiment.Settings(**{**{f: getattr(SMALL, f) for f in SMALL.__dataclass_fields__}, "num_resamples": 60})
    assert robustness.saved_detection(session(other)) is None
    assert robustness.saved_detection(session(SMALL, str(tmp_path))) is None
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "detection.json").write_bytes(open(os.path.join(out, "detection.json"), "rb").read())
    assert robustness.saved_detection(session(SMALL, str(copy))) is None  # no saved detectors


def test_edit_texts_keeps_the_prompt_and_carries_sources():
    tokens = np.array([[1, 2, 3, 10, 11, 12, 13, 0], [4, 5, 20, 21, 22, 23, 24, 25]], np.int32)
    texts = detection_rows.TextRows(
        tokens, lengths=np.array([7, 8]), starts=np.array([3, 2]),
        source=np.where(np.arange(8)[None] >= np.array([[3], [2]]), np.arange(8)[None] % 3, -1).astype(np.int8),
        candidate=np.zeros((2, 8), np.int8), keys=None, indices=np.array([0, 1]))
    out = robustness.edit_texts(texts, "delete", 0.5, seed=[0], width=20, vocab_size=30)
    assert out.tokens.shape == out.source.shape == out.candidate.shape == out.intact.shape == (2, 20)
    for row in range(2):
        start = texts.starts[row]
        np.testing.assert_array_equal(out.tokens[row, :start], tokens[row, :start])
        gen = out.tokens[row, start: out.lengths[row]]
        orig = list(tokens[row, start: texts.lengths[row]])
        assert all(t in orig for t in gen)
        for t, s in zip(gen, out.source[row, start: out.lengths[row]]):
            assert s == texts.source[row][list(tokens[row]).index(t)]
    with pytest.raises(ValueError, match="width"):
        robustness.edit_texts(texts, "insert", 1.0, seed=[0], width=9, vocab_size=30)
    with pytest.raises(ValueError, match="--edits"):
        robustness.RobustnessSettings(edits=("substitute", "substitute"))


def _round_trip_pair():
    """The toy pair with a tokenizer whose decode → encode round trip is exact (space-separated ids), as a
    real tokenizer's nearly is; other text (the human answers) is encoded as the toy pair does."""
    import dataclasses

    from wmspec_jax.models import pairs

    toy = pairs.load_pair("toy", "toy")

    def encode(text):
        words = text.split()
        return [int(w) for w in words] if words and all(w.isdigit() for w in words) else toy.encode_text(text)

    return dataclasses.replace(toy, encode_text=encode, decode=lambda ids: " ".join(str(int(i)) for i in ids))


def test_paraphrase_cells_with_stub_paraphrasers(run):
    from wmspec_jax.lab import paraphrase, paraphrase_robustness as pr

    out, _ = run
    reverse = lambda texts: [" ".join(t.split()[::-1]) for t in texts]  # noqa: E731
    with experiment.Session(SMALL, out, pair=_round_trip_pair()) as harness:
        same = pr.run_paraphrase(harness, paraphraser=paraphrase.identity_paraphraser, decoders=("gumbel",))
        changed = pr.run_paraphrase(harness, paraphraser=reverse, decoders=("gumbel",))
    for name in ("paraphrase.json", "paraphrase.csv", "paraphrase.md", pr.STORE):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    for method in ("alg1", "basic"):
        unedited = same["cells"][f"gumbel/{method}/unedited"]
        assert unedited["key-only"]["tpr"][0] > 0.5  # something to lose
        for cond in ("identity", "paraphrase", "substitution"):  # identity: 0 edits, 0 substitutions
            cell = same["cells"][f"gumbel/{method}/{cond}"]
            assert cell["measures"]["normalised"] == 0 and cell["measures"]["context_kept"] == 1
            assert all(cell[k] == unedited[k] for k in pr.KINDS), (method, cond)
        rev, sub = (changed["cells"][f"gumbel/{method}/{c}"] for c in ("paraphrase", "substitution"))
        assert rev["measures"]["normalised"] > 0.5 and rev["measures"]["context_kept"] < 0.2
        assert abs(sub["measures"]["normalised"] - rev["measures"]["normalised"]) < 0.1  # matched distance
        for kind in pr.KINDS:
            assert rev[kind]["tpr"][0] < unedited[kind]["tpr"][0] and rev[kind]["median_p"] > unedited[kind]["median_p"]
    assert "| Gumbel-max | Alg. 1 | paraphrase |" in open(os.path.join(out, "paraphrase.md")).read()


def test_the_model_paraphraser_samples_without_a_watermark_and_repeats_itself():
    from wmspec_jax.lab import paraphrase

    pair = _round_trip_pair()
    ps = paraphrase.ParaphraseSettings(max_new_tokens=6, batch_size=2, max_prompt_tokens=256)
    rewrite = paraphrase.model_paraphraser(pair, ps)
    texts = ["1 2 3 4", "5 6 7", "1 2 3 4"]
    out = rewrite(texts)
    assert len(out) == 3 and all(len(t.split()) == 6 for t in out)
    assert out[0] == out[2] and rewrite(texts[:1]) == out[:1]  # keyed by the text, not its row or batch
    assert "T = 0.7" in paraphrase.describe(rewrite)


def test_field_metrics_on_the_toy_pair(run):
    from wmspec_jax.lab import field_metrics as fm

    out, _ = run
    with experiment.Session(SMALL, out) as harness:
        res = fm.run_field_metrics(harness, fm.FieldSettings(null_keys=30, lengths=(8, 20)))
    for name in ("field_metrics.json", "field_metrics.csv", "field_metrics.md", "field_metrics.png"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    assert set(res["cells"]) == {f"{d}/{m}" for d in ("gumbel", "synthid") for m in ("alg1", "basic")}
    for cell in res["cells"].values():
        assert cell["path_check_max_error"] < 1e-3  # the running p-value at the end is the detector's
        assert len(cell["tokens_to_detect"]) == SMALL.num_detection_texts - SMALL.num_detection_train
        for alpha, curve in cell["curves"].items():
            assert [r["tokens"] for r in curve] == [8, 20] and curve[0]["null_scores"] == 30 * 7
            assert all(r["null_fpr"]["lower"] <= float(alpha) for r in curve)  # exact p-values stay calibrated
    gumbel = res["cells"]["gumbel/alg1"]
    assert gumbel["size"]["never_share"] == 0 and gumbel["curves"]["0.01"][-1]["tpr"]["value"] == 1.0
    assert secret_free(out)


def secret_free(out: str) -> bool:
    return all(SECRET not in open(os.path.join(out, f), errors="replace").read()
               for f in ("field_metrics.json", "paraphrase.json", "paraphrases.jsonl") if os.path.exists(os.path.join(out, f)))
