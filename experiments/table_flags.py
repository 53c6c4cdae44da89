"""absl flags and start-up shared by the one-table scripts (``experiments.decoders``,
``experiments.drafter_sensitivity``): their generation flags and what they do before any model loads."""

from __future__ import annotations

import os

from absl import flags

from wmspec_jax.cli.flags import secret_from_flags


def define_table_flags(output_dir: str, temperature_help: str, lookahead_help: str = "K of the speculative methods",
                       fv: flags.FlagValues = flags.FLAGS) -> None:
    """The generation flags the one-table scripts (``experiments.decoders``, ``experiments.drafter_sensitivity``)
    share: ``--lookahead``, ``--temperature`` (0.7), ``--synthid_layers``, ``--batch_size``,
    ``--max_prompt_tokens``, ``--seed`` and ``--output_dir``."""
    flags.DEFINE_integer("lookahead", 3, lookahead_help, lower_bound=1, flag_values=fv)
    flags.DEFINE_float("temperature", 0.7, temperature_help, lower_bound=0.0, flag_values=fv)
    flags.DEFINE_integer("synthid_layers", 30, "SynthID's m", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("batch_size", 16, "texts per generation call", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("max_prompt_tokens", 128, "longest prompt (tokens; longer ones lose their start)",
                         lower_bound=8, flag_values=fv)
    flags.DEFINE_integer("seed", 0, "true-randomness seed", flag_values=fv)
    flags.DEFINE_string("output_dir", output_dir, "where outputs go", flag_values=fv)


def start_table(draft_specs, fv: flags.FlagValues = flags.FLAGS):
    """What a one-table script does before any model loads: the secret (``--demo_secret`` allowed), the
    pair specs checked (``--target`` with each of ``draft_specs``), ``--num_prompts`` prompts of
    ``--dataset`` and the record store of ``--output_dir``. Returns (secret, where it came from, prompt set,
    store); a bad flag is an ``app.UsageError``."""
    from absl import app

    from wmspec_jax import text_data as data
    from wmspec_jax.lab import runs
    from wmspec_jax.models import pairs

    try:
        secret, source = secret_from_flags(allow_demo=fv.demo_secret)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    for spec in draft_specs:
        pairs.check_pair_spec(fv.target, spec, fv.dtype)
    prompt_set = data.load_prompt_set(fv.dataset).take(fv.num_prompts, seed=fv.seed)
    if len(prompt_set) < fv.num_prompts:
        raise app.UsageError(f"--dataset={fv.dataset} has {len(prompt_set)} prompts, fewer than --num_prompts")
    os.makedirs(fv.output_dir, exist_ok=True)
    return secret, source, prompt_set, runs.open_generations(fv.output_dir)
