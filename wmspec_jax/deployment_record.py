"""The deployment record: the settings and keys a key holder generated with, bound to the secret.

A verdict must not depend on what a text line says about itself: a line can
name any run, index, context width, decoder or detector option, and a
detector that believes it can be shopped (the best of 101 claimed indices
flags 64 % of 400 human paragraphs at α = 0.01). So the settings come from the key
holder's *deployment*: the secret, plus one record of the settings it
generated with. ``wmspec-generate`` writes the record beside its output
(``<output>.deployment.json``, :data:`SUFFIX`) or where ``--deployment``
says; ``wmspec-deployment`` writes one for outputs made before records
existed; ``wmspec-detect`` reads it (:mod:`wmspec_jax.lines.deployment`,
"The deployment rule" in ``docs/tools.md``).

A record (format :data:`FORMAT`) holds

* the key fingerprint, the key derivation (``direct`` or per-text
  ``wmspec-keys-v1``) and the PRF version;
* ``settings``: the generation settings as ``wmspec-generate`` records them
  on each line (decoder, m, h, method, K, draft tree, temperature, ...);
* ``draft_fraction``: Ars-Prior's p for every text (the mean share of
  accepted drafts of the texts the record was first written with), so no
  line's own ``draft_fraction`` chooses its detector;
* ``issued``: per run, the index ranges ``[first, end)`` it generated;
* ``texts``: per generated text, a keyed digest of its token ids (never the
  ids) mapped to its ``[run, index]``, so a per-text key is found from the
  tokens themselves, not from the line's claim;
* ``mac``: HMAC-SHA256 of all of the above under a key derived from the
  secret (:func:`mac_key`). A record edited or written without the secret
  is refused.

It never holds the secret or anything from which stream keys follow: the MAC
key is a one-way function of the secret's master words, under its own
domain label. Imports nothing heavy (no JAX).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
import os
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from wmspec_jax import keys
from wmspec_jax import prf_keys as prf

FORMAT = "wmspec-deployment-v1"
SUFFIX = ".deployment.json"
"""A record beside an output ``X`` is ``X.deployment.json``."""

NOT_SETTINGS = ("key_fingerprint", "key_derivation", "prf_version", "watermarked", "not_watermarked_because")
"""Fields of ``wmspec-generate``'s settings that the record keeps elsewhere or that belong to each text."""

_MAC_LABEL = b"wmspec-deployment-v1/mac"
_DIGEST_LABEL = b"wmspec-deployment-v1/text\x00"
_FIELDS = ("format", "key_fingerprint", "key_derivation", "prf_version", "settings", "draft_fraction", "detector",
           "issued", "texts")
MAX_RECORD_BYTES = 1 << 30
"""The largest record read (a digest per text: 1 GiB is tens of millions of texts)."""


class RecordError(ValueError):
    """A deployment record that cannot be used (the message names the file and the cause)."""


def mac_key(secret: keys.Secret) -> bytes:
    """The key that signs a record and digests its texts: HMAC-SHA256 of a domain label under the secret's
    master words (one-way: it gives neither the secret nor any stream key)."""
    master = np.asarray(secret.stream_keys().words, np.uint32).astype("<u4").tobytes()
    return hmac.new(master, _MAC_LABEL, hashlib.sha256).digest()


def text_digest(key: bytes, ids: Sequence[int]) -> str:
    """The record's digest of one text's token ids (16 hex digits, keyed: it does not reveal the text)."""
    data = np.asarray(list(ids), np.int64)
    if data.size and (data.min() < 0 or data.max() >= 2 ** 32):
        return ""  # no generated text has such ids: it matches nothing
    return hmac.new(key, _DIGEST_LABEL + data.astype("<u4").tobytes(), hashlib.sha256).hexdigest()[:16]


