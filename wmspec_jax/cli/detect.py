r"""``wmspec-detect``: was this text watermarked with my key?

    export WMSPEC_SECRET=...                       # or --secret_file=PATH; never on the command line
    wmspec-detect answer.txt                       # one text per file
    wmspec-generate prompts.txt --output=out.jsonl && wmspec-detect out.jsonl
    cat essay.txt | wmspec-detect --windowed       # a watermarked span inside human text
    wmspec-detect --calibrate=my_human_texts.jsonl # the key's false-positive rate on your own texts

(also ``python -m wmspec_jax.cli.detect``; the guide is ``docs/tools.md``). Inputs: text files, JSONL
(the text in ``--text_field``) or stdin, told apart by content; every text normalised
(:mod:`wmspec_jax.textnorm`) as ``wmspec-generate`` normalises what it records, so a copy-paste variant
scores as the clean text. Output: one JSON line per text (scored tokens, score, exact p-value, the
verdict at ``--alpha``, the detector, the statistics' provenance; never the key), a table on a
terminal; ``--output`` is written atomically. Inputs are streamed :data:`CHUNK_TEXTS` texts at a time.

**Keys.** Plain text is scored with the secret itself (``wmspec-generate``'s default key), a JSONL line
with the keys its ``key_derivation`` names; a generation record without one with the secret and a
warning (``--keys=per_text``: its ``run`` and ``index``; ``--run`` / ``--index`` for plain text).
**What a line says is checked** (:mod:`wmspec_jax.lines.text_line`): key fingerprint, PRF version and
settings against the secret and the ``--decoder`` / ``--synthid_layers`` / ``--context_width`` /
``--siblings`` given — a conflict is an error naming the line, never a quiet "not detected"
(``--ignore_provenance`` scores anyway) — and recorded ``tokens`` must decode to the line's ``text``
(``--score_text`` scores the text). Multi-draft texts: each token in its recorded sibling stream, or a
weighted search over ``--siblings`` streams; p-values stay exact (``docs/multidraft.md``).
**Detectors** (``--detector``: registry names or saved files, the first primary): ``auto`` is the
decoder's best key-only detector, a deterministic function of key, tokens and settings (a resubmitted
variant cannot re-draw its verdict). ``--windowed`` adds the best window; fewer than ``--min_tokens``
scored tokens: ``"not enough tokens"``; ``--scheme_config``: another engine's watermark. ``--model=builtin|DIR``
(the generator's pair): a text with a prompt gets the model-assisted detector of its scheme as primary (Gumbel-max,
SynthID, KGW; exact p-value, per-token weights from the models' distributions over the recorded prompt +
text at the recorded temperature, top-k and K), the key-only ones beside it (:mod:`.model_scoring`).
**Key sequences** (a line's ``key_sequence``, ``--key_sequence=n`` for plain text): the edit test, a Levenshtein
alignment with the key over all offsets, permutation p-value over ``--null_keys`` keys (:mod:`wmspec_jax.detect.edit_alignment`).
**One key over many texts**: texts that share (context, token) windows share keyed values, so a warning
says when the inputs share most of theirs; ``--dedup=corpus`` scores each window once per input and
``--calibrate`` measures the key's false-positive rate on your texts (``docs/repetitive_text.md``).
Errors (exit status 2, before any scoring): no key source, binary or empty input, an ``--output`` that
is an input, a link or a device, a size beyond the cap of 64 draft paths. The scoring is the library's
:mod:`wmspec_jax.lines.scoring`. ``--write_human_texts=PATH`` writes the built-in human texts.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from typing import Optional, Sequence

from absl import flags

from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.cli import deployment_flags, line_limits, model_scoring, outputs, path_guards, scoring_flags
from wmspec_jax.cli.texts import (InputError, check_not_empty, ChunksFromFirstText, is_terminal, iter_inputs,
                                  load_tokenizer, vocab_size, write_lines)
from wmspec_jax.lines import scoring, text_line as lines

PROG = "wmspec-detect"
DECODERS = cli_flags.DECODER_NAMES


def define_flags(fv: flags.FlagValues) -> None:
    """The tool's flags on ``fv``."""
    cli_flags.define_input_flags(fv, what="input", text_format="one text per file", field="text")
    flags.DEFINE_string("tokenizer", "builtin", "'builtin' (the built-in SmolLM2 pair) or a local Hugging Face "
                        "directory: the generator's tokenizer", flag_values=fv)
    cli_flags.define_secret_flags(fv, demo_flag=True)
    flags.DEFINE_enum("keys", "recorded", list(lines.KEY_CHOICES), "which keys score a JSONL line: recorded (its "
                      "key_derivation; a line without one is scored with the secret itself, with a warning), "
                      "deployment (the secret itself), per_text (its run and index)", flag_values=fv)
    flags.DEFINE_bool("score_text", False, "score each line's text (re-tokenised) instead of its recorded token "
                      "ids; without it a line whose text and tokens disagree is an error", flag_values=fv)
    flags.DEFINE_string("run", None, "score plain text with the per-text keys of this run (with --index)",
                        flag_values=fv)
    flags.DEFINE_integer("index", 0, "with --run: the text index of the first input text", lower_bound=0,
                         flag_values=fv)
    cli_flags.define_scheme_flags(
        fv, decoder_help=f"the generator's watermark decoder: {', '.join(DECODERS)}, or a scheme registered "
        "with wmspec_jax.decoders.register", draft_decoder_help="the generator's draft-stream decoder when it "
        "differs from --decoder")
    flags.DEFINE_integer("siblings", 1, "multi-draft texts: the most children of a node of the generator's draft "
                         "tree (a line's draft_tree gives it); the draft statistic searches that many sibling "
                         "streams", lower_bound=1, flag_values=fv)
    flags.DEFINE_list("sibling_weights", None, "multi-draft texts without their candidate records: the weight of "
                      "each sibling stream in the search (its share of the accepted drafts; default decreasing "
                      "as 4^-c)", flag_values=fv)
    flags.DEFINE_string("calibrate", None, "a file of your own human texts (JSONL or text): score them as the "
                        "inputs and report the key's false-positive rate at --alpha with its exact interval on "
                        "stderr (inputs optional)", flag_values=fv)
    scoring_flags.define_flags(fv)
    flags.DEFINE_string("output", None, "write the JSON lines to this file (atomically) instead of stdout; "
                        "a regular file or a new path, or - (stdout): links, devices, FIFOs and the inputs "
                        "(stdin's file included) are refused", flag_values=fv)
    flags.DEFINE_enum("format", "auto", ["auto", "json", "table"], "stdout: JSON lines, a table, or auto (a table "
                      "when stdout is a terminal)", flag_values=fv)
    flags.DEFINE_bool("timing", False, "print tokenisation / scoring time and tokens/s to stderr", flag_values=fv)
    flags.DEFINE_integer("batch_size", 1024, "texts per scoring batch", lower_bound=1, flag_values=fv)
    line_limits.define_flags(fv)
    flags.DEFINE_string("scheme_config", None, "score another engine's watermark: a JSON file of vLLM's "
                        "--watermark-config or transformers' WatermarkingConfig / SynthIDTextWatermarkingConfig "
                        "(to_dict()); it holds that engine's key, keep it as secret as --secret_file. The token "
                        "ids (a line's tokens, or --tokenizer's) must be the generated tokens alone",
                        flag_values=fv)
    flags.DEFINE_integer("model_vocab_size", None, "with --scheme_config: the generating model's vocabulary size "
                         "(its config's vocab_size, which KGW's green lists depend on) when it differs from the "
                         "tokenizer's", lower_bound=2, flag_values=fv)
    flags.DEFINE_bool("ignore_provenance", False, "score lines whose recorded key fingerprint, PRF version or "
                      "settings conflict with the secret and the flags (the flags and the secret win)",
                      flag_values=fv)
    deployment_flags.define_flags(fv)
    flags.DEFINE_string("write_human_texts", None, "write the built-in human texts to this JSONL file (for a "
                        "false-positive check) and exit", flag_values=fv)
    model_scoring.define_flags(fv)


