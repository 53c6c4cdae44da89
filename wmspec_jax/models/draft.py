"""Self-speculative drafts: a subset of the target's layers plus small adapters.

A draft is described by

* ``layers``: indices of target layers it keeps, in order (e.g. the first few
  and the last one: early layers build the representation, the last layer is
  the one trained to map it onto the shared LM head);
* ``adapters``: a pytree of low-rank (LoRA) corrections ``W + A @ B`` for the
  kept layers' matrices and replacement RMSNorm weights, trained by
  ``experiments/distill_draft.py`` to match the target's next-token
  distribution on the target's own samples.

The embedding and LM head are the target's (so the vocabulary is shared by
construction). :func:`draft_params` merges the adapters into dense weights, so
at run time the draft is an ordinary, smaller transformer of the same family
and costs exactly ``len(layers)`` layers plus the LM head.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.hf import Checkpoint

LORA_KEYS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
NORM_KEYS = ("attn_norm", "mlp_norm")
_FORMAT = "wmspec-draft-adapters-v1"
DEFAULT_ASSET = "smollm2_draft.npz"


def draft_config(target_config: TransformerConfig, layers) -> TransformerConfig:
    """The target's config with only ``layers`` (their sliding / global types kept)."""
    _check_layers(target_config, layers)
    return target_config.select_layers(layers)


def _check_layers(config: TransformerConfig, layers) -> None:
    layers = list(layers)
    if not layers or min(layers) < 0 or max(layers) >= config.num_layers:
        raise ValueError(f"draft layers {layers} must be non-empty indices < {config.num_layers}")


def init_adapters(target_params: dict, layers, rank: int, key: jax.Array,
                  dtype=jnp.float32) -> dict:
    """LoRA factors (A random, B zero: the draft starts as the plain truncation).

    Returns ``{"lora_a": {k: [L', D_in, r]}, "lora_b": {k: [L', r, D_out]},
    "attn_norm": [L', D], "mlp_norm": [L', D], "final_norm": [D]}``; the norms
    start from the target's own.
    """
    idx = jnp.asarray(list(layers))
    tl = target_params["layers"]
    keys = jax.random.split(key, len(LORA_KEYS))
    lora_a, lora_b = {}, {}
    for k, sub in zip(LORA_KEYS, keys):
        _, d_in, d_out = tl[k].shape
        lora_a[k] = (jax.random.normal(sub, (len(layers), d_in, rank)) / np.sqrt(d_in)).astype(dtype)
        lora_b[k] = jnp.zeros((len(layers), rank, d_out), dtype)
    out = {"lora_a": lora_a, "lora_b": lora_b,
           "final_norm": target_params["final_norm"].astype(dtype)}
    for k in NORM_KEYS:
        out[k] = tl[k][idx].astype(dtype)
    return out


def draft_params(target_params: dict, layers, adapters: dict | None = None) -> dict:
    """Dense draft params: target layers ``layers`` with the adapters merged in.

    Differentiable in ``adapters`` (the distillation script trains through it).
    The embedding (and untied head) are shared with the target, not copied.
    """
    idx = jnp.asarray(list(layers))
    dtype = target_params["embed"].dtype
    new_layers = {k: v[idx] for k, v in target_params["layers"].items()}
    final_norm = target_params["final_norm"]
    if adapters:
        for k in LORA_KEYS:
            if k in adapters.get("lora_a", {}):
                delta = jnp.einsum("lir,lro->lio", adapters["lora_a"][k], adapters["lora_b"][k])
                new_layers[k] = (new_layers[k] + delta).astype(dtype)
        for k in NORM_KEYS:
            if k in adapters:
                new_layers[k] = adapters[k].astype(dtype)
        if "final_norm" in adapters:
            final_norm = adapters["final_norm"].astype(dtype)
    out = {"embed": target_params["embed"], "layers": new_layers, "final_norm": final_norm}
    if "lm_head" in target_params:
        out["lm_head"] = target_params["lm_head"]
    return out


def save_adapters(path: str | os.PathLike, layers, adapters: dict, meta: dict | None = None,
                  lora_dtype=np.float16) -> None:
    """Writes layers + adapters to one ``.npz`` atomically (temp file + rename).

    LoRA factors are stored in float16 to keep the shipped asset small; norms
    stay float32.
    """
    path = os.fspath(path)
    flat = {"__meta__": np.frombuffer(json.dumps(
        {"format": _FORMAT, "layers": [int(i) for i in layers], **(meta or {})}).encode(), np.uint8)}
    for k, v in adapters.get("lora_a", {}).items():
        flat[f"lora_a/{k}"] = np.asarray(v, np.float32).astype(lora_dtype)
    for k, v in adapters.get("lora_b", {}).items():
        flat[f"lora_b/{k}"] = np.asarray(v, np.float32).astype(lora_dtype)
    for k in NORM_KEYS + ("final_norm",):
        if k in adapters:
            flat[k] = np.asarray(adapters[k], np.float32)
    from wmspec_jax import results  # the package's one atomic writer (umask permissions, fsync)

    results.atomic_write(path, lambda f: np.savez_compressed(f, **flat))


def load_adapters(path: str | os.PathLike) -> tuple[list[int], dict, dict]:
    """Reads (layers, adapters float32 pytree, meta) written by :func:`save_adapters`."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"draft adapter file {path!r} does not exist")
    with np.load(path) as z:
        meta = json.loads(bytes(z["__meta__"]).decode())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{path!r} is not a {_FORMAT} file (format={meta.get('format')!r})")
        adapters: dict = {"lora_a": {}, "lora_b": {}}
        for name in z.files:
            if name == "__meta__":
                continue
            value = jnp.asarray(z[name], jnp.float32)
            if "/" in name:
                group, k = name.split("/", 1)
                adapters[group][k] = value
            else:
                adapters[name] = value
    return list(meta["layers"]), adapters, meta


def make_draft(target: Checkpoint, layers, adapters: dict | None = None,
               name: str | None = None) -> Checkpoint:
    """A draft Checkpoint sharing the target's tokenizer, embedding and head."""
    config = draft_config(target.config, layers)
    params = draft_params(target.params, layers, adapters)
    return Checkpoint(name=name or f"{target.name}-draft{len(list(layers))}",
                      config=config, params=params, tokenizer=target.tokenizer,
                      stop_token_ids=target.stop_token_ids, logit_width=target.logit_width)
