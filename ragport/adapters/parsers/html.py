"""HTML on lxml: the main content as Markdown-ish text (headings, lists, tables, code).

lxml quirks handled here: libxml2 silently cuts a tree deeper than 256 levels (2,048 with
``huge_tree``) and only says so in the parser's error log, so the log is read and a deeper
document is refused instead of returning part of it; comments and processing instructions are
removed by the parser; text is decoded by us (strictly) before lxml sees it.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

from ragport.adapters.parsers._common import BaseParser, Deadline, check_abort, failed
from ragport.domain.errors import ParseError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["HtmlParser"]

DROP = frozenset(
    [
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "iframe",
        "object",
        "embed",
        "canvas",
        "nav",
        "header",
        "footer",
        "aside",
        "form",
        "button",
        "select",
        "input",
        "textarea",
        "dialog",
        "head",
        "title",
        "meta",
        "link",
        "base",
    ]
)
# Inline markup whose tags are removed (text and children kept) in C before the Python walk:
# most elements of a real page are links and emphasis, and the walk would only concatenate them.
INLINE = [
    "a",
    "abbr",
    "b",
    "bdi",
    "bdo",
    "cite",
    "code",
    "data",
    "del",
    "dfn",
    "em",
    "font",
    "i",
    "ins",
    "kbd",
    "mark",
    "q",
    "s",
    "samp",
    "small",
    "span",
    "strong",
    "sub",
    "sup",
    "time",
    "u",
    "var",
    "wbr",
    "label",
    "nobr",
    "tt",
    "big",
    "strike",
]
HEADINGS = {f"h{n}": n for n in range(1, 7)}
BLOCKS = frozenset(
    [
        "p",
        "div",
        "section",
        "article",
        "main",
        "blockquote",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "figure",
        "figcaption",
        "address",
        "hr",
        "details",
        "summary",
        "center",
        "caption",
        "body",
        "html",
    ]
)
_PRESCAN = 1024
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.()-]+)""", re.I)
_PARAM_CHARSET = re.compile(r"""charset\s*=\s*["']?([A-Za-z0-9_:.()-]+)""", re.I)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)


class HtmlParser(BaseParser):
    """HTML to text with Markdown structure; ``max_depth=`` (default 512) caps element nesting.

    Content root: the first ``<main>``, else ``[role=main]``, else ``<article>``, else the
    body. Dropped: scripts, styles, templates, embedded content, comments, page chrome (nav,
    header, footer, aside, form, button) and ``hidden`` / ``aria-hidden="true"`` /
    ``display:none`` elements. Headings become ``#`` lines, list items one line each (nested
    ones indented), table rows one line with `` | `` between cells, ``pre`` a fenced block.
    ``<title>`` and ``<html lang>`` go to metadata. Charset: BOM, else the media type's
    ``charset`` parameter, else a ``<meta>`` declaration in the first 1,024 bytes, else UTF-8;
    decoding is strict either way.
    """

    name = "html"
    library = "lxml"
    media_types = ("text/html", "application/xhtml+xml")

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        timeout_s: float = DEFAULT_LIMITS.parse_ms / 1000,
        max_depth: int = DEFAULT_LIMITS.html_depth,
    ) -> None:
        super().__init__(max_bytes=max_bytes, timeout_s=timeout_s)
        self._max_depth = check_limit("html_depth", max_depth)

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        import lxml.etree

        text = _decode(data, media_type)
        if not text.strip():
            return ParsedDocument("", {}, "text/html", markdown=True)
        # Plain etree elements, not lxml.html's: its per-element class lookup cost more than
        # the whole walk below.
        parser = lxml.etree.HTMLParser(
            remove_comments=True,
            remove_pis=True,
            no_network=True,
            huge_tree=True,
            encoding="utf-8",
        )
        try:
            # Bytes we re-encoded plus an explicit encoding: lxml refuses str input that
            # carries an XML encoding declaration, and must not re-guess the charset.
            root = lxml.etree.fromstring(text.encode("utf-8"), parser=parser)
        except (lxml.etree.LxmlError, ValueError) as exc:
            raise failed("lxml", exc, media_type=media_type) from None
        if root is None:
            return ParsedDocument("", {}, "text/html", markdown=True)
        if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
            raise ParseError(
                f"the document nests deeper than {self._max_depth} elements",
                reason="too_deep",
                media_type=media_type,
            )
        deadline.check()
        metadata: dict[str, Any] = {}
        title = root.find(".//title")
        if title is not None:
            value = " ".join(str(title.xpath("string()")).split())
            if value:
                metadata["title"] = value
        lang = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
        if lang and lang.strip():
            metadata["lang"] = lang.strip()
        content = _content_root(root)
        _prune(content)
        deadline.check()
        out = _Walker(self._max_depth, deadline, abort, media_type).walk(content)
        if len(out) > self._max_bytes:
            raise ParseError(
                f"the text is longer than max_bytes={self._max_bytes}",
                reason="too_large",
                media_type=media_type,
            )
        return ParsedDocument(out, metadata, "text/html", markdown=True)


