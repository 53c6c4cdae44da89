r"""``wmspec-generate``: watermarked text from prompts, as JSONL (the other half of ``wmspec-detect``).

    export WMSPEC_SECRET=...                         # or --secret_file=PATH; never on the command line
    wmspec-generate prompts.txt --output=out.jsonl   # one prompt per line; Alg. 1, Gumbel-max, built-in pair
    echo "Why is the sky blue?" | wmspec-generate --max_new_tokens=64
    wmspec-generate --input=questions.jsonl --prompt_field=question --decoder=synthid --method=basic \
        --target=/ckpt/Llama-2-7b-hf --draft=/ckpt/llama-68m --output=out.jsonl

(also ``python -m wmspec_jax.cli.generate``). Prompts come from text files
(one prompt per non-empty line), JSONL files (the prompt in
``--prompt_field``) or standard input. ``--prompt_kind=question`` (default)
asks through the tokenizer's chat template; generation stops at the model's
end-of-turn token (``--nostop_at_eos``: always ``--max_new_tokens``). The
method (``--method``: ``pseudorandom`` = Alg. 1, ``basic``, ``dathathri``,
``hu``, ``standard``, ``plain``), decoder (``gumbel`` / ``synthid``, m),
temperature, top-k and K are flags; the pair is ``builtin`` (SmolLM2-135M +
its distilled draft, no download) or local Hugging Face checkpoints.
``--num_drafts=n`` verifies n draft chains per step, ``--draft_tree=3x2x1`` a
static draft tree (K = its depth), ``--distinct_drafts`` draws siblings
without replacement (multi-draft sampling, ``docs/multidraft.md``); their
lines carry ``draft_tree`` and each token's sibling (``candidate``), and
``wmspec-detect`` scores them over the sibling streams.

Each output line is one text line of :mod:`wmspec_jax.text_record` (its
format version, ``id``, ``run``, ``index``, the generated token ids with the
end-of-turn token, each token's source, steps, AATPS, LOGPPL, watermarked
tokens, why it stopped; the experiments' records hold the same) with
``prompt``, ``text`` (the decoded tokens, normalised as ``wmspec-detect``
normalises every text it reads: :mod:`wmspec_jax.textnorm`; prompts are
normalised the same way before they are tokenised, so a BOM or a CRLF in a
prompt file does not change the answer), whether it carries a watermark
(``watermarked``; false for ``plain`` / ``standard``, at temperature 0, and for
a text none of whose tokens was drawn from a distribution that was not
one-hot, e.g. at a temperature of 1e-10, with the reason), and every
setting detection needs (decoder, m, h, method, temperature, model,
tokenizer, the key's fingerprint — never the key — its derivation and the
PRF version).

**Keys.** ``--keys=deployment`` (default): every text is watermarked with
one key per secret (``Secret.stream_keys()``, derivation ``direct``), so an
answer pasted into a file is detected by ``wmspec-detect`` with the secret
alone. The watermark is then a deterministic function of the secret and the
context: the same prompt at the same settings gives the same text (repeated
prompts in one input are reported). ``--keys=per_text``: text ``index`` of
run ``run`` gets ``keys.text_keys(secret, [index], run)`` (the experiments'
keys: independent draws for every text; detection needs the line's ``run``
and ``index``, which ``wmspec-detect`` reads from the JSONL, or ``--run`` /
``--index`` for plain text). The run name defaults to a fresh
``gen-<UTC time>-<random>``. Methods that draw no watermark (``plain``,
``standard``) need no key.

With ``--output`` each batch is appended (fsynced) as it finishes; rerunning
with the same ``--run`` resumes (the settings must match; lines that cannot be
read or lack a run / index are skipped with a report and stay in the file);
the file is locked against a second writer and may not be one of the inputs.
The flags become one generation setting (:class:`wmspec_jax.setting.Setting`,
whose record is the settings part of each line) before any model loads; its
rules and the sizes are checked then (K at most ``--max_new_tokens`` and 32, a
finite temperature, text indices below 2^32, at most
:data:`wmspec_jax.multidraft.MAX_PATHS` = 64 draft paths from ``--num_drafts`` or
``--draft_tree``), each message naming the flag given. Progress goes to stderr.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
import time
from typing import Optional, Sequence

from absl import flags

from wmspec_jax import keys, scheme_defaults, text_record
from wmspec_jax import prf_keys as prf
from wmspec_jax.cli import deployment_flags
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.cli.texts import InputError, read_inputs
from wmspec_jax.textnorm import normalize_text

PROG = "wmspec-generate"
KEY_MODES = ("deployment", "per_text")
RNG_INDEX_LIMIT = 2 ** 32  # text indices stay below it: they key the true randomness as uint32 (sampling.text_rngs)
PER_TEXT_FIELDS = ("watermarked", "not_watermarked_because")  # also decided by the text, not the settings alone


def define_flags(fv: flags.FlagValues) -> None:
    from wmspec_jax.methods import METHODS
    from wmspec_jax.setting import DEFAULTS  # the generation setting's defaults are the flags'

    cli_flags.define_input_flags(fv, what="prompt", text_format="one prompt per non-empty line", field="prompt")
    flags.DEFINE_enum("prompt_kind", "question", ["question", "text"], "question: through the chat template; "
                      "text: plain text to continue", flag_values=fv)
    cli_flags.define_pair_flags(fv)
    cli_flags.define_secret_flags(fv, demo_flag=True)
    flags.DEFINE_enum("method", DEFAULTS["method"], sorted(METHODS), "generation method (pseudorandom = Alg. 1)",
                      flag_values=fv)
    flags.DEFINE_enum("keys", "deployment", list(KEY_MODES), "deployment: one key per secret for every text (a "
                      "pasted answer is detected with the secret alone; the same prompt gives the same text); "
                      "per_text: the experiments' per-(run, index) keys (detection needs run and index)",
                      flag_values=fv)
    flags.DEFINE_integer("lookahead", DEFAULTS["lookahead"], "K drafts per step (speculative methods; 0 for "
                         "basic / plain)", lower_bound=0, flag_values=fv)
    flags.DEFINE_integer("num_drafts", DEFAULTS["num_drafts"], "n draft chains of K tokens verified together per "
                         "step (multi-draft sampling; speculative methods)", lower_bound=1, flag_values=fv)
    flags.DEFINE_string("draft_tree", None, "a static draft tree: children per node at each depth, e.g. 3x2x1 "
                        "(its depth is K; instead of --num_drafts)", flag_values=fv)
    flags.DEFINE_bool("distinct_drafts", DEFAULTS["distinct_drafts"], "draw the siblings of a node without "
                      "replacement (--num_drafts / --draft_tree)", flag_values=fv)
    flags.DEFINE_list("decoder_option", [], "settings of a registered scheme beyond the flags below, as "
                      "name=value (values read as JSON, else as text)", flag_values=fv)
    flags.DEFINE_float("dipmark_alpha", scheme_defaults.DIPMARK_ALPHA, "DiPmark's alpha in [0, 1/2] "
                       "(--decoder=dipmark)", flag_values=fv)
    flags.DEFINE_float("kgw_gamma", scheme_defaults.KGW_GAMMA, "KGW's green fraction gamma in (0, 1) (--decoder=kgw)",
                       flag_values=fv)
    flags.DEFINE_float("kgw_delta", scheme_defaults.KGW_DELTA, "KGW's logit bias delta in [0, 64] (--decoder=kgw)",
                       flag_values=fv)
    cli_flags.define_scheme_flags(
        fv, decoder_help=f"watermark decoder: {', '.join(cli_flags.DECODER_NAMES)} (gamma_reweight: DiPmark with "
        "alpha 1/2), or a scheme registered with wmspec_jax.decoders.register",
        draft_decoder_help="the draft stream's decoder when it differs from --decoder (hu, dathathri, "
        "pseudorandom; its settings from the same flags)")
    flags.DEFINE_string("scheme_config", None, "generate with another engine's watermark, its pseudorandom "
                        "function keying the target stream: a JSON file of transformers' "
                        "SynthIDTextWatermarkingConfig or WatermarkingConfig (lefthash) or vLLM's "
                        "--watermark-config ('gumbel'; 'dual_key_gumbel' with a method that drafts); it holds the "
                        "engine's key (as secret as --secret_file); the engine's detector, or wmspec-detect "
                        "--scheme_config=FILE, scores the texts", flag_values=fv)
    flags.DEFINE_integer("key_sequence", DEFAULTS["key_sequence"], "key the streams by a key sequence of this "
                         "length n with a random offset per text (Kuditipudi et al.; 256 is theirs; edit-robust "
                         "detection), not by context; 0: by context", lower_bound=0, flag_values=fv)
    flags.DEFINE_float("temperature", DEFAULTS["temperature"], "sampling temperature of P and Q", lower_bound=0.0,
                       flag_values=fv)
    flags.DEFINE_float("draft_temperature", None, "the draft's own temperature for Q (speculative methods; the "
                       "text's law stays P at --temperature, Thm 4.1); default: --temperature", lower_bound=0.0,
                       flag_values=fv)
    flags.DEFINE_integer("top_k", 0, "top-k of P and Q (0: none)", lower_bound=0, flag_values=fv)
    flags.DEFINE_integer("max_new_tokens", 128, "most generated tokens per text", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("max_prompt_tokens", 256, "longest prompt (tokens)", lower_bound=1, flag_values=fv)
    flags.DEFINE_bool("truncate_prompts", False, "shorten longer prompts from the start of their text (BOS and "
                      "the chat template kept) instead of refusing them", flag_values=fv)
    flags.DEFINE_bool("stop_at_eos", True, "stop a text at the model's end-of-turn token", flag_values=fv)
    flags.DEFINE_integer("batch_size", 8, "texts per generation call (fewer texts: that many rows)", lower_bound=1,
                         flag_values=fv)
    flags.DEFINE_integer("seed", 0, "seed of the true randomness (repeated contexts, the baselines' coins)",
                         lower_bound=0, flag_values=fv)
    flags.DEFINE_string("run", None, "run name keying the texts (default: a fresh gen-<time>-<random>); "
                        "the same --run resumes --output", flag_values=fv)
    flags.DEFINE_integer("first_index", 0, "text index of the first prompt", lower_bound=0, flag_values=fv)
    flags.DEFINE_string("output", None, "append the JSONL here (resumable, locked; a regular file or a new path, "
                        "never a link or a device); '-' or none: stdout",
                        flag_values=fv)
    deployment_flags.define_generate_flags(fv)


def _secret(fv, stderr) -> Optional[keys.Secret]:
    """The secret, or None for a method that draws no watermark or another engine's watermark
    (``--scheme_config``: its file holds the key)."""
    from wmspec_jax.methods import METHODS

    if not METHODS[fv.method].watermarks or fv.scheme_config is not None:
        return None
    try:
        return cli_flags.tool_secret(fv, PROG, stderr)
    except ValueError as e:
        raise InputError(str(e)) from None


def _decoder_options(fv) -> dict:
    """``--decoder_option`` as {name: value}: JSON values (numbers, true/false, null, strings in quotes),
    else the text itself."""
    out = {}
    for item in fv.decoder_option:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--decoder_option takes name=value, got {item[:40]!r}")
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            out[name.strip()] = text
    return out


def _named_decoder(fv, name: str, flag: str):
    """The scheme ``name`` built from the settings flags; InputError naming the flags on a bad setting."""
    from wmspec_jax import decoders

    if name not in decoders.names():
        raise InputError(f"--{flag}={name}: unknown decoder; known: {', '.join(decoders.names())}")
    try:
        return decoders.make(name, fv.synthid_layers, fv.dipmark_alpha, fv.kgw_gamma, fv.kgw_delta,
                             _decoder_options(fv))
    except (TypeError, ValueError) as e:
        flags_ = ", ".join("--decoder_option" if f == "decoder_options" else f"--{f}"
                           for f in decoders.scheme_class(name).record_fields)
        raise InputError(f"--{flag}={name}: {e}" + (f" (its settings: {flags_})" if flags_ else "")) from None


SCHEME_FLAGS = ("decoder", "draft_decoder", "decoder_option", "synthid_layers", "dipmark_alpha", "kgw_gamma",
                "kgw_delta", "key_sequence", "keys", "secret_file", "demo_secret")
"""Flags that name our own watermark's scheme or key: another engine's (``--scheme_config``) takes none."""


def _foreign(fv):
    """The engine configuration of ``--scheme_config`` (:class:`wmspec_jax.interop.foreign.ForeignScheme`), or None."""
    if fv.scheme_config is None:
        return None
    from wmspec_jax.interop import foreign

    given = [f"--{name}" for name in SCHEME_FLAGS if name in fv and fv[name].present]
    if given:
        raise InputError(f"--scheme_config: another engine's watermark has its own scheme and key; drop "
                         f"{', '.join(given)}")
    try:
        stat = os.stat(fv.scheme_config)
        key = (fv.scheme_config, stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None
    if key is None or key not in _FOREIGN:  # read once per run: the flags' setting and the keys use it
        try:
            scheme = foreign.load(fv.scheme_config)
            scheme.decoder()
        except ValueError as e:
            raise InputError(f"--scheme_config: {e}") from None
        _FOREIGN.clear()
        _FOREIGN[key] = scheme
    return _FOREIGN[key]


_FOREIGN: dict = {}


def _decoder(fv):
    scheme = _foreign(fv)
    return _named_decoder(fv, fv.decoder, "decoder") if scheme is None else scheme.decoder()


def _draft_decoder(fv):
    if fv.draft_decoder is None:
        return None
    return _named_decoder(fv, fv.draft_decoder, "draft_decoder")


def _drafts(fv) -> str:
    """The draft shape of --num_drafts / --draft_tree / --distinct_drafts as text, as the experiments write it
    (:func:`wmspec_jax.multidraft.parse_shape`): "1" one chain, "3" three chains, "3x2x1" a tree, a trailing
    "d" for distinct siblings."""
    if fv.draft_tree is not None and fv.num_drafts > 1:
        raise InputError("--num_drafts / --draft_tree: give one of them (--num_drafts=n is the tree n x 1 x ... x 1)")
    text = str(fv.num_drafts)
    if fv.draft_tree is not None:
        text = re.sub(r"\s+", "", fv.draft_tree).replace(",", "x").lower()
        if not re.fullmatch(r"[0-9]+(x[0-9]+)*", text):
            raise InputError(f"--draft_tree={fv.draft_tree!r}: expected children per depth like 3x2x1")
    return text + ("d" if fv.distinct_drafts else "")


def _setting(fv, stderr):
    """The generation setting of the flags (:class:`wmspec_jax.setting.Setting`), built once before any model
    loads; what cannot be right is refused with a message naming the flags given (module doc). Its warnings
    (temperature 0: nothing is embedded) go to ``stderr``."""
    import warnings

    from wmspec_jax import decoders, multidraft, speculative
    from wmspec_jax.setting import Setting

    for name in ("temperature", "draft_temperature"):
        value = fv[name].value
        if value is None:
            continue
        if not math.isfinite(value):
            raise InputError(f"--{name} must be a finite number >= 0, got {value}")
        try:
            decoders.check_temperature(value)
        except ValueError as e:
            raise InputError(f"--{name}: {e}") from None
    method = speculative.METHODS[fv.method]
    drafts = _drafts(fv)
    shape = multidraft.parse_shape(drafts)
    k = 0  # a method that does not speculate, unless --lookahead says otherwise (then refused)
    if method.speculative or fv["lookahead"].present:
        k = fv.lookahead if fv["lookahead"].present or "draft_tree" not in shape else len(shape["draft_tree"])
    if method.speculative and k > min(fv.max_new_tokens, speculative.MAX_LOOKAHEAD):
        raise InputError(f"--lookahead={k} exceeds --max_new_tokens={fv.max_new_tokens} or "
                         f"{speculative.MAX_LOOKAHEAD}: a step drafts K tokens one forward at a time")
    if fv.draft_decoder is not None and not method.watermark_draft:
        raise InputError(f"--draft_decoder: --method={fv.method} draws no watermarked draft token")
    decoder, draft = _decoder(fv), _draft_decoder(fv)
    if getattr(decoder, "dual_key", False) and not method.watermark_draft:
        raise InputError(f"--scheme_config: vLLM's dual_key_gumbel draws drafts with key A and the target's tokens "
                         f"with key B; --method={fv.method} draws no watermarked draft (use pseudorandom, "
                         "dathathri or hu)")
    if (decoder.target_stream_statistic or (draft is not None and draft.target_stream_statistic)) \
            and draft not in (None, decoder):
        raise InputError(f"--decoder={fv.decoder} / --draft_decoder={fv.draft_decoder}: one stream, the target's, "
                         "keys every token of that scheme; it takes no other decoder for the draft")
    if fv.context_width > prf.MAX_CONTEXT_WIDTH:
        raise InputError(f"--context_width={fv.context_width} exceeds {prf.MAX_CONTEXT_WIDTH}")
    width = fv.context_width
    if decoder.own_context_width is not None:  # the engine's n-gram
        if fv["context_width"].present and width != decoder.own_context_width:
            raise InputError(f"--context_width={width}: --scheme_config's watermark reads the "
                             f"{decoder.own_context_width} previous tokens")
        width = decoder.own_context_width
    _check_draft_shape_size(fv, shape)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            setting = Setting.from_shape(fv.method, decoder, k, drafts, draft_decoder=draft,
                                         temperature=fv.temperature, draft_temperature=fv.draft_temperature,
                                         top_k=fv.top_k or None,
                                         context_width=width, key_sequence=fv.key_sequence)
        except (ValueError, TypeError) as e:
            raise InputError(_rule_flags(fv, str(e)) + str(e)) from None
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=stderr)
    return setting


def _rule_flags(fv, message: str) -> str:
    """The flags a refused rule of the setting concerns, as a message prefix: its key sequence (a length the
    package keys, a decoder the edit test scores) or its draft shape (a speculative method, the tree's depth
    = K, no KGW); the other rules name their fields themselves."""
    if fv.key_sequence and "key_sequence" in message:
        return f"--key_sequence={fv.key_sequence}: "
    if re.search(r"num_drafts|draft_tree|distinct_drafts", message):
        return "--num_drafts / --draft_tree / --distinct_drafts: "
    return ""


def _config(fv, pair, setting=None):
    """The loop's config: the flags' setting with the pair's stop and pad ids (known once the pair loads)."""
    setting = setting or _setting(fv, sys.stderr)
    return setting.config(fv.max_new_tokens, pair.eos_id if fv.stop_at_eos else None, pair.pad_id)


