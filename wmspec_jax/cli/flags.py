"""absl flags of the command-line tools, and the watermark-secret flags every script shares.

* :func:`define_secret_flags` / :func:`secret_from_flags` / :func:`tool_secret`: where the watermark
  secret comes from — ``--secret_env=VAR`` (default ``$WMSPEC_SECRET``) or
  ``--secret_file=PATH``; never argv (visible to every user of the machine
  in ``ps`` and kept in shell histories).
* :func:`define_pair_flags`: ``--target`` / ``--draft`` / ``--dtype`` of
  ``wmspec-generate`` (the same names and help as the experiments').
* :func:`define_input_flags` / :func:`parse_tool_argv`: the input flags and
  the argv handling (help, flag errors) of ``wmspec-generate`` and
  ``wmspec-detect``.
* :func:`enable_compilation_cache`: the tools' persistent XLA compilation cache.

The experiment scripts' flags (one per field of the experiments' settings)
are in ``experiments/flags.py``. Every function takes the
``flags.FlagValues`` to use (default: absl's global ``FLAGS``); the
command-line tools use a fresh one per call, so they can be run in-process
(tests) without global state. Importing this module does not start JAX.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

from absl import flags

from wmspec_jax import keys
from wmspec_jax import prf_keys as prf
from wmspec_jax.cli.texts import FORMATS

PAIR_FLAG_HELP = {
    "target": "'builtin', 'toy' or a local Hugging Face checkpoint directory (target P)",
    "draft": "'builtin' (= 'builtin:f3', a feature draft; 'builtin:f1' / 'builtin:f2' are its predecessors, "
             "'builtin:v1' / 'v2' / 'v3' earlier shipped LoRA drafts), 'toy' or a local Hugging Face checkpoint "
             "directory (draft Q)",
    "dtype": "params dtype of checkpoints: float32 or bfloat16",
}

SECRET_FLAGS = {
    "secret_env": f"name of the environment variable holding the watermark secret (default {keys.ENV_VAR})",
    "secret_file": "file holding the watermark secret (its text, surrounding whitespace removed)",
}

DECODER_NAMES = ("gumbel", "synthid", "synthid_limit", "inverse_transform", "dipmark", "gamma_reweight", "kgw")
"""The names --decoder and a line's 'decoder' take (``wmspec_jax.decoders.DECODER_NAMES``, written out so
that --help imports no JAX)."""


def define_secret_flags(fv: flags.FlagValues = flags.FLAGS, *, demo_flag: bool = False) -> None:
    """``--secret_env``, ``--secret_file``, ``--weak_secret_ok`` (and, with ``demo_flag``, ``--demo_secret``)."""
    for name, help_ in SECRET_FLAGS.items():
        flags.DEFINE_string(name, None, help_, flag_values=fv)
    flags.DEFINE_bool("weak_secret_ok", False, f"accept a secret below the strength rule (at least "
                      f"{keys.MIN_SECRET_LENGTH} characters and {keys.MIN_SECRET_BITS} estimated bits; "
                      "wmspec_jax.keys.check_strength): for tests and demos only", flag_values=fv)
    if demo_flag:
        flags.DEFINE_bool("demo_secret", False, f"use the PUBLIC demo secret {keys.DEMO_SECRET!r} of the quick "
                          "experiments (anyone can detect and forge its watermark)", flag_values=fv)


def secret_from_flags(fv: flags.FlagValues = flags.FLAGS, *, allow_demo: bool) -> tuple:
    """(:class:`wmspec_jax.keys.Secret`, where it came from): ``--secret_file``, else the environment
    variable (``--secret_env``, default ``$WMSPEC_SECRET``), else — only with ``allow_demo`` — the
    public demo secret. Raises ValueError (bad or unreadable file, unset variable, no key source)."""
    try:
        return keys.resolve(fv["secret_env"].value, fv["secret_file"].value, allow_demo=allow_demo,
                            weak_secret_ok=bool(fv["weak_secret_ok"].value))
    except UnicodeDecodeError:
        raise ValueError(f"the watermark secret file {fv['secret_file'].value} is not UTF-8 text") from None


def tool_secret(fv: flags.FlagValues, prog: str, stderr) -> keys.Secret:
    """A console tool's secret: :func:`secret_from_flags`, else with ``--demo_secret`` the public demo
    secret (said on ``stderr``). Raises ValueError naming what to do when there is no key source."""
    if not (fv.secret_file or fv.secret_env or os.environ.get(keys.ENV_VAR)):
        if not fv.demo_secret:
            raise ValueError(f"no watermark key source: export the secret in ${keys.ENV_VAR}, or pass "
                             "--secret_env=VAR / --secret_file=PATH (the key is never read from the command line)")
        print(f"{prog}: using the PUBLIC demo secret (anyone can detect and forge its watermark)", file=stderr)
        return keys.Secret(keys.DEMO_SECRET)
    return secret_from_flags(fv, allow_demo=False)[0]


def define_pair_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
    """``--target``, ``--draft`` and ``--dtype`` (defaults: the built-in pair, float32)."""
    flags.DEFINE_string("target", "builtin", PAIR_FLAG_HELP["target"], flag_values=fv)
    flags.DEFINE_string("draft", "builtin", PAIR_FLAG_HELP["draft"], flag_values=fv)
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], PAIR_FLAG_HELP["dtype"], flag_values=fv)


HELP_ARGS = ("-h", "--help", "-?", "--helpfull", "--helpshort")


def define_input_flags(fv: flags.FlagValues, *, what: str, text_format: str, field: str) -> None:
    """``--input``, ``--input_format`` and ``--<field>_field`` of a tool reading ``what`` (texts, prompts);
    ``text_format`` says what a plain-text input holds."""
    flags.DEFINE_multi_string("input", [], f"{what} file (repeatable; also positional); '-' or none: stdin",
                              flag_values=fv)
    flags.DEFINE_enum("input_format", "auto", list(FORMATS), f"text ({text_format}), jsonl, or auto (.jsonl / "
                      ".ndjson files and stdin starting with '{' are JSONL)", flag_values=fv)
    flags.DEFINE_string(f"{field}_field", field, f"the JSONL field holding the {field}", flag_values=fv)


def define_scheme_flags(fv: flags.FlagValues, *, decoder_help: str, draft_decoder_help: str) -> None:
    """``--decoder``, ``--synthid_layers``, ``--draft_decoder`` and ``--context_width``: the watermark
    scheme, as ``wmspec-generate`` applies it and ``wmspec-detect`` scores it."""
    flags.DEFINE_string("decoder", "gumbel", decoder_help, flag_values=fv)
    flags.DEFINE_integer("synthid_layers", 30, "SynthID tournament layers m", lower_bound=1, flag_values=fv)
    flags.DEFINE_string("draft_decoder", None, draft_decoder_help, flag_values=fv)
    flags.DEFINE_integer("context_width", prf.DEFAULT_CONTEXT_WIDTH, "context width h of the watermark",
                         lower_bound=1, flag_values=fv)


def parse_tool_argv(fv: flags.FlagValues, argv, prog: str, help_text, stdout, stderr) -> tuple:
    """(status, positional arguments) of a tool's ``argv`` (``argv[0]``: the program name).

    ``status`` is 0 after writing ``help_text()`` to ``stdout`` (a help flag), 2 after writing a flag
    error to ``stderr``, else None: the caller goes on with the positional arguments."""
    if any(a in HELP_ARGS for a in argv[1:]):
        stdout.write(help_text() + "\n")
        return 0, []
    try:
        return None, fv(list(argv))[1:]
    except flags.Error as e:
        return refuse(prog, f"{e} (see --help)", stderr), []


def parse_tool(define_flags, doc: str, argv, prog: str, stdout, stderr) -> tuple:
    """(flag values, status, positional arguments) of a tool whose flags ``define_flags(fv)`` defines
    and whose help is ``doc`` and the flags' help (:func:`parse_tool_argv` for ``status``)."""
    fv = flags.FlagValues()
    define_flags(fv)
    status, paths = parse_tool_argv(
        fv, argv, prog, lambda: doc.strip() + "\n\nFlags:\n" + fv.get_help(include_special_flags=False),
        stdout, stderr)
    return fv, status, paths


