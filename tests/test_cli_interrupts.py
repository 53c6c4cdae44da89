"""Ctrl-C: both tools end with one line on stderr and exit status 130, leaving no half-written output and
no lock. Each tool runs in a subprocess through its console entry point, with one step replaced by a slow
one that says when it has started (so SIGINT arrives mid-run, at a known point), then gets a real SIGINT."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "4f1d9a7c2e6b8053d7c1a9e4b2f6d8a0"
TEXT = "The sky looks blue because the air scatters short blue wavelengths of sunlight more than red ones."

DETECT = textwrap.dedent("""
    import sys, time
    from wmspec_jax.cli import detect

    def slow(*args, **kwargs):  # inside the atomic write of --output: its temporary file exists now
        print("ready", flush=True)
        time.sleep(120)
        yield

    detect.iter_inputs = slow
    sys.argv = ["wmspec-detect", "a.txt", "--secret_file=K", "--output=out.jsonl"]
    detect.main()
""")

GENERATE = textwrap.dedent("""
    import sys, time
    from wmspec_jax import storage
    from wmspec_jax.cli import generate
    from wmspec_jax.models import pairs

    def slow(*args, **kwargs):  # after --output was opened and locked
        print("ready", flush=True)
        time.sleep(120)

    pairs.load_pair = slow
    sys.argv = ["wmspec-generate", "p.txt", "--secret_file=K", "--output=out.jsonl", "--run=g"]
    try:
        generate.main()
    except SystemExit as e:
        storage.FileLock("out.jsonl").release()  # refused inside this process if the tool still held it
        print("lock free", flush=True)
        raise
""")


def interrupt(script: str, cwd) -> tuple:
    """(exit status, stdout, stderr) of ``script`` sent SIGINT once it printed ``ready``."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("WMSPEC_SECRET", None)
    # A child inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt handler: a test
    # worker that ran a tool's interrupt path in-process ignores SIGINT from then on. A user's shell does not.
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


@pytest.fixture
def files(tmp_path):
    (tmp_path / "K").write_text(SECRET + "\n")
    os.chmod(tmp_path / "K", 0o600)
    (tmp_path / "a.txt").write_text(TEXT + "\n")
    (tmp_path / "p.txt").write_text("Why is the sky blue?\n")
    return tmp_path


def test_ctrl_c_ends_detect_in_one_line_and_leaves_no_output(files):
    rc, _, err = interrupt(DETECT, files)
    assert rc == 130, err
    assert err.splitlines() == ["wmspec-detect: interrupted (Ctrl-C): outputs hold whole lines only, no lock is kept"]
    assert sorted(os.listdir(files)) == ["K", "a.txt", "p.txt"]  # no output, no temporary file


def test_ctrl_c_ends_generate_in_one_line_and_releases_its_lock(files):
    record = '{"format_version": 3, "id": "g/0", "run": "g", "index": 0, "text": "kept"}\n'
    (files / "out.jsonl").write_text(record)
    rc, out, err = interrupt(GENERATE, files)
    assert rc == 130, err
    assert [line for line in err.splitlines() if "loaded" not in line] == [
        "wmspec-generate: interrupted (Ctrl-C): outputs hold whole lines only, no lock is kept"], err
    assert "lock free" in out and (files / "out.jsonl").read_text() == record
