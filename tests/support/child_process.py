"""Child processes for the PostgreSQL fault tests: real processes, killed for real.

``Child`` runs ``python -c CODE`` with a line queue on its stdout (one JSON object a line)
and its stderr kept in a log file; ``fault_env`` gives it the database URL (with an
``application_name`` the test can find in ``pg_stat_activity``), schema, scope and source.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["Child", "fault_env"]


def fault_env(url: str, *, app: str, schema: str, scope: Any, source: str) -> dict[str, str]:
    """The environment a fault child reads: FAULT_URL, FAULT_SCHEMA, FAULT_SCOPE, FAULT_SOURCE."""
    named = make_url(url).update_query_dict({"application_name": app})
    return {
        **os.environ,
        "FAULT_URL": named.render_as_string(hide_password=False),
        "FAULT_SCHEMA": schema,
        "FAULT_SCOPE": json.dumps([scope.tenant_id, scope.resource_id, scope.corpus_id]),
        "FAULT_SOURCE": source,
    }


class Child:
    """A ``python -c`` child with a line queue on its stdout and stderr kept in a file."""

    def __init__(self, code: str, args: list[str], env: dict[str, str], log: Path):
        self.log = log
        self._stderr = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def expect(self, timeout: float = 30.0) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"child sent nothing in {timeout}s; stderr:\n{self.stderr()}"
            ) from None
        return json.loads(line)

    def send(self, line: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        self._stderr.flush()
        return self.log.read_text()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._stderr.close()
