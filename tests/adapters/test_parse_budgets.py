"""Parse budgets that do not depend on machine load (issue 43, items 1, 12 and 13).

A parser worker is budgeted by its CPU time (``timeout_s``), with a much larger wall-clock
backstop (``wall_timeout_s``); at either, or when it exits, its whole process group is killed,
so a grandchild holding stdout cannot keep a parse alive; a worker killed by a signal is
``ParseError(reason="worker")`` for every parser, and a sync retries it.

The workers here are small scripts standing in for ``_pdf_worker.py`` / ``_rst_worker.py``
(``monkeypatch`` on the module's ``_WORKER``): one that waits, one that burns CPU, one killed
by a signal, one that starts a grandchild holding its stdout. No test asserts a duration: a
budget of CPU time stretches with the machine's load, which is the point.
"""

from __future__ import annotations

import os
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from doubles import CountingEmbedder
from pdf_bytes import pdf
from sync_support import DictConnector
from worker_children import worker_children

import ragport
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.adapters.parsers import PdfParser, RstParser
from ragport.adapters.parsers import _worker as worker_module
from ragport.adapters.parsers import pdf as pdf_module
from ragport.adapters.parsers import rst as rst_module
from ragport.domain.errors import ParseError

_READ_ALL = (
    "import json, os, sys, time\njson.loads(sys.stdin.buffer.readline())\nsys.stdin.buffer.read()\n"
)
_ANSWER = 'sys.stdout.write(json.dumps({"pages": ["waited, then answered"], "title": None}))\n'
WAITS = _READ_ALL + "time.sleep(float(os.environ['RAGPORT_TEST_WAIT']))\n" + _ANSWER
BURNS = _READ_ALL + "while True:\n    pass\n"
KILLED = "import os\nos.kill(os.getpid(), 9)\n"
# Starts a grandchild that inherits stdout and outlives everything, writes its pid to a file,
# then answers and exits ("answer") or burns CPU past its budget ("burn").
HOLDS_STDOUT = (
    _READ_ALL
    + """
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["RAGPORT_TEST_PIDFILE"], "w") as out:
    out.write(str(child.pid))
if os.environ["RAGPORT_TEST_MODE"] == "answer":
"""
    + "    "
    + _ANSWER
    + """    sys.stdout.flush()
    os._exit(0)
while True:
    pass
"""
)


