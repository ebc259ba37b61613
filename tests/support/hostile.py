"""Hostile-input tests run here: in a child process with an address-space limit, so a bomb
that gets through kills the child (and fails the test), never the machine.

``run_limited(code)`` runs ``python -c code`` under ``RLIMIT_AS`` and a wall-clock timeout
and returns a ``Limited``: the last line the child printed as JSON (``result``), the child's
peak resident memory in MiB (``peak_mb``, from ``wait4``'s rusage, which counts the child's
own reaped children too, e.g. the PDF worker), the wall time and the exit code. The code
reads its inputs from the environment (``env=``) or builds them itself; the helper adds
``tests/support`` to ``sys.path`` so the generators there (``pdf_bytes``...) import.

Typical use::

    out = run_limited('''
        from ragport.adapters.parsers import DocxParser
        ...
        emit({"error": type(exc).__name__, "reason": exc.reason})
    ''', memory_mb=1024)
    assert out.result == {...}
    assert out.peak_mb < 400

``emit(obj)`` (predefined in the child) prints ``obj`` as the JSON line ``result`` reads.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Limited", "run_limited"]

_SUPPORT = Path(__file__).resolve().parent
_PRELUDE = f"""
import json as _json, sys as _sys
_sys.path.insert(0, {str(_SUPPORT)!r})
def emit(obj):
    print(_json.dumps(obj), flush=True)
"""


@attrs.frozen
class Limited:
    result: Any
    peak_mb: float
    seconds: float
    returncode: int
    stderr: str


def run_limited(
    code: str,
    *,
    memory_mb: int = 1536,
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
) -> Limited:
    """Run ``code`` in a child with ``RLIMIT_AS = memory_mb`` MiB; see the module docstring."""
    limit = memory_mb << 20

    def limit_memory() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        preexec_fn=limit_memory,
    )
    streams: dict[str, bytes] = {}

    def drain(name: str, stream: Any) -> None:
        streams[name] = stream.read()

    readers = [
        threading.Thread(target=drain, args=(name, stream), daemon=True)
        for name, stream in (("out", process.stdout), ("err", process.stderr))
    ]
    for reader in readers:
        reader.start()
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        process.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        # wait4, not Popen.wait: its rusage is the child's own peak (with its reaped children).
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join(10)
    seconds = time.monotonic() - started
    err = streams.get("err", b"").decode(errors="replace")[-4000:]
    if timed_out.is_set():
        raise AssertionError(f"the child ran past {timeout_s:g} s; stderr:\n{err}")
    lines = [
        line
        for line in streams.get("out", b"").decode(errors="replace").splitlines()
        if line.strip()
    ]
    result: Any = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = None
    return Limited(
        result=result,
        peak_mb=usage.ru_maxrss / 1024,
        seconds=seconds,
        returncode=process.returncode,
        stderr=err,
    )
