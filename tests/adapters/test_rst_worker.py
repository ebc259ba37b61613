"""RstParser runs docutils in a worker it can kill: timeout_s and abort hold inside
``publish_doctree``, under a memory limit; hostile inputs run in a memory-limited child
(tests/support/hostile.py) whose peak includes the worker's."""

from __future__ import annotations

from hostile import run_limited
from worker_children import worker_children

from ragport.adapters.parsers import RstParser

_TABLE = """
def table(target):
    rule = "=======  ==========  ========"
    rows = [rule, "name     value       note", rule]
    size = sum(len(r) + 1 for r in rows) + len(rule) + 1
    i = 0
    while size + 30 <= target:  # each row is 29 bytes and a newline
        rows.append(f"row{i % 10000:04d}  v{i:09d}  n{i % 997:07d}")
        size += 30
        i += 1
    rows.append(rule)
    return ("\\n".join(rows) + "\\n").encode()
"""


def test_a_megabyte_simple_table_stops_at_the_deadline():
    """A 1 MiB simple table (a minute in publish_doctree) is ParseError(timeout) at timeout_s=2
    of CPU time (on the clock, however long the machine's load makes that).

    If this fails, check that RstParser runs docutils through run_worker, not in process.
    """
    out = run_limited(
        _TABLE
        + """
import time
from worker_children import worker_children
from ragport.adapters.parsers import RstParser
from ragport.domain.errors import ParseError
data = table(1 << 20)
started = time.monotonic()
try:
    RstParser(timeout_s=2).parse(data)
    emit({"error": None})
except ParseError as exc:
    emit({"error": "ParseError", "reason": exc.reason, "size": len(data),
          "seconds": time.monotonic() - started, "left": worker_children("_rst_worker.py")})
""",
        memory_mb=1536,
    )
    assert out.result is not None, out.stderr
    assert out.result["error"] == "ParseError" and out.result["reason"] == "timeout"
    assert (1 << 20) - 64 <= out.result["size"] <= 1 << 20
    assert out.result["left"] == []
    assert out.peak_mb < 400


def test_abort_inside_publish_doctree_stops_the_worker_under_its_memory_limit():
    """An abort 0.5 s into a 1 MiB parse raises AbortedError within ~0.1 s; the worker ran
    under RLIMIT_AS = the parser's memory bound and is gone.

    If this fails, check run_worker's abort poll and the memory_bytes RstParser passes.
    """
    out = run_limited(
        _TABLE
        + """
import time
from pathlib import Path
from worker_children import worker_children
from ragport.adapters.parsers import RstParser, rst
from ragport.domain.errors import AbortedError

class Later:
    def __init__(self):
        self.at = time.monotonic() + 0.5
        self.limits = []
    def is_set(self):
        # The latest reading before the abort: the worker sets its limit first thing, but a
        # poll right after it starts (a loaded machine) may still see the inherited one.
        seen = []
        for child in worker_children("_rst_worker.py"):
            try:
                text = Path(f"/proc/{child.split()[0]}/limits").read_text()
            except OSError:
                continue
            seen += [l.split()[3] for l in text.splitlines() if "address space" in l]
        if seen:
            self.limits = seen
        return time.monotonic() > self.at

data = table(1 << 20)
abort = Later()
started = time.monotonic()
try:
    RstParser().parse(data, abort=abort)
    emit({"error": None})
except AbortedError:
    emit({"error": "AbortedError", "seconds": time.monotonic() - started,
          "limits": abort.limits, "expected": str(rst.worker_memory_bytes(len(data))),
          "left": worker_children("_rst_worker.py")})
""",
        memory_mb=2048,
    )
    assert out.result is not None, out.stderr
    assert out.result["error"] == "AbortedError"
    assert 0.5 <= out.result["seconds"] < 1.5
    assert out.result["limits"] == [out.result["expected"]]
    assert int(out.result["expected"]) < 2048 << 20
    assert out.result["left"] == []
    assert out.peak_mb < 400


def test_a_substitution_bomb_is_refused_by_the_answer_cap():
    """Nested ``replace::`` substitutions turn 700 bytes into 400 kB of text: past 4 x
    max_bytes it is ParseError(too_large), and the host never holds the expanded text.

    If this fails, check max_answer_bytes in RstParser._parse.
    """
    out = run_limited(
        """
from ragport.adapters.parsers import RstParser
from ragport.domain.errors import ParseError
lol = ".. |a0| replace:: " + " ".join(["lol"] * 10)
a1 = ".. |a1| replace:: " + " ".join(["|a0|"] * 10)
a2 = ".. |a2| replace:: " + " ".join(["|a1|"] * 10)
data = "\\n".join([lol, a1, a2, "", "Title", "=====", "", " ".join(["|a2|"] * 100), ""]).encode()
try:
    doc = RstParser(max_bytes=16384).parse(data)
    emit({"error": None, "size": len(data), "text": len(doc.text)})
except ParseError as exc:
    emit({"error": "ParseError", "reason": exc.reason, "size": len(data)})
""",
        memory_mb=1536,
    )
    assert out.result is not None, out.stderr
    assert out.result["size"] < 1000
    assert out.result["error"] == "ParseError" and out.result["reason"] == "too_large"
    assert out.peak_mb < 300


def test_a_small_document_parses_in_the_worker_like_before():
    """Sections, a literal block, a table and an unknown directive come back as Markdown.

    If this fails, check Writer in _rst_worker.py and the answer handling in RstParser._parse.
    """
    doc = RstParser().parse(
        b"Guide\n=====\n\nIntro *text*.\n\nPart\n----\n\n::\n\n    code  kept\n\n"
        b"=====  =====\na      b\n=====  =====\nc      d\n=====  =====\n\n"
        b".. unknown:: kept\n"
    )
    assert doc.metadata == {"title": "Guide"} and doc.markdown
    assert doc.text == (
        "# Guide\n\nIntro text.\n\n## Part\n\n```\ncode  kept\n```\n\na | b\nc | d\n\n"
        "```\n.. unknown:: kept\n```"
    )
    assert worker_children("_rst_worker.py") == []
