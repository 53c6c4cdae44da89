"""The watermark secret and the one documented way from it to stream keys.

Generation, detection, the experiments, the notebooks and the README all go

    secret ─► Secret ─► text_keys(secret, indices, run=...) ─► StreamKeys uint32[B, 3, 2] ─► generate / detect
                 └─► fingerprint (a hash: safe to store) ◄─────────── carried by StreamKeys

Every text gets its own stream keys: calibration of detection is a statement
over the key (``docs/detection.md``, "keyed per text"), and in an experiment
every (run, text) pair gets its own — two runs of one prompt never share a
watermark draw. ``generate`` and every ``detect`` statistic accept
:class:`StreamKeys`; statistics record the fingerprint, and a detector refuses
statistics made with another secret (:mod:`wmspec_jax.detect.provenance`).

Derivation ``wmspec-keys-v1`` (:data:`KEY_DERIVATION`; a change bumps it and
breaks detection of old text, so the golden vector in ``tests/test_keys.py``
pins it)::

    M          = prf.stream_keys(secret)             uint32[3, 2] (SHA-256 of the PRF version and the typed secret)
    k(run, i)  = SHA-256("wmspec-keys-v1/text" | M | len(run) | run | i)       32 bytes (i: uint64, lengths: uint32)
    words      = prf.stream_keys(k(run, i))          uint32[3, 2] per text
    fingerprint= "fp2-" + scrypt(M, salt="wmspec-keys/fingerprint-v2", n=2^14, r=8, p=1)[:8] as 16 hex digits

(An earlier derivation, ``prf.stream_keys(f"{secret}/{i}")``, gave every
run of an experiment the same key per text and let ``"a/1"`` and
``("a", 1)`` collide; text made with it is detected with those keys.)

The fingerprint is printed in every output, so it lets anyone test a
*guessed* secret. It is therefore a slow derivation (:data:`FINGERPRINT_VERSION`,
scrypt with :data:`FINGERPRINT_SCRYPT`: 16 MiB of memory and about a tenth of a
second of one core per guess, against a microsecond for a SHA-256) computed
once per secret and process, and the scripts refuse weak secrets
(:func:`check_strength`: at least :data:`MIN_SECRET_LENGTH` characters and an
estimated :data:`MIN_SECRET_BITS` bits). Both only slow a guesser down: use
a secret with real entropy (e.g. ``python -c "import secrets; print(secrets.token_hex(32))"``).
Records written before it carry the fast fingerprint of ``wmspec-keys-v1``
(16 hex digits, no ``fp2-``); :meth:`Secret.matches_fingerprint` still accepts
it, with a :class:`FutureWarning`, so old lines, settings and detectors stay
readable; a record with it reveals a weak secret as fast as before.

The secret never appears in a ``repr``, log or file: :class:`Secret` keeps
only ``M`` and prints its fingerprint; :class:`Secret` and
:class:`StreamKeys` refuse to pickle. Scripts read it from an environment
variable (:data:`ENV_VAR` by default) or a file (:func:`resolve`), never
from argv, and both sources go through one normalisation
(:func:`secret_from_text`): surrounding whitespace (spaces, tabs, newlines)
and invisible characters (a byte-order mark some editors write at the start
of a file, a zero-width space) are removed, so a file ending in a newline or
two, or starting with a BOM, gives the same key as the same value in the
environment; a value below the strength rule (:func:`check_strength`) is
refused as too weak to be a secret unless the caller passes
``weak_secret_ok=True`` (the tools' ``--weak_secret_ok``, for tests and demos).
(Before this rule a file lost one final newline only and an environment
value nothing, so ``"k "`` and ``"k"`` were different secrets.)
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import stat
import struct
import warnings
from typing import Iterable, Optional, Union

import numpy as np

from wmspec_jax import prf_keys as prf

KEY_DERIVATION = "wmspec-keys-v1"
"""Identifier of the secret -> per-text key construction (module doc)."""

DIRECT = "direct"
"""Derivation label of a secret used as the key of every text (``generate(..., "secret")``)."""

ENV_VAR = "WMSPEC_SECRET"
"""Environment variable the experiment scripts read the secret from by default."""

DEMO_SECRET = "wmspec-demo-secret"
"""The public secret of the quick demos. Anyone can detect (and forge) its watermark."""

MIN_SECRET_LENGTH = 16
"""Fewest characters of a secret read by the scripts (:func:`check_strength`); ``secrets.token_hex(32)``
gives 64."""

MIN_SECRET_BITS = 40
"""Fewest estimated bits of a secret read by the scripts (:func:`check_strength`, :func:`estimated_bits`).
``secrets.token_hex(16)`` estimates at about 100 (never below 45 in 200,000 draws), ``passwordpassword``
at 25, sixteen times one letter at 0."""

FINGERPRINT_VERSION = "fp2"
"""Prefix of the current fingerprints: ``fp2-`` and 16 hex digits of a scrypt derivation (module doc)."""

FINGERPRINT_SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}
"""scrypt's work parameters for the fingerprint: 128 * r * n bytes = 16 MiB of memory per guess, about
0.1 s of one x86 core (the "interactive login" parameters of the scrypt paper)."""

_FINGERPRINT_SALT = b"wmspec-keys/fingerprint-v2"


class Secret:
    """A watermark secret: derives stream keys, prints only its fingerprint.

    Args:
      value: ``str`` (UTF-8), ``bytes``, non-negative ``int``, a
        ``prf.WatermarkKey`` or another :class:`Secret`. ``"1"``, ``b"1"`` and
        ``1`` are different secrets (as in :mod:`wmspec_jax.prf`).

    Only the master stream words M (module doc) are kept, not ``value``.
    Built directly, a secret is not checked for strength (toys and tests
    use small ones); the scripts read theirs through :func:`resolve`, which
    applies :func:`check_strength`.
    """

    __slots__ = ("_master",)

    def __init__(self, value: Union["Secret", prf.KeyLike]):
        if isinstance(value, Secret):
            self._master = value._master
            return
        if isinstance(value, (str, bytes, bytearray)) and len(value) == 0:
            raise ValueError("the watermark secret must not be empty")
        if isinstance(value, StreamKeys) or (hasattr(value, "dtype") and not isinstance(value, np.integer)):
            raise TypeError("a Secret is made from the secret itself (str/bytes/int), not from derived stream keys "
                            "or a jax.random key")
        master = prf.stream_keys(value)
        master.setflags(write=False)
        self._master = master

    @property
    def fingerprint(self) -> str:
        """``fp2-`` and 16 hex digits identifying the secret: a slow one-way derivation (module doc),
        safe in results and detectors; computed once per secret and process."""
        return _fingerprint(self._master.tobytes())

    def matches_fingerprint(self, recorded) -> bool:
        """Whether ``recorded`` (a fingerprint read from a line, a detector, settings) is this secret's:
        its current fingerprint, or the fast ``wmspec-keys-v1`` one of records written before it (then
        with a :class:`FutureWarning`: such a record reveals a guessable secret)."""
        if not isinstance(recorded, str):
            return False
        if recorded == self.fingerprint:
            return True
        if is_legacy_fingerprint(recorded) and recorded == _legacy_fingerprint(self._master):
            warnings.warn("a record carries the fast key fingerprint of wmspec-keys-v1, which lets anyone who "
                          "reads it test guessed secrets quickly; records written now carry the slow "
                          f"{FINGERPRINT_VERSION} fingerprint", FutureWarning, stacklevel=2)
            return True
        return False

    def stream_keys(self) -> "StreamKeys":
        """The secret used directly as one key for every text: ``StreamKeys`` uint32[3, 2]."""
        return StreamKeys(self._master, self, DIRECT)

    def __repr__(self) -> str:
        return f"Secret(fingerprint={self.fingerprint})"

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, Secret) and np.array_equal(other._master, self._master)

    def __hash__(self) -> int:
        return hash(self._master.tobytes())

    def __reduce__(self):
        raise TypeError("a watermark Secret is not picklable: never store the secret")

    def __copy__(self):  # immutable: copies (e.g. dataclasses.replace/asdict) share it
        return self

    def __deepcopy__(self, memo):
        return self


class StreamKeys:
    """Per-text stream key words uint32[B, 3, 2] (or [3, 2]) with their provenance.

    Accepted wherever ``wmspec_jax`` takes stream keys (``generate``, the
    ``detect`` statistics): it converts to the uint32 array through
    ``__array__``. ``repr`` shows the shape and fingerprint, never the words.

    Attributes:
      fingerprint: the fingerprint of the secret the words came from (``fingerprint`` may be given as
        the :class:`Secret` itself: then it is derived when first read).
      derivation: :data:`KEY_DERIVATION` (per-text keys) or :data:`DIRECT`.
    """

    __slots__ = ("_words", "_fingerprint", "derivation")

    def __init__(self, words, fingerprint, derivation: str):
        words = np.array(words, np.uint32)
        if words.shape[-2:] != (prf.NUM_STREAMS, 2) or words.ndim not in (2, 3):
            raise ValueError(f"stream key words must be uint32[3, 2] or [B, 3, 2], got shape {words.shape}")
        words.setflags(write=False)
        self._words = words
        # a Secret's fingerprint is a slow derivation: computed when first asked for, not per key set
        self._fingerprint = fingerprint if isinstance(fingerprint, Secret) else str(fingerprint)
        self.derivation = str(derivation)

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the secret the words came from."""
        if isinstance(self._fingerprint, Secret):
            self._fingerprint = self._fingerprint.fingerprint
        return self._fingerprint

    @property
    def words(self) -> np.ndarray:
        """The raw uint32 words (secret-derived: do not print or store them)."""
        return self._words

    shape = property(lambda self: self._words.shape)
    ndim = property(lambda self: self._words.ndim)
    dtype = property(lambda self: self._words.dtype)

    def __array__(self, dtype=None, copy=None):
        return self._words if dtype is None else self._words.astype(dtype)

    def __len__(self) -> int:
        if self._words.ndim != 3:
            raise TypeError("a single key (uint32[3, 2]) has no rows")
        return self._words.shape[0]

    def __getitem__(self, rows) -> "StreamKeys":
        """Selects texts (rows) and keeps the provenance: ``keys[2:5]``, ``keys[[0, 3]]``, ``keys[1]``."""
        if self._words.ndim != 3:
            raise TypeError("a single key (uint32[3, 2]) has no rows to select")
        if isinstance(rows, tuple):
            raise IndexError("StreamKeys selects rows only; np.asarray(keys) gives the raw words")
        return StreamKeys(self._words[rows], self._fingerprint, self.derivation)

    def __repr__(self) -> str:
        n = self._words.shape[0]
        rows = "one key for every text" if self._words.ndim == 2 else f"{n} text{'s' if n != 1 else ''}"
        return f"StreamKeys(<{rows}>, fingerprint={self.fingerprint}, derivation={self.derivation})"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("StreamKeys are derived from the secret and are not picklable: never store them")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


