"""Parity of the JAX transformer with transformers' PyTorch Llama / Gemma models."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax.models import hf

from tiny_hf import TINY, make_torch_model

TOL = 1e-4


def torch_logits(model, ids: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(ids[None], dtype=torch.long)).logits[0].float().numpy()


def run_schedule(lm, params, seqs, chunks, capacity=32, seed=0):
    """Feeds each row's tokens in the given per-step chunk sizes (ragged across rows).

    Returns per-row lists of logits for the tokens actually fed. Tokens past
    num_new are random garbage, so any leakage of them would break parity.
    A step that feeds some row more than one token is as wide as the widest
    chunk: two shapes (decode, T = 1, and that width) compile per model
    instead of one per chunk size, and the narrower steps carry more garbage.
    """
    rng = np.random.default_rng(seed)
    batch = len(seqs)
    step = jax.jit(lm.step)
    cache = lm.init_cache(batch, capacity)
    fed = [0] * batch
    out = [[] for _ in range(batch)]
    width = max(max(sizes) for sizes in chunks)
    for sizes in chunks:
        t = 1 if max(sizes) <= 1 else width
        tokens = rng.integers(0, lm.vocab_size, size=(batch, t))
        for b, n in enumerate(sizes):
            tokens[b, :n] = seqs[b][fed[b]:fed[b] + n]
        logits, cache = step(params, cache, jnp.asarray(tokens, jnp.int32),
                             jnp.asarray(sizes, jnp.int32))
        logits = np.asarray(logits)
        assert np.isfinite(logits).all()
        for b, n in enumerate(sizes):
            out[b].append(logits[b, :n])
            fed[b] += n
        np.testing.assert_array_equal(np.asarray(lm.cache_lengths(cache)), fed)
    return [np.concatenate(o) for o in out]


# 256: the 32-slot cache is attended in one pass; 5: block by block (7 blocks, the last one
# shifted left to stay inside the cache), with the online softmax of attention.attend.
# out_in: the matrices stored [out, in] and multiplied weight-first (models.linear).
@pytest.mark.parametrize("block, layout", [(256, "in_out"), (5, "in_out"), (256, "out_in")])
@pytest.mark.parametrize("name", sorted(TINY))
def test_prefill_and_ragged_decode_match_transformers(tiny_checkpoints, name, block, layout):
    model, path = tiny_checkpoints[name]
    ckpt = hf.load_checkpoint(path, tokenizer=False).with_weight_layout(layout)
    assert ckpt.config.weight_layout == layout
    lm = ckpt.language_model(attention_block=block)
    rng = np.random.default_rng(1)
    lens = [11, 7, 9]
    seqs = [rng.integers(0, lm.vocab_size, size=n) for n in lens]
    # Prefill of different lengths (one row gets none), then ragged decoding:
    # 1 or 2 tokens at a time, sometimes 0 for a row.
    chunks = [(6, 3, 0), (1, 1, 4), (2, 0, 1), (1, 2, 2), (1, 1, 0), (0, 0, 2)]
    for b in range(3):
        left = lens[b] - sum(c[b] for c in chunks)
        assert left >= 0
        chunks.append(tuple(left if i == b else 0 for i in range(3)))
    ours = run_schedule(lm, ckpt.params, seqs, chunks)
    for b in range(3):
        ref = torch_logits(model, seqs[b])
        assert ref.std() > 0.3, "reference logits too flat for a meaningful comparison"
        assert ours[b].shape == ref.shape
        np.testing.assert_allclose(ours[b], ref, atol=TOL, rtol=0)


def test_sharded_checkpoint_loads_identically(tmp_path):
    model = make_torch_model(TINY["llama_gqa"], seed=3)
    model.save_pretrained(tmp_path / "single")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    a = hf.load_checkpoint(tmp_path / "single", tokenizer=False)
    b = hf.load_checkpoint(tmp_path / "sharded", tokenizer=False)
    assert a.config == b.config
    jax.tree_util.tree_map(np.testing.assert_array_equal, a.params, b.params)
    ids = np.arange(10) % a.config.vocab_size
    ours = run_schedule(b.language_model(), b.params, [ids], [(10,)])[0]
    np.testing.assert_allclose(ours, torch_logits(model, ids), atol=TOL, rtol=0)


def test_bfloat16_params_stay_close(tiny_checkpoints):
    model, path = tiny_checkpoints["gemma_mqa"]
    ckpt = hf.load_checkpoint(path, dtype=jnp.bfloat16, tokenizer=False)
    assert ckpt.params["layers"][0]["wq"].dtype == jnp.bfloat16
    ids = np.arange(12) * 5 % ckpt.config.vocab_size
    logits = run_schedule(ckpt.language_model(), ckpt.params, [ids], [(12,)])[0]
    assert logits.dtype == np.float32
    ref = torch_logits(model, ids)
    # bfloat16 has 8 mantissa bits: agreement to a few percent of the logit scale.
    assert np.abs(logits - ref).max() < 0.1 * np.abs(ref).max()