def _open_output(fv, run: str, stderr):
    """(store or None, lock or None, done indices): resumes ``--output`` of the same run. Lines that
    are not records of a text (no string ``run``, no int ``index``) are reported and left alone."""
    from wmspec_jax import storage
    from wmspec_jax.cli import outputs, path_guards

    if fv.output is None or fv.output == outputs.STDOUT:  # the path was checked before any model loaded
        return None, None, {}
    lock = storage.FileLock(fv.output)  # a lock file beside it: deleting the output lets no second writer in
    try:
        path_guards.repair_torn_line("--output", fv.output, PROG, lambda note: print(f"{PROG}: {note}", file=stderr))
        store = storage.JsonlStore(fv.output, lock=False)
    except BaseException:
        lock.release()
        raise
    if store.load_report():
        print(f"{PROG}: {store.load_report()}", file=stderr)
    usable, unusable = [], []
    for rec in store.values():
        try:
            text_record.check_format(rec, f"{fv.output}: line {rec.get('id')!r}"[:200])
        except text_record.FormatError as e:
            lock.release()
            raise InputError(f"--output={e}; choose another --output") from None
        index = rec.get("index")
        ok = isinstance(rec.get("run"), str) and isinstance(index, int) and not isinstance(index, bool)
        (usable if ok else unusable).append(rec)
    if unusable:
        shown = ", ".join(repr(r.get("id"))[:40] for r in unusable[:5])
        print(f"{PROG}: {fv.output}: skipped {len(unusable)} record(s) without a run and an integer index "
              f"(ids {shown}); they stay in the file", file=stderr)
    runs_in = {r["run"] for r in usable}
    if usable and run not in runs_in:
        lock.release()
        hint = f" (its run: {sorted(runs_in)[0]})" if len(runs_in) == 1 else ""
        raise InputError(f"--output={fv.output} already holds texts of another run{hint}: pass that --run to "
                         "resume it, or choose another --output")
    return store, lock, {r["index"]: r for r in usable if r["run"] == run}