CHUNK_TEXTS = 16384
"""Texts read, scored and written at a time: a large input is streamed, never held in memory whole."""


@dataclasses.dataclass
class ScoringRun:
    """What one run of the tool keeps across chunks of texts: settings, tokenizer, counts, timing."""

    fv: object
    overrides: lines.Overrides
    options: scoring.ScoringOptions
    tokenizer: object
    vocab: int
    secret: object = None
    specs: list = dataclasses.field(default_factory=list)
    defaults: dict = dataclasses.field(default_factory=dict)
    foreign: object = None
    texts: int = 0
    tokens: int = 0
    searched: int = 0
    assumed_direct: list = dataclasses.field(default_factory=list)
    model: Optional[model_scoring.ModelScorer] = None
    rule: object = None  # the deployment rule (wmspec_jax.lines.deployment)
    corpus: scoring.Corpus = dataclasses.field(default_factory=scoring.Corpus)
    seconds: dict = dataclasses.field(default_factory=lambda: {"tokenize": 0.0, "score": 0.0})


def _overrides(fv) -> lines.Overrides:
    """What the flags fix for every text (flags not given stay None: the lines decide). Another engine's
    watermark (``--scheme_config``) has settings of its own."""
    given = {} if fv.scheme_config else {name: fv[name].value for name in lines.SETTINGS if fv[name].present}
    return lines.Overrides(**given, draft_fraction=fv.draft_fraction, kgw_gamma=fv.kgw_gamma, keys=fv.keys,
                           run=fv.run if fv["run"].present else None, index=fv.index,
                           key_sequence=fv.key_sequence if fv["key_sequence"].present else None,
                           ignore_provenance=fv.ignore_provenance)


