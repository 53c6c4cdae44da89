"""Model-assisted scoring of text lines: each line's prompt and settings, the generator's distributions
over it, the exact model-assisted p-value beside the key-only detectors (what ``wmspec-detect --model`` runs).

**The distributions generation sampled from.** Per text the pair's target P (and, for speculative
methods, the draft Q with its K in-step variants) is run once over prompt + text
(:func:`wmspec_jax.detect.model_replay.token_probs`, one batched forward pass per model and chunk of
:attr:`ModelScorer.batch_size` texts), with the temperature and top-k the line records. The prompt is the
line's ``prompt``, encoded by the generator's own function (:func:`wmspec_jax.models.pairs.encode_prompts`,
chat template included) and checked against the line's ``prompt_length``: the kind (``question``
through the chat template, or ``text``) is the one whose encoding has that length, and a longer one is
shortened as generation shortened it. The statistics are computed over prompt + text with ``starts`` =
the prompt's length, as generation keyed them. A line with a ``prompt`` but no ``prompt_length`` (a
pasted answer given as ``{"prompt": ..., "text": ...}``) is asked as a question. A text without a prompt
keeps the key-only verdict (``"model_assisted": "not applied: no prompt"``). Settings a line does not
record come from :attr:`ModelScorer.given` (the options the user fixed), else :data:`DEFAULTS`
(``wmspec-generate``'s); a given option that contradicts a line is a :class:`~.text_line.LineError`
naming the line and the option (`ignore_provenance` lets the option win).

Errors and notes name an option by its name in backquotes (`model`, `method`); the tool spells it as
its flag.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Optional, Sequence

import numpy as np

from wmspec_jax import scheme_defaults, setting
from wmspec_jax.lines import scoring
from wmspec_jax.lines import text_line as lines_lib

FAMILIES = ("gumbel", "synthid", "kgw")
"""The recorded decoders with a model-assisted detector (their statistics' law is the one the weights use)."""
DEFAULTS = {**{name: setting.DEFAULTS[name] for name in ("method", "lookahead", "temperature", "top_k")},
            "kgw_delta": scheme_defaults.KGW_DELTA, "kgw_gamma": scheme_defaults.KGW_GAMMA}
"""``wmspec-generate``'s defaults: the settings of a text that records none and that the user did not fix."""
SETTINGS = ("method", "lookahead", "temperature", "top_k", "kgw_delta")
"""The settings a user may fix for every text (:attr:`ModelScorer.given`)."""
PROMPT_KINDS = ("question", "text")
TEXTS_PER_PASS = 64
"""Texts whose statistics and token probabilities are computed together (the forward passes themselves
run :attr:`ModelScorer.batch_size` texts at a time)."""


@dataclasses.dataclass
class ModelScorer:
    """The loaded pair and what a run keeps across chunks of lines: the options the user fixed, notes said.

    Attributes:
      pair: the generator's pair (:mod:`wmspec_jax.models.pairs`); ``has_draft``: whether its draft is
        loaded (texts of speculative methods need it).
      spec: how the pair was named (``builtin`` or a checkpoint directory), for messages.
      given: the settings of :data:`SETTINGS` the user fixed for every text.
      ignore_provenance: a given setting wins over a line's (else a conflict is an error).
      batch_size: texts per forward pass.
      say: where a note goes (once per run for each kind).
    """

    pair: object
    spec: str
    has_draft: bool
    given: dict
    ignore_provenance: bool
    batch_size: int
    say: Callable[[str], None]
    notes: set = dataclasses.field(default_factory=set)

    def note(self, kind: str, text: str) -> None:
        """Says ``text``, once per run for each ``kind``."""
        if kind not in self.notes:
            self.notes.add(kind)
            self.say(text)


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """What the model-assisted score of one text needs beyond its :class:`.lines.TextLine`."""

    method: str
    lookahead: Optional[int]
    temperature: float
    top_k: Optional[int]
    kgw_delta: float
    kgw_gamma: float
    prompt: tuple
    prompt_from: str
    draft_temperature: Optional[float] = None

    @property
    def group(self) -> tuple:
        return (self.method, self.lookahead, self.temperature, self.draft_temperature, self.top_k, self.kgw_delta,
                self.kgw_gamma)


KINDS = {"method": (lambda v: isinstance(v, str), "a method name"),
         "lookahead": (lambda v: isinstance(v, int) and v >= 0, "an int >= 0"),
         "temperature": (lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, "a number >= 0"),
         "top_k": (lambda v: v is None or isinstance(v, int) and v >= 0, "null or an int >= 0"),
         "kgw_delta": (lambda v: isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, "a number >= 0")}


def _valid(name: str, value) -> bool:
    return not isinstance(value, bool) and KINDS[name][0](value)


def _setting(scorer: ModelScorer, record: dict, where: str, name: str, assumed: list):
    """A setting of a line: the line's (a given flag must agree), else the flag's, else the default."""
    recorded = name in record and (record[name] is not None or name == "top_k")  # top_k null: none
    if recorded and not _valid(name, record[name]):
        raise lines_lib.LineError(f"{where}: field {name!r} must be {KINDS[name][1]}, got {str(record[name])[:40]}")
    if name in scorer.given:
        flag = scorer.given[name]
        if recorded and record[name] != flag:
            lines_lib.conflict(lines_lib.Overrides(ignore_provenance=scorer.ignore_provenance), where,
                               f"{name}={record[name]}", f"`{name}`={flag} was given")
        return flag
    if recorded:
        return record[name]
    assumed.append(name)
    return DEFAULTS[name]


def _check_model_name(scorer: ModelScorer, record: dict, where: str, drafted: bool) -> None:
    """A recorded ``model`` must be the loaded pair (its target alone when the draft is not used)."""
    recorded = record.get("model")
    if not isinstance(recorded, str):
        return
    name = scorer.pair.name

    def target(n: str) -> str:
        return n.split("-draft-")[0] if n.startswith("builtin-") else n.split("+")[0]

    same = recorded == name if drafted and scorer.has_draft else target(recorded) == target(name)
    if not same:
        hint = ""
        if recorded.startswith("builtin-") and "-draft-" in recorded:
            hint = f"; its draft is `model_draft`=builtin:{recorded.split('-draft-')[1]}"
        what = name if scorer.has_draft else f"{target(name)} (no draft)"
        lines_lib.conflict(lines_lib.Overrides(ignore_provenance=scorer.ignore_provenance), where,
                           f"model {recorded}", f"`model`={scorer.spec} loads {what}{hint}")


def recorded_prompt(pair, prompt: str, prompt_length: int, where: str) -> list:
    """The ids generation gave ``prompt`` (:func:`wmspec_jax.models.pairs.encode_prompts`): the kind whose
    encoding has ``prompt_length`` ids, else a longer encoding shortened to it as generation's prompt
    truncation did. LineError when none has that length."""
    from wmspec_jax.models import pairs

    def encoded(kind: str, too_long: str) -> list:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the shortening warning: expected here
            ids, lengths = pairs.encode_prompts(pair, [prompt], kind, max(prompt_length, 1), too_long=too_long)
        return [int(t) for t in ids[0, : int(lengths[0])]]

    full = {}
    for kind in PROMPT_KINDS:
        full[kind] = [int(t) for t in pair.encode_prompt(prompt, kind)]
        if len(full[kind]) == prompt_length:
            return full[kind]
    for kind in PROMPT_KINDS:
        if len(full[kind]) > prompt_length:
            try:
                ids = encoded(kind, "truncate")
            except ValueError:
                continue
            if len(ids) == prompt_length:
                return ids
    raise lines_lib.LineError(f"{where}: the line's prompt encodes to {len(full['question'])} tokens as a question "
                              f"and {len(full['text'])} as text, not its prompt_length {prompt_length}: not the "
                              "prompt of this model's tokenizer (`model`)")


def _prompt(scorer: ModelScorer, record: dict, where: str) -> tuple:
    """(prompt ids, how they were found) of a line: its recorded prompt (checked against its
    ``prompt_length``), a ``prompt`` without a length asked as a question; (None, None) without one."""
    prompt, length = record.get("prompt"), record.get("prompt_length")
    if not isinstance(prompt, str):
        return None, None
    if isinstance(length, int) and not isinstance(length, bool) and length >= 1:
        return tuple(recorded_prompt(scorer.pair, prompt, length, where)), "recorded"
    from wmspec_jax.models import pairs

    try:  # the generator's encoder and packing (an empty encoding is refused, as generation refuses it)
        ids, lengths = pairs.encode_prompts(scorer.pair, [prompt], "question",
                                            max(len(scorer.pair.encode_prompt(prompt, "question")), 1))
    except ValueError as e:
        raise lines_lib.LineError(f"{where}: the line's prompt: {e}") from None
    return tuple(int(t) for t in ids[0, : int(lengths[0])]), "question"


def text_settings(scorer: ModelScorer, line, options: scoring.ScoringOptions) -> Optional[TextSettings]:
    """The :class:`TextSettings` of a read line (module doc), None for a text without a prompt (it keeps the
    key-only verdict); LineError naming the line."""
    from wmspec_jax import methods as methods_lib

    record, where = line.record, line.where
    if not isinstance(record.get("prompt"), str):
        scorer.note("prompt", f"texts without a prompt (first: {where}) keep the key-only verdict: the model-assisted "
                    "weights need the prompt the text answered (after an empty question they lose the watermark); "
                    "give it as the JSONL field 'prompt' beside the 'text'")
        return None
    named = record.get("decoder") or line.decoder
    if named not in FAMILIES or line.decoder not in FAMILIES or line.draft_decoder is not None:
        raise lines_lib.LineError(f"{where}: {named} texts have no model-assisted detector (`model` scores "
                                  f"{', '.join(FAMILIES)} texts with one decoder for both streams)")
    if line.siblings > 1:
        raise lines_lib.LineError(f"{where}: multi-draft texts (siblings > 1) have no model-assisted detector; "
                                  "score them without `model`")
    if line.key_sequence:
        raise lines_lib.LineError(f"{where}: texts generated under a key sequence have no model-assisted detector "
                                  "(the edit test scores them); score them without `model`")
    assumed: list = []
    method = _setting(scorer, record, where, "method", assumed)
    if not isinstance(method, str) or method not in methods_lib.METHODS:
        raise lines_lib.LineError(f"{where}: unknown method {str(method)[:40]!r}")
    spec = methods_lib.METHODS[method]
    # nothing embedded: the target stream's exact test; a coupled text is the basic watermark's
    method = methods_lib.detected_as(method) if spec.watermarks else "basic"
    speculative = methods_lib.METHODS[method].speculative
    lookahead = _setting(scorer, record, where, "lookahead", assumed) if speculative else None
    temperature = float(_setting(scorer, record, where, "temperature", assumed))
    if not (math.isfinite(temperature) and temperature > 0):
        raise lines_lib.LineError(f"{where}: temperature {temperature}: every distribution is one-hot, nothing "
                                  "to detect with `model`")
    top_k = _setting(scorer, record, where, "top_k", assumed)
    draft_temperature = record.get("draft_temperature") if speculative else None
    if draft_temperature is not None and not _valid("temperature", draft_temperature):
        raise lines_lib.LineError(f"{where}: field 'draft_temperature' must be a number >= 0, got "
                                  f"{str(draft_temperature)[:40]}")
    delta = float(_setting(scorer, record, where, "kgw_delta", assumed)) if line.decoder == "kgw" else 0.0
    gamma = options.kgw_gamma if options.kgw_gamma is not None else line.kgw_gamma
    gamma = DEFAULTS["kgw_gamma"] if gamma is None else float(gamma)
    if speculative and line.decoder != "kgw" and not scorer.has_draft:
        raise lines_lib.LineError(f"{where}: a {method} text was drafted: its score needs the generator's draft "
                                  f"(`model_draft`)")
    _check_model_name(scorer, record, where, speculative and line.decoder != "kgw")  # before the prompt's check
    prompt, prompt_from = _prompt(scorer, record, where)
    if assumed:
        shown = ", ".join(f"{n}={DEFAULTS[n]}" for n in assumed)
        scorer.note("assumed", f"texts that do not record their settings (first: {where}) are scored with "
                    f"wmspec-generate's defaults {shown} ({' / '.join(f'`{n}`' for n in assumed)})")
    return TextSettings(method, None if lookahead in (None, 0) else int(lookahead), temperature,
                        None if top_k in (None, 0) else int(top_k), delta, gamma, prompt, prompt_from,
                        None if draft_temperature in (None, temperature) else float(draft_temperature))


def _bucket(n: int, low: int = 32) -> int:
    return max(low, 1 << (max(int(n), 1) - 1).bit_length())


def _statistics(secret, rows: Sequence, settings: Sequence[TextSettings], vocab: int):
    """(statistics, int32[B, W] prompt + text, int32[B] lengths, int32[B] prompt lengths) of one batch of
    lines of one group: keyed over prompt + text (``starts`` = the prompt's length), as generation keyed them."""
    from wmspec_jax import decoders, detect

    first = rows[0]
    width = _bucket(max(len(s.prompt) + len(line.ids) for line, s in zip(rows, settings)))
    tokens = np.zeros((len(rows), width), np.int32)
    lengths = np.zeros(len(rows), np.int32)
    starts = np.zeros(len(rows), np.int32)
    for row, (line, s) in enumerate(zip(rows, settings)):
        starts[row], lengths[row] = len(s.prompt), len(s.prompt) + len(line.ids)
        tokens[row, : lengths[row]] = list(s.prompt) + list(line.ids)
    decoder = decoders.WatermarkDecoder.from_name(first.decoder, max(first.num_layers, 1))
    stats = detect.statistics(decoder, tokens, lines_lib.stream_keys(secret, rows), vocab_size=vocab,
                              lengths=lengths, starts=starts, context_width=first.context_width,
                              prf_version=first.prf_version)
    return stats, tokens, lengths, starts


def _score_batch(scorer: ModelScorer, secret, rows: Sequence, settings: Sequence[TextSettings], vocab: int):
    """(Scores [B], provenance) of one batch of one group: one token_probs pass, one model-assisted score."""
    from wmspec_jax import methods as methods_lib
    from wmspec_jax.decoders import green_list_size
    from wmspec_jax.detect import model_assisted
    from wmspec_jax.detect import model_replay as model_scores

    s, first = settings[0], rows[0]
    stats, tokens, lengths, starts = _statistics(secret, rows, settings, vocab)
    kgw = first.decoder == "kgw"
    bias = s.kgw_delta / s.temperature
    modulus = model_assisted.spike_modulus(green_list_size(s.kgw_gamma, vocab) / vocab, bias) if kgw else None
    drafted = methods_lib.METHODS[s.method].speculative and not kgw
    probs = model_scores.token_probs(scorer.pair, tokens, lengths=lengths, starts=starts, temperature=s.temperature,
                                     draft_temperature=s.draft_temperature, top_k=s.top_k,
                                     lookahead=s.lookahead if drafted else None, with_draft=drafted,
                                     spike_modulus=modulus, batch_size=scorer.batch_size)
    try:
        scores = model_assisted.score_model_assisted(stats, probs, method=s.method, lookahead=s.lookahead,
                                                     gamma=s.kgw_gamma, vocab_size=vocab, bias=bias)
    except ValueError as e:
        raise lines_lib.LineError(f"{first.where}: `model`: {e}") from None
    return scores, stats.provenance


def detector_name(decoder: str) -> str:
    """The name the output gives the model-assisted detector of a decoder's texts."""
    return f"{decoder}-model-assisted"


def _result(scorer: ModelScorer, line, s: TextSettings, provenance, score, n: int, log_p: float,
            options: scoring.ScoringOptions) -> dict:
    """One text's model-assisted result, in the shape of :func:`.scoring.detector_result`."""
    settings = {"method": s.method, "lookahead": s.lookahead, "temperature": s.temperature, "top_k": s.top_k,
                "model": scorer.pair.name, "prompt": s.prompt_from}
    if s.draft_temperature is not None:
        settings["draft_temperature"] = s.draft_temperature
    if line.decoder == "kgw":
        settings.update(kgw_gamma=s.kgw_gamma, kgw_delta=s.kgw_delta)
    short = n < options.min_tokens
    out = {"detector": {"name": detector_name(line.decoder), "label": f"model-assisted {line.decoder}",
                        "kind": "model_assisted", "settings": settings, "file": None,
                        "key_fingerprint": provenance.key_fingerprint},
           "num_scored": int(n), "verdict": scoring.verdict(True, n, log_p, score, options),
           "score": None if short else scoring.finite(score),
           "log_pvalue": None if short else scoring.finite(log_p)}
    out["pvalue"] = None if out["log_pvalue"] is None else math.exp(out["log_pvalue"])
    out["log10_pvalue"] = None if out["log_pvalue"] is None else out["log_pvalue"] / math.log(10)
    return out


RESULT_FIELDS = ("detector", "num_scored", "verdict", "score", "log_pvalue", "pvalue", "log10_pvalue", "posterior",
                 "window")


def _key_only_results(line_result: dict) -> list:
    """The per-detector results of a key-only result line (:func:`.scoring.result_line`)."""
    if "results" in line_result:
        return list(line_result["results"])
    return [{k: line_result[k] for k in RESULT_FIELDS if k in line_result}]


def score_lines(scorer: ModelScorer, secret, read: Sequence, specs, options: scoring.ScoringOptions, vocab: int,
                corpus_state: Optional[scoring.Corpus] = None) -> list:
    """The result line of each read line (input order): the model-assisted result first, the key-only
    detectors' (:func:`.scoring.score_lines`) beside it under ``results``."""
    settings = [text_settings(scorer, line, options) for line in read]  # every line checked before any pass
    key_only = scoring.score_lines(secret, read, specs, options, vocab, corpus_state)
    out: list = [{**r, "model_assisted": "not applied: no prompt"} for r in key_only]
    groups: dict = {}
    for k, (line, s) in enumerate(zip(read, settings)):
        if s is None:
            continue
        key = (line.decoder, line.num_layers, line.context_width, line.derivation, line.prf_version)  # not Ars-Prior's p
        groups.setdefault(key + s.group, []).append(k)
    for members in groups.values():
        members = sorted(members, key=lambda k: len(settings[k].prompt) + len(read[k].ids))
        for lo in range(0, len(members), TEXTS_PER_PASS):
            chunk = members[lo:lo + TEXTS_PER_PASS]
            scores, provenance = _score_batch(scorer, secret, [read[k] for k in chunk],
                                              [settings[k] for k in chunk], vocab)
            score, n, log_p = (np.asarray(x) for x in (scores.score, scores.num_scored, scores.log_pvalue))
            for row, k in enumerate(chunk):
                model = _result(scorer, read[k], settings[k], provenance, float(score[row]), int(n[row]),
                                float(log_p[row]), options)
                out[k] = scoring.result_line(read[k], [model] + _key_only_results(key_only[k]), provenance)
    return out


__all__ = ["DEFAULTS", "FAMILIES", "ModelScorer", "SETTINGS", "TEXTS_PER_PASS", "TextSettings", "detector_name",
           "recorded_prompt", "score_lines", "text_settings"]
