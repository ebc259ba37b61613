"""Machine-readable benchmark results: what every ``bench/`` script writes (issue 26).

Each benchmark calls :func:`write_result` once at its end with its headline figures and the
targets bench/RESULTS.md states for it; ``bench/render_results.py`` turns the JSON files into
bench/RESULTS.md, so no figure there is typed by hand.

A result file (``bench/results/<name>.json``, or ``bench/results/quick/<name>.json`` for a
``--quick``-sized run) holds::

    {"name", "bench", "command", "quick", "machine": {...}, "figures": {...},
     "targets": [...], "details": {...}}

A figure is ``{"label", "unit", "value"}`` or ``{"label", "unit", "min", "median", "max",
"n"}`` (from the samples of a repeated measurement); a ratio to a raw baseline also names its
two figures in ``"ratio_of"``. A target is ``{"figure", "op", "bound", "met"}`` with ``op``
``<=`` or ``>=``; ``met`` is computed here from the figure (its median when it has samples),
never passed in, and is ``None`` when the figure was not measured in that run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
QUICK_DIR = RESULTS_DIR / "quick"
OPS = ("<=", ">=")
QUICK_ENV = "RAGPORT_BENCH_QUICK"

_postgres: dict[str, str] = {}


def figure(
    label: str,
    unit: str,
    value: float | None = None,
    *,
    samples: Iterable[float] | None = None,
    ratio_of: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One figure: a single ``value`` or the min/median/max of ``samples``."""
    out: dict[str, Any] = {"label": label, "unit": unit}
    if samples is not None:
        values = [float(v) for v in samples]
        if values:
            out.update(
                min=min(values),
                median=statistics.median(values),
                max=max(values),
                n=len(values),
            )
        else:
            out["value"] = None
    else:
        out["value"] = None if value is None else float(value)
    if ratio_of is not None:
        out["ratio_of"] = list(ratio_of)
    return out


def ratio(label: str, numerator: float | None, denominator: float | None, names: tuple[str, str]):
    """A figure ``numerator / denominator`` (unit ``x``) that names the two figures it divides."""
    value = None
    if numerator is not None and denominator:
        value = numerator / denominator
    return figure(label, "x", value, ratio_of=names)


def headline(fig: Mapping[str, Any]) -> float | None:
    """The number a target is checked against: the median when there are samples."""
    if "median" in fig:
        return float(fig["median"])
    value = fig.get("value")
    return None if value is None else float(value)


def target(figure_name: str, op: str, bound: float) -> dict[str, Any]:
    """A target on one figure; :func:`write_result` computes whether it is met."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}")
    return {"figure": figure_name, "op": op, "bound": float(bound)}


def is_met(value: float | None, op: str, bound: float) -> bool | None:
    if value is None:
        return None
    return value <= bound if op == "<=" else value >= bound


def note_postgres(url: str) -> None:
    """Record the server's PostgreSQL and pgvector versions (call while the server runs)."""
    _postgres.clear()
    _postgres.update(postgres_versions(url))


def postgres_versions(url: str) -> dict[str, str]:
    import psycopg

    conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        server = conn.execute("SHOW server_version").fetchone()
        row = conn.execute(
            "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
            " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'))"
        ).fetchone()
    return {
        "postgresql": str(server[0]).split()[0] if server else "",
        "pgvector": str(row[0]) if row and row[0] else "",
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(HERE), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        dirty = any(line.endswith(".py") for line in status.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out + ("+bench-changes" if dirty else "")


def machine(url: str | None = None) -> dict[str, Any]:
    """Cores, memory, CPU model, Python, PostgreSQL/pgvector, git commit and the UTC date."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "postgresql": None,
        "pgvector": None,
        "commit": _commit(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    versions = postgres_versions(url) if url else dict(_postgres)
    info.update({k: v for k, v in versions.items() if v})
    return info


def _command(argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(HERE.parent))
    except ValueError:
        shown = str(script)
    return " ".join([".venv/bin/python", shown, *args])


def write_result(
    name: str,
    *,
    figures: Mapping[str, Mapping[str, Any]],
    targets: Sequence[Mapping[str, Any]] = (),
    quick: bool = False,
    command: str | None = None,
    details: Mapping[str, Any] | None = None,
    url: str | None = None,
    out_dir: Path | None = None,
) -> Path:
    """Write ``results/<name>.json`` (or ``results/quick/<name>.json``) and return its path.

    ``quick`` is also true when ``run_all.py --quick`` started the script (it sets
    ``RAGPORT_BENCH_QUICK=1``). ``command`` defaults to this process's own command line;
    ``url`` is a PostgreSQL server to read versions from (else the versions
    :func:`note_postgres` recorded, if any).
    """
    quick = quick or os.environ.get(QUICK_ENV) == "1"
    checked = []
    for t in targets:
        fig_name = t["figure"]
        if fig_name not in figures:
            raise KeyError(f"target names an unknown figure: {fig_name}")
        value = headline(figures[fig_name])
        checked.append(
            {
                "figure": fig_name,
                "op": t["op"],
                "bound": float(t["bound"]),
                "value": value,
                "met": is_met(value, t["op"], float(t["bound"])),
            }
        )
    report = {
        "name": name,
        "bench": f"bench/{Path(sys.argv[0]).name}",
        "command": command or _command(None),
        "quick": quick,
        "machine": machine(url),
        "figures": {k: dict(v) for k, v in figures.items()},
        "targets": checked,
        "details": dict(details or {}),
    }
    directory = out_dir or (QUICK_DIR if quick else RESULTS_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, default=_jsonable) + "\n")
    print(f"results: {path}", file=sys.stderr)
    return path


def _jsonable(obj: object) -> object:
    if hasattr(obj, "item"):
        return obj.item()  # numpy scalars
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path | set | frozenset | tuple):
        return str(obj) if isinstance(obj, Path) else list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
