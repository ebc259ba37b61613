"""``ragport`` commands run in this process, answered like ``subprocess.run`` would.

A ``python -m ragport.cli`` child costs 1.5-2.5 s before it does anything (imports, the
embedded server's checks); ``main()`` in this process costs milliseconds after the first
call. Tests whose promise is about a command's exit code and output, not about a new
process, run it here: ``run_cli(env, *args)`` gives the command exactly ``env`` as its
environment, ``env["RAGPORT_TEST_CWD"]`` (if set) as its current folder and ``stdin`` as a
pipe (never a terminal), and returns a ``CompletedProcess`` with ``returncode``, ``stdout``
and ``stderr`` as text. ``python -m ragport.cli`` is ``raise SystemExit(main())``, so the
exit code is the same; argparse's own exits (``--help``, usage errors) are caught here.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping

__all__ = ["run_cli"]


def run_cli(
    env: Mapping[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    from ragport.cli import main

    saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        if "RAGPORT_TEST_CWD" in env:
            os.chdir(env["RAGPORT_TEST_CWD"])
        sys.stdin = io.StringIO(stdin or "")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # --help, --version, argparse usage errors
                code = exc.code if isinstance(exc.code, int) else 1 if exc.code else 0
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(
        ["ragport", *args], code, stdout=out.getvalue(), stderr=err.getvalue()
    )
