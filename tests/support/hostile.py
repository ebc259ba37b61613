"""Hostile-input tests run here: in a child process with an address-space limit, so a bomb
that gets through kills the child (and fails the test), never the machine.

``run_limited(code)`` runs ``python -c code`` under ``RLIMIT_AS`` and a wall-clock timeout
and returns a ``Limited``: the last line the child printed as JSON (``result``), the child's
peak resident memory in MiB (``peak_mb``, from ``wait4``'s rusage, which counts the child's
own reaped children too, e.g. the PDF worker: reported by the child itself from ``VmHWM``
at exit, else ``wait4``'s rusage), the wall time and the exit code. The code
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
_PEAK = "__ragport_peak_kb__"
_PRELUDE = f"""
import atexit as _atexit, json as _json, resource as _resource, sys as _sys
_sys.path.insert(0, {str(_SUPPORT)!r})
def emit(obj):
    print(_json.dumps(obj), flush=True)
def _peak():
    # VmHWM is this process's own peak since exec (a fork of a big test runner does not
    # count); RUSAGE_CHILDREN adds its reaped children (the PDF worker, say).
    hwm = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    kids = _resource.getrusage(_resource.RUSAGE_CHILDREN).ru_maxrss
    _sys.stderr.write("\\n{_PEAK} %d\\n" % max(hwm, kids))
    _sys.stderr.flush()
_atexit.register(_peak)
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
    err_all = streams.get("err", b"").decode(errors="replace")
    # The child's own report of its peak; wait4's rusage is the fallback (a child killed or
    # out of memory before its exit handler), and it counts the pages it shared with this
    # process between fork and exec, so it overstates the peak under a big test runner.
    peak_kb = int(usage.ru_maxrss)
    kept = []
    for line in err_all.splitlines():
        if line.startswith(_PEAK + " "):
            peak_kb = int(line.split()[1])
        else:
            kept.append(line)
    err = "\n".join(kept).strip("\n")[-4000:]
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
        peak_mb=peak_kb / 1024,
        seconds=seconds,
        returncode=process.returncode,
        stderr=err,
    )
