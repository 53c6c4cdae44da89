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

Each output line is one text: ``id``, ``run``, ``index``, ``prompt``,
``text``, the generated token ids, why it stopped, and every setting
detection needs (decoder, m, h, method, temperature, model, tokenizer, the
key's fingerprint — never the key). Text ``index`` of run ``run`` is
watermarked with ``keys.text_keys(secret, [index], run)``; the run name
defaults to a fresh ``gen-<UTC time>-<random>`` so two invocations never
share keys, and ``wmspec-detect`` reads ``run`` / ``index`` from the lines.
With ``--output`` each batch is appended (fsynced) as it finishes; rerunning
with the same ``--run`` resumes (the settings must match); the file is locked
against a second writer. Progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from typing import Sequence

import numpy as np
from absl import flags

from wmspec_jax import keys, prf
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.cli.texts import InputError, read_inputs

PROG = "wmspec-generate"


def define_flags(fv: flags.FlagValues) -> None:
    from wmspec_jax.speculative import METHODS

    cli_flags.define_input_flags(fv, what="prompt", text_format="one prompt per non-empty line", field="prompt")
    flags.DEFINE_enum("prompt_kind", "question", ["question", "text"], "question: through the chat template; "
                      "text: plain text to continue", flag_values=fv)
    cli_flags.define_pair_flags(fv)
    cli_flags.define_secret_flags(fv, demo_flag=True)
    flags.DEFINE_enum("method", "pseudorandom", sorted(METHODS), "generation method (pseudorandom = Alg. 1)",
                      flag_values=fv)
    flags.DEFINE_integer("lookahead", 3, "K drafts per step (speculative methods; 0 for basic / plain)",
                         lower_bound=0, flag_values=fv)
    flags.DEFINE_enum("decoder", "gumbel", ["gumbel", "synthid"], "watermark decoder", flag_values=fv)
    flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("context_width", prf.DEFAULT_CONTEXT_WIDTH, "context width h of the watermark",
                         lower_bound=1, flag_values=fv)
    flags.DEFINE_float("temperature", 1.0, "sampling temperature of P and Q", lower_bound=0.0, flag_values=fv)
    flags.DEFINE_integer("top_k", 0, "top-k of P and Q (0: none)", lower_bound=0, flag_values=fv)
    flags.DEFINE_integer("max_new_tokens", 128, "most generated tokens per text", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("max_prompt_tokens", 256, "longest prompt (tokens)", lower_bound=1, flag_values=fv)
    flags.DEFINE_bool("truncate_prompts", False, "shorten longer prompts from the start of their text (BOS and "
                      "the chat template kept) instead of refusing them", flag_values=fv)
    flags.DEFINE_bool("stop_at_eos", True, "stop a text at the model's end-of-turn token", flag_values=fv)
    flags.DEFINE_integer("batch_size", 8, "texts per generation call", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("seed", 0, "seed of the true randomness (repeated contexts, the baselines' coins)",
                         lower_bound=0, flag_values=fv)
    flags.DEFINE_string("run", None, "run name keying the texts (default: a fresh gen-<time>-<random>); "
                        "the same --run resumes --output", flag_values=fv)
    flags.DEFINE_integer("first_index", 0, "text index of the first prompt", lower_bound=0, flag_values=fv)
    flags.DEFINE_string("output", None, "append the JSONL here (resumable, locked); default: stdout",
                        flag_values=fv)


def _secret(fv, stderr):
    have = fv.secret_file or fv.secret_env or os.environ.get(keys.ENV_VAR)
    if not have:
        if not fv.demo_secret:
            raise InputError(f"no watermark key source: export the secret in ${keys.ENV_VAR}, or pass "
                             "--secret_env=VAR / --secret_file=PATH (the key is never read from the command line)")
        print(f"{PROG}: using the PUBLIC demo secret (anyone can detect and forge its watermark)", file=stderr)
        return keys.Secret(keys.DEMO_SECRET)
    try:
        return cli_flags.secret_from_flags(fv, allow_demo=False)[0]
    except ValueError as e:
        raise InputError(str(e)) from None


def _config(fv, pair):
    from wmspec_jax import decoders, speculative

    method = speculative.METHODS[fv.method]
    k = fv.lookahead if (method.speculative or fv["lookahead"].present) else 0
    return speculative.SpeculativeConfig(
        method=fv.method, decoder=decoders.WatermarkDecoder(fv.decoder, fv.synthid_layers), lookahead=k,
        max_new_tokens=fv.max_new_tokens, temperature=fv.temperature, top_k=fv.top_k or None,
        context_width=fv.context_width, eos_id=pair.eos_id if fv.stop_at_eos else None, pad_id=pair.pad_id)


def _open_output(fv, run: str, stderr):
    """(store or None, lock or None, done indices): resumes ``--output`` of the same run."""
    from wmspec_jax import results

    if fv.output is None:
        return None, None, {}
    lock = results.FileLock(fv.output)
    try:
        store = results.JsonlStore(fv.output, lock=False)
    except BaseException:
        lock.release()
        raise
    if store.load_report():
        print(f"{PROG}: {store.load_report()}", file=stderr)
    runs_in = {r.get("run") for r in store.values()}
    if store.records and run not in runs_in:
        lock.release()
        hint = f" (its run: {sorted(map(str, runs_in))[0]})" if len(runs_in) == 1 else ""
        raise InputError(f"--output={fv.output} already holds texts of another run{hint}: pass that --run to "
                         "resume it, or choose another --output")
    return store, lock, {r["index"]: r for r in store.values() if r.get("run") == run}


def _settings_record(fv, pair, secret, config) -> dict:
    """The settings every output line carries (a resumed run must keep them)."""
    return {"method": fv.method, "lookahead": config.lookahead, "decoder": fv.decoder,
            "synthid_layers": fv.synthid_layers if fv.decoder == "synthid" else None,
            "context_width": fv.context_width, "temperature": fv.temperature, "top_k": fv.top_k or None,
            "max_new_tokens": fv.max_new_tokens, "stop_at_eos": fv.stop_at_eos, "model": pair.name,
            "tokenizer": fv.target, "seed": fv.seed, "key_fingerprint": secret.fingerprint,
            "key_derivation": keys.KEY_DERIVATION}


def _records(fv, run, pair, prompts, where, idx, rows, out, secret, config) -> list:
    from wmspec_jax import sources

    tokens, plen, length = (np.asarray(x) for x in (out.tokens, out.prompt_lengths, out.lengths))
    source, steps = np.asarray(out.source), np.asarray(out.num_steps)
    recs = []
    for row, i in zip(rows, idx):
        p, e = int(plen[row]), int(length[row])
        gen = tokens[row, p:e].tolist()
        src = source[row, p:e]
        stopped = "eos" if gen and gen[-1] in config.stop_ids else "length"
        rec = {"id": f"{run}/{i}", "run": run, "index": int(i), "input": where[i - fv.first_index],
               "prompt": prompts[i - fv.first_index], "text": pair.decode(gen), "tokens": gen,
               "num_tokens": len(gen), "stopped": stopped, **_settings_record(fv, pair, secret, config),
               "aatps": len(gen) / max(int(steps[row]), 1),
               "draft_fraction": float(np.mean(src == sources.SOURCE_DRAFT)) if len(gen) else 0.0}
        recs.append(rec)
    return recs


def generate_texts(fv, paths: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """Runs the tool on parsed flags; returns the number of texts generated now."""
    import jax

    from wmspec_jax import pairs, results, runs, speculative

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    secret = _secret(fv, stderr)
    inputs = read_inputs(list(fv.input) + list(paths), fmt=fv.input_format, field=fv.prompt_field, unit="line",
                         stdin=stdin)
    inputs = [x for x in inputs if x.text.strip()]
    if pairs.TOY in (fv.target, fv.draft):
        raise InputError("--target=toy: the toy pair has no text tokenizer; use builtin or local checkpoints")
    try:
        pairs.check_pair_spec(fv.target, fv.draft, fv.dtype)
    except (ValueError, FileNotFoundError) as e:
        raise InputError(str(e)) from None
    run = fv.run or f"gen-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"
    store, lock, done = _open_output(fv, run, stderr)
    try:
        t0 = time.perf_counter()
        pair = pairs.load_pair(fv.target, fv.draft, fv.dtype)
        print(f"{PROG}: pair {pair.name} loaded in {time.perf_counter() - t0:.1f} s; run {run}; key fingerprint "
              f"{secret.fingerprint}", file=stderr)
        config = _config(fv, pair)
        texts = [x.text for x in inputs]
        where = [x.where for x in inputs]
        prompts, lengths = pairs.encode_prompts(pair, texts, fv.prompt_kind, fv.max_prompt_tokens,
                                                too_long="truncate" if fv.truncate_prompts else "error")
        indices = [fv.first_index + i for i in range(len(texts))]
        for i, rec in done.items():
            if fv.first_index <= i < fv.first_index + len(texts):
                now = {"prompt": texts[i - fv.first_index], **_settings_record(fv, pair, secret, config)}
                changed = {k: (rec.get(k), v) for k, v in now.items() if rec.get(k) != v}
                if changed:
                    raise InputError(f"--output={fv.output}: text {i} of run {run} was generated with other settings "
                                     f"{sorted(changed)}; use another --run or --output")
        todo = [i for i in indices if i not in done]
        if done:
            print(f"{PROG}: resuming run {run}: {len(indices) - len(todo)} of {len(indices)} texts already in "
                  f"{fv.output}", file=stderr)
        draft = (pair.draft, pair.draft_params) if config.spec.speculative else (None, None)
        progress = results.Progress(len(todo), PROG, stream=stderr)
        for start in range(0, len(todo), fv.batch_size):
            idx = todo[start:start + fv.batch_size]
            padded = idx + [idx[-1]] * (fv.batch_size - len(idx))  # static shapes: one compilation
            rows = [i - fv.first_index for i in padded]
            out = speculative.generate(pair.target, pair.target_params, prompts[rows], lengths[rows],
                                       keys.text_keys(secret, padded, run=run), runs.text_rngs(fv.seed, run, padded),
                                       config, draft=draft[0], draft_params=draft[1])
            jax.block_until_ready(out.tokens)
            recs = _records(fv, run, pair, texts, where, idx, range(len(idx)), out, secret, config)
            if store is not None:
                store.add(recs)
            else:
                stdout.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
                stdout.flush()
            progress.update(len(idx))
        return len(todo)
    finally:
        if lock is not None:
            lock.release()


def run(argv: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """The tool: parses ``argv`` (``argv[0]`` is the program name) and returns the exit status."""
    from wmspec_jax import results
    from wmspec_jax.models import hf

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    fv = flags.FlagValues()
    define_flags(fv)
    status, paths = cli_flags.parse_tool_argv(
        fv, argv, PROG, lambda: __doc__.strip() + "\n\nFlags:\n" + fv.get_help(include_special_flags=False),
        stdout, stderr)
    if status is not None:
        return status
    try:
        n = generate_texts(fv, paths, stdin=stdin, stdout=stdout, stderr=stderr)
    except (InputError, ValueError, TypeError, OSError, results.OutputDirLocked, hf.CheckpointError) as e:
        print(f"{PROG}: error: {e}", file=stderr)
        return 2
    print(f"{PROG}: generated {n} texts" + (f" into {fv.output}" if fv.output else ""), file=stderr)
    return 0


def main() -> None:
    """Console-script entry point (``wmspec-generate``)."""
    sys.exit(run(sys.argv))


if __name__ == "__main__":
    main()
