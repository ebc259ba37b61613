"""The reStructuredText conversion that runs in a worker process (docutils cannot be stopped).

``publish_doctree`` is one library call that can run for a minute on a megabyte of input
(a simple table, many sections) and never looks at a deadline, so ``RstParser`` runs it here,
through ``_worker.run_worker`` (``python -I``, under ``RLIMIT_AS``), where it can be killed.
The child imports only the standard library and docutils (not ragport). It reads one JSON
line of settings (``docutils`` overrides, ``max_depth``) then the document as UTF-8 from
stdin, and writes one JSON object to stdout: ``{"text": ..., "title": ...}`` or
``{"error": reason, "detail": ...}`` where ``detail`` is a number or an exception type name,
never document text. A refusal is a ``BaseException`` so no ``except Exception`` inside
docutils can swallow it.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any

__all__ = ["Writer", "convert", "main"]


class Refusal(BaseException):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def convert(text: str, *, settings: dict[str, Any], max_depth: int) -> tuple[str, str | None]:
    """The Markdown-ish text and the title of one reST document."""
    try:
        from docutils.core import publish_doctree
    except ImportError:
        raise Refusal("dependency") from None
    try:
        tree = publish_doctree(
            text, settings_overrides={**settings, "warning_stream": io.StringIO()}
        )
    except Exception as exc:
        raise Refusal("malformed", type(exc).__name__) from None
    writer = Writer(max_depth)
    writer.node(tree, 0, 0)
    return writer.text(), writer.title


class Writer:
    """The doctree as Markdown-ish blocks; ``title`` is the first section title."""

    def __init__(self, max_depth: int) -> None:
        from docutils import nodes

        self.nodes = nodes
        self.max_depth = max_depth
        self.blocks: list[str] = []
        self.title: str | None = None

    def text(self) -> str:
        return "\n\n".join(b for b in self.blocks if b.strip())

    # Allow-listed function shape (pyproject [tool.ruff.lint]): one branch per docutils node type; a dispatch table would read worse.
    def node(self, node: Any, section: int, depth: int) -> None:  # noqa: C901
        nodes = self.nodes
        if depth > self.max_depth:
            raise Refusal("too_deep", str(self.max_depth))
        if isinstance(node, (nodes.comment, nodes.substitution_definition, nodes.target)):
            return
        if isinstance(node, nodes.system_message):
            # An unknown or disabled directive: keep its source text, drop the complaint.
            for child in node.findall(nodes.literal_block):
                self.literal(child.astext())
            return
        if isinstance(node, nodes.section):
            for child in node.children:
                self.node(child, section + 1, depth + 1)
            return
        if isinstance(node, nodes.title):
            title = " ".join(node.astext().split())
            if title:
                self.title = self.title or title
                self.blocks.append("#" * min(6, max(1, section)) + " " + title)
            return
        if isinstance(node, (nodes.literal_block, nodes.doctest_block)):
            self.literal(node.astext())
            return
        if isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
            ordered = isinstance(node, nodes.enumerated_list)
            lines = []
            for n, item in enumerate(node.children, start=1):
                marker = f"{n}." if ordered else "-"
                lines.append(f"{marker} {' '.join(item.astext().split())}")
            self.blocks.append("\n".join(lines))
            return
        if isinstance(node, nodes.table):
            rows = [
                " | ".join(" ".join(entry.astext().split()) for entry in row.children)
                for row in node.findall(nodes.row)
            ]
            self.blocks.append("\n".join(rows))
            return
        if isinstance(node, nodes.TextElement):
            text = " ".join(node.astext().split())
            if text:
                self.blocks.append(text)
            return
        for child in node.children:
            if isinstance(child, nodes.Text):
                text = " ".join(child.astext().split())
                if text:
                    self.blocks.append(text)
            else:
                self.node(child, section, depth + 1)

    def literal(self, body: str) -> None:
        body = body.strip("\n")
        longest = max((len(run) for run in body.split() if set(run) == {"`"}), default=2)
        fence = "`" * max(3, longest + 1)
        self.blocks.append(f"{fence}\n{body}\n{fence}")


def main() -> int:
    """Read settings and the document from stdin, write one JSON answer to stdout."""
    settings = json.loads(sys.stdin.buffer.readline())
    data = sys.stdin.buffer.read()
    answer: dict[str, Any]
    try:
        text, title = convert(
            data.decode("utf-8"),
            settings=dict(settings["docutils"]),
            max_depth=int(settings["max_depth"]),
        )
        answer = {"text": text, "title": title}
    except Refusal as refusal:
        answer = {"error": refusal.reason, "detail": refusal.detail}
    except MemoryError:
        answer = {"error": "memory", "detail": ""}
    except RecursionError:
        answer = {"error": "malformed", "detail": "RecursionError"}
    except Exception as exc:  # the parent turns this into ParseError(reason="malformed")
        answer = {"error": "malformed", "detail": type(exc).__name__}
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