FOREIGN_DERIVATION = "engine"
"""``key_derivation`` of a text generated with another engine's watermark (``--scheme_config``)."""


def _derivation(fv, secret) -> Optional[str]:
    if secret is None:
        return None
    return keys.DIRECT if fv.keys == "deployment" else keys.KEY_DERIVATION


def _watermark_record(fv, setting) -> dict:
    """``watermarked`` and, when false, why: what a reader of the saved lines must know."""
    if not setting.spec.watermarks:
        return {"watermarked": False, "not_watermarked_because": f"method {fv.method} draws no watermark"}
    if setting.temperature == 0:
        return {"watermarked": False,
                "not_watermarked_because": "temperature 0: every distribution is one-hot"}
    return {"watermarked": True}


def _settings_record(fv, pair, secret, setting) -> dict:
    """The settings every output line carries (a resumed run must keep them): the setting's record
    (:meth:`wmspec_jax.setting.Setting.to_record`, the decoders under the names the flags gave) and the tool's."""
    foreign = _foreign(fv)
    record = setting.to_record(*((fv.decoder, fv.draft_decoder) if foreign is None else ()))
    version = record.pop("prf_version")
    fingerprint = secret.fingerprint if secret is not None else foreign.fingerprint if foreign is not None else None
    return {**record, "max_new_tokens": fv.max_new_tokens, "stop_at_eos": fv.stop_at_eos, "model": pair.name,
            "tokenizer": fv.target, "seed": fv.seed, "key_fingerprint": fingerprint,
            "key_derivation": FOREIGN_DERIVATION if foreign is not None else _derivation(fv, secret),
            "prf_version": version, **_watermark_record(fv, setting)}


