"""Outputs stay where they belong: every output path of wmspec-detect and wmspec-generate is a regular file,
a new path or ``-``; links, devices, FIFOs and the inputs (standard input included, by device and inode) are
refused with exit status 2 before any work, and the lock of an appended output survives its deletion.

Every refusal happens before a model or tokenizer loads; the calls that get past the output checks carry a
missing checkpoint or tokenizer directory, so they stop at the next check instead of loading one."""

import io
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from wmspec_jax import keys, storage
from wmspec_jax.cli import detect as cli_detect
from wmspec_jax.cli import generate as cli_generate
from wmspec_jax.cli import outputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "outputs-test-secret-never-printed"
TEXT = "The sky looks blue because the air scatters short blue wavelengths of sunlight more than red ones."
NO_TOKENIZER = "--tokenizer=/nonexistent-wmspec-tokenizer"  # detect stops here once the output passed
NO_MODEL = ["--target=/nonexistent-wmspec-target", "--draft=/nonexistent-wmspec-draft"]  # generate, likewise


@pytest.fixture(autouse=True)
def secret(monkeypatch):
    monkeypatch.setenv(keys.ENV_VAR, SECRET)


@pytest.fixture
def texts(tmp_path):
    """(a text file, a JSONL file of generations, a prompts file)."""
    text = tmp_path / "t.txt"
    text.write_text(TEXT + "\n")
    gen = tmp_path / "G.jsonl"
    gen.write_text('{"text": "%s"}\n' % TEXT)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Why is the sky blue?\n")
    return text, gen, prompts


def call(tool, args, stdin=None, deadline=60.0):
    """(exit status, stdout, stderr) of ``tool.run`` in-process; ``stdin``: bytes or a binary file object.
    Fails (instead of hanging) when the tool does not return within ``deadline`` seconds."""
    out, err = io.StringIO(), io.StringIO()
    stream = io.BytesIO(stdin) if isinstance(stdin, bytes) else stdin
    result = []
    worker = threading.Thread(target=lambda: result.append(
        tool.run([tool.PROG] + list(args), stdin=stream, stdout=out, stderr=err)), daemon=True)
    worker.start()
    worker.join(deadline)
    assert result, f"{tool.PROG} {args} did not return within {deadline} s (blocked on an output?)"
    assert SECRET not in out.getvalue() + err.getvalue()
    return result[0], out.getvalue(), err.getvalue()


def refusals(text, prompts, output):
    """The three ways an output path reaches the tools: (tool, args, flag)."""
    return [(cli_detect, [str(text), f"--output={output}"], "--output"),
            (cli_detect, [f"--write_human_texts={output}"], "--write_human_texts"),
            (cli_generate, [str(prompts), f"--output={output}", *NO_MODEL], "--output")]


