r"""``wmspec-detect``: was this text watermarked with my key?

    export WMSPEC_SECRET=...                       # or --secret_file=PATH; never on the command line
    wmspec-detect answer.txt                       # one text per file
    wmspec-generate prompts.txt --output=out.jsonl && wmspec-detect out.jsonl
    cat essay.txt | wmspec-detect --windowed       # a watermarked span inside human text
    wmspec-detect --detector=results/quick/detectors/gumbel-ars-tau.npz out.jsonl

(also ``python -m wmspec_jax.cli.detect``). Inputs: text files (one text each),
JSONL files (one JSON object per line, the text in ``--text_field``, default
``text``) or standard input, told apart by content whatever the file's name:
JSONL when the first non-empty line is a JSON object or the file is named
``.jsonl`` / ``.ndjson`` (``--input_format`` forces either). Every text is normalised before it is tokenised
(:mod:`wmspec_jax.textnorm`: a BOM, zero-width spaces, CRLF, no-break spaces,
decomposed accents and surrounding whitespace folded away), as
``wmspec-generate`` normalises the text it records, so a copy-paste variant
scores exactly as the clean text. Inputs are read, scored and written
:data:`CHUNK_TEXTS` texts at a time (a large file never sits in memory
whole). Output: one JSON line per text — scored tokens,
score, exact p-value and its log, the verdict at ``--alpha``, the detector
and the provenance of the statistics (settings and key fingerprint, never
the key) — or, when stdout is a terminal, a table (``--format`` forces either).
``--output`` is written atomically: after an error it holds nothing new.

**Which key.** Plain text is scored with the secret itself as the key: the
key ``wmspec-generate`` uses by default (``--keys=deployment``) and the one of
texts generated through the Python API with ``generate(..., secret)``. So an
answer of ``wmspec-generate`` pasted into a file is detected with the secret
alone. A JSONL line of ``wmspec-generate`` says which keys it was made with
(``key_derivation``): ``direct`` lines are scored like plain text, per-text
lines (``wmspec-generate --keys=per_text``) with
``keys.text_keys(secret, [index], run)``. A generation record without a
``key_derivation`` (a trimmed line) is scored with the secret itself and a
warning on stderr; ``--keys=per_text`` scores such lines with their ``run`` and
``index``, ``--keys=deployment`` with the secret (a line that records the
other derivation is then a conflict). ``--run=NAME --index=I`` scores plain
text with the per-text keys of that run (texts in input order get indices I,
I+1, ...).

**What a line says is checked.** A line's key fingerprint must be the
secret's, its PRF version this package's, and a ``--decoder`` /
``--synthid_layers`` / ``--context_width`` given on the command line must
equal the line's: a conflict is an error naming the line (exit status 2),
never a quiet "not detected"; ``--ignore_provenance`` scores anyway (the
flags and the secret win). Otherwise the settings come from the line, else a
saved ``--detector`` file, else the flags' defaults. A line's recorded token
ids (``tokens``) are scored as they are (the text is re-tokenised only
without them: a decoded text does not always re-tokenise to the same ids),
after a check that they decode to the line's ``text`` (both normalised): a
line whose text was replaced, or whose tokens were emptied, is an error
naming it; ``--score_text`` scores every line's text instead of its tokens;
its ``draft_fraction`` is Ars-Prior's p unless ``--draft_fraction`` is given.
The tokenizer must be the generator's (``--tokenizer``).

**Multi-draft texts** (``wmspec-generate --num_drafts`` / ``--draft_tree``):
an accepted draft token came from one of a node's n sibling streams (n: the
line's ``draft_tree``, its largest branching factor; else ``--siblings``). A
line that records each token's sibling (``candidate``, with its ``tokens``)
is scored in the stream each token was drawn from (the output line says
``"sibling_streams": "recorded"``). Other text is scored by a weighted search
over the n streams (``"sibling_streams": "searched"``, with the
``"sibling_weights"`` used; ``--sibling_weights``, default w_c ∝ 4^-c):
Gumbel-family statistics take max_c (y^D_c)^(1/w_c), SynthID's the search of
:mod:`wmspec_jax.detect.synthid_search`; both are exactly one stream's null
law, so every p-value stays exact (``docs/multidraft.md``). ``--sibling_weights``
that no text uses (every text one chain or recorded) is said on stderr.

**Which detector** (``--detector``, a comma-separated list of registry names
or saved detector files; the first is the primary): ``auto`` is the best
key-only detector of the decoder (:data:`wmspec_jax.detect.DEFAULTS`:
Ars-Prior with ``--draft_fraction`` for Gumbel-max, its coins keyed by the
watermark key and the text, the mean g-value of both streams for SynthID):
every default verdict is a deterministic function of key, tokens and
settings, so resubmitting a text (or an invisible variant of it) cannot
re-draw it. The detection experiment saves fitted ones (Ars-τ with
its fitted τ, the soft detector, the Bayesian SynthID detectors) under
``<output_dir>/detectors/``; a saved detector refuses statistics of another
secret or other settings (its provenance). ``--windowed`` adds the best
window (a watermarked span inside human text) with a p-value corrected for
the number of windows tried (:mod:`wmspec_jax.detect.windows`).

Texts with fewer than ``--min_tokens`` scored tokens get the verdict
``"not enough tokens"`` (and no p-value) rather than p = 1. A JSONL line that
is not a JSON object with a text (a line a killed writer left half-written and
the record store kept, a text with a lone surrogate) is skipped and reported
on stderr with its line number; the other lines are scored. A bad key file,
no key source, a missing tokenizer directory, binary or empty input, a
``--output`` that is one of the inputs or cannot be written, a non-finite
``--alpha`` / ``--tau`` / ``--draft_fraction``, a ``--siblings`` (or a line's
``draft_tree``) beyond multi-draft sampling's one cap of
:data:`wmspec_jax.multidraft.MAX_PATHS` = 64 paths are errors (exit status 2)
with a message naming the cause and the flag or line, raised before any scoring.

``--write_human_texts=PATH`` writes the built-in human texts (the
``builtin-eli5`` answers and ``builtin-c4`` openings, one JSONL line each) and
exits: score them with your key to see the false-positive rate at ``--alpha``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
from absl import flags

from wmspec_jax import keys
from wmspec_jax import prf_keys as prf
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.cli.texts import (InputError, check_not_empty, is_terminal, iter_inputs, load_tokenizer,
                                  vocab_size, write_lines)
from wmspec_jax.textnorm import normalize_text

PROG = "wmspec-detect"
DECODERS = cli_flags.DECODER_NAMES
NOT_ENOUGH = "not enough tokens"
MAX_INDEX = 2 ** 64  # per-text keys hash the index as a uint64
KEY_CHOICES = ("recorded", "deployment", "per_text")
GENERATION_FIELDS = ("run", "index", "tokens", "key_fingerprint", "decoder", "prf_version", "method")
"""Fields that mark a line as a generation record (whose keys matter), not just a text."""


def define_flags(fv: flags.FlagValues) -> None:
    """The tool's flags on ``fv``."""
    cli_flags.define_input_flags(fv, what="input", text_format="one text per file", field="text")
    flags.DEFINE_string("tokenizer", "builtin", "'builtin' (the built-in SmolLM2 pair) or a local Hugging Face "
                        "directory: the generator's tokenizer", flag_values=fv)
    cli_flags.define_secret_flags(fv, demo_flag=True)
    flags.DEFINE_enum("keys", "recorded", list(KEY_CHOICES), "which keys score a JSONL line: recorded (its "
                      "key_derivation; a line without one is scored with the secret itself, with a warning), "
                      "deployment (the secret itself), per_text (its run and index)", flag_values=fv)
    flags.DEFINE_bool("score_text", False, "score each line's text (re-tokenised) instead of its recorded token "
                      "ids; without it a line whose text and tokens disagree is an error", flag_values=fv)
    flags.DEFINE_string("run", None, "score plain text with the per-text keys of this run (with --index)",
                        flag_values=fv)
    flags.DEFINE_integer("index", 0, "with --run: the text index of the first input text", lower_bound=0,
                         flag_values=fv)
    flags.DEFINE_string("decoder", "gumbel", f"the generator's watermark decoder: {', '.join(DECODERS)}, or a "
                        "scheme registered with wmspec_jax.decoders.register", flag_values=fv)
    flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m", lower_bound=1, flag_values=fv)
    flags.DEFINE_string("draft_decoder", None, "the generator's draft-stream decoder when it differs "
                      "from --decoder", flag_values=fv)
    flags.DEFINE_integer("context_width", prf.DEFAULT_CONTEXT_WIDTH, "context width h of the watermark",
                         lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("siblings", 1, "multi-draft texts: the most children of a node of the generator's draft "
                         "tree (a line's draft_tree gives it); the draft statistic searches that many sibling "
                         "streams", lower_bound=1, flag_values=fv)
    flags.DEFINE_list("sibling_weights", None, "multi-draft texts without their candidate records: the weight of "
                      "each sibling stream in the search (its share of the accepted drafts; default decreasing "
                      "as 4^-c)", flag_values=fv)
    flags.DEFINE_list("detector", ["auto"], "comma-separated registry names (see --help) or saved detector files "
                      "(.npz); 'auto': the decoder's default", flag_values=fv)
    flags.DEFINE_float("tau", None, "τ of --detector=ars-tau (default 0.5; a saved Ars-τ has its fitted τ)",
                       flag_values=fv)
    flags.DEFINE_float("kgw_gamma", None, "KGW's green fraction (default: the line's kgw_gamma, else 0.25)",
                       flag_values=fv)
    flags.DEFINE_float("draft_fraction", None, "p of Ars-Prior (default 0.5; the share of accepted drafts of the "
                       "generator, if known)", flag_values=fv)
    flags.DEFINE_float("alpha", 0.01, "verdict 'watermarked' iff p <= alpha", lower_bound=0.0, upper_bound=1.0,
                       flag_values=fv)
    flags.DEFINE_integer("min_tokens", 8, "texts with fewer scored tokens get the verdict 'not enough tokens'",
                         lower_bound=1, flag_values=fv)
    flags.DEFINE_bool("windowed", False, "also report the best window (a watermarked span) with its corrected "
                      "p-value", flag_values=fv)
    flags.DEFINE_integer("min_window", 16, "shortest window of --windowed (tokens)", lower_bound=2, flag_values=fv)
    flags.DEFINE_string("output", None, "write the JSON lines to this file (atomically) instead of stdout; "
                        "a regular file or a new path, or - (stdout): links, devices, FIFOs and the inputs "
                        "(stdin's file included) are refused", flag_values=fv)
    flags.DEFINE_enum("format", "auto", ["auto", "json", "table"], "stdout: JSON lines, a table, or auto (a table "
                      "when stdout is a terminal)", flag_values=fv)
    flags.DEFINE_bool("timing", False, "print tokenisation / scoring time and tokens/s to stderr", flag_values=fv)
    flags.DEFINE_integer("batch_size", 1024, "texts per scoring batch", lower_bound=1, flag_values=fv)
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
    flags.DEFINE_string("write_human_texts", None, "write the built-in human texts to this JSONL file (for a "
                        "false-positive check) and exit", flag_values=fv)


# ---------------------------------------------------------------------------
# Texts, settings and keys
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Item:
    """One input text on its way through the tool."""

    number: int
    where: str
    record: dict
    ids: list
    offsets: Optional[list]
    decoder: str
    num_layers: int
    context_width: int
    run: Optional[str]
    index: Optional[int]
    draft_fraction: Optional[float] = None
    draft_decoder: Optional[str] = None
    kgw_gamma: Optional[float] = None
    siblings: int = 1
    candidate: Optional[list] = None
    sibling_weights: Optional[list] = None
    result: Optional[dict] = None
    prf_version: str = prf.PRF_VERSION

    @property
    def derivation(self) -> str:
        return keys.DIRECT if self.run is None else keys.KEY_DERIVATION

    @property
    def group(self) -> tuple:
        return (self.decoder, self.num_layers, self.context_width, self.derivation, self.draft_fraction,
                self.draft_decoder, self.kgw_gamma, self.siblings, self.candidate is not None, self.prf_version)


def _record_int(record: dict, name: str, where: str, low: int, high: int) -> Optional[int]:
    """The int field ``name`` of a line, in [low, high); None when absent."""
    if name not in record or record[name] is None:
        return None
    v = record[name]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v < high:
        raise InputError(f"{where}: field {name!r} must be an int in [{low}, {high}), got {str(v)[:40]}")
    return v


def _conflict(fv, where: str, what: str, theirs, ours) -> None:
    if not fv.ignore_provenance:
        raise InputError(f"{where}: the line was generated with {what} {theirs}, but {ours}: scoring it anyway "
                         "would answer for another watermark (pass --ignore_provenance to score it regardless)")


def _settings_of(fv, record: dict, where: str, defaults: dict) -> tuple:
    """(decoder, m, h, draft decoder or None): the JSONL line > a saved detector > the flags' defaults; a
    flag given on the command line must agree with the line (or --ignore_provenance, then the flag wins).
    Decoders are returned as the statistic detection recomputes (``WatermarkDecoder.statistic``)."""
    from wmspec_jax import decoders

    def statistic(name):  # what detection recomputes: synthid_limit scores as synthid, any α as dipmark
        return None if name is None else decoders.WatermarkDecoder.from_name(name).statistic

    known = decoders.names()
    dec = record.get("decoder")
    if dec is not None and dec not in known:
        raise InputError(f"{where}: field 'decoder' must be one of {known}, got {str(dec)[:40]!r}")
    draft = record.get("draft_decoder")
    if draft is not None and draft not in known:
        raise InputError(f"{where}: field 'draft_decoder' must be one of {known}, got {str(draft)[:40]!r}")
    recorded = {"decoder": statistic(dec), "draft_decoder": statistic(draft),
                "synthid_layers": _record_int(record, "synthid_layers", where, 1, decoders.MAX_SYNTHID_LAYERS + 1),
                "context_width": _record_int(record, "context_width", where, 1, prf.MAX_CONTEXT_WIDTH + 1)}
    if recorded["decoder"] != "synthid":
        recorded["synthid_layers"] = None  # a Gumbel-max line has no m (null)
    chosen = {}
    for flag, value in recorded.items():
        if fv[flag].present:
            named = flag in ("decoder", "draft_decoder")
            given = statistic(fv[flag].value) if named else fv[flag].value
            if value is not None and value != given:
                _conflict(fv, where, f"{flag}={value}", value, f"--{flag}={fv[flag].value} was given")
            chosen[flag] = given
        elif value is None:
            chosen[flag] = statistic(defaults[flag]) if flag in ("decoder", "draft_decoder") else defaults[flag]
        else:
            chosen[flag] = value
    decoder, draft = chosen["decoder"], chosen["draft_decoder"]
    if draft == decoder:
        draft = None
    if draft is not None and decoders.WatermarkDecoder.from_name(draft).family != \
            decoders.WatermarkDecoder.from_name(decoder).family:
        raise InputError(f"{where}: a {draft} draft stream under a {decoder} target stream cannot be scored "
                         "together (both must be uniform-statistic decoders); pass --draft_decoder="
                         f"{record.get('decoder') or decoder} --ignore_provenance to score the target stream's decoder "
                         "on every token")
    return decoder, decoders.WatermarkDecoder.from_name(decoder, chosen["synthid_layers"]).num_layers, \
        chosen["context_width"], draft


def _siblings_of(fv, record: dict, where: str, default: int) -> int:
    """The sibling streams of a line's draft statistic: the most children of a node of its
    ``draft_tree`` > ``--siblings`` > a saved detector's."""
    tree = record.get("draft_tree")
    recorded = None
    if tree is not None:
        if not isinstance(tree, list) or not tree or not all(
                isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= multidraft_cap() for b in tree) \
                or math.prod(tree) > multidraft_cap():
            raise InputError(f"{where}: field 'draft_tree' must be a list of children per depth (ints >= 1, at most "
                             f"{multidraft_cap()} paths in all), got {str(tree)[:40]}")
        recorded = max(tree)
    if fv["siblings"].present:
        if recorded is not None and recorded != fv.siblings:
            _conflict(fv, where, f"draft_tree={tree} (siblings={recorded})", recorded,
                      f"--siblings={fv.siblings} was given")
        chosen = fv.siblings
    else:
        chosen = default if recorded is None else recorded
    return chosen


def _recorded_candidate(record: dict, where: str, ids: list, recorded_ids: Optional[list]) -> Optional[list]:
    """A multi-draft line's sibling of each token (``candidate``), when the line also records the token
    ids scored; None otherwise (the sibling streams are then searched)."""
    cand = record.get("candidate")
    if cand is None or recorded_ids is None:
        return None
    tree = record.get("draft_tree")
    high = max(tree) if isinstance(tree, list) and tree else multidraft_cap()
    if not isinstance(cand, list) or len(cand) != len(ids) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < high for c in cand):
        raise InputError(f"{where}: field 'candidate' must list one sibling index in [0, {high}) per token of "
                         "'tokens'")
    return cand


