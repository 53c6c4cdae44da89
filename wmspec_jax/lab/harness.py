"""One experiment run: validation before any work, the locked output directory, the pair,
the prompts and the record store.

``experiments/speculative.py``, ``experiments/detection.py``,
``experiments/robustness.py`` and ``experiments/reproduce.py`` all open a
:class:`Session`: :func:`preflight` checks the settings, the dataset and the
model paths before anything loads; the session holds the output directory's
lock (:class:`wmspec_jax.storage.DirectoryLock`: a second writer is refused)
and refuses to resume a directory whose generations used other settings or
another secret (by its fingerprint). All parts share one record store,
``<output_dir>/generations.jsonl`` (:mod:`wmspec_jax.lab.runs`), so a rerun (or
an interrupted run) only generates what is missing, and the Alg. 1 texts of
Tables 1-2 are the positives of detection and robustness.

With ``--mesh`` the pair is placed on a ``data`` x ``model`` mesh
(``docs/sharding.md``). A multi-process run (the scripts call
:func:`wmspec_jax.sharding.maybe_initialize_distributed` first) opens one
session per process: each holds its own lock file and appends its rows to
``generations.<process_index>.jsonl`` (:func:`wmspec_jax.lab.runs.open_generations`);
every process knows every record, computes the same tables, and only
process 0 writes the shared files (:func:`wmspec_jax.storage.is_output_writer`).
When the session ends without an error, process 0 appends the shards to
``generations.jsonl`` (:func:`wmspec_jax.lab.runs.merge_generations`).
"""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Optional, Sequence

import jax

from wmspec_jax import keys, sharding, storage
from wmspec_jax import text_data as data
from wmspec_jax.lab import runs
from wmspec_jax.models import pairs
from wmspec_jax.lab.settings import GENERATION_FIELDS, PARTS, Settings, prompts_needed


def preflight(s: Settings, parts: Sequence[str] = PARTS) -> data.PromptSet:
    """Checks everything that can be checked before loading models; returns the loaded prompt set.

    Raises ValueError / FileNotFoundError for a bad dataset spec or file, too
    few prompts for the requested parts, or bad ``--target`` / ``--draft``.
    """
    s.validate()
    if "detection" in parts and max(s.tpr_lengths) > s.max_new_tokens:
        raise ValueError(f"--tpr_lengths {list(s.tpr_lengths)} exceed --max_new_tokens={s.max_new_tokens}: "
                         "texts that short cannot be scored at those lengths")
    pairs.check_pair_spec(s.target, s.draft, s.dtype)
    data.parse_dataset_spec(s.dataset)
    need = prompts_needed(s, parts)
    prompt_set = data.load_prompt_set(s.dataset)
    if len(prompt_set) < need:
        what = " / ".join(f"--{n}" for n, part in (("num_prompts", "speculative"),
                                                   ("num_detection_texts", "detection")) if part in parts)
        raise ValueError(f"dataset {s.dataset!r} has {len(prompt_set)} prompts; the settings need {need} "
                         f"(lower {what} or pass a larger --dataset)")
    return prompt_set


