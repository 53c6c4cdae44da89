"""The deployment rule of ``wmspec-detect``: every text is scored under the deployment's settings and keys.

A line's own fields — its decoder, context width, key derivation, run,
index, ``draft_fraction`` — are claims anyone can write. Believed, they
sell the verdict: a human text submitted under each of 101 claimed indices
comes out "watermarked" for 64 % of 400 human paragraphs at α = 0.01. So:

* the **deployment** (:class:`wmspec_jax.deployment_record.Deployment`)
  decides: a record signed with the secret (``--deployment=PATH``, else the
  record beside an input, ``<input>.deployment.json``), else the tool's
  flags and defaults, one setting for the whole run (:func:`resolve`). With
  a record, a flag that contradicts it is refused (:func:`check_flags`);
* a line whose declared settings or keys differ from the deployment's is
  an error naming the line, reported while the other lines are scored
  (:meth:`Rule.plan`); with ``--try_declared_settings`` it is scored under
  both, and a text is tried under at most one declared alternative per run,
  so every line's p-value of that run is multiplied by 2 (Bonferroni over
  the two settings a text can get, whichever of its lines comes first);
* per-text keys come from the record: a text whose token ids are ones the
  record issued is scored with that text's key; any other text with every
  issued key, and its best p-value multiplied by their number N (a claimed
  run and index outside what the record issued is an error; inside, the
  claim does not shrink N — it could be any of them);
* Ars-Prior's p is the deployment's, never the line's ``draft_fraction``;
  a multi-draft line's ``candidate`` (the sibling stream of each token) is
  believed only for token ids the record issued, else the sibling streams
  are searched.

The correction keeps P(p ≤ α) ≤ α under H0 whatever a line claims: the
reported p-value is the smallest of the k tried, times k
(:func:`combine`). ``docs/tools.md``, "The deployment rule".
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Callable, Optional, Sequence

from wmspec_jax import deployment_record, keys, text_record
from wmspec_jax import prf_keys as prf
from wmspec_jax.lines import text_line as lines_mod
from wmspec_jax.lines.text_line import LineError

MAX_SCAN_KEYS = 4096
"""The most issued keys a text the record does not know is scored under (each costs one scoring)."""

ERROR_VERDICT = "error"

SCORING_FIELDS = ("decoder", "draft_decoder", "synthid_layers", "context_width", "key_sequence", "draft_tree",
                  "kgw_gamma", "prf_version")
"""Declared fields that change how a text is scored: a declared alternative tries them."""

KEY_FIELDS = ("key_derivation", "run", "index")

_RULE_FIELDS = SCORING_FIELDS + KEY_FIELDS + ("draft_fraction", "candidate")
_VALIDATED = frozenset(("decoder", "draft_decoder", "synthid_layers", "context_width", "index", "key_sequence",
                        "draft_fraction", "kgw_gamma", "draft_tree", "key_derivation"))


def _statistic(name) -> Optional[str]:
    from wmspec_jax import decoders

    if name is None:
        return None
    try:
        return decoders.WatermarkDecoder.from_name(name).statistic
    except (KeyError, ValueError, TypeError):
        return f"unknown:{name}"


def resolve(explicit: Optional[str], inputs: Sequence[str], secret: keys.Secret, flag_settings: dict,
            flag_derivation: str, ignore_provenance: bool, note: Callable[[str], None]):
    """The deployment of a run: the record ``explicit`` (``--deployment``), else the one record beside the
    inputs, else the flags' settings (``flag_settings``: decoder, draft_decoder, synthid_layers,
    context_width, siblings, key_sequence, kgw_gamma). Raises :class:`deployment_record.RecordError`
    for a record that is refused (forged, edited, another secret's, unreadable) or inputs of different
    records; with ``ignore_provenance`` a record of another secret beside an input is passed over (``note``)."""
    if explicit is not None:
        return deployment_record.load(explicit, secret)
    found = {}
    for path in inputs:
        if path in (None, "-"):
            continue
        candidate = deployment_record.beside(path)
        if os.path.isfile(candidate):
            body = deployment_record.read_body(candidate)
            if ignore_provenance and body.get("key_fingerprint") != secret.fingerprint:
                note(f"{candidate}: a deployment record of another secret, not used (`ignore_provenance`)")
                continue
            found[candidate] = deployment_record.from_body(body, secret, candidate)
    distinct = {(d.key_derivation, d.prf_version, repr(sorted(d.settings.items()))) for d in found.values()}
    if len(distinct) > 1:
        raise deployment_record.RecordError(
            f"the inputs have deployment records of different settings ({', '.join(sorted(found))}): score them "
            "in separate runs, or pass `deployment`")
    if found:
        records = list(found.values())
        first = records[0]
        if len(records) == 1:
            return first
        issued: dict = {}
        texts: dict = {}
        for d in records:
            for run, ranges in d.issued.items():
                issued[run] = tuple(sorted(set(issued.get(run, ())) | set(ranges)))
            for digest, where in d.texts.items():
                texts[digest] = tuple(sorted(set(texts.get(digest, ())) | set(where)))
        return dataclasses.replace(first, issued=issued, texts=texts, source=", ".join(sorted(found)))
    settings = dict(flag_settings)
    return deployment_record.Deployment(secret.fingerprint, flag_derivation, prf.PRF_VERSION, settings,
                                        source="the flags (no deployment record)", signed=False)


def check_flags(dep, given: dict, detectors: Sequence[str]) -> None:
    """Refuses flags that contradict a signed record (``given``: flag name -> value, the flags given only);
    the first ``--detector`` must be the record's. Raises :class:`LineError` naming the flag."""
    if not dep.signed:
        return
    s = dep.settings
    wanted = {"decoder": s.get("decoder"), "draft_decoder": s.get("draft_decoder"),
              "synthid_layers": s.get("synthid_layers"), "context_width": s.get("context_width"),
              "key_sequence": s.get("key_sequence") or 0, "kgw_gamma": s.get("kgw_gamma"),
              "siblings": max(s.get("draft_tree") or [1]), "draft_fraction": dep.draft_fraction, "tau": None}
    for name, value in given.items():
        if name in ("run", "index"):
            raise LineError(f"--{name}: the deployment record {dep.source} decides each text's key (the text's "
                            "issued key when its token ids are one the record issued, else every issued key with "
                            "the p-value corrected for their number); `run` / `index` name keys without a record")
        if name == "keys":
            derivation = {"deployment": keys.DIRECT, "per_text": keys.KEY_DERIVATION}.get(value)
            if derivation is not None and derivation != dep.key_derivation:
                raise LineError(f"`keys`={value} contradicts the deployment record {dep.source} (key derivation "
                                f"{dep.key_derivation})")
            continue
        if name not in wanted:
            continue
        ours = wanted[name]
        same = _statistic(value) == _statistic(ours) if name in ("decoder", "draft_decoder") else (
            value == ours or (name == "synthid_layers" and _statistic(s.get("decoder")) != "synthid"))
        if not same:
            raise LineError(f"--{name}={value} contradicts the deployment record {dep.source} ({name}={ours}): the "
                            "deployment decides how every text is scored (docs/tools.md, \"The deployment rule\")")
    first = next((d.strip() for d in detectors if d.strip()), "auto")
    if first not in (dep.detector, "auto") and not _is_auto(first, dep):
        raise LineError(f"`detector`={first}: the deployment record {dep.source} scores with {dep.detector!r}; "
                        "other detectors may follow it (`detector`=auto,NAME) and are reported beside it")


def _is_auto(name: str, dep) -> bool:
    from wmspec_jax import decoders, detect

    try:
        family = decoders.WatermarkDecoder.from_name(dep.settings.get("decoder") or "gumbel").family
        return detect.DEFAULTS.get(family) == name
    except (KeyError, ValueError, TypeError):
        return False


def validate(record: dict, where: str) -> None:
    """A line's declared fields of the wrong type or out of range: :class:`LineError` naming the line and
    the field (the tool stops, as for any malformed input), before the rule compares them."""
    from wmspec_jax import decoders

    try:
        text_record.check_format(record, where)
    except text_record.FormatError as e:
        raise LineError(str(e)) from None
    if not record.keys() & _VALIDATED:  # a plain {"text": ...}: nothing declared (the common case, kept fast)
        return
    lines_mod.check_decoder_fields(record, where)
    lines_mod.record_int(record, "synthid_layers", where, 1, decoders.MAX_SYNTHID_LAYERS + 1)
    lines_mod.record_int(record, "context_width", where, 1, prf.MAX_CONTEXT_WIDTH + 1)
    lines_mod.record_int(record, "index", where, 0, lines_mod.KEY_INDEX_LIMIT)
    lines_mod.record_int(record, "key_sequence", where, 0, lines_mod.max_key_length() + 1)
    empty = lines_mod.Overrides()
    lines_mod.recorded_option(record, where, "draft_fraction", empty, closed=True)
    lines_mod.recorded_option(record, where, "kgw_gamma", empty, closed=False)
    lines_mod.siblings_of(record, where, empty, 1)
    derivation = record.get("key_derivation")
    if derivation is not None and derivation not in (keys.DIRECT, keys.KEY_DERIVATION):
        raise LineError(f"{where}: unknown key_derivation {str(derivation)[:40]!r} (this package knows "
                        f"{keys.DIRECT!r} and {keys.KEY_DERIVATION!r})")


def _same(name: str, declared, ours, dep) -> bool:
    if name in ("decoder", "draft_decoder"):
        return _statistic(declared) == _statistic(ours)
    if name == "key_sequence":
        return (declared or 0) == (ours or 0)
    if name == "draft_tree" and "draft_tree" not in dep.settings:  # flags: the sibling count
        return isinstance(declared, list) and bool(declared) and max(declared) == dep.settings.get("siblings", 1)
    if isinstance(declared, bool) or isinstance(ours, bool):
        return declared is ours
    if isinstance(declared, (int, float)) and isinstance(ours, (int, float)):
        return float(declared) == float(ours)
    return declared == ours


def declared_differences(record: dict, dep) -> list:
    """The fields a line declares that differ from the deployment's, as ``name=line value`` texts."""
    out = []
    settings = dict(dep.settings)
    draft_stat = lambda d, t: _statistic(d if d is not None else t)  # noqa: E731
    for name, declared in record.items():
        if name == "prf_version":
            ours = dep.prf_version
        elif name == "key_derivation":
            ours = dep.key_derivation
        elif name == "draft_tree":
            if declared is None:
                continue
            ours = settings.get("draft_tree")
            if "draft_tree" in settings and ours is None:
                out.append(f"draft_tree={str(declared)[:40]}")
                continue
        elif name in settings and name not in ("siblings",):
            ours = settings[name]
        else:
            continue
        if declared is None:
            continue
        if name == "draft_decoder":
            same = draft_stat(declared, record.get("decoder")) == draft_stat(ours, settings.get("decoder"))
        elif name == "synthid_layers":
            same = _statistic(settings.get("decoder")) != "synthid" or _same(name, declared, ours, dep)
        elif name == "kgw_gamma":
            same = _statistic(settings.get("decoder")) != "kgw" or _same(name, declared, ours, dep)
        else:
            same = _same(name, declared, ours, dep)
        if not same:
            out.append(f"{name}={str(declared)[:40]} (the deployment's: {str(ours)[:40]})")
    return out


@dataclasses.dataclass
class Variant:
    """One way of scoring a line: the record read (the line with the deployment's or its declared
    settings and one key), and which overrides read it."""

    record: dict
    declared: bool = False


@dataclasses.dataclass
class Plan:
    """How one input line is scored: its variants and the counts the correction multiplies."""

    variants: list
    base: dict
    settings_tried: int = 1
    keys_tried: int = 1
    key_note: Optional[dict] = None

    @property
    def tries(self) -> int:
        return len(self.variants)


@dataclasses.dataclass
class Rule:
    """The deployment rule for one run of the tool (module doc)."""

    deployment: object
    secret: keys.Secret
    try_declared: bool = False
    ignore_provenance: bool = False
    memo: Optional[dict] = dataclasses.field(default_factory=dict)
    declared_tried: dict = dataclasses.field(default_factory=dict)
    refused: list = dataclasses.field(default_factory=list)

    def base_record(self, record: dict) -> dict:
        """``record`` without the fields the rule decides (settings, keys, draft fraction, candidates)."""
        dep = self.deployment
        out = {k: v for k, v in record.items() if k not in _RULE_FIELDS}
        if dep.draft_fraction is not None:
            out["draft_fraction"] = dep.draft_fraction
        if dep.signed:
            s = dep.settings
            for name in ("decoder", "draft_decoder", "synthid_layers", "context_width", "key_sequence", "draft_tree",
                         "kgw_gamma"):
                if s.get(name) is not None:
                    out[name] = s[name]
            for name in ("method", "lookahead", "temperature", "draft_temperature", "top_k", "kgw_delta"):  # replayed
                if name in s:
                    out[name] = s[name]
            out["prf_version"] = dep.prf_version
        return out

    def plan(self, record: dict, where: str, ids: Sequence[int]) -> Plan:
        """The variants ``record`` is scored under. Raises :class:`LineError` naming the line when its
        declared settings or keys differ from the deployment's (module doc)."""
        dep, secret = self.deployment, self.secret
        fp = record.get("key_fingerprint")
        if fp is not None and not secret.matches_fingerprint(fp) and not self.ignore_provenance:
            raise LineError(f"{where}: the line was generated with key fingerprint {str(fp)[:20]}, but the given "
                            f"secret's is {secret.fingerprint}: scoring it anyway would answer for another watermark "
                            "(pass `ignore_provenance` to score it regardless)")
        differences = [] if self.ignore_provenance else declared_differences(record, dep)
        key_diff = [d for d in differences if d.startswith("key_derivation=")]
        if key_diff:
            raise LineError(f"{where}: the line declares {key_diff[0]}: the deployment {dep.source} decides the "
                            "keys" + ("" if dep.signed else "; per-text keys need the run's own deployment record "
                                      "(`deployment`=PATH)"))
        base = self.base_record(record)
        exact = dep.lookup(ids) if dep.signed else []
        if exact and record.get("candidate") is not None:
            base["candidate"] = record["candidate"]  # the record issued these very tokens
        key_records, note = self._keys(record, where, exact, base)
        variants = [Variant(r) for r in key_records]
        # with --try_declared_settings any text may be scored under two settings in this run, so every
        # line's p-value pays for both, whichever line of the text comes first
        settings_tried = 2 if self.try_declared else 1
        if differences:
            if not self.try_declared:
                raise LineError(f"{where}: the line declares {'; '.join(differences)}: the deployment "
                                f"{dep.source} decides how a text is scored, never the line (pass "
                                "`try_declared_settings` to score it both ways, the p-value corrected for the two)")
            signature = tuple(sorted((k, repr(record.get(k))) for k in SCORING_FIELDS))
            seen = self.declared_tried.setdefault(tuple(ids), (signature, where))
            if seen[0] != signature:
                raise LineError(f"{where}: the same text was already scored under other declared settings "
                                f"({seen[1]}); a text is tried under one declared alternative per run")
            declared = {k: record[k] for k in SCORING_FIELDS if record.get(k) is not None}
            variants += [Variant({**r, **declared}, declared=True) for r in key_records]
        return Plan(variants, base, settings_tried, len(key_records), note)

    def _keys(self, record: dict, where: str, exact: list, base: dict) -> tuple:
        """The records of each key a line is tried under, and what the result says about them."""
        dep = self.deployment
        if not dep.per_text:
            return [{**base, "key_derivation": dep.key_derivation}], None
        if not dep.signed:  # --run / --index: the flags name every text's key by position
            return [{**base, "key_derivation": keys.KEY_DERIVATION}], None
        claimed = (record.get("run"), record.get("index"))
        claims = claimed[0] is not None or claimed[1] is not None
        if claims and not dep.is_issued(*claimed):
            raise LineError(f"{where}: the line names text {str(claimed[1])[:24]} of run {str(claimed[0])[:60]!r}, "
                            f"which the deployment record {dep.source} did not issue")
        if exact:
            if claims and tuple(claimed) not in exact:
                raise LineError(f"{where}: its token ids are text {exact[0][1]} of run {exact[0][0]!r} of the "
                                f"deployment; the line names text {claimed[1]} of run {claimed[0]!r}")
            chosen = exact
            note = {"found_by": "its token ids are a text the deployment issued"}
        else:
            n = dep.num_issued()
            if n == 0:
                raise LineError(f"{where}: the deployment record {dep.source} issued no per-text key")
            if n > MAX_SCAN_KEYS:
                raise LineError(f"{where}: its token ids are no text the deployment issued, and scoring it under "
                                f"all {n} issued keys exceeds {MAX_SCAN_KEYS}: score the generated line itself")
            chosen = dep.issued_keys()
            note = {"found_by": f"not a text the deployment issued: scored under all {n} issued keys"}
        return [{**base, "key_derivation": keys.KEY_DERIVATION, "run": r, "index": i} for r, i in chosen], note

    def error_line(self, record: dict, where: str, ids: Sequence[int], error: Exception) -> dict:
        """The result line of a line refused by the rule (the other lines are still scored)."""
        self.refused.append(where)
        out = {"input": where}
        if "id" in record:
            out["id"] = record["id"]
        out.update(num_tokens=len(ids), detector={"name": "none"}, num_scored=0, verdict=ERROR_VERDICT, score=None,
                   log_pvalue=None, pvalue=None, log10_pvalue=None, error=str(error))
        return out


def _correct(result: dict, log_k: float, alpha: float) -> None:
    lp = result.get("log_pvalue")
    if lp is None:
        return
    corrected = min(0.0, lp + log_k)
    result["uncorrected_log_pvalue"] = lp
    result["log_pvalue"] = corrected
    result["pvalue"] = math.exp(corrected)
    result["log10_pvalue"] = corrected / math.log(10)
    if result.get("verdict") in ("watermarked", "not detected"):
        result["verdict"] = "watermarked" if corrected <= math.log(alpha) else "not detected"
    window = result.get("window")
    if isinstance(window, dict) and window.get("log_pvalue") is not None:
        w = min(0.0, window["log_pvalue"] + log_k)
        window["log_pvalue"], window["pvalue"] = w, math.exp(w)
        if window.get("verdict") in ("watermarked span", "not detected"):
            window["verdict"] = "watermarked span" if w <= math.log(alpha) else "not detected"


def combine(plan: Plan, results: Sequence[dict], alpha: float) -> dict:
    """One result line from the results of a plan's variants: the smallest primary p-value, multiplied
    (with every other p-value of that line) by the number of variants tried (Bonferroni)."""
    k = plan.settings_tried * plan.keys_tried
    if k == 1:
        out = dict(results[0])
        if plan.key_note is not None:
            out["key"] = {**out.get("key", {}), **plan.key_note}
        return out

    def primary(r: dict) -> float:
        lp = r.get("log_pvalue")
        return math.inf if lp is None else lp

    calibrated = [r for r in results if r.get("posterior") is None]
    if len(calibrated) != len(results):
        raise LineError(f"{results[0]['input']}: a posterior (a fitted Bayesian detector) cannot be corrected for "
                        f"the {k} settings and keys tried; score the generated line with its deployment record")
    best = min(range(len(results)), key=lambda j: primary(results[j]))
    import copy

    out = copy.deepcopy(results[best])
    log_k = math.log(k)
    _correct(out, log_k, alpha)
    for r in out.get("results", []):
        _correct(r, log_k, alpha)
    out["tried"] = {"settings": plan.settings_tried, "keys": plan.keys_tried, "total": k,
                    "correction": "Bonferroni: the smallest p-value times the number tried",
                    "best": "declared settings" if plan.variants[best].declared else "deployment settings"}
    if plan.key_note is not None:
        out["key"] = {**out.get("key", {}), **plan.key_note}
    return out


MEMO_ENTRIES = 65536
"""Combined results kept per run for texts submitted again (the same ids under the same claims)."""


def _memo_key(plan: Plan, ids: Sequence[int], offsets) -> str:
    import hashlib
    import json

    base = {k: v for k, v in plan.base.items() if k != "id"}
    if plan.key_note is not None and plan.key_note["found_by"].startswith("not a text"):
        # every issued key, whatever the line claimed: the claims' values do not matter
        variants = [[v.declared] + [v.record.get(k) for k in SCORING_FIELDS] for v in plan.variants[::plan.keys_tried]]
    else:
        variants = [[v.declared] + [v.record.get(k) for k in _RULE_FIELDS] for v in plan.variants]
    text = json.dumps([list(ids), base, variants, offsets], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _relabelled(result: dict, record: dict, where: str) -> dict:
    import copy

    out = copy.deepcopy(result)
    out["input"] = where
    out.pop("id", None)
    if "id" in record:
        out = {"input": where, "id": record["id"], **{k: v for k, v in out.items() if k != "input"}}
    return out


def score_chunk(rule: Rule, inputs: Sequence, ids: Sequence, recorded: Sequence, offsets: Sequence,
                first_number: int, read: Callable, score: Callable, alpha: float, memo: bool = True) -> list:
    """The result lines of one chunk of inputs under the rule.

    Each line is planned (:meth:`Rule.plan`; a line the rule refuses gets its
    error line and the others are scored), every variant read by
    ``read(record, where, number, ids, recorded_ids, offsets, declared)``
    (a :class:`wmspec_jax.lines.text_line.TextLine`), all scored together by
    ``score(text_lines)`` and each line's results combined (:func:`combine`).
    ``memo``: a text submitted again under the same claims gets the result
    already computed (off where scoring depends on the order of texts, e.g.
    corpus dedup).
    """
    plans: list = []
    text_lines: list = []
    pending: dict = {}
    for k, (x, toks) in enumerate(zip(inputs, ids)):
        validate(x.record, x.where)
        try:
            plan = rule.plan(x.record, x.where, toks)
        except LineError as e:
            plans.append(("error", rule.error_line(x.record, x.where, toks, e)))
            continue
        # --run / --index key a text by its position, so a repeated text is another key there; a text
        # scored once (one setting, one key) costs less to score again than to look up
        by_position = rule.deployment.per_text and not rule.deployment.signed
        reuse = memo and rule.memo is not None and not by_position and plan.tries > 1
        key = _memo_key(plan, toks, offsets[k]) if reuse else None
        if key is not None and key in rule.memo:
            plans.append(("memo", _relabelled(rule.memo[key], x.record, x.where)))
            continue
        if key is not None and key in pending:  # the same text and claims earlier in this chunk
            plans.append(("same", (key, x.record, x.where)))
            continue
        if key is not None:
            pending[key] = True
        start = len(text_lines)
        for v in plan.variants:
            text_lines.append(read(v.record, x.where, first_number + k, toks, recorded[k], offsets[k], v.declared))
        plans.append(("scored", (plan, start, key)))
    results = score(text_lines) if text_lines else []
    out = []
    done: dict = {}
    for kind, entry in plans:
        if kind == "same":
            key, record, where = entry
            line = done[key]
            if line.get("verdict") == ERROR_VERDICT:
                rule.refused.append(where)
            out.append(_relabelled(line, record, where))
            continue
        if kind != "scored":
            out.append(entry)
            continue
        plan, start, key = entry
        try:
            line = combine(plan, results[start:start + plan.tries], alpha)
        except LineError as e:
            line = rule.error_line({}, results[start]["input"], [], e)
        if key is not None:
            done[key] = line
            if len(rule.memo) >= MEMO_ENTRIES:
                rule.memo.clear()
            rule.memo[key] = line
        out.append(line)
    return out


__all__ = ["ERROR_VERDICT", "KEY_FIELDS", "MAX_SCAN_KEYS", "Plan", "Rule", "SCORING_FIELDS", "Variant",
           "MEMO_ENTRIES", "check_flags", "combine", "declared_differences", "resolve", "score_chunk", "validate"]