def _check_provenance(fv, record: dict, where: str, secret) -> None:
    """A line's key fingerprint and PRF version against the secret and this package."""
    fp = record.get("key_fingerprint")
    if fp is not None and fp != secret.fingerprint:
        _conflict(fv, where, "key fingerprint", fp, f"the given secret's is {secret.fingerprint}")
    version = record.get("prf_version")
    if version is not None and version not in prf.PRF_VERSIONS:
        _conflict(fv, where, "PRF version", version, f"this package implements {', '.join(prf.PRF_VERSIONS)}")


def _prf_version_of(record: dict) -> str:
    """The PRF version a line names (texts of every version this package implements are scored with
    theirs), else the current one."""
    version = record.get("prf_version")
    return version if version in prf.PRF_VERSIONS else prf.PRF_VERSION


def _key_of(fv, record: dict, where: str, number: int, assumed_direct: Optional[list] = None) -> tuple:
    """(run, index) of the text's per-text keys, or (None, None): the secret itself (module doc). A
    generation record without ``key_derivation`` is scored with the secret itself and its ``where``
    appended to ``assumed_direct`` (the tool warns): the keys are never guessed from other fields."""
    if fv["run"].present:
        index = fv.index + number
        if index >= MAX_INDEX:
            raise InputError(f"--index={fv.index}: text indices must stay below 2^64")
        return fv.run, index
    derivation = record.get("key_derivation")
    if derivation is not None and derivation not in (keys.DIRECT, keys.KEY_DERIVATION):
        raise InputError(f"{where}: unknown key_derivation {str(derivation)[:40]!r} (this package knows "
                         f"{keys.DIRECT!r} and {keys.KEY_DERIVATION!r})")
    wanted = {"deployment": keys.DIRECT, "per_text": keys.KEY_DERIVATION}.get(fv.keys)
    if wanted is not None and derivation is not None and derivation != wanted:
        _conflict(fv, where, "key_derivation", derivation, f"--keys={fv.keys} was given")
    if wanted is None:
        wanted = derivation
    if wanted == keys.KEY_DERIVATION:
        run, index = record.get("run"), _record_int(record, "index", where, 0, MAX_INDEX)
        if not isinstance(run, str) or index is None:
            raise InputError(f"{where}: per-text keys need both 'run' (a string) and 'index' (an int >= 0)")
        return run, index
    if wanted is None and assumed_direct is not None and any(f in record for f in GENERATION_FIELDS):
        assumed_direct.append(where)
    return None, None