def _script(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def _workers(tmp_path: Path) -> list[str]:
    return worker_children(str(tmp_path))


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()`` on a thread, or a test failure if it has not returned after ``seconds``: a
    guard against a hang (far above the budgets here), not a timing assertion."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the test below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the parse was still running after {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ends(pid: int) -> bool:
    """Whether ``pid`` stops running within 10 s: a killed process has closed its files (the
    parse saw stdout end) a moment before it becomes a zombie, longer on a loaded machine."""
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _alive(pid)


# --- item 1: CPU time, not the clock -----------------------------------------------------------


def test_a_worker_that_waits_past_its_cpu_budget_still_parses(monkeypatch, tmp_path):
    """A worker that waits 1.5 s (a loaded machine, a slow disk) using almost no CPU parses
    under timeout_s=0.5: the budget is CPU time, and the wall-clock backstop is far away.

    If this fails, check run_worker's budget in parsers/_worker.py (the worker's CPU time from
    /proc, deadline.check(cpu_used=...)), not the clock.
    """
    monkeypatch.setattr(pdf_module, "_WORKER", _script(tmp_path, "waits.py", WAITS))
    monkeypatch.setenv("RAGPORT_TEST_WAIT", "1.5")
    doc = PdfParser(timeout_s=0.5).parse(pdf(["hello"]))
    assert doc.pages == ("waited, then answered",)
    assert _workers(tmp_path) == []


def test_a_worker_that_burns_cpu_past_its_budget_is_a_timeout(monkeypatch, tmp_path):
    """A worker spinning on the CPU is ParseError(timeout) once it has used timeout_s of CPU,
    long before the wall-clock backstop; it is killed and reaped.

    If this fails, check run_worker's CPU check and _end (the group kill) in _worker.py.
    """
    monkeypatch.setattr(pdf_module, "_WORKER", _script(tmp_path, "burns.py", BURNS))
    parser = PdfParser(timeout_s=0.5, wall_timeout_s=120)
    with pytest.raises(ParseError) as caught:
        _within(60, lambda: parser.parse(pdf(["hello"]), media_type="application/pdf"))
    assert (caught.value.reason, caught.value.media_type) == ("timeout", "application/pdf")
    assert _workers(tmp_path) == []


def test_the_kernel_stops_a_burning_worker_where_the_parent_cannot_see_its_cpu(
    monkeypatch, tmp_path
):
    """Without /proc (the parent cannot read the worker's CPU time), RLIMIT_CPU set in the
    worker ends it with SIGXCPU at the budget rounded up to a second: ParseError(timeout),
    not "worker".

    If this fails, check the RLIMIT_CPU line of _BOOT and the SIGXCPU case of _answer.
    """
    monkeypatch.setattr(worker_module, "_cpu_seconds", lambda pid: None)
    monkeypatch.setattr(pdf_module, "_WORKER", _script(tmp_path, "burns.py", BURNS))
    with pytest.raises(ParseError) as caught:
        _within(60, lambda: PdfParser(timeout_s=0.5, wall_timeout_s=120).parse(pdf(["x"])))
    assert caught.value.reason == "timeout"
    assert _workers(tmp_path) == []


def test_the_wall_clock_backstop_ends_a_worker_that_waits_forever(monkeypatch, tmp_path):
    """A worker that waits without computing (stopped, swapped out) is ParseError(timeout) at
    wall_timeout_s, however much CPU budget is left.

    If this fails, check the wall-clock check of Deadline.check and wall_timeout_s in
    BaseParser.
    """
    monkeypatch.setattr(pdf_module, "_WORKER", _script(tmp_path, "waits.py", WAITS))
    monkeypatch.setenv("RAGPORT_TEST_WAIT", "600")
    parser = PdfParser(timeout_s=30, wall_timeout_s=1)
    assert parser.wall_timeout_s == 1.0
    with pytest.raises(ParseError) as caught:
        _within(60, lambda: parser.parse(pdf(["hello"])))
    assert caught.value.reason == "timeout"
    assert _workers(tmp_path) == []


# --- item 12: a killed worker is "worker" for every parser, and a sync retries it --------------


@pytest.mark.parametrize(
    ("parser", "module", "data"),
    [
        (PdfParser, pdf_module, pdf(["hello"])),
        (RstParser, rst_module, b"Guide\n=====\n\nSome text.\n"),
    ],
    ids=["pdf", "rst"],
)
def test_a_worker_killed_by_a_signal_is_a_worker_failure_for_every_parser(
    monkeypatch, tmp_path, parser, module, data
):
    """SIGKILL (what the OOM killer sends) without an answer is ParseError(reason="worker")
    for the PDF and the reST parser alike, never "malformed" (a verdict on the bytes).

    If this fails, check _answer in parsers/_worker.py (it raises for every parser).
    """
    monkeypatch.setattr(module, "_WORKER", _script(tmp_path, "killed.py", KILLED))
    with pytest.raises(ParseError) as caught:
        parser().parse(data)
    assert caught.value.reason == "worker"
    assert _workers(tmp_path) == []


def test_a_sync_retries_a_rst_file_whose_worker_was_killed(monkeypatch, tmp_path):
    """A reST item whose worker is killed fails the run and is kept for a retry (the checkpoint's
    retry list: sync_knowledge retries ParseError "worker"); the next run, with a worker that
    lives, indexes it though nothing changed upstream.

    If this fails, check TRANSIENT_PARSE_REASONS in application/_sync_state.py and the reason
    RstParser raises for a killed worker.
    """
    scope = ragport.Scope("tenant-1", "kb", "rst-retry")
    store, checkpoints, status = InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore()
    connector = DictConnector({"guide.rst": b"Guide\n=====\n\nParental leave is 16 weeks.\n"})

    def sync() -> ragport.SyncResult:
        return ragport.bootstrap.sync_knowledge(
            connector=connector,
            checkpoints=checkpoints,
            store=store,
            embedder=CountingEmbedder(),
            scope=scope,
            status_store=status,
            parser=RstParser(),
        )

    real = rst_module._WORKER
    monkeypatch.setattr(rst_module, "_WORKER", _script(tmp_path, "killed.py", KILLED))
    first = sync()
    assert (first.upserted, first.failed, first.retrying) == (0, 1, 1)
    assert status.get(scope, "guide.rst").state == "failed"
    monkeypatch.setattr(rst_module, "_WORKER", real)
    second = sync()
    assert (second.upserted, second.failed, second.retrying) == (1, 0, 0)
    assert [r.text for r in store.get_by_source(scope, "guide.rst")]


# --- item 13: the whole process group ends with the parse -----------------------------------


@pytest.mark.parametrize("mode", ["answer", "burn"])
def test_a_grandchild_holding_stdout_cannot_keep_the_parse_alive(monkeypatch, tmp_path, mode):
    """A worker whose own child inherits stdout and sleeps 600 s: when the worker answers and
    exits, the parse returns its answer; when it burns past timeout_s, the parse is
    ParseError(timeout). Either way the grandchild is killed with the worker's process group
    (it used to hold the parse until it exited: 60 s past timeout_s=3).

    If this fails, check start_new_session in _start and the killpg in _end (parsers/_worker.py).
    """
    pidfile = tmp_path / "grandchild.pid"
    monkeypatch.setattr(pdf_module, "_WORKER", _script(tmp_path, "holds.py", HOLDS_STDOUT))
    monkeypatch.setenv("RAGPORT_TEST_PIDFILE", str(pidfile))
    monkeypatch.setenv("RAGPORT_TEST_MODE", mode)
    parser = PdfParser(timeout_s=1, wall_timeout_s=300)
    try:
        if mode == "answer":
            doc = _within(30, lambda: parser.parse(pdf(["hello"])))
            assert doc.pages == ("waited, then answered",)
        else:
            with pytest.raises(ParseError) as caught:
                _within(30, lambda: parser.parse(pdf(["hello"])))
            assert caught.value.reason == "timeout"
        assert _ends(int(pidfile.read_text()))
    finally:
        if pidfile.exists() and _alive(int(pidfile.read_text())):  # never leave it behind
            os.kill(int(pidfile.read_text()), 9)
    assert _workers(tmp_path) == []