@functools.lru_cache(maxsize=1024)
def _fingerprint(master: bytes) -> str:
    # master is the little-endian uint32 words M; cached, since a secret is rebuilt from its value often
    digest = hashlib.scrypt(np.frombuffer(master, np.uint32).astype("<u4").tobytes(), salt=_FINGERPRINT_SALT,
                            dklen=8, maxmem=64 * 2 ** 20, **FINGERPRINT_SCRYPT)
    return f"{FINGERPRINT_VERSION}-{digest.hex()}"


def _legacy_fingerprint(master: np.ndarray) -> str:
    digest = hashlib.sha256(f"{KEY_DERIVATION}/fingerprint".encode() + b"\x00" + master.astype("<u4").tobytes())
    return digest.hexdigest()[:16]


def is_legacy_fingerprint(value) -> bool:
    """Whether ``value`` has the form of a ``wmspec-keys-v1`` fingerprint (16 hex digits, no prefix)."""
    return isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value)


def fingerprints_agree(a, b) -> Optional[bool]:
    """Whether two recorded fingerprints name one secret: True or False when both have one form,
    None when one is a ``wmspec-keys-v1`` fingerprint and the other is not (only the secret can tell)."""
    if is_legacy_fingerprint(a) != is_legacy_fingerprint(b):
        return None
    return a == b