def _start(fv, paths: Sequence[str], stderr, stdin=None) -> ScoringRun:
    """Everything checked and loaded before the first text is read."""
    options = scoring_flags.scoring_options(fv)
    overrides = _overrides(fv)
    outputs.check_output_path("--output", fv.output, list(fv.input) + list(paths) + [
        p for p in [fv.scheme_config, fv.calibrate] if p], stdin=stdin, consequence="the results would replace the texts")
    path_guards.check_output(fv, "--output", fv.output, paths, "wmspec-detect")
    model_scoring.check_flags(fv)
    if fv.scheme_config is not None:  # another engine's watermark: its file holds the key
        from wmspec_jax.interop import foreign

        scheme = foreign.load(fv.scheme_config)
        tokenizer = load_tokenizer(fv.tokenizer)
        vocab = vocab_size(tokenizer) if fv.model_vocab_size is None else fv.model_vocab_size
        return ScoringRun(fv, overrides, options, tokenizer, vocab, foreign=scheme)
    secret = cli_flags.tool_secret(fv, PROG, stderr)
    specs = scoring.parse_detectors(fv.detector)
    defaults = scoring.settings_defaults(specs, {name: fv[name].value for name in lines.SETTINGS})
    rule = deployment_flags.rule(fv, paths, secret, defaults, stderr, PROG)
    tokenizer = load_tokenizer(model_scoring.tokenizer_spec(fv))
    model = model_scoring.load(fv, vocab_size(tokenizer), stderr) if fv.model else None  # before any text
    return ScoringRun(fv, overrides, options, tokenizer, vocab_size(tokenizer), secret, specs, defaults, model=model,
                      rule=rule)


def _token_ids(run_state: ScoringRun, inputs: Sequence) -> tuple:
    """(ids, offsets, recorded ids) of a chunk: a line's recorded ids, checked against its text, else the
    text tokenised."""
    fv = run_state.fv
    flag = "--tokenizer" if run_state.model is None else "--model"
    recorded = [None if fv.score_text else lines.recorded_ids(x.record, x.where, run_state.vocab, flag)
                for x in inputs]
    lines.check_text_matches_tokens(run_state.tokenizer, [x.where for x in inputs], [x.text for x in inputs],
                                    recorded)
    to_tokenize = [i for i, r in enumerate(recorded) if r is None]
    ids: list = list(recorded)
    offsets: list = [None] * len(inputs)
    if to_tokenize:
        texts = [inputs[i].text for i in to_tokenize]
        try:
            enc = run_state.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=fv.windowed)
        except NotImplementedError:  # slow tokenizers have no offsets
            enc = run_state.tokenizer(texts, add_special_tokens=False)
        for j, i in enumerate(to_tokenize):
            ids[i] = enc["input_ids"][j]
            if fv.windowed and enc.get("offset_mapping") is not None:
                offsets[i] = enc["offset_mapping"][j]
    return ids, offsets, recorded


