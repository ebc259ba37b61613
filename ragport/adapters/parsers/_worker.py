"""Run a library call that cannot be interrupted in a worker process that can be killed.

``run_worker(script, settings, data, ...)`` starts ``python -I -c BOOT LIMIT script``: the
bootstrap sets ``RLIMIT_AS`` to ``memory_bytes`` (before the script imports anything) and
runs the script as ``__main__``. The script reads one JSON line of settings, then ``data``
to EOF, from stdin, and writes one JSON object to stdout. JSON, not pickle: the parent must
not execute what a child that read hostile bytes sends back.

The payload is written by one thread and closed (EOF), the answer read by another, so neither
side waits on the other however large either is or whatever the timing; the calling thread
polls every 50 ms for ``abort`` and the deadline and, at either, kills the worker and reaps
it before raising. An answer past ``max_answer_bytes`` kills the worker too
(``ParseError(reason="too_large")``), so a worker cannot make the host hold unbounded text.

No ``multiprocessing``: its spawn and forkserver modes re-import the host's ``__main__`` in
the child, and ``fork`` is unsafe in a threaded host. ``-I`` keeps the child to the standard
library and site-packages: no ``PYTHONPATH``, no user site, not the script's directory (the
parsers' own ``html.py`` would shadow the standard library's ``html``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, cast

from ragport.adapters.parsers._common import Deadline, check_abort
from ragport.domain.errors import ParseError
from ragport.ports.runtime import Abort

__all__ = ["POLL_S", "run_worker"]

POLL_S = 0.05  # how often abort and the deadline are looked at while the worker runs
_READ = 1 << 20

# Runs in the child before the worker script: the address-space limit first, then the script.
_BOOT = """\
import runpy, sys
limit = int(sys.argv[1])
try:
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
except (ImportError, ValueError, OSError):
    pass
script = sys.argv[2]
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
    """The worker's JSON answer, or ``{"error": "malformed", "detail": ...}`` if it sent none
    (``"worker"`` instead when a signal killed it).

    Raises ``ParseError`` ``worker`` (no interpreter to start), ``timeout`` or ``too_large``,
    or ``AbortedError``; in every case the worker is dead and reaped first.
    """
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOT, str(int(memory_bytes)), str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:  # no usable interpreter (an embedded host's sys.executable)
        raise ParseError(
            f"the parser's worker process could not start ({type(exc).__name__})",
            reason="worker",
            media_type=media_type,
        ) from None
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
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise ParseError(
                    f"parsing took longer than {deadline.seconds:g} s",
                    reason="timeout",
                    media_type=media_type,
                )
            if reader.overflow:
                break
            if reader.is_alive():  # the answer is complete when the worker closes stdout
                reader.join(min(remaining, POLL_S))
            else:
                try:
                    process.wait(min(remaining, POLL_S))
                    break
                except subprocess.TimeoutExpired:
                    pass
            check_abort(abort)
        if reader.overflow:
            raise ParseError(
                f"the worker's answer is over {max_answer_bytes} bytes",
                reason="too_large",
                media_type=media_type,
            )
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        reader.join()
        writer.join()
        process.stdout.close()
    try:
        answer = json.loads(b"".join(reader.blocks).decode("utf-8", "surrogatepass"))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        if process.returncode < 0:
            # Killed by a signal (the OOM killer, a crash): not a verdict on the bytes, so a
            # sync retries it (reason "worker").
            return {"error": "worker", "detail": f"worker killed by signal {-process.returncode}"}
        return {"error": "malformed", "detail": f"worker exit code {process.returncode}"}
    return answer