def _as_secret(secret) -> Secret:
    if isinstance(secret, Secret):
        return secret
    if isinstance(secret, StreamKeys):
        raise TypeError("pass the Secret (or the secret itself), not keys already derived from it")
    return Secret(secret)


def text_keys(secret, indices: Iterable[int], run: str = "") -> StreamKeys:
    """Stream keys of texts ``indices`` (of run ``run``): the one secret -> keys map (module doc).

    Args:
      secret: a :class:`Secret` (or a str/bytes/int secret).
      indices: non-negative text indices (e.g. ``range(B)``, or the prompt
        indices of an experiment).
      run: name of the generation setting; different runs get independent
        keys for the same text index. ``""`` for plain API use.

    Returns:
      :class:`StreamKeys` uint32[B, 3, 2], to pass as the ``watermark_key`` of
      ``wmspec_jax.generate`` and as the ``key`` of the ``detect`` statistics.
    """
    sec = _as_secret(secret)
    idx = [_check_index(i) for i in indices]
    if not idx:
        raise ValueError("no text indices: the batch needs at least one key")
    if not isinstance(run, str):
        raise TypeError(f"run must be a str (the run's name), got {type(run).__name__}")
    run_bytes = run.encode("utf-8")
    prefix = (f"{KEY_DERIVATION}/text".encode() + b"\x00" + sec._master.astype("<u4").tobytes()
              + struct.pack("<I", len(run_bytes)) + run_bytes)
    words = np.stack([prf.stream_keys(hashlib.sha256(prefix + struct.pack("<Q", i)).digest()) for i in idx])
    return StreamKeys(words, sec, KEY_DERIVATION)


