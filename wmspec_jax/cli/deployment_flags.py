"""``wmspec-detect``'s flags of the deployment rule and the glue between them and
:mod:`wmspec_jax.lines.deployment` (which names no flag): which deployment a run scores under, the flags
it refuses, and each chunk of texts planned, read, scored and combined."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import flags

from wmspec_jax import deployment_record, keys, scheme_defaults
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.lines import deployment, text_line as lines

CHECKED_FLAGS = ("decoder", "draft_decoder", "synthid_layers", "context_width", "siblings", "key_sequence",
                 "kgw_gamma", "draft_fraction", "tau", "run", "index", "keys")
"""Flags that choose how a text is scored: with a deployment record they must agree with it."""


def define_flags(fv: flags.FlagValues) -> None:
    """``--deployment`` and ``--try_declared_settings`` on ``fv``."""
    flags.DEFINE_string("deployment", None, "the deployment record: the settings and keys every text is scored "
                        "with (wmspec-generate writes <output>.deployment.json beside its output; wmspec-deployment "
                        "writes one for older outputs). Default: the record beside an input, else the flags",
                        flag_values=fv)
    flags.DEFINE_bool("try_declared_settings", False, "score a line whose declared settings differ from the "
                      "deployment's under both, its p-value multiplied by the settings tried (without it such a "
                      "line is an error naming it; the other lines are scored)", flag_values=fv)


def define_generate_flags(fv: flags.FlagValues) -> None:
    """``wmspec-generate``'s ``--deployment``: where its deployment record goes."""
    flags.DEFINE_string("deployment", None, "write the deployment record here (the settings and keys wmspec-detect "
                        "scores with, signed with the secret; an existing record of the same settings gains this "
                        "run's texts). Default: <output>.deployment.json beside --output", flag_values=fv)


class Recorder:
    """What ``wmspec-generate`` adds to its deployment record: the texts of a run, written at the end of the
    run (and at most every :attr:`EVERY_SECONDS` while it runs, so a killed run leaves its texts recorded)."""

    EVERY_SECONDS = 30.0

    def __init__(self, fv, secret, run: str, settings: dict, inputs: Sequence[str], stderr, prog: str):
        import time

        from wmspec_jax.cli import outputs

        self.secret, self.run, self.settings = secret, run, settings
        self.derivation = settings.get("key_derivation")
        path = fv.deployment
        if path is None and fv.output not in (None, outputs.STDOUT):
            path = deployment_record.beside(fv.output)
        if secret is None:  # a method that draws no watermark: nothing to detect
            path = None
        elif path is None:
            print(f"{prog}: no deployment record is written for standard output: pass --deployment=PATH so "
                  "wmspec-detect can score these texts under their settings", file=stderr)
        else:
            others = [p for p in list(inputs) + [fv.output] if p not in (None, outputs.STDOUT)]
            outputs.check_output_path("--deployment", path, others or None, allow_stdout=False,
                                      consequence="the record would replace it")
        self.path = path
        self.texts: list = []
        self.fractions: list = []
        self.last = time.monotonic()
        if path is not None:
            import os

            if os.path.exists(path):  # another secret's or other settings: refused before any text is made
                deployment_record.record_generated(path, secret, settings, key_derivation=self.derivation, texts=[],
                                                   draft_fraction=None)

    def add(self, lines_: Sequence[dict]) -> None:
        """Adds generated lines (``run``, ``index``, ``tokens``, ``draft_fraction``)."""
        import time

        for rec in lines_:
            self.texts.append((self.run, int(rec["index"]), list(rec["tokens"])))
            if isinstance(rec.get("draft_fraction"), (int, float)):
                self.fractions.append(float(rec["draft_fraction"]))
        if self.path is not None and time.monotonic() - self.last > self.EVERY_SECONDS:
            self.write()

    def write(self) -> None:
        """Writes the record with the texts added so far."""
        import time

        if self.path is None or not self.texts:
            return
        p = sum(self.fractions) / len(self.fractions) if self.fractions else None
        deployment_record.record_generated(self.path, self.secret, self.settings, key_derivation=self.derivation,
                                           texts=self.texts, draft_fraction=p)
        self.texts = []
        self.last = time.monotonic()


def rule(fv, paths: Sequence[str], secret: keys.Secret, defaults: dict, stderr, prog: str) -> deployment.Rule:
    """The :class:`wmspec_jax.lines.deployment.Rule` of a run: its deployment (``--deployment``, the record
    beside an input, else the flags), the flags checked against it. Raises ``ValueError`` naming the cause."""
    given = {name: fv[name].value for name in CHECKED_FLAGS if fv[name].present}
    settings = {**defaults, "key_sequence": fv.key_sequence or None,
                "kgw_gamma": scheme_defaults.KGW_GAMMA if fv.kgw_gamma is None else fv.kgw_gamma}
    derivation = keys.KEY_DERIVATION if fv["run"].present else keys.DIRECT
    dep = deployment.resolve(fv.deployment, list(fv.input) + list(paths), secret, settings, derivation,
                             fv.ignore_provenance,
                             lambda text: print(f"{prog}: {cli_flags.flag_names(text)}", file=stderr))
    if not dep.signed and fv.keys == "per_text":
        raise deployment_record.RecordError("--keys=per_text: per-text keys need the run's own deployment record "
                                            "(--deployment=PATH; wmspec-generate writes it beside its output)")
    deployment.check_flags(dep, given, fv.detector)
    return deployment.Rule(dep, secret, try_declared=fv.try_declared_settings, ignore_provenance=fv.ignore_provenance)


def score_chunk(run_state, inputs: Sequence, ids: Sequence, recorded: Sequence, offsets: Sequence,
                first_number: int, score) -> list:
    """The result lines of one chunk under ``run_state.rule`` (``score(secret, text_lines, specs, options,
    vocab, corpus)``: the key-only or model-assisted scorer)."""
    declared_overrides = dataclasses.replace(run_state.overrides, **{name: None for name in lines.SETTINGS},
                                             key_sequence=None, kgw_gamma=None)

    def read(record, where, number, toks, recorded_ids, offs, declared):
        return lines.read_line(record, where, number, toks, secret=run_state.secret,
                               overrides=declared_overrides if declared else run_state.overrides,
                               defaults=run_state.defaults, recorded_ids=recorded_ids, offsets=offs,
                               assumed_direct=run_state.assumed_direct)

    def score_all(text_lines):
        out = score(run_state.secret, text_lines, run_state.specs, run_state.options, run_state.vocab,
                    run_state.corpus)
        run_state.searched += sum(line.sibling_weights is not None for line in text_lines)
        return out

    return deployment.score_chunk(run_state.rule, inputs, ids, recorded, offsets, first_number, read, score_all,
                                  run_state.options.alpha, memo=run_state.options.dedup != "corpus")


def report(run_state, stderr, prog: str) -> bool:
    """Says on ``stderr`` which lines the rule refused; returns whether any was."""
    refused = [] if run_state.rule is None else run_state.rule.refused
    if refused:
        print(f"{prog}: {len(refused)} line(s) refused by the deployment rule (first: {refused[0]}); their "
              "output lines carry the error, the other lines were scored", file=stderr)
    return bool(refused)


__all__ = ["CHECKED_FLAGS", "Recorder", "define_flags", "define_generate_flags", "report", "rule", "score_chunk"]