def _decode(data: bytes, media_type: str | None) -> str:
    encoding = None
    for bom, name in _BOMS:
        if data.startswith(bom):
            encoding, data = name, data[len(bom) :]
            break
    if encoding is None and media_type:
        param = _PARAM_CHARSET.search(media_type)
        encoding = param.group(1) if param else None
    if encoding is None:
        meta = _META_CHARSET.search(data[:_PRESCAN])
        if meta is not None:
            encoding = meta.group(1).decode("ascii")
            if encoding.lower().replace("_", "-").startswith("utf-16"):
                encoding = "utf-8"  # a <meta> cannot declare UTF-16 (the HTML standard)
    encoding = encoding or "utf-8"
    try:
        codec = codecs.lookup(encoding)
    except LookupError:
        raise ParseError(
            "the declared charset is not one Python knows",
            reason="encoding",
            media_type=media_type,
        ) from None
    try:
        text = data.decode(codec.name)
    except UnicodeDecodeError as exc:
        raise ParseError(
            f"the bytes are not valid {codec.name} (first bad byte at offset {exc.start})",
            reason="decode",
            media_type=media_type,
        ) from None
    if "\x00" in text:
        raise ParseError("the text holds NUL bytes", reason="nul", media_type=media_type)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _content_root(root: Any) -> Any:
    for path in ("//main", "//*[@role='main']", "//article", "//body"):
        for found in root.xpath(path):
            if _visible(found):
                return found
    return root


def _prune(content: Any) -> None:
    """Drop chrome and hidden elements (tails kept), then unwrap inline tags, in place."""
    import lxml.etree

    lxml.etree.strip_elements(content, *DROP, with_tail=False)
    for element in content.xpath(".//*[@hidden or @aria-hidden or @style]"):
        if not _visible(element):
            _drop(element)
    lxml.etree.strip_tags(content, *INLINE)


def _drop(element: Any) -> None:
    """Remove ``element`` and its subtree, keeping its tail text in place."""
    parent = element.getparent()
    if parent is None:
        return
    tail = element.tail
    if tail:
        previous = element.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(element)


def _visible(element: Any) -> bool:
    if element.get("hidden") is not None:
        return False
    if (element.get("aria-hidden") or "").strip().lower() == "true":
        return False
    style = element.get("style")
    return not (style and _HIDDEN_STYLE.search(style))