def log(msg: str) -> None:
    """Timestamped progress line on stdout."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


TRACEBACK_ENV = "WMSPEC_TRACEBACK"


def script_main(main):
    """``main`` of an experiment script, for ``absl.app.run``: the errors a user can cause and
    fix — a locked output directory, a bad setting, dataset or checkpoint, an unwritable or
    missing file — end the script with ``<script>: error: <message>`` and exit status 2 instead of
    a traceback (``WMSPEC_TRACEBACK=1`` shows the traceback too)."""
    import functools
    import subprocess
    import sys

    from wmspec_jax.models.hf import CheckpointError

    @functools.wraps(main)
    def guarded(argv):
        try:
            return main(argv)
        except (storage.OutputDirLocked, CheckpointError, ValueError, OSError, subprocess.CalledProcessError) as e:
            if os.environ.get(TRACEBACK_ENV):
                raise
            print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
            sys.exit(2)

    return guarded


class Session:
    """Loaded pair, encoded prompts and the record store of one output directory.

    Args:
      s: the settings.
      output_dir: where everything goes; locked for this process while the
        session is open (:meth:`close`, or use it as a context manager).
      pair: an already loaded :class:`wmspec_jax.models.pairs.ModelPair` (tests).
      parts: the parts that will run (``"speculative"``, ``"detection"``):
        only their prompts are needed.

    Raises:
      wmspec_jax.storage.OutputDirLocked: another process writes there.
      ValueError: the directory holds generations of other settings or of
        another secret, or a preflight check fails.
    """

    def __init__(self, s: Settings, output_dir: str, pair: Optional[pairs.ModelPair] = None,
                 parts: Sequence[str] = PARTS):
        self.settings, self.output_dir, self.parts = s, output_dir, tuple(parts)
        self._lock = storage.DirectoryLock(output_dir, sharding.process_shard_name(storage.LOCK_NAME))
        try:
            self._open(pair)
        except BaseException:
            self._lock.release()
            raise

    def _open(self, pair) -> None:
        s, output_dir = self.settings, self.output_dir
        prompt_set = preflight(s, self.parts)
        settings_path = os.path.join(output_dir, "settings.json")
        if os.path.exists(settings_path) and glob.glob(os.path.join(glob.escape(output_dir), "generations*.jsonl")):
            with open(settings_path, encoding="utf-8") as f:
                old = json.load(f)
            changed = {k: (old.get(k), v) for k, v in s.public().items()
                       if k in GENERATION_FIELDS and json.loads(json.dumps(v)) != old.get(k)}
            if "key_fingerprint" in changed and s.secret.matches_fingerprint(old.get("key_fingerprint")):
                del changed["key_fingerprint"]  # the same secret, recorded with the wmspec-keys-v1 fingerprint
            if changed:
                hint = ""
                if "draft" in changed and changed["draft"][0] == pairs.BUILTIN:
                    hint = (f" (made before the built-in drafts had names, with draft v1: "
                            f"--draft={pairs.BUILTIN}:v1 resumes it)")
                if "key_fingerprint" in changed:
                    hint = (" (written before keys had fingerprints: its texts used the old key derivation)"
                            if changed["key_fingerprint"][0] is None else " (another secret: its fingerprint differs)")
                raise ValueError(f"{output_dir} holds generations made with other settings {changed}{hint}; "
                                 "use a new --output_dir (records are reused on resume)")
        need = prompts_needed(s, self.parts)
        self.prompt_set = prompt_set.take(need, seed=s.seed)
        t0 = time.perf_counter()
        mesh = sharding.make_mesh(s.mesh) if s.mesh else None
        for name, rows in (("batch_size", s.batch_size), ("detection_batch_size", s.detection_rows)):
            if mesh is not None and rows % mesh.shape[sharding.DATA]:
                raise ValueError(f"--{name}={rows} must be a multiple of the mesh's data axis "
                                 f"({mesh.shape[sharding.DATA]})")
        self.pair = pair or pairs.load_pair(s.target, s.draft, s.dtype, mesh=mesh)
        log(f"pair {self.pair.name} ready in {time.perf_counter() - t0:.1f}s; "
            f"{need} prompts from {prompt_set.name}")
        self.prompts, self.prompt_lengths = pairs.encode_prompts(
            self.pair, self.prompt_set.prompts, self.prompt_set.kind, s.max_prompt_tokens)
        storage.atomic_write_json(settings_path, s.public())
        self.store = runs.open_generations(output_dir)
        if self.store.load_report():
            log(self.store.load_report())

    def finish(self) -> None:
        """Merges every process's records into ``generations.jsonl`` (module doc) and closes."""
        try:
            if jax.process_count() > 1:
                from jax.experimental import multihost_utils

                multihost_utils.sync_global_devices("wmspec_jax: generations written")
            if storage.is_output_writer() and getattr(self, "store", None) is not None:
                merged = runs.merge_generations(self.store, self.output_dir)
                if merged:
                    log(f"appended {merged} records of other processes to generations.jsonl")
        finally:
            self.close()

    def close(self) -> None:
        """Releases the output directory (records and outputs stay)."""
        if getattr(self, "store", None) is not None:
            self.store.close()
        self._lock.release()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.close()

    def records(self, run: runs.RunSpec, num_texts: int, batch_size: Optional[int] = None) -> list:
        """The records of ``run`` on prompts 0..num_texts-1, generated where missing, ``batch_size``
        rows per call (default ``settings.batch_size``; the texts do not depend on it)."""
        s = self.settings
        return runs.generate_run(
            run, self.pair, self.prompts[:num_texts], self.prompt_lengths[:num_texts], self.store,
            secret=s.secret, seed=s.seed, max_new_tokens=s.max_new_tokens, batch_size=batch_size or s.batch_size,
            eos_id=self.pair.eos_id if s.stop_at_eos else None, top_k=s.top_k, log=log)

    def keys_for(self, run: runs.RunSpec, indices) -> keys.StreamKeys:
        """The stream keys run ``run`` generated texts ``indices`` with."""
        return keys.text_keys(self.settings.secret, [int(i) for i in indices], run=run.name)

    def human_token_ids(self, num_texts: int) -> list:
        """Token ids of the human answer / continuation of prompts 0..num_texts-1 ([] where the
        dataset has none), at most ``max_new_tokens`` tokens (their start)."""
        out = []
        for example in self.prompt_set.examples[:num_texts]:
            ids = list(self.pair.encode_text(example.human)) if example.human.strip() else []
            out.append(ids[: self.settings.max_new_tokens])
        return out


__all__ = ["Session", "log", "preflight", "script_main"]
