r"""``wmspec-detect --model``: model-assisted detection in the console tool: its flags, the pair loaded,
and what is refused before any text is read. The scoring itself is :mod:`wmspec_jax.lines.model_scoring`.

    wmspec-detect answers.jsonl --model=builtin                 # the built-in pair generated them
    wmspec-detect answers.jsonl --model=/ckpt/target --model_draft=/ckpt/draft

With ``--model`` every text with a prompt is scored by the model-assisted detector of its scheme
(:func:`wmspec_jax.detect.model_assisted.score_model_assisted`: Gumbel-max, SynthID, KGW), whose
per-token weights come from the generator's models, with an exact p-value; the key-only detectors of
``--detector`` are still run and listed beside it under ``results``, for comparison only: the line's
verdict is the model-assisted one (which detector decides depends on the line alone, never on its
keyed values, so there is no second chance to pass).

**The distributions generation sampled from.** Per text the pair's target P (and, for speculative
methods, the draft Q with its K in-step variants) is run once over prompt + text
(:func:`wmspec_jax.detect.model_replay.token_probs`, one batched forward pass per model and chunk of
``--model_batch_size`` texts), with the temperature and top-k the line records. The prompt is the
line's ``prompt``, encoded by the generator's own function (:func:`wmspec_jax.models.pairs.encode_prompts`,
chat template included) and checked against the line's ``prompt_length``: the kind (``question``
through the chat template, or ``text``) is the one whose encoding has that length, and a longer one is
shortened as ``--truncate_prompts`` shortened it. The statistics are computed over prompt + text with
``starts`` = the prompt's length, as generation keyed them. A line with a ``prompt`` but no
``prompt_length`` (a pasted answer given as ``{"prompt": ..., "text": ...}``) is asked as a question.
A text without a prompt (a plain pasted answer) keeps the key-only verdict, with a note once on stderr
and ``"model_assisted": "not applied: no prompt"`` in its line: after an empty question the model's
distributions are not those generation sampled from, and the weights they set drown the watermark (three
48-token answers of the built-in pair: log10 p −0.1, −1.8, −5.9 after an empty question, −15.9, −14.2,
−21.2 with their prompts, −2.1, −3.2, −7.5 key-only). Settings a line does not record
come from ``--method`` / ``--lookahead`` / ``--temperature`` / ``--top_k`` / ``--kgw_delta``, else
``wmspec-generate``'s defaults (said once on stderr); a flag that contradicts a line is an error naming
the line (``--ignore_provenance`` lets the flag win), as for the other settings.

**Refused before any text is scored** (each message names the flag): ``--model=toy`` (no text
tokenizer), a directory without ``config.json``, ``--model_draft`` / the model settings flags without
``--model``, ``--model`` with ``--scheme_config`` (another engine's watermark has no model-assisted
detector here), ``--windowed`` or ``--dedup=corpus`` (the model-assisted statistic is whole-text and
not deduplicated), a ``--tokenizer`` other than the model's own, a decoder without a model-assisted
detector (only ``gumbel``, ``synthid``, ``kgw``), a model whose tokenizer has more ids than its
vocabulary. Per line: a recorded ``model`` other than the loaded pair's (the target's alone for
methods without a draft), a recorded ``prompt`` whose encoding cannot have the recorded
``prompt_length``, multi-draft texts (no model-assisted detector), a speculative text without the draft,
temperature 0. The key never appears in any output or message.
"""

from __future__ import annotations

import math
import os

from absl import flags

from wmspec_jax.cli.texts import InputError
from wmspec_jax.lines import model_scoring as line_scoring
from wmspec_jax.lines.model_scoring import DEFAULTS, FAMILIES, ModelScorer, score_lines
SETTING_FLAGS = line_scoring.SETTINGS
MODEL_FLAGS = ("model_draft", "model_dtype", "model_batch_size") + SETTING_FLAGS


def define_flags(fv: flags.FlagValues) -> None:
    """``--model`` and the flags that only apply with it."""
    from wmspec_jax.methods import METHODS

    flags.DEFINE_string("model", None, "score with the generator's models (model-assisted detection, exact "
                        "p-values, more power on low-entropy text): 'builtin' or a local Hugging Face checkpoint "
                        "directory, the generator's --target", flag_values=fv)
    flags.DEFINE_string("model_draft", None, "with --model: the generator's --draft (default: 'builtin' with "
                        "--model=builtin; a directory's texts of speculative methods need it)", flag_values=fv)
    flags.DEFINE_enum("model_dtype", "float32", ["float32", "bfloat16"], "with --model: the generator's --dtype",
                      flag_values=fv)
    flags.DEFINE_integer("model_batch_size", 4, "with --model: texts per forward pass", lower_bound=1,
                         flag_values=fv)
    flags.DEFINE_enum("method", None, sorted(METHODS), "with --model: the generation method of texts that do "
                      "not record it (default pseudorandom)", flag_values=fv)
    flags.DEFINE_integer("lookahead", None, "with --model: the generator's K for texts that do not record it "
                         "(default 3)", lower_bound=1, flag_values=fv)
    flags.DEFINE_float("temperature", None, "with --model: the sampling temperature of texts that do not record "
                       "it (default 1)", flag_values=fv)
    flags.DEFINE_integer("top_k", None, "with --model: the top-k of texts that do not record it (0: none, the "
                         "default)", lower_bound=0, flag_values=fv)
    flags.DEFINE_float("kgw_delta", None, "with --model: KGW's delta for texts that do not record it (default 2)",
                       flag_values=fv)