def _recorded_ids(record: dict, where: str, vocab: int) -> Optional[list]:
    """The line's generated token ids (``tokens``), checked; None when it has none."""
    ids = record.get("tokens")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise InputError(f"{where}: field 'tokens' must be a list of token ids (ints)")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise InputError(f"{where}: token id {bad[0]} is outside the tokenizer's vocabulary [0, {vocab}): "
                         "the line was generated with another tokenizer (--tokenizer)")
    return ids


def _recorded_option(fv, record: dict, where: str, name: str, closed: bool) -> Optional[float]:
    """A detector option for this text: None when the flag ``--name`` is given (one value for every text,
    through the detector options) or the line has no field ``name``; else the line's value, which must lie
    in [0, 1] (``closed``) or (0, 1)."""
    if fv[name].value is not None:
        return None
    value = record.get(name)
    if value is None:
        return None
    inside = (0.0 <= float(value) <= 1.0 if closed else 0.0 < float(value) < 1.0) \
        if isinstance(value, (int, float)) and not isinstance(value, bool) else False
    if not inside:
        interval = "[0, 1]" if closed else "(0, 1)"
        raise InputError(f"{where}: field {name!r} must be a number in {interval}, got {str(value)[:40]}")
    return float(value)


def _draft_fraction_of(fv, record: dict, where: str) -> Optional[float]:
    """Ars-Prior's p for this text: --draft_fraction, else the line's ``draft_fraction``, else None."""
    return _recorded_option(fv, record, where, "draft_fraction", closed=True)


