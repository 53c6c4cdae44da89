"""wmspec-detect --scheme_config: texts another engine watermarked, scored with that engine's pseudorandom
function and exact p-values; its configuration file is a secret like --secret_file."""

import json

import numpy as np
import pytest

from tests.cli_calls import lines, run_tool
from wmspec_jax.cli import detect as detect_cli
from wmspec_jax.cli.texts import load_tokenizer
from wmspec_jax.interop import engine_gumbel, hf_kgw
from wmspec_jax.textnorm import normalize_text

KEY = 987654321123
TEXTS, LENGTH, FIRST_ID, CANDIDATES = 24, 64, 100, 1000  # token ids 100..1099: no special tokens


def call(args):
    return run_tool(detect_cli, args, str(KEY))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("builtin")


def jsonl(path, tokenizer, texts) -> str:
    rows = [{"id": f"t{i}", "tokens": [int(t) for t in ids],
             "text": normalize_text(tokenizer.decode([int(t) for t in ids], skip_special_tokens=True))}
            for i, ids in enumerate(texts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def config_file(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def generate(sample, vocab: int, context_width: int, seed: int, pad: int = -1) -> np.ndarray:
    """TEXTS texts of LENGTH tokens from random logits over the candidate ids, one position at a time;
    ``sample(logits [B, vocab], contexts [B, context_width])`` draws the tokens (None: plain sampling);
    ``pad``: the context before the first token (vLLM: -1; a prompt token for transformers)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((TEXTS, LENGTH), np.int64)
    for t in range(LENGTH):
        logits = np.full((TEXTS, vocab), -np.inf, np.float32)
        logits[:, FIRST_ID:FIRST_ID + CANDIDATES] = 2.0 * rng.standard_normal((TEXTS, CANDIDATES), np.float32)
        ctx = np.full((TEXTS, context_width), pad, np.int64)
        take = min(t, context_width)
        if take:
            ctx[:, context_width - take:] = out[:, t - take:t]
        if sample is None:
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            out[:, t] = [rng.choice(vocab, p=row) for row in p]
        else:
            out[:, t] = sample(logits, ctx)
    return out


def verdicts(out: str) -> list:
    return [r["verdict"] for r in lines(out)]


def test_vllm_gumbel_texts_are_detected_with_the_engines_key_alone(tmp_path, tokenizer):
    config = {"algorithm": "gumbel", "key": KEY, "context_width": 4}
    cfg = engine_gumbel.config_from_dict(config)
    marked = generate(lambda logits, ctx: engine_gumbel.sample_tokens(cfg, logits, ctx), FIRST_ID + CANDIDATES, 4, 1)
    plain = generate(None, FIRST_ID + CANDIDATES, 4, 2)
    flag = f"--scheme_config={config_file(tmp_path / 'vllm.json', config)}"
    rc, out, err = call([jsonl(tmp_path / "marked.jsonl", tokenizer, marked), flag, "--format=json"])
    assert rc == 0, err
    res = lines(out)
    assert [r["id"] for r in res] == [f"t{i}" for i in range(TEXTS)]
    assert all(r["verdict"] == "watermarked" for r in res), [r["pvalue"] for r in res]
    first = res[0]
    assert first["scheme"]["name"] == "vllm/gumbel" and first["scheme"]["key_fingerprint"] == cfg.fingerprint
    assert "key" not in first["scheme"] and first["detector"]["name"] == "vllm/gumbel"
    # the p-value is the engine's exact Gamma tail of the printed score
    from scipy import stats as sstats

    assert first["log_pvalue"] == pytest.approx(sstats.gamma.logsf(first["score"], first["num_scored"]), rel=1e-6)
    rc, out, _ = call([jsonl(tmp_path / "plain.jsonl", tokenizer, plain), flag, "--format=json"])
    assert rc == 0 and verdicts(out).count("watermarked") <= 3  # P(Binomial(24, 0.01) > 3) = 1.6e-5
    wrong = f"--scheme_config={config_file(tmp_path / 'wrong.json', dict(config, key=KEY + 1))}"
    rc, out, _ = call([str(tmp_path / "marked.jsonl"), wrong, "--format=json"])
    assert rc == 0 and verdicts(out).count("watermarked") <= 3


def test_transformers_kgw_texts_are_detected_at_the_models_vocabulary(tmp_path, tokenizer):
    """KGW's green lists depend on the model's V: --model_vocab_size gives it when the tokenizer's differs."""
    vocab = FIRST_ID + CANDIDATES
    config = {"greenlist_ratio": 0.25, "bias": 2.0, "hashing_key": KEY % 2**31, "seeding_scheme": "lefthash",
              "context_width": 1}
    cfg = hf_kgw.HFKGWConfig.from_dict(config)
    private = np.random.default_rng(9)  # the engine's own sampling randomness
    marked = generate(lambda logits, ctx: np.argmax(np.asarray(hf_kgw.biased_logits(cfg, ctx, logits, vocab))
                                                    + private.gumbel(size=logits.shape), axis=1),
                      vocab, 1, 3, pad=FIRST_ID)
    flag = f"--scheme_config={config_file(tmp_path / 'kgw.json', config)}"
    path = jsonl(tmp_path / "kgw.jsonl", tokenizer, marked)
    rc, out, err = call([path, flag, f"--model_vocab_size={vocab}", "--format=json"])
    assert rc == 0, err
    res = lines(out)
    assert sum(r["verdict"] == "watermarked" for r in res) >= TEXTS - 2
    assert res[0]["scheme"]["name"] == "transformers/kgw-lefthash"
    rc, out, _ = call([path, flag, "--format=json"])  # the tokenizer's V: other green lists, no watermark
    assert rc == 0 and verdicts(out).count("watermarked") <= 3
    # the reverse direction: transformers' own WatermarkDetector flags the texts our reimplementation biased
    torch = pytest.importorskip("torch")
    import types

    from transformers import WatermarkDetector

    reference = WatermarkDetector(types.SimpleNamespace(bos_token_id=-1, is_encoder_decoder=False, vocab_size=vocab),
                                  "cpu", cfg.to_transformers_dict())
    with_context = np.concatenate([np.full((TEXTS, 1), FIRST_ID), marked], axis=1)
    verdict = reference(torch.as_tensor(with_context), return_dict=True)
    assert np.mean(np.asarray(verdict.prediction)) >= 0.9 and np.min(verdict.z_score) > 3.0


def test_a_scheme_config_is_checked_and_never_printed(tmp_path, tokenizer):
    text = jsonl(tmp_path / "t.jsonl", tokenizer, [[FIRST_ID + i for i in range(20)]])
    for bad, message in (({"algorithm": "unknown", "key": KEY}, "unsupported vLLM watermark algorithm"),
                         ({"foo": 1}, "names no engine"), ([1, 2], "JSON object")):
        rc, _, err = call([text, f"--scheme_config={config_file(tmp_path / 'bad.json', bad)}"])
        assert rc == 2 and message in err and str(KEY) not in err
    rc, _, err = call([text, f"--scheme_config={tmp_path / 'missing.json'}"])
    assert rc == 2 and "no such file" in err
    cfg = config_file(tmp_path / "vllm.json", {"algorithm": "gumbel", "key": KEY})
    rc, _, err = call([text, f"--scheme_config={cfg}", f"--output={cfg}"])  # never overwrites its key file
    assert rc == 2 and json.loads(open(cfg).read())["key"] == KEY