def _check_index(i) -> int:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"text indices must be ints, got {type(i).__name__}")
    if i < 0:
        raise ValueError(f"text indices must be >= 0, got {i}")
    return int(i)


def key_provenance(key) -> tuple:
    """(fingerprint, derivation) of anything accepted as a watermark key.

    :class:`StreamKeys` carry theirs; a secret (:class:`Secret`, str, bytes,
    int, ``prf.WatermarkKey``) used directly is ``(its fingerprint, "direct")``;
    raw uint32 words have no known origin: ``(None, None)``.
    """
    if isinstance(key, StreamKeys):
        return key.fingerprint, key.derivation
    if isinstance(key, (Secret, prf.WatermarkKey, str, bytes, bytearray)) or (
            isinstance(key, (int, np.integer)) and not isinstance(key, bool)):
        return Secret(key).fingerprint, DIRECT
    return None, None


# ---------------------------------------------------------------------------
# Reading the secret (scripts): environment variable or file, never argv
# ---------------------------------------------------------------------------


def _strip_edges(value: str) -> str:
    from wmspec_jax.textnorm import INVISIBLE

    edges = "".join(INVISIBLE)
    text = value
    while True:  # whitespace and invisible characters in any order at either end
        stripped = text.strip().strip(edges)
        if stripped == text:
            return text
        text = stripped


def estimated_bits(text: str) -> float:
    """A rough estimate of the bits of a secret text, for :func:`check_strength`.

    The entropy of the text's own character frequencies (bits per character) times the number of its
    characters that are not predictable from what comes before: a character equal to or one code
    point from the previous one (``aaaa``, ``abcd``, ``4321``) or ending a three-character sequence
    already seen (the second ``password`` of ``passwordpassword``) adds nothing. It is a bar against
    obviously weak secrets, not a measure of a guesser's work: a dictionary phrase may pass it.
    """
    n = len(text)
    if n == 0:
        return 0.0
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    per_char = -sum(c / n * math.log2(c / n) for c in counts.values())
    free = 0
    for i, ch in enumerate(text):
        if i and abs(ord(ch) - ord(text[i - 1])) <= 1:
            continue
        if i >= 2 and text.find(text[i - 2:i + 1]) < i - 2:
            continue
        free += 1
    return per_char * free


def check_strength(text: str, where: str = "the watermark secret") -> None:
    """Refuses a secret text below the strength rule: fewer than :data:`MIN_SECRET_LENGTH` characters,
    or fewer than :data:`MIN_SECRET_BITS` estimated bits (:func:`estimated_bits`). ValueError naming
    the rule that failed, never the secret."""
    hint = "e.g. python -c \"import secrets; print(secrets.token_hex(32))\""
    if len(text) < MIN_SECRET_LENGTH:
        raise ValueError(f"{where} has {len(text)} characters: too weak (the rule: at least {MIN_SECRET_LENGTH} "
                         f"characters and {MIN_SECRET_BITS} estimated bits; {hint})")
    bits = estimated_bits(text)
    if bits < MIN_SECRET_BITS:
        raise ValueError(f"{where} is too weak: about {bits:.0f} estimated bits, from its {len(set(text))} distinct "
                         f"characters and its repeats and runs (the rule: at least {MIN_SECRET_LENGTH} characters "
                         f"and {MIN_SECRET_BITS} estimated bits; {hint})")