def _records(fv, run, pair, prompts, where, texts, settings: dict) -> list:
    """Output lines (:func:`wmspec_jax.text_record.generation_line`): each text's own fields, its prompt,
    the decoded text and the settings (:func:`_settings_record`)."""
    return [text_record.generation_line(
        t, run, input=where[t.index - fv.first_index], prompt=prompts[t.index - fv.first_index],
        text=normalize_text(pair.decode(list(t.tokens))), num_tokens=len(t.tokens),
        **{**settings, **_text_watermark(settings, t)}, draft_fraction=t.draft_fraction) for t in texts]


def _text_watermark(settings: dict, text) -> dict:
    """``watermarked`` of one text: the settings' answer, unless no token of the text was drawn from a
    distribution that was not one-hot (a temperature so low that sampling is greedy: nothing was embedded)."""
    if settings["watermarked"] and text.watermarked_tokens == 0:
        return {"watermarked": False, "not_watermarked_because": (
            f"no token was drawn from a distribution that was not one-hot (temperature {settings['temperature']}: "
            "the text is the greedy answer)")}
    return {}


def _check_indices(fv, num_texts: int) -> None:
    if fv.first_index + num_texts > RNG_INDEX_LIMIT:
        raise InputError(f"--first_index={fv.first_index}: text indices must stay below 2^32 "
                         f"({num_texts} texts)")


