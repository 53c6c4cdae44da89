"""Hugging Face checkpoints from a local directory -> (config, params, tokenizer).

Only local files are read (``local_files_only=True``); nothing is downloaded.
Weights are streamed one tensor at a time from ``*.safetensors`` (single file
or sharded through ``model.safetensors.index.json``), cast to the requested
dtype and copied into per-parameter stacked host buffers, so converting a
large checkpoint holds one converted copy plus one tensor, never two full
copies. With a mesh, each buffer is placed straight into its tensor-parallel
layout (:mod:`wmspec_jax.models.partitioning`), so no single device ever
holds the whole model.

Families: Llama (2, 3.x), Mistral, Qwen2 / Qwen2.5, Qwen3, Gemma, Gemma-2
(:mod:`wmspec_jax.models.config`). Every unreadable file raises
:class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax.lm import LanguageModel
from wmspec_jax.models import partitioning, protocol, transformer
from wmspec_jax.models.attention import DEFAULT_BLOCK
from wmspec_jax.models.config import TransformerConfig, UnsupportedModelError
from wmspec_jax.models.hf_config import config_from_hf

_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"
_GENERATION = "generation_config.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


class CheckpointError(ValueError):
    """A checkpoint directory is missing files or holds unreadable / unexpected ones."""


class IncompatibleModelsError(ValueError):
    """A draft and a target cannot be paired for speculative sampling."""


# A Llama-family layer's tensors: (our param name, HF name inside ``model.layers.{i}.``, GGUF name inside
# ``blk.{i}.``). Both formats store matrices [out, in]; checkpoints load [in, out] (the in_out weight layout), so
# every ``w*`` is transposed (a pair converts its models to out_in on CPU: models.pairs).
LLAMA_LAYER_TENSORS = (
    ("attn_norm", "input_layernorm.weight", "attn_norm.weight"),
    ("wq", "self_attn.q_proj.weight", "attn_q.weight"),
    ("wk", "self_attn.k_proj.weight", "attn_k.weight"),
    ("wv", "self_attn.v_proj.weight", "attn_v.weight"),
    ("wo", "self_attn.o_proj.weight", "attn_output.weight"),
    ("mlp_norm", "post_attention_layernorm.weight", "ffn_norm.weight"),
    ("w_gate", "mlp.gate_proj.weight", "ffn_gate.weight"),
    ("w_up", "mlp.up_proj.weight", "ffn_up.weight"),
    ("w_down", "mlp.down_proj.weight", "ffn_down.weight"),
)


def layer_tensor_map(config: TransformerConfig) -> dict[str, tuple[str, bool]]:
    """HF tensor name inside ``model.layers.{i}.`` -> (our param name, transpose?)."""
    out = {hf_name: (ours, ours.startswith("w")) for ours, hf_name, _ in LLAMA_LAYER_TENSORS}
    if config.sandwich_norms:
        # Gemma-2: post_attention_layernorm normalises the attention output;
        # the pre-MLP norm is pre_feedforward_layernorm.
        out.update({"post_attention_layernorm.weight": ("post_attn_norm", False),
                    "pre_feedforward_layernorm.weight": ("mlp_norm", False),
                    "post_feedforward_layernorm.weight": ("post_mlp_norm", False)})
    else:
        out["post_attention_layernorm.weight"] = ("mlp_norm", False)
    if config.qkv_bias:
        out.update({"self_attn.q_proj.bias": ("bq", False), "self_attn.k_proj.bias": ("bk", False),
                    "self_attn.v_proj.bias": ("bv", False)})
    if config.qk_norm:
        out.update({"self_attn.q_norm.weight": ("q_norm", False),
                    "self_attn.k_norm.weight": ("k_norm", False)})
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """A loaded model: static config, params pytree and (optional) tokenizer.

    Attributes:
      stop_token_ids: ids that end generation, in order of preference:
        ``generation_config.json``'s ``eos_token_id`` (an int or a list, e.g.
        Llama-3.1-Instruct's end-of-text, end-of-message and end-of-turn),
        then ``config.json``'s, then the tokenizer's EOS.
      logit_width: width of the logits when it must exceed the config's
        vocabulary (a pair whose checkpoints pad one tokenizer to different
        sizes, see :func:`load_pair`); None means ``config.vocab_size``.
    """

    name: str
    config: TransformerConfig
    params: Any
    tokenizer: Any = None
    stop_token_ids: tuple[int, ...] = ()
    logit_width: int | None = None

    @property
    def dtype(self):
        return self.params["embed"].dtype

    def with_weight_layout(self, layout: str) -> "Checkpoint":
        """This checkpoint with its matrices stored in ``layout``
        (:func:`wmspec_jax.models.transformer.to_weight_layout`; itself when already so)."""
        config, params = transformer.to_weight_layout(self.config, self.params, layout)
        return self if params is self.params else dataclasses.replace(self, config=config, params=params)

    def language_model(self, mesh: jax.sharding.Mesh | None = None, *,
                       attention_block: int = DEFAULT_BLOCK) -> LanguageModel:
        """The :class:`~wmspec_jax.lm.LanguageModel` (caches split over ``mesh`` when given;
        ``attention_block`` as :func:`wmspec_jax.models.protocol.make_language_model`)."""
        return protocol.make_language_model(self.config, name=self.name, dtype=self.dtype,
                                            vocab_size=self.logit_width, mesh=mesh,
                                            attention_block=attention_block)


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {what} {path!r}: {e}") from e


def read_config_json(path: str | os.PathLike) -> dict:
    """The parsed ``path/config.json``; CheckpointError if missing or corrupt."""
    path = os.fspath(path)
    cfg_file = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint directory {path!r} does not exist")
    if not os.path.isfile(cfg_file):
        raise CheckpointError(f"missing config.json in checkpoint directory {path!r}")
    raw = _read_json(cfg_file, "config")
    if not isinstance(raw, dict):
        raise CheckpointError(f"{cfg_file!r} does not hold a JSON object")
    return raw


def read_config(path: str | os.PathLike) -> TransformerConfig:
    """Parses ``path/config.json`` (:func:`~wmspec_jax.models.hf_config.config_from_hf`).

    Raises:
      CheckpointError: missing / corrupt file or a missing / malformed field.
      UnsupportedModelError: an architecture or field that is not implemented.
      Both name the file.
    """
    raw = read_config_json(path)
    cfg_file = os.path.join(os.fspath(path), "config.json")
    try:
        return config_from_hf(raw)
    except UnsupportedModelError as e:
        raise UnsupportedModelError(f"{cfg_file!r}: {e}") from e
    except ValueError as e:
        raise CheckpointError(f"{cfg_file!r}: {e}") from e


def _weight_files(path: str) -> dict[str, list[str] | None]:
    """Maps each safetensors file to the tensor names it holds."""
    index = os.path.join(path, _INDEX)
    single = os.path.join(path, _SINGLE)
    if os.path.isfile(index):
        raw = _read_json(index, "weight index")
        if not isinstance(raw, dict) or not isinstance(raw.get("weight_map"), dict):
            raise CheckpointError(f"{index!r} has no 'weight_map' object")
        files: dict[str, list[str]] = {}
        for tensor_name, file_name in raw["weight_map"].items():
            files.setdefault(file_name, []).append(tensor_name)
        missing = [fn for fn in files if not os.path.isfile(os.path.join(path, fn))]
        if missing:
            raise CheckpointError(
                f"{_INDEX} in {path!r} lists shard files that are missing: {sorted(missing)}")
        return {os.path.join(path, fn): names for fn, names in files.items()}
    if os.path.isfile(single):
        return {single: None}
    others = [f for f in os.listdir(path) if f.endswith((".bin", ".pt", ".pth", ".gguf"))]
    hint = f" (found {others}: only safetensors are supported)" if others else ""
    raise CheckpointError(
        f"missing weights in {path!r}: expected {_SINGLE} or {_INDEX}{hint}")


def _iter_tensors(path: str):
    """Yields (name, host array) one tensor at a time across all shards."""
    from safetensors import safe_open  # local: only needed when loading

    for file_name, names in _weight_files(path).items():
        try:
            # The "flax" framework reads bfloat16, which the numpy one cannot.
            with safe_open(file_name, framework="flax") as f:
                for name in (names if names is not None else f.keys()):
                    yield name, np.asarray(f.get_tensor(name))
        except CheckpointError:
            raise
        except Exception as e:  # safetensors raises its own SafetensorError, OSError, ...
            raise CheckpointError(f"cannot read weights file {file_name!r}: {e}") from e


def _place(value: np.ndarray, sharding) -> jax.Array:
    if sharding is None:
        return jnp.asarray(value)
    # Each process supplies only the shards its devices hold (multi-host safe).
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])


def load_params(path: str | os.PathLike, config: TransformerConfig,
                dtype=jnp.float32, mesh: jax.sharding.Mesh | None = None) -> dict:
    """Streams the safetensors weights of ``path`` into a params pytree of ``dtype``.

    With ``mesh`` every parameter is placed with
    :func:`wmspec_jax.models.partitioning.param_shardings`.
    """
    path = os.fspath(path)
    shapes = transformer.param_shapes(config)
    one_layer = transformer.layer_shapes(config)
    layer_map = layer_tensor_map(config)
    np_dtype = np.dtype(dtype)
    shardings = partitioning.param_shardings(config, mesh) if mesh is not None else None
    # Each tensor goes to the device as soon as it is read, so host memory
    # holds one tensor at a time, not the model.
    layers: list[dict[str, Any]] = [{} for _ in range(config.num_layers)]
    host: dict[str, np.ndarray] = {}
    unexpected = []

    def checked(name, value, expected):
        if tuple(value.shape) != tuple(expected):
            raise CheckpointError(
                f"tensor {name} in {path!r} has shape {tuple(value.shape)}, "
                f"expected {tuple(expected)}")
        return value

    for name, tensor in _iter_tensors(path):
        m = _LAYER_RE.match(name)
        if m and m.group(2) in layer_map:
            layer = int(m.group(1))
            key, transpose = layer_map[m.group(2)]
            if layer >= config.num_layers:
                raise CheckpointError(
                    f"tensor {name} in {path!r} is beyond num_hidden_layers={config.num_layers}")
            value = checked(name, tensor.T if transpose else tensor, one_layer[key])
            layers[layer][key] = _place(value.astype(np_dtype),
                                        shardings and shardings["layers"][layer][key])
        elif m and m.group(2).endswith("rotary_emb.inv_freq"):
            continue  # recomputed from the config
        elif name == "model.embed_tokens.weight":
            host["embed"] = checked(name, tensor, shapes["embed"]).astype(np_dtype)
        elif name == "model.norm.weight":
            host["final_norm"] = checked(name, tensor, shapes["final_norm"]).astype(np_dtype)
        elif name == "lm_head.weight":
            if not config.tie_word_embeddings:
                host["lm_head"] = checked(name, tensor.T, shapes["lm_head"]).astype(np_dtype)
        else:
            unexpected.append(name)
        del tensor
    if unexpected:
        raise CheckpointError(
            f"unexpected tensors in {path!r} (unsupported architecture variant?): "
            f"{sorted(unexpected)[:8]}")
    missing = [f"model.layers.{i}.{hf}" for hf, (key, _) in layer_map.items()
               for i in range(config.num_layers) if key not in layers[i]]
    for key, hf_name in (("embed", "model.embed_tokens.weight"),
                         ("final_norm", "model.norm.weight"), ("lm_head", "lm_head.weight")):
        if key in shapes and key not in host:
            missing.append(hf_name)
    if missing:
        raise CheckpointError(f"checkpoint {path!r} is missing tensors: {missing[:8]}"
                              + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    params: dict[str, Any] = {}
    for key in list(host):
        params[key] = _place(host.pop(key), shardings and shardings[key])
    params["layers"] = [{k: lp[k] for k in one_layer} for lp in layers]
    return params


def load_tokenizer(path: str | os.PathLike):
    """``transformers.AutoTokenizer`` (with its chat template) from local files only."""
    path = os.fspath(path)
    if not any(os.path.isfile(os.path.join(path, f)) for f in _TOKENIZER_FILES):
        raise CheckpointError(
            f"missing tokenizer in {path!r}: expected one of {list(_TOKENIZER_FILES)}")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # corrupt tokenizer.json / tokenizer_config.json
        raise CheckpointError(f"cannot load the tokenizer in {path!r}: {e}") from e


def _ids(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def stop_token_ids(path: str | os.PathLike, tokenizer=None,
                   config_json: dict | None = None) -> tuple[int, ...]:
    """End-of-sequence ids: generation_config.json, then config.json, then the tokenizer."""
    path = os.fspath(path)
    gen_file = os.path.join(path, _GENERATION)
    found: list[int] = []
    if os.path.isfile(gen_file):
        gen = _read_json(gen_file, "generation config")
        if not isinstance(gen, dict):
            raise CheckpointError(f"{gen_file!r} does not hold a JSON object")
        try:
            found += _ids(gen.get("eos_token_id"))
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"{gen_file!r}: malformed eos_token_id: {e}") from e
    found += _ids((config_json or {}).get("eos_token_id"))
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        found.append(int(tokenizer.eos_token_id))
    return tuple(dict.fromkeys(found))


def chat_end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template puts right after an assistant reply.

    E.g. ``<|eot_id|>`` (Llama-3), ``<|im_end|>`` (Qwen, SmolLM2),
    ``<end_of_turn>`` (Gemma), ``</s>`` (Mistral, Llama-2). None when the
    tokenizer has no chat template or the reply is not followed by a special
    token.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    marker = "wmspecReplyMarker"
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": marker}],
            tokenize=False)
    except Exception:  # templates may refuse this conversation shape
        return None
    if not isinstance(text, str) or marker not in text:
        return None
    after = text.split(marker, 1)[1]
    ids = tokenizer.encode(after, add_special_tokens=False) if after else []
    if not ids:
        return None
    special = set(tokenizer.all_special_ids) | {
        int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    return int(ids[0]) if ids[0] in special else None


def generation_eos_id(ckpt: Checkpoint, chat: bool) -> int | None:
    """The one id that ends a generated reply (the loop takes a single EOS).

    With ``chat`` and a chat template: the template's end-of-turn token
    (:func:`chat_end_of_turn_id`); otherwise the first of
    ``ckpt.stop_token_ids``, else the config's ``eos_token_id``.
    """
    if chat:
        eot = chat_end_of_turn_id(ckpt.tokenizer)
        if eot is not None:
            return eot
    if ckpt.stop_token_ids:
        return int(ckpt.stop_token_ids[0])
    eos = ckpt.config.eos_token_id
    return None if eos is None else int(eos)


def load_checkpoint(path: str | os.PathLike, dtype=jnp.float32, *,
                    tokenizer: bool = True, name: str | None = None,
                    mesh: jax.sharding.Mesh | None = None) -> Checkpoint:
    """Loads ``config.json`` + safetensors (+ tokenizer) from a local directory.

    Args:
      path: directory written by ``save_pretrained`` (or downloaded by hand).
      dtype: params dtype, e.g. ``jnp.bfloat16`` for large models.
      tokenizer: also load the tokenizer (fails if its files are missing).
      mesh: place the params tensor-parallel on this (data, model) mesh.

    Raises:
      CheckpointError: missing directory; missing, corrupt or malformed
        config, weights, generation config or tokenizer (the file is named).
      UnsupportedModelError: an architecture or config field that is not implemented.
    """
    path = os.fspath(path)
    config = read_config(path)
    params = load_params(path, config, dtype, mesh=mesh)
    tok = load_tokenizer(path) if tokenizer else None
    return Checkpoint(name=name or os.path.basename(os.path.normpath(path)),
                      config=config, params=params, tokenizer=tok,
                      stop_token_ids=stop_token_ids(path, tok, read_config_json(path)))


def _special_ids(tokenizer) -> set[int]:
    return set(map(int, tokenizer.all_special_ids)) | {
        int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}


def tokenizer_differences(draft_tok, target_tok, limit: int = 5) -> list[str]:
    """Human-readable differences in vocabulary (token -> id) and special tokens."""
    problems = []
    d_vocab, t_vocab = draft_tok.get_vocab(), target_tok.get_vocab()
    if d_vocab != t_vocab:
        diff = sorted(set(d_vocab.items()) ^ set(t_vocab.items()), key=str)[:limit]
        problems.append(f"the tokenizers map tokens to different ids (e.g. {diff})")
    d_special, t_special = _special_ids(draft_tok), _special_ids(target_tok)
    if d_special != t_special:
        only_d = sorted(d_special - t_special)[:limit]
        only_t = sorted(t_special - d_special)[:limit]
        problems.append(f"the special tokens differ (ids special only for the draft: {only_d}, "
                        f"only for the target: {only_t})")
    return problems


def check_compatible(draft: Checkpoint, target: Checkpoint) -> int:
    """Raises IncompatibleModelsError unless the draft can propose for the target.

    Speculative sampling compares the two next-token distributions entry by
    entry, so both must give each id the same meaning. With both tokenizers
    loaded they must agree on every token -> id and on which ids are special;
    the configs' ``vocab_size`` may then differ (Qwen2.5-0.5B pads to 151936,
    Qwen2.5-7B to 152064) as long as both cover the tokenizer. Without
    tokenizers the sizes must be equal.

    Returns:
      The common logit width W = max of the two vocab sizes.
    """
    dv, tv = draft.config.vocab_size, target.config.vocab_size
    if draft.tokenizer is not None and target.tokenizer is not None:
        problems = tokenizer_differences(draft.tokenizer, target.tokenizer)
        if problems:
            raise IncompatibleModelsError(
                f"vocabulary mismatch between draft {draft.name!r} and target {target.name!r}: "
                + "; ".join(problems))
        needed = len(target.tokenizer)
        if min(dv, tv) < needed:
            raise IncompatibleModelsError(
                f"vocabulary mismatch: the tokenizer has {needed} tokens but draft {draft.name!r} "
                f"has vocab_size={dv} and target {target.name!r} has vocab_size={tv}")
        return max(dv, tv)
    if dv != tv:
        raise IncompatibleModelsError(
            f"vocabulary mismatch: draft {draft.name!r} has vocab_size={dv} but target "
            f"{target.name!r} has vocab_size={tv}")
    return tv


def load_pair(target_dir: str | os.PathLike, draft_dir: str | os.PathLike,
              dtype=jnp.float32, mesh: jax.sharding.Mesh | None = None
              ) -> tuple[Checkpoint, Checkpoint]:
    """Loads (target, draft) from local directories and checks they are compatible.

    When the two pad one tokenizer to different sizes, both checkpoints get
    ``logit_width`` = the larger size (the extra logits are −inf; exact, see
    :func:`wmspec_jax.models.protocol.step`). ``mesh`` places both
    tensor-parallel.
    """
    target = load_checkpoint(target_dir, dtype, mesh=mesh)
    draft = load_checkpoint(draft_dir, dtype, mesh=mesh)
    width = check_compatible(draft, target)
    if width != target.config.vocab_size:
        target = dataclasses.replace(target, logit_width=width)
    if width != draft.config.vocab_size:
        draft = dataclasses.replace(draft, logit_width=width)
    return target, draft


def cast_params(params, dtype=None):
    """Casts a params pytree (e.g. to bfloat16) without changing its structure."""
    if dtype is None:
        return params
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


__all__ = ["Checkpoint", "CheckpointError", "IncompatibleModelsError", "LLAMA_LAYER_TENSORS", "cast_params",
           "chat_end_of_turn_id", "check_compatible", "generation_eos_id", "layer_tensor_map", "load_checkpoint",
           "load_pair", "load_params", "load_tokenizer", "read_config", "read_config_json", "stop_token_ids",
           "tokenizer_differences"]