def secret_from_text(value: str, where: str, *, weak_secret_ok: bool = False) -> Secret:
    """The :class:`Secret` of a secret read as text from ``where`` (an environment variable, a file):
    surrounding whitespace and invisible characters (a byte-order mark an editor wrote, a zero-width
    space: :data:`wmspec_jax.textnorm.INVISIBLE`) removed (module doc), so a file and the environment
    give the same key; ValueError when nothing is left or, unless ``weak_secret_ok``, when what is
    left fails :func:`check_strength`."""
    text = _strip_edges(value)
    if not text:
        what = "empty" if not value else "only whitespace"
        raise ValueError(f"the watermark secret in {where} is {what}")
    if not weak_secret_ok:
        check_strength(text, f"the watermark secret in {where}")
    return Secret(text)


def from_env(var: str = ENV_VAR, *, weak_secret_ok: bool = False) -> Secret:
    """The secret in environment variable ``var`` (UTF-8 text, normalised and checked by
    :func:`secret_from_text`)."""
    value = os.environ.get(var, "")
    if not value:
        raise ValueError(f"environment variable {var} is not set or empty: export the watermark secret there")
    return secret_from_text(value, f"${var}", weak_secret_ok=weak_secret_ok)


def from_file(path, *, weak_secret_ok: bool = False) -> Secret:
    """The secret stored in a file: its UTF-8 text, normalised by :func:`secret_from_text`
    (surrounding whitespace, final newlines included, removed).

    Warns when the file is readable by other users.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ValueError(f"cannot read the watermark secret file {path}: {e.strerror}") from None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        warnings.warn(f"the secret file {path} is readable by other users (chmod 600 it)", stacklevel=2)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"the watermark secret file {path} is not UTF-8 text") from None
    return secret_from_text(text, f"the file {path}", weak_secret_ok=weak_secret_ok)


def resolve(secret_env: Optional[str] = None, secret_file: Optional[str] = None, *,
            allow_demo: bool = True, weak_secret_ok: bool = False) -> tuple:
    """The secret of a script run: (:class:`Secret`, where it came from, in words).

    Order: ``secret_file`` if given; else the environment variable
    ``secret_env`` (default :data:`ENV_VAR`) if set; else the public
    :data:`DEMO_SECRET` with a loud warning — or, with
    ``allow_demo=False`` (the paper preset), a ``ValueError``. A file's or
    variable's secret must pass :func:`check_strength` unless ``weak_secret_ok``.
    """
    if secret_file:
        return from_file(secret_file, weak_secret_ok=weak_secret_ok), f"file {secret_file}"
    var = secret_env or ENV_VAR
    if os.environ.get(var):
        return from_env(var, weak_secret_ok=weak_secret_ok), f"${var}"
    if secret_env:
        raise ValueError(f"--secret_env={secret_env}: that environment variable is not set or empty")
    if not allow_demo:
        raise ValueError(f"no watermark secret: set ${ENV_VAR} (or --secret_env=VAR / --secret_file=PATH). "
                         f"This preset refuses the public demo secret {DEMO_SECRET!r}: anyone could detect "
                         "and forge its watermark.")
    warnings.warn(f"no watermark secret given (${ENV_VAR}, --secret_env, --secret_file): using the PUBLIC demo "
                  f"secret {DEMO_SECRET!r}. Anyone can detect and forge this watermark; fine for a demo, never "
                  "for real text.", stacklevel=2)
    return Secret(DEMO_SECRET), "the public demo secret"


__all__ = [
    "DEMO_SECRET", "DIRECT", "ENV_VAR", "FINGERPRINT_SCRYPT", "FINGERPRINT_VERSION", "KEY_DERIVATION", "Secret",
    "StreamKeys", "check_strength", "estimated_bits", "fingerprints_agree", "from_env", "from_file",
    "is_legacy_fingerprint", "MIN_SECRET_BITS", "MIN_SECRET_LENGTH", "key_provenance", "resolve",
    "secret_from_text", "text_keys",
]
