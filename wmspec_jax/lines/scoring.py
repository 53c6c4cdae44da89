"""From text lines to verdicts: detectors by name, statistics per settings group, one result line per text.

This is what ``wmspec-detect`` runs between reading its inputs and writing
its output, as a library (:func:`score_texts` for JSON records,
:func:`score_lines` for read :class:`~wmspec_jax.lines.text_line.TextLine` s):

1. the detectors — registry names (``auto``: the decoder's default,
   :data:`wmspec_jax.detect.DEFAULTS`) or saved files
   (:func:`parse_detectors`), each built for every settings group it
   applies to;
2. lines grouped by their settings and keys (:attr:`TextLine.group`), each
   group's statistics computed in batches of padded rows (lengths and batch
   sizes rounded up to powers of two: a stream of batches compiles a
   handful of programs, not one per leftover size);
3. per text, one result line: scored tokens, score, exact p-value and its
   log, the verdict at ``alpha`` (``"not enough tokens"`` below
   ``min_tokens``, never p = 1), the provenance of the statistics (settings
   and key fingerprint, never the key) and, with ``windowed``, the best
   window (:mod:`wmspec_jax.detect.windows`).

Imports nothing heavy at module level (JAX loads when the first text is
scored).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import NamedTuple, Optional, Sequence

import numpy as np

from wmspec_jax import keys
from wmspec_jax import prf_keys as prf
from wmspec_jax.lines.text_line import LineError, Overrides, TextLine, read_line, recorded_ids, stream_keys
from wmspec_jax.lines.text_line import conflict as _conflict

NOT_ENOUGH = "not enough tokens"
DEDUP_CHOICES = ("none", "corpus")
"""``"corpus"``: each (context, token) window scored at most once per corpus (:mod:`.corpus`)."""


@dataclasses.dataclass(frozen=True)
class ScoringOptions:
    """How texts are scored and judged (``wmspec-detect``'s flags of the same names).

    ``dedup="corpus"``: texts scored with the secret itself (one key for
    all) score each (context, token) window at most once per corpus, at its
    first occurrence in input order (:func:`.corpus.dedup_corpus`), so the
    count of false positives of the key over the corpus is binomial; texts
    with per-text keys share no keyed values and are left as they are.
    ``tau``, ``draft_fraction``, ``kgw_gamma``: detector options for every
    text (None: a line's ``draft_fraction`` / ``kgw_gamma``, else the
    detector's default). ``sibling_weights``: the weights of the search over
    sibling streams of multi-draft texts without candidate records (None:
    decreasing as 4^-c). ``edit_gamma``, ``null_keys``: γ and T of the edit test that scores
    texts generated under a key sequence (:mod:`.edit_alignment`; every other option but
    ``alpha``, ``min_tokens`` and ``batch_size`` is for texts keyed by context).
    """

    alpha: float = 0.01
    min_tokens: int = 8
    windowed: bool = False
    min_window: int = 16
    batch_size: int = 1024
    tau: Optional[float] = None
    draft_fraction: Optional[float] = None
    kgw_gamma: Optional[float] = None
    sibling_weights: Optional[tuple] = None
    dedup: str = "none"
    edit_gamma: float = 0.0
    null_keys: int = 99

    def __post_init__(self):
        # NaN passes absl's bounds (it compares false to every bound); each message names the tool's flag
        def inside(x, low, high, closed_low=True, closed_high=True):
            return math.isfinite(x) and (low <= x if closed_low else low < x) and (x <= high if closed_high else x < high)

        if not inside(self.alpha, 0.0, 1.0, closed_low=False):
            raise LineError(f"`alpha` must be a number in (0, 1], got {self.alpha}")
        if self.tau is not None and not inside(self.tau, 0.0, 1.0):
            raise LineError(f"`tau` must be a number in [0, 1], got {self.tau}")
        if self.kgw_gamma is not None and not inside(self.kgw_gamma, 0.0, 1.0, False, False):
            raise LineError(f"`kgw_gamma` must lie in (0, 1), got {self.kgw_gamma}")
        if not (math.isfinite(self.edit_gamma) and self.edit_gamma >= 0):
            raise LineError(f"`edit_gamma` must be a finite number >= 0, got {self.edit_gamma}")
        if isinstance(self.null_keys, bool) or not isinstance(self.null_keys, int) or not 1 <= self.null_keys <= 9999:
            raise LineError(f"`null_keys` must be an int in [1, 9999], got {self.null_keys}")
        if self.dedup not in DEDUP_CHOICES:
            raise LineError(f"`dedup`={self.dedup}: one of {', '.join(DEDUP_CHOICES)}")
        if self.draft_fraction is not None and not inside(self.draft_fraction, 0.0, 1.0):
            raise LineError(f"`draft_fraction` must be a number in [0, 1], got {self.draft_fraction}")
        if self.sibling_weights is not None:
            shown = ",".join(str(w) for w in self.sibling_weights)
            try:
                weights = [float(w) for w in self.sibling_weights]
            except (TypeError, ValueError):
                raise LineError(f"`sibling_weights` must be numbers, got {shown}") from None
            if not weights or not all(math.isfinite(w) and w > 0 for w in weights):
                raise LineError(f"`sibling_weights` must be positive numbers, got {shown}")
            object.__setattr__(self, "sibling_weights", tuple(weights))


@dataclasses.dataclass(frozen=True)
class DetectorSpec:
    """One requested detector: a registry name (``auto`` included) or a loaded file."""

    name: str
    loaded: object = None
    path: Optional[str] = None


def _looks_like_path(item: str) -> bool:
    return item.endswith(".npz") or os.sep in item or os.path.exists(item)


def parse_detectors(items: Sequence[str]) -> list:
    """The :class:`DetectorSpec` of each registry name or saved-detector path in ``items`` (empty items
    dropped). Raises ``ValueError`` for an unknown name, a missing or unreadable file, a fitted detector
    asked by name, or a detector that needs generation records (token sources)."""
    from wmspec_jax import detect

    specs = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        if item == "auto" or (item in detect.registry.ENTRIES and not os.path.exists(item)):
            entry = detect.registry.ENTRIES.get(item)
            if entry is not None and entry.needs_source:
                raise LineError(f"`detector`={item}: needs generation records (token sources); text alone cannot "
                                "be scored with it")
            if entry is not None and entry.trained:
                raise LineError(f"`detector`={item}: a fitted detector; pass its saved file (experiments/detection.py "
                                "writes them to <output_dir>/detectors/)")
            specs.append(DetectorSpec(item))
        elif _looks_like_path(item):
            if not os.path.exists(item):
                raise LineError(f"`detector`={item}: no such detector file")
            try:
                d = detect.load_detector(item)
            except (ValueError, OSError) as e:
                raise LineError(f"`detector`={item}: {e}") from None
            if d.needs_source:
                raise LineError(f"`detector`={item}: a {d.label} detector needs generation records (token sources); "
                                "text alone cannot be scored with it")
            specs.append(DetectorSpec(detect.registry.name_of(d), d, item))
        else:
            raise LineError(f"`detector`={item}: unknown detector; registry names: "
                            f"{', '.join(detect.registry.ENTRIES)}, or a saved .npz file")
    if not specs:
        raise LineError("`detector` is empty")
    return specs


def settings_defaults(specs: Sequence[DetectorSpec], flags: dict) -> dict:
    """The settings no line gives (:data:`.lines.SETTINGS`): the first saved detector's, else ``flags``."""
    loaded = [s.loaded for s in specs if s.loaded is not None]
    if not loaded:
        return dict(flags)
    prov = loaded[0].provenance
    return {"decoder": prov.decoder, "synthid_layers": prov.num_layers or flags["synthid_layers"],
            "context_width": prov.context_width, "draft_decoder": prov.draft_decoder, "siblings": prov.siblings}


def build_detector(spec: DetectorSpec, provenance, options: ScoringOptions, draft_fraction: Optional[float] = None,
                   kgw_gamma: Optional[float] = None, vocab: Optional[int] = None):
    """The detector object of ``spec`` for statistics of ``provenance``'s settings (None: it does not apply)."""
    from wmspec_jax import detect

    if spec.loaded is not None:
        return spec.loaded if spec.loaded.provenance.decoder == provenance.decoder else None
    family = provenance.family
    name = detect.DEFAULTS[family] if spec.name == "auto" else spec.name
    entry = detect.registry.entry(name)
    if entry.decoder != family:
        return None
    chosen = {"tau": options.tau,
              "gamma": options.kgw_gamma if options.kgw_gamma is not None else kgw_gamma,
              "draft_fraction": options.draft_fraction if options.draft_fraction is not None else draft_fraction,
              "vocab_size": vocab}
    given = {k: v for k, v in chosen.items() if k in entry.options and (v is not None or k == "vocab_size")}
    try:
        return detect.make(name, provenance, **given)
    except ValueError as e:
        raise LineError(f"`detector`={name}: {e}") from None


def verdict(calibrated: bool, n: int, log_p: float, score: float, options: ScoringOptions) -> str:
    """``"watermarked"`` / ``"not detected"`` / :data:`NOT_ENOUGH` (Bayesian detectors: posterior > 1/2)."""
    if n < options.min_tokens:
        return NOT_ENOUGH
    if calibrated:
        return "watermarked" if log_p <= math.log(options.alpha) else "not detected"
    return "watermarked" if score > 0 else "not detected"


def finite(x) -> Optional[float]:
    """``x`` as a float, None when not finite (JSON has no NaN)."""
    x = float(x)
    return x if math.isfinite(x) else None


def _char_span(line: TextLine, start: int, end: int) -> Optional[list]:
    if not line.offsets or end <= start:
        return None
    return [int(line.offsets[start][0]), int(line.offsets[end - 1][1])]


def _window(window, line: TextLine, options: ScoringOptions, ok: bool) -> dict:
    lp, wstart, wend, wlp, wnum, wk = window
    return {"start_token": int(wstart), "end_token": int(wend), "char_span": _char_span(line, int(wstart), int(wend)),
            "num_scored": int(wk), "num_windows": int(wnum),
            "log_pvalue": finite(lp) if ok else None, "pvalue": math.exp(float(lp)) if ok else None,
            "window_log_pvalue": finite(wlp) if ok else None,
            "verdict": NOT_ENOUGH if not ok else ("watermarked span" if lp <= math.log(options.alpha)
                                                  else "not detected")}


def detector_result(detector, spec: DetectorSpec, score, n: int, log_p: float, options: ScoringOptions,
                    window=None, line: Optional[TextLine] = None) -> dict:
    """One detector's result for one text: score, p-value (exact), its logs and the verdict."""
    from wmspec_jax import detect

    short = n < options.min_tokens
    calibrated = detector.calibrated
    out = {"detector": {"name": detect.registry.name_of(detector), **detector.describe(),
                        "file": spec.path, "key_fingerprint": detector.provenance.key_fingerprint},
           "num_scored": int(n), "verdict": verdict(calibrated, n, log_p, score, options)}
    out["score"] = None if short else finite(score)
    out["log_pvalue"] = None if short or not calibrated else finite(log_p)
    out["pvalue"] = None if out["log_pvalue"] is None else math.exp(out["log_pvalue"])
    out["log10_pvalue"] = None if out["log_pvalue"] is None else out["log_pvalue"] / math.log(10)
    if not calibrated and not short:
        out["posterior"] = 1.0 / (1.0 + math.exp(-min(max(float(score), -700.0), 700.0)))
    if window is not None:
        out["window"] = _window(window, line, options, n >= options.min_tokens)
    return out


def result_line(line: TextLine, results: list, provenance) -> dict:
    """The output line of one text: the first detector's result, the others under ``results``."""
    record = line.record
    out = {"input": line.where}
    if "id" in record:
        out["id"] = record["id"]
    if record.get("watermarked") is False:
        out["generator_note"] = ("the generator recorded no watermark: "
                                 + str(record.get("not_watermarked_because", "unwatermarked method")))
    out.update(num_tokens=len(line.ids), **results[0])
    if line.candidate is not None:
        out["sibling_streams"] = "recorded"  # each token scored in the sibling stream the line names
    elif line.sibling_weights is not None:
        out["sibling_streams"] = "searched"
        out["sibling_weights"] = [round(w, 6) for w in line.sibling_weights]
    out["provenance"] = provenance.to_dict()
    out["key"] = ({"derivation": keys.DIRECT} if line.run is None
                  else {"derivation": keys.KEY_DERIVATION, "run": line.run, "index": line.index})
    if len(results) > 1:
        out["results"] = results
    return out


def _bucket(n: int, low: int = 32) -> int:
    return max(low, 1 << (max(int(n), 1) - 1).bit_length())


def search_weights(options: ScoringOptions, siblings: int, where: str) -> list:
    """The weights (summing to 1) of the search over ``siblings`` streams: the given ones or the default."""
    from wmspec_jax.detect.streams_compute import resolved_sibling_weights

    given = None if options.sibling_weights is None else [float(w) for w in options.sibling_weights]
    if given is not None and len(given) != siblings:
        raise LineError(f"{where}: the text searches {siblings} sibling streams; `sibling_weights` gives "
                        f"{len(given)} weights")
    return list(resolved_sibling_weights(given, siblings))


def _group_detectors(lines: Sequence[TextLine], specs, options: ScoringOptions, vocab: int, settings) -> list:
    from wmspec_jax import detect

    first = lines[0]
    detectors = [(spec, d) for spec in specs
                 if (d := build_detector(spec, settings, options, first.draft_fraction, first.kgw_gamma, vocab))
                 is not None]
    if not detectors:
        usable = [n for n in detect.registry.names(settings.family, buildable=True)
                  if not detect.registry.entry(n).needs_source]
        raise LineError(f"no `detector` applies to {first.decoder} texts ({first.where}, ...): add one of "
                        f"{', '.join(usable)} or a saved file")
    return detectors


def _batch_statistics(secret, rows: Sequence[TextLine], vocab: int):
    """(statistics, int32[B, L] token ids) of one padded batch of lines of one group."""
    from wmspec_jax import decoders, detect

    first = rows[0]
    recorded = first.candidate is not None
    width = _bucket(max(len(line.ids) for line in rows))
    tokens = np.zeros((len(rows), width), np.int32)
    candidate = np.zeros((len(rows), width), np.int32) if recorded else None
    for row, line in enumerate(rows):
        tokens[row, : len(line.ids)] = line.ids
        if recorded:
            candidate[row, : len(line.ids)] = line.candidate
    extra = {"siblings": first.siblings} if first.siblings > 1 else {}
    if recorded:  # each token's own sibling stream, as the line records it
        extra["candidate"] = candidate
    elif first.siblings > 1:
        extra["sibling_weights"] = first.sibling_weights
    decoder = decoders.WatermarkDecoder.from_name
    stats = detect.statistics(decoder(first.decoder, max(first.num_layers, 1)), tokens, stream_keys(secret, rows),
                              vocab_size=vocab, lengths=np.array([len(line.ids) for line in rows], np.int32),
                              context_width=first.context_width, prf_version=first.prf_version,
                              draft_decoder=None if first.draft_decoder is None else decoder(first.draft_decoder),
                              **extra)
    return stats, tokens


def _score_batch(detectors, stats, options: ScoringOptions) -> list:
    from wmspec_jax import detect

    per_detector = []
    for spec, d in detectors:
        try:
            sc = d.score(stats)
        except detect.ProvenanceMismatch as e:
            raise LineError(f"detector {spec.path or spec.name} does not fit these texts: {e}") from None
        win = None
        if options.windowed and d.windowable:
            w = detect.windows.score_windows(d, stats, min_window=options.min_window)
            win = [np.asarray(x) for x in (w.log_pvalue, w.start, w.end, w.window_log_pvalue, w.num_windows,
                                           w.num_scored)]
        per_detector.append((spec, d, [np.asarray(x) for x in (sc.score, sc.num_scored, sc.log_pvalue)], win))
    return per_detector


def _empty_result(line: TextLine, detectors, options: ScoringOptions, provenance) -> dict:
    results = [detector_result(d, spec, float("nan"), 0, 0.0, options, None, line) for spec, d in detectors]
    if options.windowed:
        for r, (_, d) in zip(results, detectors):
            if d.windowable:
                r["window"] = None
    return result_line(line, results, provenance)


class _Rows(NamedTuple):
    mask: np.ndarray
    provenance: object


@dataclasses.dataclass
class Corpus:
    """The windows scored so far of the texts scored with the secret itself, one state per (decoder, h):
    what corpus-level dedup and the shared-context warning carry from batch to batch (:mod:`.corpus`)."""

    windows: dict = dataclasses.field(default_factory=dict)

    def add(self, line: TextLine, stats, tokens: np.ndarray, num_rows: int, dedup: bool):
        """Counts (``dedup``: and dedups) the first ``num_rows`` rows of a batch of ``line``'s group;
        returns the statistics to score (padding rows then score nothing)."""
        from wmspec_jax.detect import corpus

        group = (line.decoder, line.draft_decoder, line.context_width, line.prf_version)
        state = self.windows.get(group)
        mask = np.asarray(stats.mask, bool)
        rows = _Rows(mask[:num_rows], stats.provenance)  # the batch without its padding rows
        if not dedup:
            self.windows[group] = corpus.count_windows(rows, tokens[:num_rows], state)
            return stats
        kept, self.windows[group] = corpus.dedup_corpus(rows, tokens[:num_rows], state)
        new_mask = np.zeros_like(mask)
        new_mask[:num_rows] = kept.mask
        if isinstance(stats.mask, np.ndarray):
            return stats._replace(mask=new_mask)
        import jax.numpy as jnp

        return stats._replace(mask=jnp.asarray(new_mask, dtype=jnp.asarray(stats.mask).dtype))

    def warnings(self) -> list:
        """The shared-context warning of each state whose texts share most of their scored windows."""
        from wmspec_jax.detect import corpus

        return [w for state in self.windows.values() if (w := corpus.shared_context_warning(state))]


def score_group(secret, lines: Sequence[TextLine], specs, options: ScoringOptions, vocab: int,
                corpus_state: Optional[Corpus] = None) -> None:
    """Scores the lines of one settings group (equal :attr:`TextLine.group`); fills each ``line.result``."""
    from wmspec_jax.detect.provenance import Provenance

    first = lines[0]
    settings = Provenance(first.decoder, first.num_layers, first.context_width, first.prf_version,
                          draft_decoder=first.draft_decoder, siblings=first.siblings)
    weights = search_weights(options, first.siblings, first.where) \
        if first.siblings > 1 and (first.candidate is None or first.key_sequence) else None
    for line in lines:
        line.sibling_weights = weights
    if first.key_sequence:
        return score_edit_group(secret, lines, options, vocab)
    detectors = _group_detectors(lines, specs, options, vocab, settings)
    for line in lines:
        if len(line.ids) <= line.context_width:  # no position has a full context: nothing to score
            provenance = Provenance(line.decoder, line.num_layers, line.context_width, line.prf_version,
                                    secret.fingerprint, line.derivation, line.draft_decoder, line.siblings)
            line.result = _empty_result(line, detectors, options, provenance)
    scorable = [line for line in lines if len(line.ids) > line.context_width]
    # one key for every text: texts share keyed values where they share windows
    shared_key = corpus_state is not None and first.run is None
    dedup = shared_key and options.dedup == "corpus"
    order = scorable if dedup else sorted(scorable, key=lambda line: len(line.ids))  # dedup: input order
    for start in range(0, len(order), options.batch_size):
        chunk = order[start:start + options.batch_size]
        # rows padded with repeats of the first text (scored and dropped) to a power of two
        rows = chunk + [chunk[0]] * (min(_bucket(len(chunk), low=8), options.batch_size) - len(chunk))
        stats, tokens = _batch_statistics(secret, rows, vocab)
        if shared_key:
            stats = corpus_state.add(first, stats, tokens, len(chunk), dedup)
        per_detector = _score_batch(detectors, stats, options)
        for row, line in enumerate(chunk):
            results = [detector_result(d, spec, score[row], int(n[row]), float(lp[row]), options,
                                       None if win is None else [x[row] for x in win], line)
                       for spec, d, (score, n, lp), win in per_detector]
            line.result = result_line(line, results, stats.provenance)
            if dedup:
                line.result["dedup"] = "corpus"


def edit_result(line: TextLine, pvalue: float, phi: float, n: int, provenance, options: ScoringOptions) -> dict:
    """The edit test's result for one text (the shape of :func:`detector_result`'s)."""
    from wmspec_jax.detect import edit_alignment

    short = n < options.min_tokens
    weight = edit_alignment.method_draft_weight(line.method or "pseudorandom")
    log_p = None if short else math.log(pvalue)
    return {"detector": {"name": "edit", "label": "edit test (Kuditipudi et al.)", "key_sequence": line.key_sequence,
                         "gamma": options.edit_gamma, "null_keys": options.null_keys, "draft_weight": weight,
                         "file": None, "key_fingerprint": provenance.key_fingerprint},
            "num_scored": int(n), "verdict": NOT_ENOUGH if short else (
                "watermarked" if pvalue <= options.alpha else "not detected"),
            "score": None if short else finite(phi), "log_pvalue": log_p, "pvalue": None if short else float(pvalue),
            "log10_pvalue": None if short else log_p / math.log(10)}


def score_edit_group(secret, lines: Sequence[TextLine], options: ScoringOptions, vocab: int) -> None:
    """Scores lines generated under a key sequence (one settings group) with the edit test."""
    from wmspec_jax import decoders, detect

    first = lines[0]
    if options.alpha < 1.0 / (options.null_keys + 1):
        raise LineError(f"{first.where}: `alpha`={options.alpha} is below the edit test's smallest p-value "
                        f"1/(T + 1) with `null_keys`={options.null_keys}: raise `null_keys`")
    decoder = decoders.WatermarkDecoder.from_name
    order = sorted(lines, key=lambda line: len(line.ids))
    chunk_size = min(options.batch_size, 64)
    for start in range(0, len(order), chunk_size):
        chunk = order[start:start + chunk_size]
        tokens = np.zeros((len(chunk), _bucket(max(len(line.ids) for line in chunk), low=8)), np.int32)
        for row, line in enumerate(chunk):
            tokens[row, : len(line.ids)] = line.ids
        res = detect.edit_test(
            tokens, stream_keys(secret, chunk), key_length=first.key_sequence, vocab_size=vocab,
            lengths=np.array([len(line.ids) for line in chunk], np.int32), decoder=decoder(first.decoder),
            draft_decoder=None if first.draft_decoder is None else decoder(first.draft_decoder),
            method=first.method or "pseudorandom", gamma=options.edit_gamma, null_keys=options.null_keys,
            siblings=first.siblings, sibling_weights=first.sibling_weights, prf_version=first.prf_version)
        for row, line in enumerate(chunk):
            line.candidate = None  # the edit test searches the sibling streams
            line.result = result_line(line, [edit_result(line, res.pvalue[row], res.statistic[row],
                                                         int(res.num_scored[row]), res.provenance, options)],
                                      res.provenance)


def score_lines(secret, lines: Sequence[TextLine], specs, options: ScoringOptions, vocab: int,
                corpus_state: Optional[Corpus] = None) -> list:
    """The result line of each :class:`TextLine` (in input order), scored group by group.

    ``corpus_state``: the :class:`Corpus` of the texts before these (a tool scoring its input in
    chunks passes one for the whole input; None: these lines are the whole corpus). Its
    :meth:`Corpus.warnings` say whether the texts share most of their scored windows.
    """
    corpus_state = Corpus() if corpus_state is None else corpus_state
    groups: dict = {}
    for line in lines:
        groups.setdefault(line.group, []).append(line)
    for group in groups.values():
        score_group(secret, group, specs, options, vocab, corpus_state)
    return [line.result for line in lines]


def score_texts(records: Sequence[dict], secret, detectors: Sequence[str] = ("auto",), *, vocab_size: int,
                overrides: Optional[Overrides] = None, options: Optional[ScoringOptions] = None,
                defaults: Optional[dict] = None) -> list:
    """Scores generation records (JSON objects with ``tokens``) as ``wmspec-detect`` scores a JSONL file.

    Args:
      records: JSON objects, each with its generated token ids under
        ``tokens`` and, as ``wmspec-generate`` and the experiments write them,
        its settings and key provenance (:mod:`.lines`).
      secret: the watermark :class:`wmspec_jax.keys.Secret` (or its text).
      detectors: registry names or saved-detector paths; the first is primary.
      vocab_size: the tokenizer's vocabulary (token ids are checked against it).
      overrides, options, defaults: as the tool's flags (None: its defaults).
    Returns:
      one result dict per record (the tool's JSON line; ``"input"`` is
      ``"record k"``). Raises :class:`.lines.LineError` for a record that
      cannot be scored as it stands.
    """
    secret = secret if isinstance(secret, keys.Secret) else keys.Secret(secret)
    overrides = overrides or Overrides()
    options = options or ScoringOptions()
    specs = parse_detectors(detectors)
    base = {"decoder": "gumbel", "draft_decoder": None, "synthid_layers": 30,
            "context_width": prf.DEFAULT_CONTEXT_WIDTH, "siblings": 1}
    defaults = settings_defaults(specs, {**base, **(defaults or {})})
    lines = []
    for number, record in enumerate(records):
        where = f"record {number}"
        ids = recorded_ids(record, where, vocab_size)
        if ids is None:
            raise LineError(f"{where}: no 'tokens' field (score texts with wmspec-detect, which tokenises them)")
        lines.append(read_line(record, where, number, ids, secret=secret, overrides=overrides, defaults=defaults,
                               recorded_ids=ids))
    return score_lines(secret, lines, specs, options, vocab_size)


def score_foreign(scheme, records: Sequence[dict], wheres: Sequence[str], ids: Sequence[list], vocab: int,
                  eos: Optional[int], options: ScoringOptions, overrides: Overrides) -> list:
    """Result lines of texts scored with another engine's watermark (:mod:`wmspec_jax.interop.foreign`)."""
    out = scheme.score([list(t) for t in ids], vocab, eos)
    lines = []
    detector = {"name": scheme.name, "statistic": scheme.statistic, "key_fingerprint": scheme.fingerprint}
    for record, where, toks, score, n, log_p in zip(records, wheres, ids, out.score, out.num_scored, out.log_pvalue):
        n, log_p = int(n), float(log_p)
        short = n < options.min_tokens
        line = {"input": where}
        if "id" in record:
            line["id"] = record["id"]
        named = record.get("scheme")
        if isinstance(named, dict) and named.get("name") not in (None, scheme.name):
            _conflict(overrides, where, f"scheme {named.get('name')}", f"`scheme_config` is {scheme.name}")
        bounded = max(log_p, -745.0)  # below float64's smallest p: reported as its log bound
        line.update(num_tokens=len(toks), detector=detector, num_scored=n,
                    verdict=verdict(True, n, log_p, float(score), options),
                    score=None if short else finite(score), log_pvalue=None if short else bounded,
                    pvalue=None if short else math.exp(log_p),
                    log10_pvalue=None if short else bounded / math.log(10), scheme=scheme.record())
        if not short and log_p < -745.0:
            line["pvalue_underflow"] = True
        lines.append(line)
    return lines


def _format_p(r: dict) -> str:
    if r.get("log_pvalue") is None:
        return "-" if r.get("posterior") is None else f"post {r['posterior']:.3f}"
    l10 = r["log_pvalue"] / math.log(10)
    return f"{10 ** l10:.2g}" if l10 > -300 else f"1e{l10:.0f}"


def results_table(results: Sequence[dict]) -> str:
    """The results as a fixed-width table (what a terminal shows)."""
    rows = [("input", "tokens", "scored", "detector", "p-value", "verdict",
             "best window (p corrected over the windows tried)")]
    for line in results:
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


__all__ = ["Corpus", "DEDUP_CHOICES", "DetectorSpec", "NOT_ENOUGH", "ScoringOptions", "build_detector",
           "detector_result", "finite", "parse_detectors", "result_line", "results_table", "score_foreign",
           "score_group", "score_lines", "score_texts", "search_weights", "settings_defaults", "verdict"]
