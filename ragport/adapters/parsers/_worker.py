"""Run a library call that cannot be interrupted in a worker process that can be killed.

``run_worker(script, settings, data, ...)`` starts ``python -I -c BOOT LIMIT CPU script`` in a
session (process group) of its own: the bootstrap sets ``RLIMIT_AS`` to ``memory_bytes``,
``RLIMIT_CPU`` to the CPU budget (rounded up to a second: the kernel's backstop) and
``RLIMIT_CORE`` to 0 (before the script imports anything) and runs the script as ``__main__``.
The script reads one JSON line of settings, then ``data`` to EOF, from stdin, and writes one
JSON object to stdout. JSON, not pickle: the parent must not execute what a child that read
hostile bytes sends back.

The payload is written by one thread and closed (EOF), the answer read by another, so neither
side waits on the other however large either is or whatever the timing; the calling thread
looks at ``abort``, the worker's CPU time (``/proc``, where there is one) and the wall-clock
backstop every 50 ms. The budget is CPU time because a busy machine stretches the clock, not
the work: a PDF that takes 5 s of CPU takes 40 s on a loaded machine and is no more hostile.
At the budget, the backstop or an abort, the worker's whole process group is killed (a child
of the worker holding stdout open cannot keep the parse alive) and the worker reaped before
raising. The group is killed when the worker exits, too. An answer past ``max_answer_bytes``
kills the worker (``ParseError(reason="too_large")``), so a worker cannot make the host hold
unbounded text. A worker killed by a signal without an answer (the OOM killer, a crash) is
``ParseError(reason="worker")`` for every parser: not a verdict on the bytes, so a sync
retries it; killed by ``SIGXCPU`` (``RLIMIT_CPU``) it is ``timeout``.

No ``multiprocessing``: its spawn and forkserver modes re-import the host's ``__main__`` in
the child, and ``fork`` is unsafe in a threaded host. ``-I`` keeps the child to the standard
library and site-packages: no ``PYTHONPATH``, no user site, not the script's directory (the
parsers' own ``html.py`` would shadow the standard library's ``html``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, cast

from ragport.adapters.parsers._common import Deadline, check_abort
from ragport.domain.errors import ParseError
from ragport.ports.runtime import Abort

__all__ = ["POLL_S", "run_worker"]

POLL_S = 0.05  # how often abort and the budgets are looked at while the worker runs
_READ = 1 << 20
_SIGXCPU = getattr(signal, "SIGXCPU", None)

# Runs in the child before the worker script: the limits first, then the script.
_BOOT = """\
import runpy, sys
memory, cpu = int(sys.argv[1]), int(sys.argv[2])
try:
    import resource
except ImportError:
    resource = None
if resource is not None:
    for kind, value in (("RLIMIT_AS", memory), ("RLIMIT_CORE", 0), ("RLIMIT_CPU", cpu)):
        try:
            kind = getattr(resource, kind)
            soft, hard = resource.getrlimit(kind)
            if soft == resource.RLIM_INFINITY or soft > value:
                resource.setrlimit(kind, (value, hard))
        except (AttributeError, ValueError, OSError):
            pass
script = sys.argv[3]
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""


class _Reader(threading.Thread):
    def __init__(self, stream: IO[bytes], cap: int) -> None:
        super().__init__(name="ragport-worker-reader", daemon=True)
        self.stream = cast(io.BufferedReader, stream)
        self.cap = cap
        self.blocks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def run(self) -> None:
        try:
            while block := self.stream.read1(_READ):
                self.size += len(block)
                if self.size > self.cap:
                    self.overflow = True  # stop reading: the worker blocks, the caller kills it
                    return
                self.blocks.append(block)
        except (OSError, ValueError):  # the pipe closed under us after a kill
            pass


