"""``ragport demo``: the bundled corpus through every guarantee, printed step by step.

The demo lives in ``ragport.demo`` (its steps, texts, files and how they read); this module
reads the options, runs it and prints each step as it finishes, or with ``--json`` one JSON
document at the end. ``--clean`` removes the demo's data.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from ragport.bootstrap import build_embedder
from ragport.cli.config import _config, _store_url
from ragport.cli.options import Parents, command
from ragport.cli.output import EXIT_OK, _print_json
from ragport.demo import (
    DEMO_CORPUS,
    DEMO_QUESTIONS,
    DemoSettings,
    DemoStep,
    clean_demo,
    demo_out,
    open_demo_stores,
    run_demo,
    step_lines,
)
from ragport.demo.report import DemoOut as DemoOut
from ragport.demo.report import StepOut as StepOut
from ragport.domain.errors import ValidationError
from ragport.domain.limits import check_limit

__all__ = ["DEMO_QUERIES", "DemoOut", "StepOut"]

DEMO_QUERIES = DEMO_QUESTIONS


def _print_step(step: DemoStep) -> None:
    print()
    for line in step_lines(step):
        print(line)


def _demo(args: argparse.Namespace) -> int:
    url = _store_url(args)
    if args.clean:
        place, found = clean_demo(url)
        if place.kind == "memory":
            print("the in-memory store keeps nothing: nothing to remove")
        else:
            print(f"{place.description}: {'dropped' if found else 'nothing to remove'}")
        return EXIT_OK
    check_limit("top_k", args.top_k)
    questions = tuple(args.query or DEMO_QUESTIONS)
    if any(not q.strip() for q in questions):
        raise ValidationError("a --query is empty", field="query")
    embedder = build_embedder(args.embedder or _config(args).embedder)
    settings = DemoSettings(
        tenant=args.tenant or "local", resource=args.resource or "default",
        questions=questions, top_k=args.top_k, size=args.size, overlap=args.overlap,
    )  # fmt: skip
    started = time.perf_counter()
    with open_demo_stores(url) as (stores, checkpoints, place):
        if not args.json:
            print(
                f"ragport demo: {place.description}, embedder {embedder.id}, corpus {DEMO_CORPUS}"
            )
        steps = run_demo(
            stores=stores, checkpoints=checkpoints, place=place, embedder=embedder,
            settings=settings, on_step=None if args.json else _print_step,
        )  # fmt: skip
    seconds = round(time.perf_counter() - started, 3)
    if args.json:
        _print_json(demo_out(place, embedder.id, steps, seconds))
    else:
        print(f"\ndone: {len(steps)} steps in {seconds:.1f} s")
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``demo`` on ``sub``."""
    demo = command(sub, "demo", "run the bundled corpus through every guarantee, step by step",
                   ["ragport demo", "ragport demo --store memory:// --embedder hash --json",
                    "ragport demo --clean"], [parents.embed, parents.json_out])  # fmt: skip
    demo.add_argument(
        "--store",
        help="memory://, postgresql://... or embedded (default: RAGPORT_STORE, ragport.toml, "
        "else the embedded server); the demo writes only to schema ragport_demo, emptied first",
    )
    demo.add_argument("--tenant", help="tenant id (default: ragport.toml, else local)")
    demo.add_argument("--resource", help="resource id (default: ragport.toml, else default)")
    demo.add_argument("--query", action="append", help="a question to ask in step 2 (repeatable)")
    demo.add_argument("--top-k", type=int, default=3, help="hits per question")
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40, help="chunk overlap in characters")
    demo.add_argument("--clean", action="store_true", help="remove the demo's data and exit")
    demo.set_defaults(func=_demo)