def _canonical(body: Mapping) -> bytes:
    return json.dumps({k: body[k] for k in _FIELDS}, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _mac(body: Mapping, key: bytes) -> str:
    return hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()


def _merge_ranges(ranges: Iterable[Sequence[int]]) -> list:
    out: list = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def _ranges_of(indices: Iterable[int]) -> list:
    return _merge_ranges([i, i + 1] for i in indices)


@dataclasses.dataclass(frozen=True)
class Deployment:
    """The settings and keys detection scores every text with (module doc).

    Attributes:
      key_fingerprint: the secret's fingerprint.
      key_derivation: ``"direct"`` (the secret keys every text) or
        ``"wmspec-keys-v1"`` (per-text keys of the issued runs and indices).
      prf_version: the PRF version the texts were generated with.
      settings: the generation settings (``wmspec-generate``'s fields).
      draft_fraction: Ars-Prior's p (None: the detector's default).
      detector: the primary detector (a registry name; ``"auto"``).
      issued: run -> list of ``[first, end)`` index ranges.
      texts: token digest -> list of ``[run, index]``.
      source: the record's path, or a description of where the settings came from.
      signed: whether the settings come from a record signed with the secret.
    """

    key_fingerprint: str
    key_derivation: str
    prf_version: str
    settings: Mapping
    draft_fraction: Optional[float] = None
    detector: str = "auto"
    issued: Mapping = dataclasses.field(default_factory=dict)
    texts: Mapping = dataclasses.field(default_factory=dict, repr=False)
    source: str = "flags"
    signed: bool = False
    digest_key: bytes = dataclasses.field(default=b"", repr=False, compare=False)

    @property
    def per_text(self) -> bool:
        """Whether each text has its own key (run and index)."""
        return self.key_derivation == keys.KEY_DERIVATION

    def num_issued(self) -> int:
        """How many (run, index) keys the record issued."""
        return sum(hi - lo for ranges in self.issued.values() for lo, hi in ranges)

    def is_issued(self, run, index) -> bool:
        """Whether the record issued text ``index`` of run ``run``."""
        if not isinstance(run, str) or isinstance(index, bool) or not isinstance(index, int):
            return False
        return any(lo <= index < hi for lo, hi in self.issued.get(run, ()))

    def issued_keys(self) -> list:
        """Every issued (run, index), runs in name order."""
        return [(run, i) for run in sorted(self.issued) for lo, hi in self.issued[run] for i in range(lo, hi)]

    def lookup(self, ids: Sequence[int]) -> list:
        """The issued (run, index) whose generated token ids are ``ids`` (empty: none; more than one only
        when two texts came out the same)."""
        if not self.digest_key:
            return []
        return [(r, i) for r, i in self.texts.get(text_digest(self.digest_key, ids), ())]

    def describe(self) -> dict:
        """What a result line says about the deployment (no secret-derived material)."""
        return {"source": self.source, "signed": self.signed, "key_derivation": self.key_derivation,
                "issued_keys": self.num_issued() if self.per_text else None}


def record_body(secret: keys.Secret, settings: Mapping, *, key_derivation: str, prf_version: str = prf.PRF_VERSION,
                draft_fraction: Optional[float] = None, detector: str = "auto",
                texts: Sequence[tuple] = ()) -> dict:
    """A signed record of ``settings`` for ``secret`` and the generated ``texts`` ((run, index, token ids)
    each). Raises ``ValueError`` for a setting that is not JSON or a derivation this package does not know."""
    if key_derivation not in (keys.DIRECT, keys.KEY_DERIVATION):
        raise ValueError(f"key derivation {key_derivation!r}: one of {keys.DIRECT!r}, {keys.KEY_DERIVATION!r}")
    if draft_fraction is not None and not (math.isfinite(draft_fraction) and 0.0 <= draft_fraction <= 1.0):
        raise ValueError(f"draft_fraction must lie in [0, 1], got {draft_fraction}")
    body = {"format": FORMAT, "key_fingerprint": secret.fingerprint, "key_derivation": key_derivation,
            "prf_version": prf_version, "settings": {k: v for k, v in settings.items() if k not in NOT_SETTINGS},
            "draft_fraction": draft_fraction, "detector": detector, "issued": {}, "texts": {}}
    return add_texts(body, secret, texts)


def add_texts(body: dict, secret: keys.Secret, texts: Sequence[tuple]) -> dict:
    """``body`` with ``texts`` ((run, index, token ids) each) added to its issued ranges and digests, signed
    again."""
    key = mac_key(secret)
    issued = {run: [list(r) for r in ranges] for run, ranges in body["issued"].items()}
    digests = {d: [list(x) for x in where] for d, where in body["texts"].items()}
    by_run: dict = {}
    for run, index, ids in texts:
        by_run.setdefault(run, []).append(int(index))
        entry = digests.setdefault(text_digest(key, ids), [])
        if [run, int(index)] not in entry:
            entry.append([run, int(index)])
    for run, indices in by_run.items():
        issued[run] = _merge_ranges(issued.get(run, []) + _ranges_of(indices))
    out = {**body, "issued": issued, "texts": digests}
    out["mac"] = _mac(out, key)
    return out


def write(path: str, body: Mapping) -> None:
    """Writes a record atomically (a reader never sees half a record)."""
    from wmspec_jax import storage

    storage.atomic_write_text(path, json.dumps({k: body[k] for k in _FIELDS + ("mac",)}, sort_keys=True,
                                               separators=(",", ":"), allow_nan=False) + "\n")


def read_body(path: str) -> dict:
    """The JSON object of a record file, unchecked. Raises :class:`RecordError` naming the file."""
    try:
        if os.path.getsize(path) > MAX_RECORD_BYTES:
            raise RecordError(f"deployment record {path}: larger than {MAX_RECORD_BYTES} bytes")
        with open(path, "rb") as f:
            body = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"deployment record {path}: cannot be read ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(body, dict):
        raise RecordError(f"deployment record {path}: not a JSON object")
    return body


def verify(body: Mapping, secret: keys.Secret, where: str) -> None:
    """Checks a record's format, secret and MAC. Raises :class:`RecordError` naming ``where``: another
    format, another secret's record, or one edited or written without the secret."""
    if body.get("format") != FORMAT:
        raise RecordError(f"deployment record {where}: format {str(body.get('format'))[:40]!r}, this package "
                          f"reads {FORMAT!r}")
    missing = [k for k in _FIELDS + ("mac",) if k not in body]
    if missing:
        raise RecordError(f"deployment record {where}: missing {', '.join(missing)}")
    if body["key_fingerprint"] != secret.fingerprint:
        raise RecordError(f"deployment record {where}: it is the record of another secret (key fingerprint "
                          f"{str(body['key_fingerprint'])[:20]}, the given secret's is {secret.fingerprint})")
    try:
        expected = _mac(body, mac_key(secret))
    except (TypeError, ValueError):
        expected = ""
    if not isinstance(body["mac"], str) or not expected or not hmac.compare_digest(body["mac"], expected):
        raise RecordError(f"deployment record {where}: its signature does not match the secret: the record was "
                          "edited or not written by the key holder; it is refused")


def from_body(body: Mapping, secret: keys.Secret, where: str) -> Deployment:
    """The :class:`Deployment` of a verified record (:func:`verify` runs first)."""
    verify(body, secret, where)
    bad = RecordError
    if body["key_derivation"] not in (keys.DIRECT, keys.KEY_DERIVATION):
        raise bad(f"deployment record {where}: unknown key derivation {str(body['key_derivation'])[:40]!r}")
    if body["prf_version"] not in prf.PRF_VERSIONS:
        raise bad(f"deployment record {where}: PRF version {str(body['prf_version'])[:40]!r}, this package "
                  f"implements {', '.join(prf.PRF_VERSIONS)}")
    if not isinstance(body["settings"], dict) or not isinstance(body["issued"], dict) \
            or not isinstance(body["texts"], dict):
        raise bad(f"deployment record {where}: settings, issued and texts must be objects")
    issued = {run: tuple((int(lo), int(hi)) for lo, hi in ranges) for run, ranges in body["issued"].items()}
    texts = {d: tuple((r, int(i)) for r, i in where_) for d, where_ in body["texts"].items()}
    return Deployment(body["key_fingerprint"], body["key_derivation"], body["prf_version"], dict(body["settings"]),
                      body["draft_fraction"], str(body["detector"]), issued, texts, source=where, signed=True,
                      digest_key=mac_key(secret))


def load(path: str, secret: keys.Secret) -> Deployment:
    """The verified :class:`Deployment` of the record at ``path``. Raises :class:`RecordError`."""
    return from_body(read_body(path), secret, path)


def beside(path: str) -> str:
    """The path of the record beside output ``path``."""
    return path + SUFFIX


def record_generated(path: str, secret: keys.Secret, settings: Mapping, *, key_derivation: str,
                     texts: Sequence[tuple], draft_fraction: Optional[float]) -> dict:
    """Adds generated ``texts`` ((run, index, token ids)) to the record at ``path`` (created when absent,
    with ``draft_fraction`` as its Ars-Prior p) and writes it. Raises :class:`RecordError` when the file
    holds a record of another secret or other settings, or one that fails its signature."""
    settings = {k: v for k, v in settings.items() if k not in NOT_SETTINGS}
    if os.path.exists(path):
        body = read_body(path)
        verify(body, secret, path)
        changed = sorted(k for k in set(settings) | set(body["settings"])
                         if settings.get(k) != body["settings"].get(k))
        if body["key_derivation"] != key_derivation:
            changed.append("key_derivation")
        if body["prf_version"] != prf.PRF_VERSION:
            changed.append("prf_version")
        if changed:
            raise RecordError(f"deployment record {path} holds other settings ({', '.join(changed)}): a record is "
                              "one deployment; choose another --deployment (or --output)")
        body = add_texts(body, secret, texts)
    else:
        body = record_body(secret, settings, key_derivation=key_derivation, draft_fraction=draft_fraction,
                           texts=texts)
    write(path, body)
    return body


__all__ = ["Deployment", "FORMAT", "MAX_RECORD_BYTES", "NOT_SETTINGS", "RecordError", "SUFFIX", "add_texts",
           "beside", "from_body", "load", "mac_key", "read_body", "record_body", "record_generated", "text_digest",
           "verify", "write"]