def _score_chunk(run_state: ScoringRun, inputs: Sequence, first_number: int) -> list:
    """The result lines of one chunk of input texts, in input order."""
    t0 = time.perf_counter()
    ids, offsets, recorded = _token_ids(run_state, inputs)
    t1 = time.perf_counter()
    if run_state.foreign is not None:
        out = scoring.score_foreign(run_state.foreign, [x.record for x in inputs], [x.where for x in inputs], ids,
                                    run_state.vocab, getattr(run_state.tokenizer, "eos_token_id", None),
                                    run_state.options, run_state.overrides)
    else:
        score = functools.partial(model_scoring.score_lines, run_state.model) if run_state.model else scoring.score_lines
        out = deployment_flags.score_chunk(run_state, inputs, ids, recorded, offsets, first_number, score)
    run_state.seconds["tokenize"] += t1 - t0
    run_state.seconds["score"] += time.perf_counter() - t1
    run_state.texts += len(inputs)
    run_state.tokens += sum(len(t) for t in ids)
    return out


def iter_results(fv, paths: Sequence[str], stdin=None, stderr=None, run_out: Optional[list] = None):
    """The result lines of the tool on parsed flags, chunk by chunk (:data:`CHUNK_TEXTS` texts at a
    time, so memory stays bounded whatever the input's size). Every check that needs no text (flags,
    the output, the secret, detectors, the tokenizer) runs now, before this returns; the texts are read
    as the lines are taken. ``run_out``: a list that receives the :class:`ScoringRun` (counts, timing)
    when the last line has been yielded."""
    stderr = stderr or sys.stderr
    return _results(_start(fv, paths, stderr, stdin=stdin), paths, stdin, stderr, run_out)


def _results(run_state: ScoringRun, paths: Sequence[str], stdin, stderr, run_out: Optional[list]):
    all_paths = list(run_state.fv.input) + list(paths)
    skipped: list = []
    texts = iter_inputs(all_paths, fmt=run_state.fv.input_format, field=run_state.fv.text_field, stdin=stdin,
                        skipped=skipped)
    try:
        any_text = yield from _scored_chunks(run_state, texts, skipped, stderr)
    finally:
        texts.close()  # an error mid-way closes the input files now
    if not any_text:
        check_not_empty([], all_paths, skipped=skipped)
    _report(run_state, stderr)
    if run_out is not None:
        run_out.append(run_state)


def _scored_chunks(run_state: ScoringRun, texts, skipped: list, stderr):
    """Yields the result lines chunk by chunk (:func:`.texts.ChunksFromFirstText`); returns whether any
    text had a non-space character."""
    texts = line_limits.within_bounds(texts, skipped, run_state.fv.max_chars)  # before any text is tokenised
    chunks = ChunksFromFirstText(texts, CHUNK_TEXTS, skipped,
                                 lambda where, why: print(f"{PROG}: skipped {where}: {why}", file=stderr))
    for number, chunk in chunks:
        yield from _score_chunk(run_state, chunk, number)
    return chunks.any_text


def _report(run_state: ScoringRun, stderr) -> None:
    """What the whole run should know: keys assumed for lines without a derivation, unused weights."""
    if run_state.assumed_direct:
        first = run_state.assumed_direct[0]
        print(f"{PROG}: warning: {len(run_state.assumed_direct)} line(s) carry generation records but no "
              f"key_derivation (first: {first}): scored with the secret itself (deployment keys, as "
              "wmspec-generate's default); if they were generated with per-text keys, pass --keys=per_text",
              file=stderr)
    if run_state.options.dedup == "none":
        for warning in run_state.corpus.warnings():
            print(f"{PROG}: warning: {warning} (--dedup=corpus)", file=stderr)
    if run_state.fv.sibling_weights is not None and run_state.searched == 0:
        print(f"{PROG}: --sibling_weights unused: no text was searched over sibling streams (each was one "
              "chain, or its line records the stream of every token)", file=stderr)