def _write(stream: IO[bytes], header: bytes, data: bytes) -> None:
    try:
        stream.write(header)
        stream.write(data)
    except (OSError, ValueError):  # the worker exited or was killed before reading it all
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def run_worker(
    script: Path,
    settings: Mapping[str, object],
    data: bytes,
    *,
    deadline: Deadline,
    abort: Abort | None,
    memory_bytes: int,
    max_answer_bytes: int,
    media_type: str | None,
) -> dict[str, Any]:
    """The worker's JSON answer, or ``{"error": "malformed", "detail": ...}`` if it exited
    without one.

    Raises ``ParseError`` ``worker`` (no interpreter to start, or killed by a signal without
    an answer), ``timeout`` (past ``deadline``'s CPU budget or its wall-clock backstop) or
    ``too_large``, or ``AbortedError``; in every case the worker's process group is dead and
    the worker reaped first.
    """
    process = _start(script, memory_bytes, deadline.seconds, media_type)
    assert process.stdin is not None and process.stdout is not None
    header = json.dumps(dict(settings)).encode() + b"\n"
    writer = threading.Thread(
        target=_write,
        args=(process.stdin, header, data),
        name="ragport-worker-writer",
        daemon=True,
    )
    reader = _Reader(process.stdout, max_answer_bytes)
    writer.start()
    reader.start()
    try:
        _watch(process, reader, deadline, abort)
    except ParseError as exc:
        raise ParseError(str(exc), reason=exc.reason, media_type=media_type) from None
    finally:
        _end(process)
        # Every writer of the pipe is dead now, so the reader meets EOF at once, unless a
        # grandchild left the group: then the wall-clock backstop holds.
        reader.join(max(1.0, deadline.remaining()))
        writer.join()
        if not reader.is_alive():
            process.stdout.close()
    if reader.is_alive():
        raise ParseError(
            f"the worker's answer did not end within {deadline.wall_seconds:g} s on the clock",
            reason="timeout",
            media_type=media_type,
        )
    return _answer(process.returncode, reader, deadline, media_type)


def _start(
    script: Path, memory_bytes: int, cpu_seconds: float, media_type: str | None
) -> subprocess.Popen[bytes]:
    # The parent stops the worker at the budget; the kernel does where the parent cannot see
    # the worker's CPU time (no /proc), at the budget rounded up to a second.
    cpu_limit = max(1, math.ceil(cpu_seconds))
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-c",
                _BOOT,
                str(int(memory_bytes)),
                str(cpu_limit),
                str(script),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killed whole, grandchildren too
        )
    except OSError as exc:  # no usable interpreter (an embedded host's sys.executable)
        raise ParseError(
            f"the parser's worker process could not start ({type(exc).__name__})",
            reason="worker",
            media_type=media_type,
        ) from None


def _watch(
    process: subprocess.Popen[bytes], reader: _Reader, deadline: Deadline, abort: Abort | None
) -> None:
    """Return once the worker has exited (not yet reaped) or its answer overflowed; raise
    ``ParseError(reason="timeout")`` past either budget, ``AbortedError`` on abort."""
    delay = 0.0005
    while not reader.overflow and not _exited(process):
        cpu = _cpu_seconds(process.pid)
        deadline.check(cpu_used=0.0 if cpu is None else cpu)
        check_abort(abort)
        if reader.is_alive():  # wakes as soon as the answer is complete
            reader.join(min(POLL_S, max(0.0, deadline.remaining())))
        else:
            time.sleep(delay)
            delay = min(2 * delay, POLL_S)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the worker has exited, leaving it unreaped where the platform allows, so its
    process id (and group id) stay reserved until the group is killed."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # pragma: no cover - no waitid (older macOS)
        return process.poll() is not None
    try:
        found = waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped
        return True
    return found is not None


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill the worker's process group (the worker, if alive, and anything it started), then
    reap the worker."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    process.wait()


@functools.cache
def _ticks() -> int:
    """Clock ticks a second, the unit of the CPU times in ``/proc/PID/stat``."""
    return os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, from ``/proc`` (Linux); ``None``
    where there is no ``/proc`` (``RLIMIT_CPU`` then stops the worker)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _ticks()
    except (OSError, IndexError, ValueError, AttributeError):
        return None


def _answer(
    returncode: int, reader: _Reader, deadline: Deadline, media_type: str | None
) -> dict[str, Any]:
    """The worker's answer, or the error its exit stands for."""
    if reader.overflow:
        raise ParseError(
            f"the worker's answer is over {reader.cap} bytes",
            reason="too_large",
            media_type=media_type,
        )
    try:
        answer = json.loads(b"".join(reader.blocks).decode("utf-8", "surrogatepass"))
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    if _SIGXCPU is not None and returncode == -_SIGXCPU:  # RLIMIT_CPU: the kernel's backstop
        raise ParseError(deadline.cpu_message(), reason="timeout", media_type=media_type)
    if returncode < 0:
        # Killed by a signal (the OOM killer, a crash): not a verdict on the bytes, so a sync
        # retries it.
        raise ParseError(
            f"the parser's worker was killed by signal {-returncode}",
            reason="worker",
            media_type=media_type,
        )
    return {"error": "malformed", "detail": f"worker exit code {returncode}"}