def _kgw_gamma_of(fv, record: dict, where: str) -> Optional[float]:
    """KGW's γ for this text: --kgw_gamma, else the line's ``kgw_gamma``, else None (the detector's default)."""
    return _recorded_option(fv, record, where, "kgw_gamma", closed=False)


def _stream_keys(secret: keys.Secret, items: Sequence[Item]):
    if items[0].run is None:
        return secret.stream_keys()
    words = np.zeros((len(items), prf.NUM_STREAMS, 2), np.uint32)
    by_run: dict = {}
    for row, it in enumerate(items):
        by_run.setdefault(it.run, []).append(row)
    for run, rows in by_run.items():
        words[rows] = np.asarray(keys.text_keys(secret, [items[r].index for r in rows], run=run))
    return keys.StreamKeys(words, secret.fingerprint, keys.KEY_DERIVATION)


# ---------------------------------------------------------------------------
# Detectors
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DetectorSpec:
    """One item of ``--detector``: a registry name (``auto`` included) or a loaded file."""

    name: str
    loaded: object = None
    path: Optional[str] = None


def _looks_like_path(item: str) -> bool:
    return item.endswith(".npz") or os.sep in item or os.path.exists(item)


def parse_detectors(items: Sequence[str]) -> list:
    from wmspec_jax import detect

    specs = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item == "auto" or (item in detect.registry.ENTRIES and not os.path.exists(item)):
            entry = detect.registry.ENTRIES.get(item)
            if entry is not None and entry.needs_source:
                raise InputError(f"--detector={item}: needs generation records (token sources); text alone cannot "
                                 "be scored with it")
            if entry is not None and entry.trained:
                raise InputError(f"--detector={item}: a fitted detector; pass its saved file (experiments/detection.py "
                                 "writes them to <output_dir>/detectors/)")
            specs.append(DetectorSpec(item))
        elif _looks_like_path(item):
            if not os.path.exists(item):
                raise InputError(f"--detector={item}: no such detector file")
            try:
                d = detect.load_detector(item)
            except (ValueError, OSError) as e:
                raise InputError(f"--detector={item}: {e}") from None
            if d.needs_source:
                raise InputError(f"--detector={item}: a {d.label} detector needs generation records (token sources); "
                                 "text alone cannot be scored with it")
            specs.append(DetectorSpec(detect.registry.name_of(d), d, item))
        else:
            raise InputError(f"--detector={item}: unknown detector; registry names: "
                             f"{', '.join(detect.registry.ENTRIES)}, or a saved .npz file")
    if not specs:
        raise InputError("--detector is empty")
    return specs


def _build(fv, spec: DetectorSpec, decoder: str, provenance, draft_fraction: Optional[float] = None,
           kgw_gamma: Optional[float] = None, vocab: Optional[int] = None):
    """The detector object of ``spec`` for statistics of ``decoder`` (None: it does not apply)."""
    from wmspec_jax import detect

    if spec.loaded is not None:
        return spec.loaded if spec.loaded.provenance.decoder == decoder else None
    family = provenance.family
    name = detect.DEFAULTS[family] if spec.name == "auto" else spec.name
    entry = detect.registry.entry(name)
    if entry.decoder != family:
        return None
    options = {}
    if "tau" in entry.options and fv.tau is not None:
        options["tau"] = fv.tau
    if "gamma" in entry.options:
        if fv.kgw_gamma is not None:
            options["gamma"] = fv.kgw_gamma
        elif kgw_gamma is not None:
            options["gamma"] = kgw_gamma
    if "vocab_size" in entry.options:
        options["vocab_size"] = vocab
    if "draft_fraction" in entry.options:
        if fv.draft_fraction is not None:
            options["draft_fraction"] = fv.draft_fraction
        elif draft_fraction is not None:
            options["draft_fraction"] = draft_fraction
    try:
        return detect.make(name, provenance, **options)
    except ValueError as e:
        raise InputError(f"--detector={name}: {e}") from None


# ---------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------


def _bucket(n: int, low: int = 32) -> int:
    return max(low, 1 << (max(int(n), 1) - 1).bit_length())


def _float(x) -> Optional[float]:
    x = float(x)
    return x if math.isfinite(x) else None


def _verdict(calibrated: bool, n: int, log_p: float, score: float, fv) -> str:
    if n < fv.min_tokens:
        return NOT_ENOUGH
    if calibrated:
        return "watermarked" if log_p <= math.log(fv.alpha) else "not detected"
    return "watermarked" if score > 0 else "not detected"  # Bayesian log-odds: posterior > 1/2


def _char_span(item: Item, start: int, end: int) -> Optional[list]:
    if not item.offsets or end <= start:
        return None
    return [int(item.offsets[start][0]), int(item.offsets[end - 1][1])]