def tokenizer_spec(fv) -> str:
    """The tokenizer ``wmspec-detect`` loads: the model's own with ``--model`` (checked), else ``--tokenizer``."""
    if fv.model is None:
        return fv.tokenizer
    if fv["tokenizer"].present and fv.tokenizer != fv.model:
        raise InputError(f"--model={fv.model} tokenises with its own tokenizer; --tokenizer={fv.tokenizer} names "
                         "another (drop --tokenizer)")
    return fv.model


def check_flags(fv) -> None:
    """Everything ``--model`` refuses before anything loads (module doc); InputError naming the flag."""
    if fv.model is None:
        given = [f"--{name}" for name in MODEL_FLAGS if fv[name].present]
        if given:
            raise InputError(f"{', '.join(given)}: only with --model (model-assisted detection)")
        return
    spec = fv.model
    if fv.scheme_config is not None:
        raise InputError(f"--model={spec}: another engine's watermark (--scheme_config) has no model-assisted "
                         "detector here; drop one of the two")
    if fv.windowed:
        raise InputError(f"--model={spec}: the model-assisted detector scores whole texts; drop --windowed")
    if fv.dedup != "none":
        raise InputError(f"--model={spec}: --dedup={fv.dedup} is for the key-only detectors; drop one of the two")
    if fv["decoder"].present and fv.decoder not in FAMILIES:
        raise InputError(f"--model={spec}: --decoder={fv.decoder} has no model-assisted detector (one of "
                         f"{', '.join(FAMILIES)})")
    if fv.temperature is not None and not (math.isfinite(fv.temperature) and fv.temperature > 0):
        raise InputError(f"--temperature must be a finite number > 0, got {fv.temperature}")
    if fv.kgw_delta is not None and not (math.isfinite(fv.kgw_delta) and fv.kgw_delta >= 0):
        raise InputError(f"--kgw_delta must be a finite number >= 0, got {fv.kgw_delta}")
    if fv.lookahead is not None:
        from wmspec_jax import speculative

        if fv.lookahead > speculative.MAX_LOOKAHEAD:  # wmspec-generate's bound: each draft is a model pass
            raise InputError(f"--lookahead={fv.lookahead} exceeds {speculative.MAX_LOOKAHEAD}, the most "
                             "wmspec-generate drafts per step")
    for flag, value in (("--model", spec), ("--model_draft", fv.model_draft)):
        if value is None or value == "builtin" or value.startswith("builtin:"):
            continue
        if value == "toy":
            raise InputError(f"{flag}=toy: the toy pair has no text tokenizer; use builtin or a local checkpoint")
        if not os.path.isdir(value):
            raise InputError(f"{flag}={value}: model directory not found (give 'builtin' or a local Hugging Face "
                             "checkpoint directory)")
        if not os.path.isfile(os.path.join(value, "config.json")):
            raise InputError(f"{flag}={value}: no config.json (not a Hugging Face checkpoint directory)")
    builtin_draft = fv.model_draft is not None and fv.model_draft.split(":")[0] == "builtin"
    if fv.model_draft is not None and (spec == "builtin") != builtin_draft:
        raise InputError(f"--model={spec} --model_draft={fv.model_draft}: the built-in target takes a built-in "
                         "draft ('builtin', 'builtin:f3', 'builtin:PATH'), a checkpoint directory another one")


def load(fv, vocab: int, stderr) -> ModelScorer:
    """The pair ``--model`` / ``--model_draft`` / ``--model_dtype`` name (:func:`wmspec_jax.models.pairs.load_pair`),
    checked against the tokenizer's ``vocab``; InputError naming the flag."""
    from wmspec_jax.models import pairs
    from wmspec_jax.models import hf

    check_flags(fv)
    spec = fv.model
    has_draft = spec == "builtin" or fv.model_draft is not None
    try:
        pair = pairs.load_pair(spec, fv.model_draft or spec, fv.model_dtype) if has_draft else \
            pairs.load_target(spec, fv.model_dtype)  # the target alone, loaded once
    except (ValueError, OSError, hf.CheckpointError) as e:  # unreadable, unsupported or mismatched checkpoints
        raise InputError(f"--model={spec}: {e}") from None
    if vocab > pair.vocab_size:
        raise InputError(f"--model={spec}: its tokenizer has {vocab} ids but the model's vocabulary only "
                         f"{pair.vocab_size}: not the model of these texts")
    given = {name: fv[name].value for name in SETTING_FLAGS if fv[name].present}
    if given.get("top_k") == 0:
        given["top_k"] = None
    from wmspec_jax.cli import flags as cli_flags

    def say(text: str) -> None:
        print(f"wmspec-detect: note: {cli_flags.flag_names(text)}", file=stderr)

    return ModelScorer(pair, spec, has_draft, given, fv.ignore_provenance, fv.model_batch_size, say)


__all__ = ["DEFAULTS", "FAMILIES", "MODEL_FLAGS", "ModelScorer", "SETTING_FLAGS", "check_flags", "define_flags",
           "load", "score_lines", "tokenizer_spec"]