class _Walker:
    """An explicit-stack walk (no recursion) that writes lines and blank-line separators."""

    def __init__(
        self, max_depth: int, deadline: Deadline, abort: Abort | None, media_type: str | None
    ):
        self.max_depth = max_depth
        self.deadline = deadline
        self.abort = abort
        self.media_type = media_type
        self.lines: list[str] = []
        self.inline: list[str] = []
        # Open list items: [prefix, indent, prefix already used]
        self.items: list[list[Any]] = []
        self.lists: list[list[Any]] = []  # [ordered, counter]
        self.steps = 0

    def walk(self, top: Any) -> str:
        stack: list[tuple[int, Any, int]] = [(0, top, 0)]  # (phase, element, depth)
        while stack:
            phase, element, depth = stack.pop()
            if phase == 1:
                self.close(element)
                if element.tail:
                    self.inline.append(element.tail)
                continue
            self.steps += 1
            if self.steps % 4096 == 0:
                self.deadline.check()
                check_abort(self.abort)
            if depth > self.max_depth:
                raise ParseError(
                    f"the document nests deeper than {self.max_depth} elements",
                    reason="too_deep",
                    media_type=self.media_type,
                )
            tag = element.tag  # libxml2's HTML parser gives lower-case names
            if not isinstance(tag, str) or tag in DROP:
                if element.tail and element is not top:
                    self.inline.append(element.tail)
                continue
            if tag == "tr":
                self.flush()
                self.table_row(element)
                if element.tail:
                    self.inline.append(element.tail)
                continue
            if tag == "pre":
                self.pre(element)
                if element.tail:
                    self.inline.append(element.tail)
                continue
            self.open(tag, element)
            if len(element) == 0:  # a leaf: no need to come back for it
                if element.text:
                    self.inline.append(element.text)
                self.close(element)
                if element.tail:
                    self.inline.append(element.tail)
                continue
            stack.append((1, element, depth))
            if element.text:
                self.inline.append(element.text)
            for child in reversed(element):
                stack.append((0, child, depth + 1))
        self.flush()
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines)

    def flush(self) -> None:
        text = " ".join("".join(self.inline).split())
        self.inline.clear()
        if not text:
            return
        if self.items:
            item = self.items[-1]
            text = (item[0] if not item[2] else " " * len(item[0])) + text
            item[2] = True
            text = item[1] + text
        self.lines.append(text)

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "" and not self.items:
            self.lines.append("")

    def open(self, tag: str, element: Any) -> None:
        if tag in HEADINGS or tag in BLOCKS:
            self.flush()
            if tag not in ("dt", "dd"):
                self.blank()
            if tag in ("ul", "ol"):
                self.lists.append([tag == "ol", 0])
        elif tag == "li":
            self.flush()
            ordered = bool(self.lists) and self.lists[-1][0]
            if self.lists:
                self.lists[-1][1] += 1
            marker = f"{self.lists[-1][1]}. " if ordered else "- "
            indent = "  " * max(0, len(self.lists) - 1)
            self.items.append([marker, indent, False])
        elif tag in ("td", "th") or tag == "br":
            self.flush()

    def close(self, element: Any) -> None:
        tag = element.tag
        if tag in HEADINGS:
            text = " ".join("".join(self.inline).split())
            self.inline.clear()
            if text:
                self.blank()
                self.lines.append("#" * HEADINGS[tag] + " " + text)
                self.blank()
        elif tag == "li":
            self.flush()
            self.items.pop()
        elif tag in ("td", "th"):
            self.flush()
        elif tag in BLOCKS:
            self.flush()
            if tag in ("ul", "ol") and self.lists:
                self.lists.pop()
            if tag not in ("dt", "dd"):
                self.blank()

    def table_row(self, row: Any) -> None:
        cells = [
            " ".join((cell.text or "" if len(cell) == 0 else "".join(cell.itertext())).split())
            for cell in row
            if cell.tag in ("td", "th")
        ]
        if any(cells):
            prefix = ""
            if self.items:
                prefix = self.items[-1][1] + " " * len(self.items[-1][0])
            self.lines.append(prefix + " | ".join(cells))

    def pre(self, element: Any) -> None:
        self.flush()
        self.blank()
        body = "".join(element.itertext()).strip("\n")
        longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
        fence = "`" * (longest + 1)
        self.lines.extend([fence, *body.split("\n"), fence])
        self.blank()