def _calibrate(fv, stderr, paths: Sequence[str] = ()) -> None:
    """``--calibrate``: the key's false-positive rate on the user's human texts, scored as the inputs
    are (detector, settings, dedup), with its exact interval (:func:`wmspec_jax.detect.corpus.calibrate`)."""
    from wmspec_jax.detect import corpus

    run_state = _start(fv, paths, stderr)  # the inputs' deployment record, if any
    skipped: list = []
    texts = iter_inputs([fv.calibrate], fmt=fv.input_format, field=fv.text_field, skipped=skipped)
    try:
        results = list(_scored_chunks(run_state, texts, skipped, stderr))
    finally:
        texts.close()
    try:
        cal = corpus.calibrate([1.0 if r["pvalue"] is None and r["verdict"] == scoring.NOT_ENOUGH else
                                float("nan") if r["pvalue"] is None else r["pvalue"] for r in results],
                               alpha=fv.alpha, num_scored=[r["num_scored"] for r in results], min_tokens=fv.min_tokens)
    except ValueError as e:
        raise InputError(f"--calibrate={fv.calibrate}: {e}") from None
    print(f"{PROG}: --calibrate={fv.calibrate}: {cal.summary()}", file=stderr)
    _report(run_state, stderr)
    if cal.warning:
        print(f"{PROG}: warning: {cal.warning}", file=stderr)


def _timing_line(run_state: ScoringRun) -> str:
    sec, tokens = run_state.seconds, run_state.tokens
    return (f"{PROG}: {run_state.texts} texts, {tokens} tokens: tokenize {sec['tokenize']:.2f} s, score "
            f"{sec['score']:.2f} s (compilation included) -> "
            f"{tokens / max(sec['tokenize'] + sec['score'], 1e-9):,.0f} tokens/s")


def run(argv: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """The tool: parses ``argv`` (``argv[0]`` is the program name) and returns the exit status."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    fv = flags.FlagValues()
    define_flags(fv)

    def help_text():
        from wmspec_jax import detect

        return (__doc__.strip() + "\n\nDetectors (--detector):\n" + cli_flags.flag_names(detect.registry.help_text())
                + "\n\nFlags:\n" + fv.get_help(include_special_flags=False))

    status, paths = cli_flags.parse_tool_argv(fv, argv, PROG, help_text, stdout, stderr)
    if status is not None:
        return status
    if fv.write_human_texts:
        try:
            outputs.check_output_path("--write_human_texts", fv.write_human_texts, None, allow_stdout=False)
            path_guards.check_output(fv, "--write_human_texts", fv.write_human_texts, paths, "human texts")
            from wmspec_jax import text_data as data

            n = data.write_human_texts(fv.write_human_texts)
        except (InputError, ValueError, OSError) as e:
            return cli_flags.refuse(PROG, e, stderr)
        print(f"{PROG}: wrote {n} built-in human texts to {fv.write_human_texts}", file=stderr)
        return 0
    cli_flags.enable_compilation_cache()
    as_table = fv.format == "table" or (fv.format == "auto" and fv.output in (None, "-") and is_terminal(stdout))
    finished_runs: list = []
    kept: list = []  # the lines a table needs (a table's columns fit its widest cell)

    def stream_lines(results, write) -> None:
        for line in results:
            if "error" in line:  # the lines layer names options; the tool's user typed flags
                line["error"] = cli_flags.flag_names(line["error"])
            if as_table:
                kept.append(line)
            if write is not None:
                write(json.dumps(line, ensure_ascii=False) + "\n")

    try:
        if fv.calibrate:
            _calibrate(fv, stderr, paths)
            if not (paths or fv.input):  # only the calibration was asked for
                return 0
        results = iter_results(fv, paths, stdin=stdin, stderr=stderr, run_out=finished_runs)  # checks all first
        if fv.output is not None and fv.output != "-":
            from wmspec_jax import storage

            def write_file(f) -> None:  # one atomic file: a failed run leaves the old file (or none)
                stream_lines(results, lambda text: f.write(text.encode("utf-8")))

            storage.atomic_write(fv.output, write_file)
        elif as_table:
            stream_lines(results, None)
        else:
            stream_lines(results, lambda text: (stdout.write(text), stdout.flush()))
    except (InputError, ValueError, OSError) as e:
        return cli_flags.refuse(PROG, e, stderr)
    if as_table:
        write_lines(stdout, [scoring.results_table(kept)])
    if fv.timing:
        print(_timing_line(finished_runs[0]), file=stderr)
    return 1 if finished_runs and deployment_flags.report(finished_runs[0], stderr, PROG) else 0


main = cli_flags.console_entry(run)  # ``wmspec-detect``


if __name__ == "__main__":
    main()


__all__ = ["CHUNK_TEXTS", "DECODERS", "PROG", "ScoringRun", "define_flags", "iter_results", "main", "run"]