def assert_refused(tool, args, flag, output, message):
    rc, stdout, err = call(tool, args)
    assert rc == 2, (tool.PROG, args, err)
    assert f"{flag}={output}" in err and message in err, err
    assert not stdout and "checkpoint" not in err and "tokenizer" not in err, err  # refused first


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_a_device_node_is_refused_and_left_a_device(tmp_path, texts):
    text, _, prompts = texts
    node = tmp_path / "null-node"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the null device's numbers
    for tool, args, flag in refusals(text, prompts, node):
        assert_refused(tool, args, flag, node, "is a character device")
        assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_a_symlink_is_refused_even_to_a_regular_file(tmp_path, texts):
    text, _, prompts = texts
    real = tmp_path / "real.jsonl"
    real.write_text('{"id": "kept"}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    for tool, args, flag in refusals(text, prompts, link):
        assert_refused(tool, args, flag, link, "is a symbolic link")
        rc, _, err = call(tool, args)
        assert "even when it points to a regular file" in err
        assert link.is_symlink() and real.read_text() == '{"id": "kept"}\n'
    assert sorted(os.listdir(tmp_path)) == sorted(["G.jsonl", "link.jsonl", "prompts.txt", "real.jsonl", "t.txt"])


def test_a_symlink_to_stdout_is_refused(tmp_path, texts):
    text, _, prompts = texts
    link = tmp_path / "out.jsonl"
    link.symlink_to("/dev/stdout")
    for tool, args, flag in refusals(text, prompts, link):
        assert_refused(tool, args, flag, link, "is a symbolic link (to /dev/stdout)")
        assert link.is_symlink()
    if os.path.islink("/dev/stdout"):  # Linux: /dev/stdout -> /proc/self/fd/1 (read back, it blocked forever)
        for tool, args, flag in refusals(text, prompts, "/dev/stdout"):
            assert_refused(tool, args, flag, "/dev/stdout", "is a symbolic link")


def test_a_fifo_is_refused_without_opening_it(tmp_path, texts):
    text, _, prompts = texts
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for tool, args, flag in refusals(text, prompts, fifo):
        assert_refused(tool, args, flag, fifo, "is a FIFO")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_directory_and_a_socket_are_refused(tmp_path, texts):
    import socket

    text, _, prompts = texts
    for tool, args, flag in refusals(text, prompts, tmp_path):
        assert_refused(tool, args, flag, tmp_path, "is a directory")
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for tool, args, flag in refusals(text, prompts, sock_path):
            assert_refused(tool, args, flag, sock_path, "is a socket")


def test_the_file_on_standard_input_is_never_the_output(tmp_path, texts):
    """``wmspec-detect - --output=G.jsonl < G.jsonl`` (and without ``-``: no input reads stdin), a hard link
    of the stdin file, and ``wmspec-generate --output=P < P``."""
    _, gen, prompts = texts
    before = gen.read_bytes()
    twin = tmp_path / "H.jsonl"
    os.link(gen, twin)
    for args, output in [(["-", f"--output={gen}"], gen), ([f"--output={gen}"], gen),
                         (["-", f"--output={twin}"], twin)]:
        with open(gen, "rb") as stdin:
            rc, stdout, err = call(cli_detect, args, stdin=stdin)
        assert rc == 2 and "is also an input (it is the file on standard input)" in err, err
        assert f"--output={output}" in err and not stdout and gen.read_bytes() == before
    prompt_bytes = prompts.read_bytes()
    with open(prompts, "rb") as stdin:
        rc, _, err = call(cli_generate, [f"--output={prompts}", *NO_MODEL], stdin=stdin)
    assert rc == 2 and "it is the file on standard input" in err and prompts.read_bytes() == prompt_bytes, err
    # a file input and an earlier results file on stdin: stdin is not read, nothing refused
    results = tmp_path / "R.jsonl"
    results.write_text('{"input": "t.txt", "verdict": "not watermarked"}\n')
    with open(results, "rb") as stdin:
        rc, _, err = call(cli_detect, [str(texts[0]), f"--output={results}", NO_TOKENIZER], stdin=stdin)
    assert rc == 2 and "tokenizer directory not found" in err, err


def test_a_hard_link_of_an_input_is_refused(tmp_path, texts):
    text, gen, prompts = texts
    for tool, source, extra in [(cli_detect, gen, []), (cli_generate, prompts, NO_MODEL)]:
        twin = tmp_path / f"twin-{source.name}"
        os.link(source, twin)
        before = source.read_bytes()
        rc, _, err = call(tool, [str(source), f"--output={twin}", *extra])
        assert rc == 2 and f"--output={twin} is also an input (the same file as {source}" in err, err
        assert source.read_bytes() == before


def test_good_outputs_pass_the_checks(tmp_path, texts):
    """A new path, an existing regular file and ``-`` get past the output checks (to the next check)."""
    text, gen, prompts = texts
    existing = tmp_path / "old.jsonl"
    existing.write_text("")
    for output in [tmp_path / "new.jsonl", existing, "-"]:
        rc, _, err = call(cli_detect, [str(text), f"--output={output}", NO_TOKENIZER])
        assert rc == 2 and "tokenizer directory not found" in err, err
        rc, _, err = call(cli_generate, [str(prompts), f"--output={output}", *NO_MODEL])
        assert rc == 2 and "checkpoint directory not found" in err, err
    rc, _, err = call(cli_detect, ["--write_human_texts=-"])
    assert rc == 2 and "--write_human_texts=- is not a file" in err
    assert not (tmp_path / "-").exists() and not os.path.exists("-")


def test_check_output_path_says_what_the_output_is(tmp_path):
    assert outputs.check_output_path("--output", None, []) is None
    assert outputs.check_output_path("--output", "-", []).stdout
    new = outputs.check_output_path("--output", str(tmp_path / "n.jsonl"), [str(tmp_path / "in.txt")])
    assert not new.stdout and not new.exists
    with pytest.raises(outputs.InputError, match="--out=- is not a file"):
        outputs.check_output_path("--out", "-", [], allow_stdout=False)
    with pytest.raises(outputs.InputError, match="the directory .* does not exist"):
        outputs.check_output_path("--output", str(tmp_path / "missing" / "o.jsonl"), [])
    assert not outputs.reads_stdin(None) and outputs.reads_stdin([]) and outputs.reads_stdin(["a", "-"])


HOLDER = textwrap.dedent("""
    import sys, time
    from wmspec_jax import storage
    lock = storage.FileLock(sys.argv[1])
    print("ready", flush=True)
    time.sleep(60)
""")


def test_the_output_lock_survives_the_deletion_of_the_output(tmp_path):
    path = tmp_path / "out.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(storage.OutputDirLocked, match=rf"being written by another process \(pid {holder.pid} "):
            storage.FileLock(path)
        os.unlink(path)  # deleted mid-run: the lock file beside it still names the holder
        with pytest.raises(storage.OutputDirLocked, match=rf"being written by another process \(pid {holder.pid} "):
            storage.FileLock(path)
        assert not path.exists()  # the refused writer created nothing
    finally:
        holder.kill()  # SIGKILL: the kernel releases the locks with the process
        holder.wait()
    with storage.FileLock(path) as lock:  # the dead holder left no stale lock
        assert os.path.basename(lock.lock_path) == ".out.jsonl.lock"
        assert f"pid {os.getpid()} " in open(lock.lock_path).read()


def test_the_output_lock_survives_the_deletion_of_its_lock_file(tmp_path):
    path = tmp_path / "out.jsonl"
    first = storage.FileLock(path)
    try:
        os.unlink(first.lock_path)  # the output itself stays locked
        with pytest.raises(storage.OutputDirLocked, match="being written by another process"):
            storage.FileLock(path)
    finally:
        first.release()
    storage.FileLock(path).release()


def test_the_output_lock_refuses_links_and_special_files(tmp_path):
    real = tmp_path / "real.jsonl"
    real.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with pytest.raises(OSError, match="symbolic link"):
        storage.FileLock(link)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        storage.FileLock(fifo)
    (tmp_path / ".planted.jsonl.lock").symlink_to(real)  # a planted link as the lock file is never written through
    with pytest.raises(OSError, match="symbolic link"):
        storage.FileLock(tmp_path / "planted.jsonl")
    assert real.read_text() == ""


def test_generate_refuses_a_second_writer_after_the_output_was_deleted(tmp_path, texts):
    """The run holding ``--output`` had its file deleted: a second wmspec-generate is refused before a model
    loads (locking a fresh file would let it append duplicates)."""
    _, _, prompts = texts
    out = tmp_path / "gen.jsonl"
    holder = storage.FileLock(out)
    try:
        os.unlink(out)
        rc, _, err = call(cli_generate, [str(prompts), f"--output={out}"])
        assert rc == 2 and f"being written by another process (pid {os.getpid()} " in err, err
        assert "loaded in" not in err and not out.exists()
    finally:
        holder.release()
