r"""``wmspec-deployment``: the deployment record of outputs written before ``wmspec-generate`` wrote one.

    export WMSPEC_SECRET=...                      # the key holder's secret
    wmspec-deployment answers.jsonl               # writes answers.jsonl.deployment.json
    wmspec-detect answers.jsonl                   # scores under it (docs/tools.md, "The deployment rule")

(also ``python -m wmspec_jax.cli.deployment``). Reads the key holder's own ``wmspec-generate`` output(s):
every line must be a generation record of the given secret (its key fingerprint) and all lines must share
one set of settings; the record holds those settings, the key derivation the lines name (``direct`` when
they name none, said on stderr), the runs and indices they hold, a keyed digest of each text's token ids,
and Ars-Prior's p (the lines' mean ``draft_fraction``), signed with the secret
(:mod:`wmspec_jax.deployment_record`). Run it only on files you generated: the record believes them.
An existing record of the same secret and settings gains the texts. Errors exit with status 2.
"""

from __future__ import annotations

import sys
from typing import Sequence

from absl import flags

from wmspec_jax import deployment_record, keys, text_record
from wmspec_jax.cli import flags as cli_flags
from wmspec_jax.cli import outputs
from wmspec_jax.cli.texts import InputError, iter_inputs

PROG = "wmspec-deployment"
PER_TEXT = set(text_record.TEXT_FIELDS) | set(text_record.TOOL_FIELDS) | {
    text_record.FORMAT_FIELD, "id", "run", "candidate"} | set(deployment_record.NOT_SETTINGS)
"""Fields of a generated line that belong to the text, not to the settings of its run."""


def define_flags(fv: flags.FlagValues) -> None:
    """The tool's flags on ``fv``."""
    cli_flags.define_input_flags(fv, what="wmspec-generate output", text_format="not read: JSONL only", field="text")
    cli_flags.define_secret_flags(fv, demo_flag=True)
    flags.DEFINE_string("output", None, "where the record goes (default: <first input>.deployment.json)",
                        flag_values=fv)


def settings_of(record: dict) -> dict:
    """The settings of the run a generated line records (its fields that are not the text's own)."""
    return {k: v for k, v in record.items() if k not in PER_TEXT}


def record_outputs(paths: Sequence[str], secret: keys.Secret, output: str, stderr) -> dict:
    """Writes the record of the generated lines in ``paths`` to ``output``; returns the record. Raises
    ``InputError`` / ``ValueError`` naming the line that is no generation record of ``secret`` or whose
    settings differ from the first line's."""
    settings, derivation, first, texts, fractions = None, None, None, [], []
    inputs = iter_inputs(paths, fmt="jsonl")
    try:
        for x in inputs:
            rec = x.record
            text_record.check_format(rec, x.where)
            if rec.get("key_fingerprint") != secret.fingerprint:
                raise InputError(f"{x.where}: not a generation record of the given secret (key fingerprint "
                                 f"{str(rec.get('key_fingerprint'))[:20]}, the secret's is {secret.fingerprint})")
            run, index, tokens = rec.get("run"), rec.get("index"), rec.get("tokens")
            if not isinstance(run, str) or isinstance(index, bool) or not isinstance(index, int) or index < 0 \
                    or not isinstance(tokens, list):
                raise InputError(f"{x.where}: a generation record needs its run, index and tokens")
            own = settings_of(rec)
            line_derivation = rec.get("key_derivation") or keys.DIRECT
            if settings is None:
                settings, derivation, first = own, line_derivation, x.where
                if "key_derivation" not in rec:
                    print(f"{PROG}: {x.where}: no key_derivation: the lines are taken as deployment keys (direct)",
                          file=stderr)
            elif own != settings or line_derivation != derivation:
                changed = sorted(k for k in set(own) | set(settings) if own.get(k) != settings.get(k))
                raise InputError(f"{x.where}: other settings than {first} ({', '.join(changed) or 'key_derivation'}): "
                                 "a record is one deployment; record each run's output on its own")
            texts.append((run, index, tokens))
            if isinstance(rec.get("draft_fraction"), (int, float)):
                fractions.append(float(rec["draft_fraction"]))
    finally:
        inputs.close()
    if settings is None:
        raise InputError("no generation record in the inputs")
    p = sum(fractions) / len(fractions) if fractions else None
    return deployment_record.record_generated(output, secret, settings, key_derivation=derivation, texts=texts,
                                              draft_fraction=p)


def run(argv: Sequence[str], *, stdin=None, stdout=None, stderr=None) -> int:
    """The tool: parses ``argv`` (``argv[0]`` is the program name) and returns the exit status."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    fv, status, paths = cli_flags.parse_tool(define_flags, __doc__, argv, PROG, stdout, stderr)
    if status is not None:
        return status
    paths = list(fv.input) + list(paths)
    try:
        if not paths or "-" in paths:
            raise InputError("give the wmspec-generate output file(s): the record goes beside the first")
        output = fv.output or deployment_record.beside(paths[0])
        outputs.check_output_path("--output", output, paths, allow_stdout=False,
                                  consequence="the record would replace it")
        secret = cli_flags.tool_secret(fv, PROG, stderr)
        body = record_outputs(paths, secret, output, stderr)
    except (InputError, ValueError, OSError) as e:
        return cli_flags.refuse(PROG, e, stderr)
    n = sum(hi - lo for ranges in body["issued"].values() for lo, hi in ranges)
    print(f"{PROG}: wrote {output}: {n} texts of {len(body['issued'])} run(s), key derivation "
          f"{body['key_derivation']}", file=stderr)
    return 0


main = cli_flags.console_entry(run)  # ``wmspec-deployment``


if __name__ == "__main__":
    main()


__all__ = ["PER_TEXT", "PROG", "define_flags", "main", "record_outputs", "run", "settings_of"]
