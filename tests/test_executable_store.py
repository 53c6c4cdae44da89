"""The executable store: a fresh process's generation loop loaded without tracing, never a wrong one.

A stored program is used only under a key that fixes the program (source, versions, flags, static
arguments described field by field, argument shapes): the tests check that it gives the jit path's
tokens, that it skips tracing, that each part of the key changes it, that arguments it cannot
describe turn it off, and that damaged, foreign or exposed files are never loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmspec_jax import decoders, executable_store, speculative, toy
from wmspec_jax.models import protocol, transformer
from wmspec_jax.models.config import TransformerConfig
from wmspec_jax.speculative import SpeculativeConfig

CFG = TransformerConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                        num_heads=2, num_kv_heads=1, head_dim=16)
PROMPTS = np.random.default_rng(0).integers(0, 64, (2, 5)).astype(np.int32)
LENGTHS = np.array([5, 3], np.int32)


@pytest.fixture(scope="module")
def tiny():
    params = transformer.init_params(CFG, jax.random.key(0), scale=0.5)
    return protocol.make_language_model(CFG, name="tiny"), params


@pytest.fixture
def store(tmp_path):
    folder = executable_store.enable(str(tmp_path / "executables"))
    assert folder is not None
    executable_store.forget()
    yield folder
    executable_store.enable(None)
    executable_store.forget()


def _config(**kw):
    return SpeculativeConfig(method="pseudorandom", decoder=decoders.GumbelMax(), lookahead=2,
                             max_new_tokens=kw.pop("max_new_tokens", 8), **kw)


def _generate(tiny, config=None, prompts=PROMPTS, lengths=LENGTHS):
    lm, params = tiny
    res = speculative.generate(lm, params, prompts, lengths, "secret", jax.random.key(3), config or _config(),
                               draft=lm, draft_params=params)
    return np.asarray(res.tokens)


def _entries(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(executable_store.SUFFIX))


def test_a_stored_loop_is_loaded_without_tracing_and_generates_the_jit_paths_tokens(tiny, store):
    executable_store.enable(None)
    by_jit = _generate(tiny)
    jax.clear_caches()  # as a fresh process: nothing traced
    executable_store.enable(store)
    before = speculative.trace_count()
    first = _generate(tiny)
    assert speculative.trace_count() == before + 1 and len(_entries(store)) == 1
    entry = os.path.join(store, _entries(store)[0])
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600 and stat.S_IMODE(os.stat(store).st_mode) == 0o700
    executable_store.forget()  # as a fresh process: only the file remains
    again = _generate(tiny)
    assert speculative.trace_count() == before + 1
    np.testing.assert_array_equal(first, by_jit)
    np.testing.assert_array_equal(again, by_jit)


def test_a_program_jax_loaded_from_its_persistent_cache_is_run_but_not_stored(tiny, store):
    """XLA:CPU serialises an executable it loaded from JAX's cache without some of its kernels: a
    stored copy failed with NOT_FOUND when run. The store keeps its own variant out of JAX's cache;
    put there all the same (as by another tool), it is used and left out of the store. (A prompt
    shape of its own: no other test's program is put in JAX's cache.)"""
    if not jax.config.jax_compilation_cache_dir:
        pytest.skip("JAX's persistent compilation cache is off (scripts/run_tests.sh turns it on)")
    lm, params = tiny
    prompts, lengths = PROMPTS[:1, :4], np.array([4], np.int32)
    executable_store.enable(None)
    by_jit = _generate(tiny, prompts=prompts, lengths=lengths)
    args = speculative._loop_arguments(lm, params, prompts, lengths, "secret", jax.random.key(3), _config(),
                                       lm, params)
    jax.clear_caches()  # compiled now, so written to JAX's cache
    speculative._generate_jit.trace(*args).lower().compile(compiler_options=executable_store._COMPILER_OPTIONS)
    jax.clear_caches()
    executable_store.enable(store)
    try:
        np.testing.assert_array_equal(_generate(tiny, prompts=prompts, lengths=lengths), by_jit)
        assert _entries(store) == []
    finally:
        jax.clear_caches()  # no later test is handed this program from memory


def test_another_shape_or_setting_is_another_program(tiny, store):
    _generate(tiny)
    _generate(tiny, prompts=np.pad(PROMPTS, ((0, 0), (0, 1))))
    _generate(tiny, config=_config(max_new_tokens=9))
    _generate(tiny, config=dataclasses.replace(_config(), decoder=decoders.KGWDecoder(delta=1.0)))
    assert len(_entries(store)) == 4


@pytest.mark.parametrize("damage", ["truncated", "foreign_key", "group_writable"])
def test_a_damaged_foreign_or_exposed_entry_is_not_loaded(tiny, store, damage):
    first = _generate(tiny)
    (name,) = _entries(store)
    path = os.path.join(store, name)
    if damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif damage == "foreign_key":  # a valid entry of another program under this program's name
        _generate(tiny, config=_config(max_new_tokens=9))
        other = next(n for n in _entries(store) if n != name)
        os.replace(os.path.join(store, other), path)
    else:
        os.chmod(path, 0o620)
    executable_store.forget()
    jax.clear_caches()
    before = speculative.trace_count()
    np.testing.assert_array_equal(_generate(tiny), first)
    assert speculative.trace_count() == before + 1  # compiled anew, not loaded


def test_a_stored_program_that_fails_to_run_is_dropped_and_the_loop_compiled_by_jit(tiny, store, monkeypatch):
    """As the copy XLA:CPU once serialised without some kernels: NOT_FOUND when run."""
    first = _generate(tiny)
    (name,) = _entries(store)
    executable_store.forget()

    def broken(*args):
        raise jax.errors.JaxRuntimeError("NOT_FOUND: Function broadcast_compare_fusion not found")

    monkeypatch.setattr(executable_store, "_read", lambda path, k: broken)
    np.testing.assert_array_equal(_generate(tiny), first)
    assert name not in _entries(store)


def test_a_model_built_outside_the_package_factories_turns_the_store_off(store):
    lm = toy.markov_model(16)  # closures: no process-independent description
    assert executable_store.describe(lm) is None
    assert executable_store.compiled("p", None, (lm, None, _config()), 3,
                                     [executable_store.describe(lm), None, executable_store.describe(_config())]) is None
    assert _entries(store) == []


def test_descriptions_are_field_by_field_and_refuse_what_a_process_cannot_name():
    describe = executable_store.describe
    assert describe(decoders.KGWDecoder(delta=1.0)) != describe(decoders.KGWDecoder(delta=2.0))
    assert describe(jnp.float32) == describe(np.dtype("float32")) != describe(jnp.bfloat16)
    assert describe(functools.partial(transformer.lm_logits, CFG)) is not None
    assert describe(_config()).startswith("wmspec_jax.speculative.SpeculativeConfig(")
    # a model's repr names it only; its description holds how it was built
    assert describe(protocol.make_language_model(CFG, name="tiny")) != describe(
        protocol.make_language_model(CFG, name="tiny", attention_block=4))
    mesh = jax.make_mesh((1, 1), ("data", "model"))
    assert describe(protocol.make_language_model(CFG, name="tiny", mesh=mesh)) is None  # a split cache

    @dataclasses.dataclass(frozen=True)
    class Outside:
        x: int = 1

    def closure(x):
        return x

    for value in (lambda x: x, closure, Outside(), np.zeros(2), functools.partial(closure, 1),
                  decoders.GumbelMax().__repr__, object()):
        assert describe(value) is None, value


def test_each_part_of_the_key_changes_it(tiny, monkeypatch):
    lm, params = tiny
    statics = [executable_store.describe(x) for x in (lm, lm, _config())]
    args = (params, params, PROMPTS, LENGTHS)
    base = executable_store.key("p", statics, args)
    assert executable_store.key("p", statics, args) == base
    assert executable_store.key("q", statics, args) != base
    assert executable_store.key("p", statics, (params, params, PROMPTS[:1], LENGTHS[:1])) != base
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    assert executable_store.key("p", statics, (half, params, PROMPTS, LENGTHS)) != base
    assert executable_store.key("p", statics[:2] + [executable_store.describe(_config(max_new_tokens=9))],
                                args) != base
    assert executable_store.key("p", statics[:2] + [None], args) is None
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=false")
    assert executable_store.key("p", statics, args) != base
    monkeypatch.setitem(executable_store._state, "source", "0" * 64)
    monkeypatch.delenv("XLA_FLAGS")
    assert executable_store.key("p", statics, args) != base


def test_the_store_keeps_the_most_recently_used_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(executable_store, "MAX_ENTRIES", 2)
    for i, name in enumerate("abc"):
        path = tmp_path / f"{name}{executable_store.SUFFIX}"
        path.write_bytes(b"x")
        os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / "unrelated.txt").write_text("kept")
    executable_store._prune(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["b.executable", "c.executable", "unrelated.txt"]


def test_a_directory_others_can_write_is_made_private_or_refused(tmp_path):
    folder = tmp_path / "executables"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    try:
        assert executable_store.enable(str(folder)) == str(folder)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        link = tmp_path / "link"
        link.symlink_to(folder)
        assert executable_store.enable(str(link)) is None  # a symlink is not followed
    finally:
        executable_store.enable(None)