def _result(fv, detector, spec: DetectorSpec, score, n: int, log_p: float, window=None, item=None) -> dict:
    from wmspec_jax import detect

    short = n < fv.min_tokens
    calibrated = detector.calibrated
    out = {"detector": {"name": detect.registry.name_of(detector), **detector.describe(),
                        "file": spec.path, "key_fingerprint": detector.provenance.key_fingerprint},
           "num_scored": int(n), "verdict": _verdict(calibrated, n, log_p, score, fv)}
    out["score"] = None if short else _float(score)
    out["log_pvalue"] = None if short or not calibrated else _float(log_p)
    out["pvalue"] = None if out["log_pvalue"] is None else math.exp(out["log_pvalue"])
    out["log10_pvalue"] = None if out["log_pvalue"] is None else out["log_pvalue"] / math.log(10)
    if not calibrated and not short:
        out["posterior"] = 1.0 / (1.0 + math.exp(-min(max(float(score), -700.0), 700.0)))
    if window is not None:
        lp, wstart, wend, wlp, wnum, wk = window
        ok = n >= fv.min_tokens
        out["window"] = {
            "start_token": int(wstart), "end_token": int(wend), "char_span": _char_span(item, int(wstart), int(wend)),
            "num_scored": int(wk), "num_windows": int(wnum),
            "log_pvalue": _float(lp) if ok else None, "pvalue": math.exp(float(lp)) if ok else None,
            "window_log_pvalue": _float(wlp) if ok else None,
            "verdict": NOT_ENOUGH if not ok else ("watermarked span" if lp <= math.log(fv.alpha) else "not detected"),
        }
    return out


def _score_group(fv, secret, items: Sequence[Item], specs, vocab: int) -> None:
    """Scores the texts of one (decoder, m, h, key derivation) group; fills ``item.result``."""
    from wmspec_jax import decoders, detect
    from wmspec_jax.detect.provenance import Provenance

    decoder, m, h, derivation, draft_fraction, draft_decoder, kgw_gamma, siblings, recorded, version = items[0].group
    settings = Provenance(decoder, m, h, version, draft_decoder=draft_decoder, siblings=siblings)
    weights = _search_weights(fv, siblings, items[0].where) if siblings > 1 and not recorded else None
    for it in items:
        it.sibling_weights = weights
    detectors = [(spec, d) for spec in specs
                 if (d := _build(fv, spec, decoder, settings, draft_fraction, kgw_gamma, vocab)) is not None]
    if not detectors:
        usable = [n for n in detect.registry.names(settings.family, buildable=True) if not detect.registry.entry(n).needs_source]
        raise InputError(f"no --detector applies to {decoder} texts ({items[0].where}, ...): add one of "
                         f"{', '.join(usable)} or a saved file")
    scorable = [it for it in items if len(it.ids) > h]
    for it in items:
        if len(it.ids) <= h:  # no position has a full context: nothing to score
            it.result = _empty_result(fv, detectors, it,
                                      _statistics_provenance(secret, it, decoder, m, h, draft_decoder, siblings,
                                                             version))
    order = sorted(scorable, key=lambda it: len(it.ids))
    for start in range(0, len(order), fv.batch_size):
        chunk = order[start:start + fv.batch_size]
        width = _bucket(max(len(it.ids) for it in chunk))
        # rows padded to a power of two (repeats of the first text, scored and dropped): a stream of
        # chunks then compiles a handful of shapes, not one program per leftover batch size
        rows = chunk + [chunk[0]] * (min(_bucket(len(chunk), low=8), fv.batch_size) - len(chunk))
        tokens = np.zeros((len(rows), width), np.int32)
        lengths = np.array([len(it.ids) for it in rows], np.int32)
        candidate = np.zeros((len(rows), width), np.int32) if recorded else None
        for row, it in enumerate(rows):
            tokens[row, : len(it.ids)] = it.ids
            if recorded:
                candidate[row, : len(it.ids)] = it.candidate
        key = _stream_keys(secret, rows)
        extra = {"siblings": siblings} if siblings > 1 else {}
        extra["prf_version"] = version
        if recorded:  # each token's own sibling stream, as the line records it
            extra["candidate"] = candidate
        elif siblings > 1:
            extra["sibling_weights"] = weights
        stats = detect.statistics(decoders.WatermarkDecoder.from_name(decoder, max(m, 1)), tokens, key,
                                  vocab_size=vocab, lengths=lengths, context_width=h,
                                  draft_decoder=None if draft_decoder is None else
                                  decoders.WatermarkDecoder.from_name(draft_decoder), **extra)
        per_detector = []
        for spec, d in detectors:
            try:
                sc = d.score(stats)
            except detect.ProvenanceMismatch as e:
                raise InputError(f"detector {spec.path or spec.name} does not fit these texts: {e}") from None
            win = None
            if fv.windowed and d.windowable:
                w = detect.windows.score_windows(d, stats, min_window=fv.min_window)
                win = [np.asarray(x) for x in (w.log_pvalue, w.start, w.end, w.window_log_pvalue, w.num_windows,
                                               w.num_scored)]
            per_detector.append((spec, d, [np.asarray(x) for x in (sc.score, sc.num_scored, sc.log_pvalue)], win))
        for row, it in enumerate(chunk):
            results = []
            for spec, d, (score, n, lp), win in per_detector:
                window = None if win is None else [x[row] for x in win]
                results.append(_result(fv, d, spec, score[row], int(n[row]), float(lp[row]), window, it))
            it.result = _line(it, results, stats.provenance)


def _search_weights(fv, siblings: int, where: str) -> list:
    """The weights (summing to 1) of the search over ``siblings`` streams: ``--sibling_weights`` or the default."""
    from wmspec_jax.detect import streams

    given = None if fv.sibling_weights is None else [float(w) for w in fv.sibling_weights]
    if given is not None and len(given) != siblings:
        raise InputError(f"{where}: the text searches {siblings} sibling streams; --sibling_weights gives "
                         f"{len(given)} weights")
    return list(streams.resolved_sibling_weights(given, siblings))


def _statistics_provenance(secret, it: Item, decoder, m, h, draft_decoder=None, siblings: int = 1,
                           version: str = prf.PRF_VERSION):
    from wmspec_jax.detect.provenance import Provenance

    return Provenance(decoder, m, h, version, secret.fingerprint, it.derivation, draft_decoder, siblings)


def _empty_result(fv, detectors, it: Item, provenance) -> dict:
    results = [_result(fv, d, spec, float("nan"), 0, 0.0, None, it) for spec, d in detectors]
    if fv.windowed:
        for r, (_, d) in zip(results, detectors):
            if d.windowable:
                r["window"] = None
    return _line(it, results, provenance)


