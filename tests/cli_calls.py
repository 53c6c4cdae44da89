"""Running the command-line tools in-process for the tests: their exit status and output, and the check
that the secret never shows in either."""

import io
import json


def run_tool(tool, args, secret: str, stdin=None) -> tuple:
    """(exit status, stdout, stderr) of ``tool.run`` on ``args`` (stdin: bytes or None); fails the test if
    ``secret`` appears in the output."""
    out, err = io.StringIO(), io.StringIO()
    rc = tool.run([tool.PROG] + list(args), stdin=None if stdin is None else io.BytesIO(stdin), stdout=out,
                  stderr=err)
    assert secret not in out.getvalue() + err.getvalue()
    return rc, out.getvalue(), err.getvalue()


def lines(text: str) -> list:
    """The JSON objects of a JSONL output (blank lines skipped)."""
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def secret_file_flag(directory, secret: str) -> str:
    """``--secret_file=PATH`` of a new owner-only key file holding ``secret`` in ``directory``."""
    import os

    path = directory / "secret.txt"
    path.write_text(secret + "\n")
    os.chmod(path, 0o600)
    return f"--secret_file={path}"
