"""Feature-conditioned drafts: one decoder layer reading the target's hidden states.

The idea is EAGLE's (Li et al., "EAGLE: Speculative Sampling Requires
Rethinking Feature Uncertainty", ICML 2024); it is not part of the paper this
package implements, whose Alg. 1 and Thm 4.1 hold for *any* draft
distribution Q_s that depends only on the text before position s. This draft's
Q_s depends on the committed text through the target's own hidden states,
which are a function of that text, so speculative sampling (watermarked or
not) keeps its output law exactly.

At token position i the draft reads

    x_i = [embed(w_i) ; f_{i-1}] @ fc              (fc: [2D, D]; f_{-1} = 0)

where ``f_{i-1}`` is the target's final (normalised) hidden state at position
i − 1, i.e. the vector the target's LM head maps to P(. | w_{<=i-1}). One
transformer layer of the target's family (with its own KV cache over the
draft's earlier positions) and a final norm give ``h_i``, the draft's
estimate of ``f_i``; the target's (tied) head, restricted to ``head_ids``,
maps ``h_i`` to Q(. | w_{<=i}). When drafting several tokens ahead the target
has not yet seen the drafted ones, so the draft feeds its own ``h_i`` as the
next ``f_i``; once the target has verified them, the loop rolls the draft's
cache back to the positions it computed with true features and feeds the
accepted tokens again with the target's features (:mod:`wmspec_jax.stages`).

Departures from EAGLE: a reduced-vocabulary head (Q = 0 off ``head_ids``, see
:mod:`wmspec_jax.models.draft`); the features are the target's hidden states
*after* its final norm (the head's input); training matches the target's
top-k next-token distributions (forward KL + TV) on the target's own samples
(``experiments/distill_feature_draft.py``) rather than regressing features on
ShareGPT; one chain of drafts, no token tree.

Params (runtime): ``fc`` [2D, D], ``layers`` (a list of one layer in the
target's layout), ``final_norm`` [D], the target's ``embed`` [V, D] (shared,
not copied) and ``head_ids`` int32[K] / ``head_rows`` [K, D]. The trainable
params and the saved file keep that layer stacked ([1, ...] arrays).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import FeatureDraftModel
from wmspec_jax.models import cache as cache_lib
from wmspec_jax.models import draft as draft_lib
from wmspec_jax.models import partitioning, protocol, transformer
from wmspec_jax.models.attention import DEFAULT_BLOCK
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.models.hf import Checkpoint

FORMAT = "wmspec-feature-draft-v1"
TRAINABLE = ("fc", "layers", "final_norm")


def feature_config(target_config: TransformerConfig) -> TransformerConfig:
    """The draft's config: the target's, with one layer of its last layer's type (sliding or global)."""
    return target_config.select_layers([target_config.num_layers - 1])


def init_trainable(target_params: dict, target_config: TransformerConfig, key: jax.Array) -> dict:
    """Trainable params at the start of distillation (float32).

    The layer starts as a copy of the target's last layer, the final norm as
    the target's; ``fc`` starts as [I; 0] plus small noise, so the untrained
    draft is that layer applied to the token embedding.
    """
    d = target_config.hidden_size
    layer = target_config.num_layers - 1
    fc = jnp.concatenate([jnp.eye(d), jnp.zeros((d, d))], axis=0)
    fc = fc + 0.01 * jax.random.normal(key, (2 * d, d)) / np.sqrt(2 * d)
    return {
        "fc": fc.astype(jnp.float32),
        "layers": {k: v[None].astype(jnp.float32) for k, v in target_params["layers"][layer].items()},
        "final_norm": target_params["final_norm"].astype(jnp.float32),
    }