def _line(it: Item, results: list, provenance) -> dict:
    primary = results[0]
    line = {"input": it.where}
    if "id" in it.record:
        line["id"] = it.record["id"]
    if it.record.get("watermarked") is False:
        line["generator_note"] = ("the generator recorded no watermark: "
                                  + str(it.record.get("not_watermarked_because", "unwatermarked method")))
    line.update(num_tokens=len(it.ids), **{k: v for k, v in primary.items()})
    if it.candidate is not None:
        line["sibling_streams"] = "recorded"  # each token scored in the sibling stream the line names
    elif it.sibling_weights is not None:
        line["sibling_streams"] = "searched"
        line["sibling_weights"] = [round(w, 6) for w in it.sibling_weights]
    line["provenance"] = provenance.to_dict()
    line["key"] = ({"derivation": keys.DIRECT} if it.run is None
                   else {"derivation": keys.KEY_DERIVATION, "run": it.run, "index": it.index})
    if len(results) > 1:
        line["results"] = results
    return line


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _format_p(r: dict) -> str:
    if r.get("log_pvalue") is None:
        return "-" if r.get("posterior") is None else f"post {r['posterior']:.3f}"
    l10 = r["log_pvalue"] / math.log(10)
    return f"{10 ** l10:.2g}" if l10 > -300 else f"1e{l10:.0f}"


def table(lines: Sequence[dict]) -> str:
    """The results as a fixed-width table (what a terminal shows)."""
    rows = [("input", "tokens", "scored", "detector", "p-value", "verdict",
             "best window (p corrected over the windows tried)")]
    for line in lines:
        for r in line.get("results", [line]):
            w = r.get("window")
            wtxt = "" if not w else (f"tokens {w['start_token']}-{w['end_token']}: p {_format_p(w)} over "
                                     f"{w['num_windows']} windows ({w['verdict']})")
            rows.append((line["input"][-40:], str(line["num_tokens"]), str(r["num_scored"]), r["detector"]["name"],
                         _format_p(r), r["verdict"], wtxt))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def _check_flags(fv) -> None:
    """The float flags absl's bounds let through (NaN compares false to every bound)."""
    if not (math.isfinite(fv.alpha) and 0.0 < fv.alpha <= 1.0):
        raise InputError(f"--alpha must be a number in (0, 1], got {fv.alpha}")
    if fv.scheme_config is None:
        from wmspec_jax import decoders

        for flag in ("decoder", "draft_decoder"):
            if fv[flag].value is not None and fv[flag].value not in decoders.names():
                raise InputError(f"--{flag}={fv[flag].value}: unknown decoder; known: {', '.join(decoders.names())}")
    if fv.tau is not None and not (math.isfinite(fv.tau) and 0.0 <= fv.tau <= 1.0):
        raise InputError(f"--tau must be a number in [0, 1], got {fv.tau}")
    if fv.kgw_gamma is not None and not (math.isfinite(fv.kgw_gamma) and 0.0 < fv.kgw_gamma < 1.0):
        raise InputError(f"--kgw_gamma must lie in (0, 1), got {fv.kgw_gamma}")
    if fv.draft_fraction is not None and not (math.isfinite(fv.draft_fraction) and 0.0 <= fv.draft_fraction <= 1.0):
        raise InputError(f"--draft_fraction must be a number in [0, 1], got {fv.draft_fraction}")
    if fv.run is not None and fv["run"].present and not fv.run:
        raise InputError("--run must not be empty")
    if fv.siblings > multidraft_cap():
        raise InputError(f"--siblings={fv.siblings} exceeds {multidraft_cap()}: a draft tree has at most "
                         f"{multidraft_cap()} paths, so no node has more children")
    if fv.sibling_weights is not None:
        try:
            weights = [float(w) for w in fv.sibling_weights]
        except ValueError:
            raise InputError(f"--sibling_weights must be numbers, got {','.join(fv.sibling_weights)}") from None
        if not weights or not all(math.isfinite(w) and w > 0 for w in weights):
            raise InputError(f"--sibling_weights must be positive numbers, got {','.join(fv.sibling_weights)}")


def multidraft_cap() -> int:
    """The most sibling streams a text can have: :data:`wmspec_jax.multidraft.MAX_PATHS`."""
    from wmspec_jax import multidraft

    return multidraft.MAX_PATHS


def check_output(output: Optional[str], inputs: Optional[Sequence[str]], stdin=None,
                 flag: str = "--output") -> None:
    """Refuses, before any work, an output that is not a regular file or a new path (``-``: stdout, for
    ``--output``), is one of the inputs (standard input included) or cannot be written
    (:mod:`wmspec_jax.cli.outputs`). ``inputs`` None: the tool reads none."""
    from wmspec_jax.cli import outputs

    outputs.check_output_path(flag, output, inputs, stdin=stdin, allow_stdout=flag == "--output",
                              consequence="the results would replace the texts")


def _secret(fv, stderr):
    demo = fv.demo_secret
    if not (fv.secret_file or fv.secret_env or os.environ.get(keys.ENV_VAR) or demo):
        raise InputError(f"no watermark key source: export the secret in ${keys.ENV_VAR}, or pass "
                         "--secret_env=VAR / --secret_file=PATH (the key is never read from the command line)")
    try:
        if demo and not (fv.secret_file or fv.secret_env or os.environ.get(keys.ENV_VAR)):
            print(f"{PROG}: using the PUBLIC demo secret (anyone can detect and forge its watermark)", file=stderr)
            return keys.Secret(keys.DEMO_SECRET)
        return cli_flags.secret_from_flags(fv, allow_demo=False)[0]
    except ValueError as e:
        raise InputError(str(e)) from None


def write_human_texts(path: str) -> int:
    """Writes the built-in human texts as JSONL (``{"id", "source", "text"}``); returns how many."""
    from wmspec_jax import storage
    from wmspec_jax.lab import data

    rows = [{"id": f"builtin-eli5/{i}", "source": "builtin-eli5 answer", "text": t}
            for i, t in enumerate(data.builtin_questions().human_texts)]
    rows += [{"id": f"builtin-c4/{i}", "source": "builtin-c4 opening", "text": e.human}
             for i, e in enumerate(data.builtin_openings().examples)]
    rows = [r for r in rows if r["text"].strip()]
    storage.atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


CHUNK_TEXTS = 16384
"""Texts read, scored and written at a time: a large input is streamed, never held in memory whole."""


@dataclasses.dataclass
class ScoringRun:
    """What one run of the tool keeps across chunks of texts: settings, tokenizer, counts, timing."""

    fv: object
    secret: object
    specs: list
    defaults: dict
    tokenizer: object
    vocab: int
    stderr: object
    foreign: object = None
    texts: int = 0
    tokens: int = 0
    searched: int = 0
    assumed_direct: list = dataclasses.field(default_factory=list)
    seconds: dict = dataclasses.field(default_factory=lambda: {"read": 0.0, "tokenize": 0.0, "score": 0.0})