def _check_draft_shape_size(fv, shape: dict) -> None:
    """--num_drafts and --draft_tree (their :func:`wmspec_jax.multidraft.parse_shape` keywords ``shape``)
    against the one cap of multi-draft sampling (:data:`wmspec_jax.multidraft.MAX_PATHS` paths)."""
    from wmspec_jax import multidraft

    if fv.num_drafts > multidraft.MAX_PATHS:
        raise InputError(f"--num_drafts={fv.num_drafts} exceeds {multidraft.MAX_PATHS}: a step verifies at most "
                         f"{multidraft.MAX_PATHS} draft paths")
    tree = shape.get("draft_tree")
    if tree is not None:
        if not tree or any(b < 1 for b in tree):
            raise InputError(f"--draft_tree={fv.draft_tree}: every depth needs at least one child per node")
        if math.prod(tree) > multidraft.MAX_PATHS:
            raise InputError(f"--draft_tree={fv.draft_tree} has {math.prod(tree)} paths; at most "
                             f"{multidraft.MAX_PATHS}")


def _report_repeated_prompts(fv, texts: Sequence[str], where: Sequence[str], stderr) -> None:
    if fv.keys != "deployment":
        return
    first: dict = {}
    repeats = []
    for t, w in zip(texts, where):
        if t in first:
            repeats.append((first[t], w))
        first.setdefault(t, w)
    if repeats:
        shown = "; ".join(f"{w} repeats {f}" for f, w in repeats[:3])
        print(f"{PROG}: warning: {len(repeats)} repeated prompt(s) ({shown}): with --keys=deployment a prompt "
              "gives the same text every time at these settings; --keys=per_text draws independent texts",
              file=stderr)


