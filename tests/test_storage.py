"""Result files: one atomic-write helper, resumable JSONL that never drops a valid record,
one writer per output directory, confidence intervals."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from wmspec_jax import storage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_jsonl_store_resumes_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "runs" / "texts.jsonl"
    store = storage.JsonlStore(path)
    store.add([{"id": 1, "x": np.float32(0.5)}, {"id": "b", "x": [1, 2]}])
    with open(path, "a") as f:
        f.write('{"id": 3, "x":')  # killed mid-write
    with pytest.warns(UserWarning, match="removed a torn last line"):
        again = storage.JsonlStore(path)
    assert len(again) == 2 and 1 in again and "b" in again and 3 not in again
    assert again.torn_bytes == len('{"id": 3, "x":') and again.bad_lines == []
    again.add([{"id": 3, "x": 1}])
    lines = path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [1, "b", 3]


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "texts.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}')
    store = storage.JsonlStore(path)
    assert len(store) == 2 and store.torn_bytes == 0
    store.add([{"id": 3}])
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_corrupt_middle_line_is_skipped_and_reported_never_a_reason_to_delete(tmp_path):
    path = tmp_path / "texts.jsonl"
    good = [{"id": i, "v": i * i} for i in range(6)]
    lines = [json.dumps(r) for r in good]
    lines.insert(2, '{"id": 99, "v": ')  # corrupt (e.g. a disk error) in the middle
    lines.insert(5, '{"v": 7}')  # valid JSON without an id
    lines.insert(6, '[1, 2]')  # not an object
    content = "\n".join(lines) + "\n"
    path.write_text(content)
    with pytest.warns(UserWarning, match=r"skipped 3 unreadable line\(s\) \(line 3, 6, 7\)"):
        store = storage.JsonlStore(path)
    assert sorted(int(k) for k in store.records) == list(range(6))  # every valid record, also after the bad ones
    assert store.bad_lines == [3, 6, 7] and "line 3, 6, 7" in store.load_report()
    assert path.read_text() == content  # nothing deleted
    store.add([{"id": 6}])
    assert path.read_text() == content + '{"id": 6}\n'
    with pytest.raises(ValueError, match="'id'"):
        store.add([{"no_id": 1}])


def test_a_re_added_id_replaces_the_earlier_record(tmp_path):
    path = tmp_path / "texts.jsonl"
    store = storage.JsonlStore(path)
    store.add([{"id": "a", "v": 1}])
    store.add([{"id": "a", "v": 2}])
    assert store.records["a"]["v"] == 2
    store.close()
    again = storage.JsonlStore(path)
    assert again.records["a"]["v"] == 2 and again.duplicates == 1


def test_atomic_writes_and_cleanup_on_failure(tmp_path):
    storage.atomic_write_json(tmp_path / "a" / "s.json", {"v": np.arange(3), "f": np.float64(1.5)})
    assert json.loads((tmp_path / "a" / "s.json").read_text()) == {"v": [0, 1, 2], "f": 1.5}
    storage.atomic_savez(tmp_path / "a" / "x.npz", w=np.ones(3))
    assert np.load(tmp_path / "a" / "x.npz")["w"].tolist() == [1, 1, 1]

    def broken(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        storage.atomic_write(tmp_path / "a" / "s.json", broken)
    assert json.loads((tmp_path / "a" / "s.json").read_text())["f"] == 1.5  # old file intact
    assert sorted(os.listdir(tmp_path / "a")) == ["s.json", "x.npz"]  # no temporary file left behind
    with pytest.raises(TypeError, match="not JSON serialisable"):
        storage.atomic_write_json(tmp_path / "a" / "t.json", {"x": object()})
    assert sorted(os.listdir(tmp_path / "a")) == ["s.json", "x.npz"]


def test_atomic_savefig(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    storage.atomic_savefig(fig, tmp_path / "f.png", dpi=50)
    plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and len(os.listdir(tmp_path)) == 1


HOLDER = textwrap.dedent("""
    import sys, time
    from wmspec_jax import storage
    store = storage.JsonlStore(sys.argv[1])
    store.add([{"id": "holder"}])
    print("ready", flush=True)
    time.sleep(60)
""")


def test_a_second_writer_process_is_refused(tmp_path):
    path = tmp_path / "out" / "generations.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(storage.OutputDirLocked, match=r"being written by another process \(pid \d+"):
            storage.JsonlStore(path)
        with pytest.raises(storage.OutputDirLocked):
            storage.DirectoryLock(tmp_path / "out")
        # Deleting the lock file does not let a second writer in: the directory itself is locked.
        os.unlink(tmp_path / "out" / storage.LOCK_NAME)
        with pytest.raises(storage.OutputDirLocked, match="being written by another process"):
            storage.JsonlStore(path)
        assert not (tmp_path / "out" / storage.LOCK_NAME).exists()  # the refused writer left nothing behind
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock with the process
        holder.wait()
    store = storage.JsonlStore(path)  # the dead holder left no stale lock
    assert "holder" in store
    # within one process the lock is re-entrant (a session and its store share it)
    with storage.DirectoryLock(tmp_path / "out"):
        storage.JsonlStore(path).add([{"id": "same-process"}])
    store.close()