def _start(fv, paths: Sequence[str], stderr, stdin=None) -> ScoringRun:
    """Everything checked and loaded before the first text is read."""
    _check_flags(fv)
    check_output(fv.output, list(fv.input) + list(paths) + [p for p in [fv.scheme_config] if p], stdin=stdin)
    if fv.scheme_config is not None:  # another engine's watermark: its file holds the key
        from wmspec_jax.interop import foreign

        scheme = foreign.load(fv.scheme_config)
        tokenizer = load_tokenizer(fv.tokenizer)
        vocab = vocab_size(tokenizer) if fv.model_vocab_size is None else fv.model_vocab_size
        return ScoringRun(fv, None, [], {}, tokenizer, vocab, stderr, foreign=scheme)
    secret = _secret(fv, stderr)
    specs = parse_detectors(fv.detector)
    loaded = [s.loaded for s in specs if s.loaded is not None]
    defaults = {"decoder": fv.decoder, "synthid_layers": fv.synthid_layers, "context_width": fv.context_width,
                "draft_decoder": fv.draft_decoder, "siblings": fv.siblings}
    if loaded:  # the first saved detector supplies the settings no flag or line gives
        prov = loaded[0].provenance
        defaults = {"decoder": prov.decoder, "synthid_layers": prov.num_layers or fv.synthid_layers,
                    "context_width": prov.context_width, "draft_decoder": prov.draft_decoder,
                    "siblings": prov.siblings}
    tokenizer = load_tokenizer(fv.tokenizer)
    return ScoringRun(fv, secret, specs, defaults, tokenizer, vocab_size(tokenizer), stderr)


def _decoded(tokenizer, ids: Sequence[list]) -> list:
    """The texts the token ids decode to, as the generator recorded them (special tokens dropped), normalised."""
    return [normalize_text(t) for t in tokenizer.batch_decode(list(ids), skip_special_tokens=True)]


def _check_text_matches_tokens(scoring: ScoringRun, inputs: Sequence, recorded: list) -> None:
    """A line that carries both ``text`` and ``tokens`` must say the same thing twice (module doc)."""
    rows = [i for i, r in enumerate(recorded) if r is not None]
    if not rows:
        return
    decoded = _decoded(scoring.tokenizer, [recorded[i] for i in rows])
    for i, text in zip(rows, decoded):
        if text != inputs[i].text:
            raise InputError(
                f"{inputs[i].where}: the line's text is not what its {len(recorded[i])} recorded token ids decode "
                f"to (after normalisation: {_first_difference(text, inputs[i].text)}); the tokens would be scored "
                "for a text the line does not hold. Pass --score_text to score the line's text (re-tokenised) "
                "instead of its tokens, or remove the 'tokens' field")


def _first_difference(decoded: str, text: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(decoded, text)) if a != b), min(len(decoded), len(text)))
    if not decoded:
        return "the tokens decode to nothing"
    return f"they differ from character {at} on; the tokens decode to {len(decoded)} characters, the text has {len(text)}"


def _score_chunk(scoring: ScoringRun, inputs: Sequence, first_number: int) -> list:
    """The result lines of one chunk of input texts, in input order."""
    fv = scoring.fv
    t0 = time.perf_counter()
    recorded = [None if fv.score_text else _recorded_ids(x.record, x.where, scoring.vocab) for x in inputs]
    _check_text_matches_tokens(scoring, inputs, recorded)
    to_tokenize = [i for i, r in enumerate(recorded) if r is None]
    texts = [inputs[i].text for i in to_tokenize]
    ids: list = list(recorded)
    offsets: list = [None] * len(inputs)
    if texts:
        try:
            enc = scoring.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=fv.windowed)
        except NotImplementedError:  # slow tokenizers have no offsets
            enc = scoring.tokenizer(texts, add_special_tokens=False)
        for j, i in enumerate(to_tokenize):
            ids[i] = enc["input_ids"][j]
            if fv.windowed and enc.get("offset_mapping") is not None:
                offsets[i] = enc["offset_mapping"][j]
    if scoring.foreign is not None:
        return _score_foreign(scoring, inputs, ids, t0)
    items = []
    for k, (x, toks) in enumerate(zip(inputs, ids)):
        number = first_number + k
        _check_provenance(fv, x.record, x.where, scoring.secret)
        decoder, m, h, draft = _settings_of(fv, x.record, x.where, scoring.defaults)
        run, index = _key_of(fv, x.record, x.where, number, scoring.assumed_direct)
        items.append(Item(number, x.where, x.record, list(toks), offsets[k], decoder, m, h, run, index,
                          _draft_fraction_of(fv, x.record, x.where), draft, _kgw_gamma_of(fv, x.record, x.where),
                          _siblings_of(fv, x.record, x.where, scoring.defaults["siblings"]),
                          None if fv["siblings"].present else  # --siblings: search the streams
                          _recorded_candidate(x.record, x.where, list(toks), recorded[k]),
                          prf_version=_prf_version_of(x.record)))
    t1 = time.perf_counter()
    groups: dict = {}
    for it in items:
        groups.setdefault(it.group, []).append(it)
    for group in groups.values():
        _score_group(fv, scoring.secret, group, scoring.specs, scoring.vocab)
    t2 = time.perf_counter()
    scoring.seconds["tokenize"] += t1 - t0
    scoring.seconds["score"] += t2 - t1
    scoring.texts += len(items)
    scoring.tokens += sum(len(it.ids) for it in items)
    scoring.searched += sum(it.sibling_weights is not None for it in items)
    return [it.result for it in items]


def _score_foreign(scoring: ScoringRun, inputs: Sequence, ids: list, t0: float) -> list:
    """Result lines of texts scored with another engine's watermark (``--scheme_config``)."""
    fv, scheme = scoring.fv, scoring.foreign
    t1 = time.perf_counter()
    eos = getattr(scoring.tokenizer, "eos_token_id", None)
    out = scheme.score([list(t) for t in ids], scoring.vocab, eos)
    lines = []
    detector = {"name": scheme.name, "statistic": scheme.statistic, "key_fingerprint": scheme.fingerprint}
    for x, toks, score, n, log_p in zip(inputs, ids, out.score, out.num_scored, out.log_pvalue):
        n, log_p = int(n), float(log_p)
        short = n < fv.min_tokens
        line = {"input": x.where}
        if "id" in x.record:
            line["id"] = x.record["id"]
        recorded = x.record.get("scheme")
        if isinstance(recorded, dict) and recorded.get("name") not in (None, scheme.name):
            _conflict(fv, x.where, "scheme", recorded.get("name"), f"--scheme_config is {scheme.name}")
        line.update(num_tokens=len(toks), detector=detector, num_scored=n,
                    verdict=_verdict(True, n, log_p, float(score), fv),
                    score=None if short else _float(score),
                    log_pvalue=None if short else max(log_p, -745.0),
                    pvalue=None if short else math.exp(log_p),
                    log10_pvalue=None if short else max(log_p, -745.0) / math.log(10),
                    scheme=scheme.record())
        if not short and log_p < -745.0:
            line["pvalue_underflow"] = True  # below float64's smallest: reported as its log bound
        lines.append(line)
    t2 = time.perf_counter()
    scoring.seconds["tokenize"] += t1 - t0
    scoring.seconds["score"] += t2 - t1
    scoring.texts += len(lines)
    scoring.tokens += sum(len(t) for t in ids)
    return lines


