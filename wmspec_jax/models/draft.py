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

**Reduced-vocabulary head** (optional, ``head_ids`` in the adapters): the
draft's output layer keeps only the rows of the (tied) head for a fixed set of
token ids (e.g. the most frequent tokens of the target's own samples), so its
per-token head cost falls from ``V x D`` to ``|head_ids| x D``. The draft still
returns float32[B, T, V] logits: the kept ones scattered into a row of −inf,
i.e. Q(v) = 0 for every token outside the set. Speculative sampling stays
exact with such a draft (the paper's Thm 4.1 / Alg. 1 need no assumption on
the support of Q: a token Q cannot propose is produced by the residual
``norm(max(P - Q, 0))`` after a rejection), only the acceptance rate pays for
the target mass outside the set. The rest of the system sees an ordinary
model whose logits contain −inf, as after top-k.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import LanguageModel
from wmspec_jax.models import protocol
from wmspec_jax.models.attention import DEFAULT_BLOCK
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.hf import Checkpoint
from wmspec_jax.models.linear import linear

LORA_KEYS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
NORM_KEYS = ("attn_norm", "mlp_norm")
_FORMAT = "wmspec-draft-adapters-v1"


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
    kept = [target_params["layers"][i] for i in layers]
    keys = jax.random.split(key, len(LORA_KEYS))
    lora_a, lora_b = {}, {}
    for k, sub in zip(LORA_KEYS, keys):
        d_in, d_out = kept[0][k].shape
        lora_a[k] = (jax.random.normal(sub, (len(kept), d_in, rank)) / np.sqrt(d_in)).astype(dtype)
        lora_b[k] = jnp.zeros((len(kept), rank, d_out), dtype)
    out = {"lora_a": lora_a, "lora_b": lora_b,
           "final_norm": target_params["final_norm"].astype(dtype)}
    for k in NORM_KEYS:
        out[k] = jnp.stack([lp[k] for lp in kept]).astype(dtype)
    return out


def draft_params(target_params: dict, layers, adapters: dict | None = None) -> dict:
    """Dense draft params: target layers ``layers`` with the adapters merged in.

    Differentiable in ``adapters`` (the distillation script trains through it).
    The embedding (and untied head) are shared with the target, not copied;
    so are the kept layers' arrays that no adapter changes. Adapters hold one
    entry per kept layer on a leading axis ([L', ...]).
    """
    dtype = target_params["embed"].dtype
    new_layers = [dict(target_params["layers"][i]) for i in layers]
    final_norm = target_params["final_norm"]
    if adapters:
        for j, lp in enumerate(new_layers):
            for k in LORA_KEYS:
                if k in adapters.get("lora_a", {}):
                    delta = adapters["lora_a"][k][j] @ adapters["lora_b"][k][j]
                    lp[k] = (lp[k] + delta).astype(dtype)
            for k in NORM_KEYS:
                if k in adapters:
                    lp[k] = adapters[k][j].astype(dtype)
        if "final_norm" in adapters:
            final_norm = adapters["final_norm"].astype(dtype)
    out = {"layers": new_layers, "final_norm": final_norm}
    return with_shared_head(target_params, out, (adapters or {}).get("head_ids"))


def with_shared_head(target_params: dict, params: dict, head_ids=None) -> dict:
    """``params`` plus the target's embedding / untied head (shared, not copied) and, with
    ``head_ids`` int32[K], those ids and the head's rows for them (``head_rows`` [K, D])."""
    out = {**params, "embed": target_params["embed"]}
    if "lm_head" in target_params:
        out["lm_head"] = target_params["lm_head"]
    if head_ids is not None:
        head_ids = jnp.asarray(head_ids, jnp.int32)
        out["head_ids"] = head_ids
        # The kept rows of the output matrix, gathered once (not at every step).
        out["head_rows"] = (_gather_rows(target_params["lm_head"], head_ids, transposed=True)
                            if "lm_head" in target_params else _gather_rows(target_params["embed"], head_ids))
    return out


@functools.partial(jax.jit, static_argnames="transposed")
def _gather_rows(table: jax.Array, ids: jax.Array, transposed: bool = False) -> jax.Array:
    """``table[ids]`` (rows of ``table.T`` when ``transposed``) as one program: indexing outside
    ``jit`` runs (and loads) one small program per operation."""
    return (table.T if transposed else table)[ids]


def reduced_head(config: TransformerConfig, params: dict, h: jax.Array) -> jax.Array:
    """float32[B, T, V] logits of a reduced-vocabulary head: −inf outside ``params["head_ids"]``.

    ``h``: final hidden states dtype[B, T, D]; ``params["head_rows"]``:
    dtype[K, D] (the head's rows for ``head_ids`` int32[K]). Costs a
    [B, T, D] x [D, K] product plus a scatter into a −inf row; in the ``out_in`` weight
    layout the product runs weight-first (:func:`wmspec_jax.models.linear.linear`).
    """
    if config.weight_layout == "out_in":
        z = linear(h, params["head_rows"], config, preferred_element_type=jnp.float32)
    else:
        z = jnp.einsum("btd,kd->btk", h, params["head_rows"], preferred_element_type=jnp.float32)
    if config.final_logit_softcap is not None:
        cap = config.final_logit_softcap
        z = jnp.tanh(z / cap) * cap
    full = jnp.full(z.shape[:-1] + (config.vocab_size,), -jnp.inf, jnp.float32)
    return full.at[..., params["head_ids"]].set(z, unique_indices=True)


def check_head_ids(head_ids, vocab_size: int) -> np.ndarray:
    """int32[K] sorted unique ids in [0, V); raises ValueError otherwise."""
    ids = np.asarray(head_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"head_ids must be a non-empty 1-D integer array, got {ids.dtype}{ids.shape}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"head_ids must lie in [0, {vocab_size}), got [{ids.min()}, {ids.max()}]")
    if np.unique(ids).size != ids.size:
        raise ValueError("head_ids has repeated ids")
    return np.sort(ids).astype(np.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class DraftCheckpoint(Checkpoint):
    """A draft :class:`Checkpoint` whose model uses :func:`reduced_head` when
    its params hold ``head_ids`` (otherwise identical to a Checkpoint)."""

    def language_model(self, mesh: jax.sharding.Mesh | None = None, *,
                       attention_block: int = DEFAULT_BLOCK) -> LanguageModel:
        if "head_ids" not in self.params:
            return super().language_model(mesh, attention_block=attention_block)
        return protocol.make_language_model(
            self.config, name=self.name, dtype=self.dtype, vocab_size=self.logit_width, mesh=mesh,
            head=functools.partial(reduced_head, self.config), attention_block=attention_block)


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
    if adapters.get("head_ids") is not None:
        flat["head_ids"] = np.asarray(adapters["head_ids"], np.int32)
    from wmspec_jax import storage  # the package's one atomic writer (umask permissions, fsync)

    storage.atomic_write(path, lambda f: np.savez_compressed(f, **flat))


@contextlib.contextmanager
def open_draft_file(path: str, fmt: str, what: str):
    """(open npz, its ``__meta__`` dict) of a draft file of format ``fmt``; FileNotFoundError
    or ValueError naming ``what`` otherwise."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what} {path!r} does not exist")
    with np.load(path) as z:
        meta = json.loads(bytes(z["__meta__"]).decode())
        if meta.get("format") != fmt:
            raise ValueError(f"{path!r} is not a {fmt} file (format={meta.get('format')!r})")
        yield z, meta


def load_adapters(path: str | os.PathLike) -> tuple[list[int], dict, dict]:
    """Reads (layers, adapters float32 pytree, meta) written by :func:`save_adapters`."""
    path = os.fspath(path)
    with open_draft_file(path, _FORMAT, "draft adapter file") as (z, meta):
        adapters: dict = {"lora_a": {}, "lora_b": {}}
        for name in z.files:
            if name == "__meta__":
                continue
            if name == "head_ids":
                adapters[name] = jnp.asarray(z[name], jnp.int32)
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
    """A draft Checkpoint sharing the target's tokenizer, embedding and head
    (restricted to ``adapters["head_ids"]`` when present: :func:`reduced_head`)."""
    config = draft_config(target.config, layers)
    if (adapters or {}).get("lora_a") and config.weight_layout != "in_out":
        # LoRA factors are [in, r] @ [r, out]; added to a square [out, in] matrix they would fit and be wrong.
        raise ValueError(f"LoRA adapters apply to a target in the in_out weight layout, not "
                         f"{config.weight_layout!r} (convert it: Checkpoint.with_weight_layout('in_out'))")
    if (adapters or {}).get("head_ids") is not None:
        check_head_ids(adapters["head_ids"], config.vocab_size)
    params = draft_params(target.params, layers, adapters)
    return DraftCheckpoint(name=name or f"{target.name}-draft{len(list(layers))}",
                      config=config, params=params, tokenizer=target.tokenizer,
                      stop_token_ids=target.stop_token_ids, logit_width=target.logit_width)


__all__ = ["DraftCheckpoint", "LORA_KEYS", "NORM_KEYS", "check_head_ids", "draft_config", "draft_params",
           "init_adapters", "load_adapters", "make_draft", "open_draft_file", "reduced_head", "save_adapters",
           "with_shared_head"]