def runtime_params(target_params: dict, trainable: dict, head_ids=None) -> dict:
    """The draft's params: trainable ones in the target's dtype plus the shared embedding
    (and the head's kept rows when ``head_ids`` is given)."""
    dtype = target_params["embed"].dtype
    own = {k: trainable[k] for k in TRAINABLE}
    if all(isinstance(a, np.ndarray) for a in jax.tree_util.tree_leaves(own)):
        # Host arrays (a loaded file): the layer axis is split on the host and float32 arrays are
        # placed with device_put, so no device program runs per array (each is one to trace and load).
        def place(a):
            return jax.device_put(a) if dtype == np.float32 else jnp.asarray(a).astype(dtype)

        own["layers"] = [{k: place(v) for k, v in layer.items()} for layer in transformer.unstack_layers(own["layers"])]
        own.update({k: place(own[k]) for k in TRAINABLE if k != "layers"})
    else:
        own = jax.tree_util.tree_map(lambda a: jnp.asarray(a).astype(dtype), own)
        own["layers"] = transformer.unstack_layers(own["layers"])
    return draft_lib.with_shared_head(target_params, own, head_ids)


def hidden_states(config: TransformerConfig, params: dict, tokens: jax.Array, features: jax.Array,
                  positions: jax.Array, cache: cache_lib.KVCache, lengths: jax.Array,
                  write_mask: jax.Array | None = None, *,
                  attention_block: int = DEFAULT_BLOCK) -> tuple[jax.Array, cache_lib.KVCache]:
    """(h dtype[B, T, D], cache): the draft's estimate of the target's feature at each position.

    ``tokens`` int32[B, T]; ``features`` [B, T, D]: the target's (or, for
    positions the target has not seen, the draft's own) feature of the
    *previous* position. Other args as :func:`transformer.hidden_states`.
    """
    e = transformer.embed_tokens(config, params, tokens)
    x = jnp.concatenate([e, features.astype(e.dtype)], axis=-1) @ params["fc"]
    return transformer.decoder_stack(config, params, x, positions, cache, lengths, write_mask,
                                     attention_block=attention_block)


def head_logits(config: TransformerConfig, params: dict, h: jax.Array) -> jax.Array:
    """float32[B, T, V] logits of the draft (−inf off ``head_ids`` when present)."""
    if "head_ids" in params:
        return draft_lib.reduced_head(config, params, h)
    return transformer.lm_logits(config, params, h)


def step(config: TransformerConfig, params: dict, cache: cache_lib.KVCache, tokens: jax.Array,
         num_new: jax.Array, features: jax.Array, *, logit_width: int | None = None,
         attention_block: int = DEFAULT_BLOCK):
    """:func:`wmspec_jax.models.protocol.step` with the previous positions' features
    ``features`` [B, T, D]; returns (float32[B, T, W] logits, h [B, T, D], cache)."""
    def hidden(p, ids, positions, c, lengths, write, attention_block):
        return hidden_states(config, p, ids, features, positions, c, lengths, write,
                             attention_block=attention_block)

    return protocol.step(config, functools.partial(head_logits, config), params, cache, tokens, num_new,
                         logit_width=logit_width, hidden_fn=hidden, return_hidden=True,
                         attention_block=attention_block)


def make_language_model(config: TransformerConfig, *, name: str, dtype=jnp.float32,
                        vocab_size: int | None = None,
                        mesh: jax.sharding.Mesh | None = None,
                        attention_block: int = DEFAULT_BLOCK) -> FeatureDraftModel:
    """The :class:`~wmspec_jax.lm.FeatureDraftModel` of a feature draft with ``config``;
    with ``mesh`` its cache is split as the target's (pass params placed with
    :func:`wmspec_jax.sharding.shard_params`); ``attention_block`` as
    :func:`wmspec_jax.models.protocol.make_language_model`."""
    width = int(vocab_size or config.vocab_size)
    attention_block = protocol.check_attention_block(attention_block)
    sharding = None if mesh is None else partitioning.cache_shardings(config, mesh)
    return FeatureDraftModel(
        name=name, vocab_size=width,
        init_cache=functools.partial(cache_lib.init_cache, config, dtype=dtype, sharding=sharding),
        step=functools.partial(step, config, logit_width=width, attention_block=attention_block),
        rewind=cache_lib.rewind, cache_lengths=cache_lib.cache_lengths,
        feature_size=config.hidden_size)


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureDraftCheckpoint(Checkpoint):
    """A feature draft as a :class:`Checkpoint` (its model is a FeatureDraftModel)."""

    def language_model(self, mesh: jax.sharding.Mesh | None = None, *,
                       attention_block: int = DEFAULT_BLOCK) -> FeatureDraftModel:
        return make_language_model(self.config, name=self.name, dtype=self.dtype,
                                   vocab_size=self.logit_width, mesh=mesh, attention_block=attention_block)


