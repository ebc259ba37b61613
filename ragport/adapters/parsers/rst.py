"""reStructuredText on docutils, as Markdown: sections to ``#`` headings, literal blocks kept.

docutils is a document *processor*: by default it reads config files, includes files, passes
raw HTML through and prints warnings. Here it only parses: no config files, no file inclusion,
no raw directive, nothing printed, never halts. A directive it does not know becomes a
``system_message`` holding the directive's source; that source is kept as a literal block, so
the text survives and nothing runs.
"""

from __future__ import annotations

import io
from typing import Any

from ragport.adapters.parsers._common import (
    BaseParser,
    Deadline,
    check_abort,
    decode_utf8,
    failed,
    normalise_newlines,
)
from ragport.domain.errors import ParseError
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["RstParser"]

MAX_DEPTH = 256
SETTINGS = {
    "_disable_config": True,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "report_level": 5,  # keep every system message out of the warning stream
    "halt_level": 5,  # never stop on a problem: we keep what docutils could read
    "exit_status_level": 5,
    "warning_stream": False,
    "doctitle_xform": False,  # a lone top section stays a section (and a heading)
    "docinfo_xform": False,
    "sectsubtitle_xform": False,
    "input_encoding": "unicode",
    "traceback": True,
    "syntax_highlight": "none",
}


class RstParser(BaseParser):
    """reStructuredText as Markdown-ish text; ``title`` from the first section title."""

    name = "rst"
    library = "docutils"
    media_types = ("text/x-rst", "text/prs.fallenstein.rst")

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        text = normalise_newlines(decode_utf8(data, media_type=media_type))
        if "\x00" in text:
            raise ParseError("the text holds NUL bytes", reason="nul", media_type=media_type)
        try:
            from docutils.core import publish_doctree
        except ImportError:  # pragma: no cover - part of ragport[rst]
            raise ParseError(
                "reStructuredText needs docutils: install ragport[rst]",
                reason="dependency",
                media_type=media_type,
            ) from None
        try:
            tree = publish_doctree(
                text,
                settings_overrides={**SETTINGS, "warning_stream": io.StringIO()},
            )
        except Exception as exc:
            raise failed("docutils", exc, media_type=media_type) from None
        deadline.check()
        check_abort(abort)
        writer = _Writer(deadline, abort, media_type)
        writer.node(tree, 0, 0)
        metadata = {"title": writer.title} if writer.title else {}
        return ParsedDocument(writer.text(), metadata, "text/x-rst", markdown=True)


class _Writer:
    def __init__(self, deadline: Deadline, abort: Abort | None, media_type: str | None) -> None:
        from docutils import nodes

        self.nodes = nodes
        self.deadline = deadline
        self.abort = abort
        self.media_type = media_type
        self.blocks: list[str] = []
        self.title: str | None = None
        self.steps = 0

    def text(self) -> str:
        return "\n\n".join(b for b in self.blocks if b.strip())

    def node(self, node: Any, section: int, depth: int) -> None:
        nodes = self.nodes
        self.steps += 1
        if self.steps % 1024 == 0:
            self.deadline.check()
            check_abort(self.abort)
        if depth > MAX_DEPTH:
            raise ParseError(
                f"the document nests deeper than {MAX_DEPTH}",
                reason="too_deep",
                media_type=self.media_type,
            )
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