def _check_output(fv, paths: Sequence[str], stdin) -> None:
    """``--output`` before any work: its kind, not an input nor any file the run reads (nor is its lock
    file), and an existing file only when it holds this tool's own lines (:mod:`.outputs`, :mod:`.path_guards`)."""
    from wmspec_jax.cli import outputs, path_guards

    outputs.check_output_path("--output", fv.output, list(fv.input) + list(paths), stdin=stdin,
                              consequence="the generated lines would be written into it")
    path_guards.check_output(fv, "--output", fv.output, paths, PROG, locked=True, written=("deployment",))


def generate_texts(fv, paths: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """Runs the tool on parsed flags; returns the number of texts generated now."""
    from wmspec_jax import batching, sampling, storage
    from wmspec_jax.models import pairs

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    all_paths = list(fv.input) + list(paths)
    _check_output(fv, paths, stdin)
    secret = _secret(fv, stderr)
    inputs = read_inputs(all_paths, fmt=fv.input_format, field=fv.prompt_field, unit="line", stdin=stdin)
    inputs = [x for x in inputs if x.text.strip()]
    setting = _setting(fv, stderr)  # every refusal of the settings before a model loads
    _check_indices(fv, len(inputs))
    if pairs.TOY in (fv.target, fv.draft):
        raise InputError("--target=toy: the toy pair has no text tokenizer; use builtin or local checkpoints")
    try:
        pairs.check_pair_spec(fv.target, fv.draft, fv.dtype)
    except (ValueError, FileNotFoundError) as e:
        raise InputError(str(e)) from None
    run = fv.run or f"gen-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"
    store, lock, done = _open_output(fv, run, stderr)
    recorder = None
    try:
        t0 = time.perf_counter()
        pair = pairs.load_pair(fv.target, fv.draft, fv.dtype)
        keyed = "no watermark key" if secret is None else f"key fingerprint {secret.fingerprint} ({fv.keys} keys)"
        if fv.scheme_config is not None:
            keyed = f"{_foreign(fv).name} watermark, key fingerprint {_foreign(fv).fingerprint}"
        print(f"{PROG}: pair {pair.name} loaded in {time.perf_counter() - t0:.1f} s; run {run}; {keyed}",
              file=stderr)
        config = _config(fv, pair, setting)
        settings = _settings_record(fv, pair, secret, setting)
        texts = [x.text for x in inputs]
        where = [x.where for x in inputs]
        _report_repeated_prompts(fv, texts, where, stderr)
        prompts, lengths = pairs.encode_prompts(pair, texts, fv.prompt_kind, fv.max_prompt_tokens,
                                                too_long="truncate" if fv.truncate_prompts else "error")
        indices = [fv.first_index + i for i in range(len(texts))]
        for i, rec in done.items():
            if fv.first_index <= i < fv.first_index + len(texts):
                now = {"prompt": texts[i - fv.first_index], **settings}
                changed = {k: (rec.get(k), v) for k, v in now.items()
                           if rec.get(k) != v and k not in PER_TEXT_FIELDS}
                if changed:
                    raise InputError(f"--output={fv.output}: text {i} of run {run} was generated with other settings "
                                     f"{sorted(changed)}; use another --run or --output")
        todo = [i for i in indices if i not in done]
        recorder = deployment_flags.Recorder(fv, secret, run, settings, all_paths, stderr, PROG)
        recorder.add([rec for i, rec in done.items() if fv.first_index <= i < fv.first_index + len(texts)])
        if done:
            print(f"{PROG}: resuming run {run}: {len(indices) - len(todo)} of {len(indices)} texts already in "
                  f"{fv.output}", file=stderr)
        progress = storage.Progress(len(todo), PROG, stream=stderr)
        rows = [i - fv.first_index for i in todo]
        batches = batching.generate_in_batches(
            pair.target, pair.target_params, prompts[rows], lengths[rows], todo, config,
            stream_keys=lambda idx: _text_keys(fv, secret, idx, run),
            rngs=lambda idx: sampling.text_rngs(fv.seed, idx, run=run),
            batch_size=max(1, min(fv.batch_size, len(todo))),  # one prompt: one row, not a padded batch
            draft=pair.draft, draft_params=pair.draft_params)
        for batch in batches:
            recs = _records(fv, run, pair, texts, where, batch.texts, settings)
            if store is not None:
                store.add(recs)
            else:
                stdout.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
                stdout.flush()
            recorder.add(recs)
            progress.update(len(recs))
        return len(todo)
    finally:
        if recorder is not None:  # the texts written so far, also when the run stops early
            recorder.write()
        if lock is not None:
            lock.release()


def _text_keys(fv, secret, indices, run: str):
    if fv.scheme_config is not None:  # another engine's: its configuration keys every stream
        return _foreign(fv).stream_keys()
    if secret is None:  # a method without a watermark: the key is never read
        return keys.Secret(keys.DEMO_SECRET).stream_keys()
    if fv.keys == "deployment":
        return secret.stream_keys()
    return keys.text_keys(secret, indices, run=run)


def run(argv: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """The tool: parses ``argv`` (``argv[0]`` is the program name) and returns the exit status."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    fv, status, paths = cli_flags.parse_tool(define_flags, __doc__, argv, PROG, stdout, stderr)
    if status is not None:
        return status
    from wmspec_jax import storage
    from wmspec_jax.models import hf

    if fv.scheme_config is None:  # another engine's key is a constant of the compiled loop: not kept on disk
        cli_flags.enable_compilation_cache()
    try:
        n = generate_texts(fv, paths, stdin=stdin, stdout=stdout, stderr=stderr)
    except (InputError, ValueError, TypeError, OSError, storage.OutputDirLocked, hf.CheckpointError) as e:
        return cli_flags.refuse(PROG, e, stderr)
    print(f"{PROG}: generated {n} texts" + (f" into {fv.output}" if fv.output not in (None, "-") else ""), file=stderr)
    return 0


main = cli_flags.console_entry(run)  # ``wmspec-generate``


if __name__ == "__main__":
    main()


__all__ = ["KEY_MODES", "RNG_INDEX_LIMIT", "PER_TEXT_FIELDS", "PROG", "define_flags", "generate_texts", "main", "run"]