def make_feature_draft(target: Checkpoint, trainable: dict, head_ids=None,
                       name: str | None = None) -> FeatureDraftCheckpoint:
    """A feature draft of ``target`` from its trainable params (and reduced head ids)."""
    if head_ids is not None:
        head_ids = draft_lib.check_head_ids(head_ids, target.config.vocab_size)
    config = feature_config(target.config)
    _check_trainable(config, trainable)
    return FeatureDraftCheckpoint(
        name=name or f"{target.name}-feature-draft", config=config,
        params=runtime_params(target.params, trainable, head_ids), tokenizer=target.tokenizer,
        stop_token_ids=target.stop_token_ids, logit_width=target.logit_width)


def _check_trainable(config: TransformerConfig, trainable: dict) -> None:
    d = config.hidden_size
    want = {k: (1,) + shape for k, shape in transformer.layer_shapes(config).items()}
    problems = []
    if tuple(np.shape(trainable.get("fc"))) != (2 * d, d):
        problems.append(f"fc: expected {(2 * d, d)}, got {np.shape(trainable.get('fc'))}")
    if tuple(np.shape(trainable.get("final_norm"))) != (d,):
        problems.append(f"final_norm: expected {(d,)}")
    layers = trainable.get("layers", {})
    for k, shape in want.items():
        if k not in layers or tuple(np.shape(layers[k])) != shape:
            problems.append(f"layers/{k}: expected {shape}, got {np.shape(layers.get(k))}")
    if problems:
        raise ValueError("feature draft params do not match the target: " + "; ".join(problems))


def save(path: str | os.PathLike, trainable: dict, head_ids=None, meta: dict | None = None,
         dtype=np.float16) -> None:
    """Writes the trainable params (matrices in ``dtype``, norms float32) and head ids atomically."""
    from wmspec_jax import storage

    flat = {"__meta__": np.frombuffer(json.dumps({"format": FORMAT, **(meta or {})}).encode(), np.uint8),
            "fc": np.asarray(trainable["fc"], np.float32).astype(dtype),
            "final_norm": np.asarray(trainable["final_norm"], np.float32)}
    for k, v in trainable["layers"].items():
        keep = np.float32 if k in transformer.NORM_PARAMS else dtype
        flat[f"layers/{k}"] = np.asarray(v, np.float32).astype(keep)
    if head_ids is not None:
        flat["head_ids"] = np.asarray(head_ids, np.int32)
    storage.atomic_write(os.fspath(path), lambda f: np.savez_compressed(f, **flat))


def load(path: str | os.PathLike) -> tuple[dict, np.ndarray | None, dict]:
    """(trainable float32 pytree of host arrays, head ids or None, meta) written by :func:`save`."""
    with draft_lib.open_draft_file(os.fspath(path), FORMAT, "feature draft file") as (z, meta):
        trainable = {"fc": np.asarray(z["fc"], np.float32),
                     "final_norm": np.asarray(z["final_norm"], np.float32),
                     "layers": {n.split("/", 1)[1]: np.asarray(z[n], np.float32)
                                for n in z.files if n.startswith("layers/")}}
        head_ids = np.asarray(z["head_ids"], np.int32) if "head_ids" in z.files else None
    return trainable, head_ids, meta


def is_feature_draft_file(path: str | os.PathLike) -> bool:
    """True when ``path`` is a file written by :func:`save` (not LoRA adapters, not missing)."""
    if not os.path.isfile(os.fspath(path)):
        return False
    with np.load(os.fspath(path)) as z:
        return json.loads(bytes(z["__meta__"]).decode()).get("format") == FORMAT


__all__ = ["FORMAT", "FeatureDraftCheckpoint", "TRAINABLE", "feature_config", "head_logits", "hidden_states",
           "init_trainable", "is_feature_draft_file", "load", "make_feature_draft", "make_language_model",
           "runtime_params", "save", "step"]