def iter_results(fv, paths: Sequence[str], stdin=None, stderr=None, run_out: Optional[list] = None):
    """The result lines of the tool on parsed flags, chunk by chunk (:data:`CHUNK_TEXTS` texts at a
    time, so memory stays bounded whatever the input's size). Every check that needs no text (flags,
    the output, the secret, detectors, the tokenizer) runs now, before this returns; the texts are read
    as the lines are taken. ``run_out``: a list that receives the :class:`ScoringRun` (counts, timing)
    when the last line has been yielded."""
    stderr = stderr or sys.stderr
    return _results(_start(fv, paths, stderr, stdin=stdin), paths, stdin, stderr, run_out)


def _results(scoring: ScoringRun, paths: Sequence[str], stdin, stderr, run_out: Optional[list]):
    all_paths = list(scoring.fv.input) + list(paths)
    skipped: list = []
    texts = iter_inputs(all_paths, fmt=scoring.fv.input_format, field=scoring.fv.text_field, stdin=stdin,
                        skipped=skipped)
    try:
        any_text = yield from _scored_chunks(scoring, texts, skipped, stderr)
    finally:
        texts.close()  # an error mid-way closes the input files now
    if not any_text:
        check_not_empty([], all_paths, skipped=skipped)
    _report(scoring, stderr)
    if run_out is not None:
        run_out.append(scoring)


def _scored_chunks(scoring: ScoringRun, texts, skipped: list, stderr):
    """Yields the result lines chunk by chunk; returns whether any text had a non-space character.
    Nothing is scored before the first such text is read: input with none is an error with no output."""
    reported, number, any_text = 0, 0, False
    held: list = []  # empty texts read before the first non-empty one
    while True:
        t0 = time.perf_counter()
        chunk = list(itertools.islice(texts, CHUNK_TEXTS))
        scoring.seconds["read"] += time.perf_counter() - t0
        for where, why in skipped[reported:]:
            print(f"{PROG}: skipped {where}: {why}", file=stderr)
        reported = len(skipped)
        if not chunk:
            return any_text
        if not any_text:
            any_text = any(x.text.strip() for x in chunk)
            if not any_text:
                held += chunk
                continue
            chunk, held = held + chunk, []
        for start in range(0, len(chunk), CHUNK_TEXTS):
            yield from _score_chunk(scoring, chunk[start:start + CHUNK_TEXTS], number + start)
        number += len(chunk)


def _report(scoring: ScoringRun, stderr) -> None:
    """What the whole run should know: keys assumed for lines without a derivation, unused weights."""
    if scoring.assumed_direct:
        first = scoring.assumed_direct[0]
        print(f"{PROG}: warning: {len(scoring.assumed_direct)} line(s) carry generation records but no "
              f"key_derivation (first: {first}): scored with the secret itself (deployment keys, as "
              "wmspec-generate's default); if they were generated with per-text keys, pass --keys=per_text",
              file=stderr)
    if scoring.fv.sibling_weights is not None and scoring.searched == 0:
        print(f"{PROG}: --sibling_weights unused: no text was searched over sibling streams (each was one "
              "chain, or its line records the stream of every token)", file=stderr)


def _timing(scoring: ScoringRun) -> dict:
    sec = scoring.seconds
    return {"texts": scoring.texts, "tokens": scoring.tokens, "read_seconds": sec["read"],
            "tokenize_seconds": sec["tokenize"], "score_seconds": sec["score"],
            "tokens_per_second": scoring.tokens / max(sec["tokenize"] + sec["score"], 1e-9)}


def detect_texts(fv, paths: Sequence[str], stdin=None, stderr=None) -> tuple:
    """Runs the tool on parsed flags: (JSON-able result lines, timing dict)."""
    out: list = []
    lines = list(iter_results(fv, paths, stdin=stdin, stderr=stderr, run_out=out))
    return lines, _timing(out[0])


def run(argv: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """The tool: parses ``argv`` (``argv[0]`` is the program name) and returns the exit status."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    fv = flags.FlagValues()
    define_flags(fv)

    def help_text():
        from wmspec_jax import detect

        return (__doc__.strip() + "\n\nDetectors (--detector):\n" + detect.registry.help_text() + "\n\nFlags:\n"
                + fv.get_help(include_special_flags=False))

    status, paths = cli_flags.parse_tool_argv(fv, argv, PROG, help_text, stdout, stderr)
    if status is not None:
        return status
    if fv.write_human_texts:
        try:
            check_output(fv.write_human_texts, None, flag="--write_human_texts")
            n = write_human_texts(fv.write_human_texts)
        except (InputError, ValueError, OSError) as e:
            print(f"{PROG}: error: {e}", file=stderr)
            return 2
        print(f"{PROG}: wrote {n} built-in human texts to {fv.write_human_texts}", file=stderr)
        return 0
    cli_flags.enable_compilation_cache()
    fmt = fv.format
    as_table = fmt == "table" or (fmt == "auto" and (fv.output is None or fv.output == "-") and is_terminal(stdout))
    finished_runs: list = []
    kept: list = []  # the lines a table needs (a table's columns fit its widest cell)

    def stream_lines(results, write) -> None:
        for line in results:
            if as_table:
                kept.append(line)
            if write is not None:
                write(json.dumps(line, ensure_ascii=False) + "\n")

    try:
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
        print(f"{PROG}: error: {e}", file=stderr)
        return 2
    if as_table:
        write_lines(stdout, [table(kept)])
    if fv.timing:
        timing = _timing(finished_runs[0])
        print(f"{PROG}: {timing['texts']} texts, {timing['tokens']} tokens: tokenize {timing['tokenize_seconds']:.2f} s, "
              f"score {timing['score_seconds']:.2f} s (compilation included) -> "
              f"{timing['tokens_per_second']:,.0f} tokens/s", file=stderr)
    return 0


def main() -> None:
    """Console-script entry point (``wmspec-detect``)."""
    sys.exit(run(sys.argv))


if __name__ == "__main__":
    main()
