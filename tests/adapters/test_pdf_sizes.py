"""PdfParser on PDFs of realistic size (100 kB to 8 MB, 256 pages) and the worker runner.

Every PDF is made by the test (tests/support/pdf_bytes.py ``manual``). Past the 64 kB of a
pipe buffer the bytes must still reach the worker whole, whatever the timing; abort and the
deadline must still kill the worker and reap it.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from pdf_bytes import manual, manual_page
from worker_children import worker_children

from ragport.adapters.parsers import PdfParser
from ragport.adapters.parsers._common import Deadline
from ragport.adapters.parsers._worker import run_worker
from ragport.domain.errors import AbortedError, ParseError
from ragport.domain.limits import HARD_LIMITS

MIB = 1 << 20


class _AbortAfter:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() > self.at


@pytest.mark.parametrize(
    ("pages", "size", "lines"),
    [
        (4, 100_000, 43),
        (4, 1_000_000, 43),
        (4, 8_000_000, 43),
        (256, None, 2),
    ],
    ids=["100kB", "1MB", "8MB", "256pages"],
)
def test_realistic_pdf_parses_whole_well_within_the_default_timeout(pages, size, lines):
    """Each size parses to every page's text in seconds, not at the 30 s deadline.

    If this fails, check how run_worker hands the bytes to the worker (all of them, then EOF).
    """
    data = manual(pages, size=size, lines=lines)
    if size is not None:
        assert abs(len(data) - size) <= size // 100
    parser = PdfParser(max_bytes=HARD_LIMITS.parse_bytes)
    doc = parser.parse(data)  # ~2-7 s of CPU here, well within the default 30 s
    assert len(doc.pages) == pages and doc.metadata["pages"] == pages
    assert doc.pages[pages // 2] == manual_page(pages // 2 + 1, pages, lines)
    assert doc.pages[-1].endswith(f"Page {pages} of {pages}")
    assert worker_children("_pdf_worker.py") == []


def test_a_pdf_past_the_pipe_buffer_is_not_a_timeout():
    """A 100 kB PDF that takes under a second parses under timeout_s=8 (it used to time out).

    If this fails, check that run_worker writes the whole payload and closes the worker's stdin.
    """
    doc = PdfParser(timeout_s=8).parse(manual(2, size=100_000))
    assert len(doc.pages) == 2


def test_abort_during_a_long_parse_stops_it_and_reaps_the_worker():
    """An abort set 0.3 s into a 256-page parse (2-7 s whole) raises AbortedError long before the
    parse could end (~0.1 s after the abort; 3 s allowed on a loaded machine); no worker left.

    If this fails, check the abort poll and the kill in run_worker's wait loop.
    """
    data = manual(256, lines=2)
    started = time.monotonic()
    with pytest.raises(AbortedError):
        PdfParser().parse(data, abort=_AbortAfter(0.3))
    assert time.monotonic() - started < 3
    assert worker_children("_pdf_worker.py") == []


def test_the_deadline_kills_the_worker_of_a_large_pdf():
    """A 256-page parse under timeout_s=0.5 is ParseError(timeout) once the worker has used
    0.5 s of CPU (on the clock that depends on the machine's load); no worker left. Twenty
    lines a page make the whole parse take ~2.8 s of CPU here (two lines took 0.49 s, so the
    parse sometimes beat the budget).

    If this fails, check the budget check and the kill in run_worker's wait loop.
    """
    data = manual(256, lines=20)
    with pytest.raises(ParseError) as info:
        PdfParser(timeout_s=0.5).parse(data)
    assert info.value.reason == "timeout"
    assert worker_children("_pdf_worker.py") == []


# --- the worker runner ----------------------------------------------------------------------

_ECHO = """
import json, sys
settings = json.loads(sys.stdin.buffer.readline())
out = sys.stdout.buffer
out.write(b'{"settings": ' + json.dumps(settings).encode() + b', "hex": "')
while True:  # answer while still reading: a parent that writes everything first would block
    block = sys.stdin.buffer.read(65536)
    if not block:
        break
    out.write(block.hex().encode())
out.write(b'"}')
"""


def _script(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def test_runner_streams_a_many_megabyte_answer_while_writing_the_payload(tmp_path):
    """8 MB in and a 16 MB answer written while the payload still flows: no deadlock.

    If this fails, check that run_worker writes stdin and reads stdout on separate threads.
    """
    data = bytes(range(256)) * (8 * MIB // 256)
    answer = run_worker(
        _script(tmp_path, "echo_worker.py", _ECHO),
        {"k": 1},
        data,
        deadline=Deadline(20),
        abort=None,
        memory_bytes=1 << 30,
        max_answer_bytes=64 * MIB,
        media_type=None,
    )
    assert answer["settings"] == {"k": 1}
    assert answer["hex"] == data.hex()
    assert worker_children("echo_worker.py") == []


def test_runner_refuses_an_answer_past_its_cap_and_kills_the_worker(tmp_path):
    """An answer past max_answer_bytes is ParseError(too_large), not unbounded memory.

    If this fails, check the reader thread's cap in run_worker.
    """
    with pytest.raises(ParseError) as info:
        run_worker(
            _script(tmp_path, "echo_worker.py", _ECHO),
            {},
            b"x" * MIB,
            deadline=Deadline(20),
            abort=None,
            memory_bytes=1 << 30,
            max_answer_bytes=MIB,
            media_type=None,
        )
    assert info.value.reason == "too_large"
    assert worker_children("echo_worker.py") == []


def test_runner_limits_the_workers_address_space(tmp_path):
    """The worker runs under RLIMIT_AS = memory_bytes: a 1 GiB allocation fails at 256 MiB.

    If this fails, check the bootstrap in run_worker that sets RLIMIT_AS before the script.
    """
    hog = """
    import json, sys
    sys.stdin.buffer.read()
    try:
        block = bytearray(1 << 30)
        answer = {"allocated": len(block)}
    except MemoryError:
        answer = {"error": "memory"}
    sys.stdout.write(json.dumps(answer))
    """
    answer = run_worker(
        _script(tmp_path, "hog_worker.py", hog),
        {},
        b"",
        deadline=Deadline(20),
        abort=None,
        memory_bytes=256 * MIB,
        max_answer_bytes=MIB,
        media_type=None,
    )
    assert answer == {"error": "memory"}


def test_runner_answer_that_is_not_json_is_malformed(tmp_path):
    """A worker that dies without an answer is reported as malformed, never as a result.

    If this fails, check the answer decoding at the end of run_worker.
    """
    answer = run_worker(
        _script(tmp_path, "crash_worker.py", "import os\nos._exit(3)\n"),
        {},
        b"abc",
        deadline=Deadline(20),
        abort=None,
        memory_bytes=256 * MIB,
        max_answer_bytes=MIB,
        media_type=None,
    )
    assert answer["error"] == "malformed"
    assert json.dumps(answer)  # plain JSON values only


def test_runner_worker_killed_by_a_signal_is_a_worker_failure(tmp_path):
    """A worker killed by a signal (the OOM killer, a crash) is ParseError(reason="worker"),
    which a sync retries, not "malformed", a verdict on the bytes.

    If this fails, check _answer in run_worker for a negative return code.
    """
    with pytest.raises(ParseError) as caught:
        run_worker(
            _script(tmp_path, "killed_worker.py", "import os, signal\nos.kill(os.getpid(), 9)\n"),
            {},
            b"abc",
            deadline=Deadline(20),
            abort=None,
            memory_bytes=256 * MIB,
            max_answer_bytes=MIB,
            media_type="application/pdf",
        )
    assert (caught.value.reason, caught.value.media_type) == ("worker", "application/pdf")


def test_a_pdf_worker_killed_by_a_signal_is_a_retryable_parse_error(monkeypatch, tmp_path):
    """PdfParser turns a killed worker into ParseError(reason="worker"), which sync_knowledge
    keeps for a retry.

    If this fails, check PdfParser's mapping of the runner's "worker" answer.
    """
    from pdf_bytes import pdf

    from ragport.adapters.parsers import pdf as pdf_module
    from ragport.application._sync_state import is_retryable

    killer = _script(tmp_path, "killed_pdf_worker.py", "import os\nos.kill(os.getpid(), 9)\n")
    monkeypatch.setattr(pdf_module, "_WORKER", killer)
    with pytest.raises(ParseError) as caught:
        PdfParser().parse(pdf(["hello"]))
    assert caught.value.reason == "worker"
    assert is_retryable(caught.value)
