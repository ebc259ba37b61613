"""The demo: the bundled corpus (the Markdown, HTML, PDF and DOCX files in this folder, of the
fictional Harbor Lane Logistics) through every guarantee ragport makes, step by step.

- ``run``: the nine steps (``run_demo``), the stores they run in (``open_demo_stores``,
  ``clean_demo``) and the bundled files (``demo_files``);
- ``text``: the fixed texts, ids and questions the steps use;
- ``report``: how each step reads on a terminal and the ``--json`` document;
- ``make_corpus.py``: regenerates the PDF and the DOCX (a script, not imported).

``ragport demo`` (``ragport.cli.demo``) only reads its options, runs it and prints.
"""

from __future__ import annotations

from ragport.demo.report import DemoOut, StepOut, demo_out, step_lines
from ragport.demo.run import (
    DEMO_CORPUS,
    DEMO_QUESTIONS,
    DEMO_SCHEMA,
    DemoPlace,
    DemoSettings,
    DemoStep,
    clean_demo,
    demo_files,
    demo_markdown,
    open_demo_stores,
    run_demo,
)

__all__ = [
    "DEMO_CORPUS",
    "DEMO_QUESTIONS",
    "DEMO_SCHEMA",
    "DemoOut",
    "DemoPlace",
    "DemoSettings",
    "DemoStep",
    "StepOut",
    "clean_demo",
    "demo_files",
    "demo_markdown",
    "demo_out",
    "open_demo_stores",
    "run_demo",
    "step_lines",
]