def enable_compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache for a command-line tool; returns its directory.

    A tool run compiles the same few programs as the last one (the scoring
    kernels, the generation loop): with the cache a later run loads them from
    disk instead of compiling. Directory: ``$JAX_COMPILATION_CACHE_DIR`` when
    set, else ``xla/`` of :mod:`wmspec_jax.user_cache` (off with
    ``WMSPEC_CACHE_DIR=""``). Entries are keyed by the program, the JAX
    version and the device, so a stale one is never used. XLA checks nothing
    of what it loads, so the directory must keep the user cache's ownership
    rule (:func:`wmspec_jax.user_cache.private`; else the cache is off, with
    a warning) and entries that break it are deleted first. The generation
    loop is also kept in :mod:`wmspec_jax.executable_store` (``executables/``
    of the user cache), which a later run loads without tracing it.
    """
    from wmspec_jax import executable_store, user_cache

    executable_store.enable(user_cache.directory("executables"))
    path = os.environ.get("JAX_COMPILATION_CACHE_DIR") or user_cache.directory("xla")
    import jax

    if path and not user_cache.private(path):  # XLA loads what it finds there as native code
        warnings.warn(f"the compilation cache {path} ($JAX_COMPILATION_CACHE_DIR) is not used: it is not a "
                      "directory of this user that only this user can write", RuntimeWarning, stacklevel=2)
        jax.config.update("jax_compilation_cache_dir", None)  # JAX itself reads the variable too
        return None
    if not path:
        return None
    user_cache.remove_foreign(path)  # entries another user could have planted before it was private

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def console_entry(run):
    """A tool's console-script entry point: a function of no arguments that exits with ``run(sys.argv)``'s
    status (``run`` takes the argv list, ``argv[0]`` the program name); Ctrl-C ends it with one line and
    status 130 (:mod:`wmspec_jax.cli.interrupts`)."""
    def main() -> None:
        from wmspec_jax.cli import interrupts

        sys.exit(interrupts.run_interruptible(run, sys.argv, interrupts.program_name(run)))

    main.__doc__ = f"Console-script entry point of {run.__module__}: exits with its run(sys.argv)."
    return main


_OPTION = re.compile(r"`([a-z][a-z0-9_]*)`")


def flag_names(message) -> str:
    """A library message in the tools' words: the lines layer (:mod:`wmspec_jax.lines`) names an option by
    its field name in backquotes (`alpha`), which is the flag's name; the tools spell it ``--alpha``."""
    return _OPTION.sub(r"--\1", str(message))


def refuse(prog: str, error, stderr) -> int:
    """Writes ``prog: error: …`` to ``stderr``; returns the tools' exit status for a refused input (2)."""
    print(f"{prog}: error: {flag_names(error)}", file=stderr)
    return 2


__all__ = ["HELP_ARGS", "PAIR_FLAG_HELP", "SECRET_FLAGS", "console_entry", "define_input_flags",
           "define_pair_flags", "define_scheme_flags", "define_secret_flags", "enable_compilation_cache",
           "flag_names", "parse_tool", "parse_tool_argv", "refuse", "secret_from_flags"]
