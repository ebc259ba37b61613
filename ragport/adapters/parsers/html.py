"""HTML on lxml: the main content as Markdown-ish text (headings, lists, tables, code).

lxml quirks handled here: libxml2 silently cuts a tree deeper than 256 levels (2,048 with
``huge_tree``) and only says so in the parser's error log, so the log is read and a deeper
document is refused instead of returning part of it; comments and processing instructions are
removed by the parser; text is decoded by us (strictly) before lxml sees it.
"""

from __future__ import annotations

import codecs
import re
from itertools import repeat
from typing import Any

from ragport.adapters.parsers._common import (
    Deadline,
    EncodedTextParser,
    check_abort,
    decode_text,
    failed,
)
from ragport.domain.errors import ParseError
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, Limits, check_limit
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
_STYLE_ATTR = re.compile(rb"style\s*=")


class HtmlParser(EncodedTextParser):
    """HTML to text with Markdown structure; ``max_depth=`` (default 512) caps element nesting.

    Content root: the first ``<main>``, else ``[role=main]``, else ``<article>``, else the
    body. Dropped: scripts, styles, templates, embedded content, comments, page chrome (nav,
    header, footer, aside, form, button) and ``hidden`` / ``aria-hidden="true"`` /
    ``display:none`` elements. Headings become ``#`` lines, list items one line each (nested
    ones indented), table rows one line with `` | `` between cells, ``pre`` a fenced block.
    ``<title>`` and ``<html lang>`` go to metadata. Charset: BOM, else the media type's
    ``charset`` parameter, else a ``<meta>`` declaration in the first 1,024 bytes, else
    ``encoding=`` (``"utf-8"`` by default; ``"auto"``: UTF-8, else charset-normalizer's guess;
    or a codec name, e.g. ``"cp1252"``, the HTML standard's fallback for legacy pages): a page
    that declares its charset is read with it whatever ``encoding`` says. Decoding is strict
    either way; an undeclared page read with another encoding than UTF-8 records it in
    ``metadata["encoding"]``.
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
        ceilings: Ceilings = DEFAULT_CEILINGS,
        encoding: str = "utf-8",
        wall_timeout_s: float = DEFAULT_LIMITS.parse_wall_ms / 1000,
    ) -> None:
        super().__init__(
            max_bytes=max_bytes,
            timeout_s=timeout_s,
            wall_timeout_s=wall_timeout_s,
            ceilings=ceilings,
            encoding=encoding,
        )
        self._max_depth = check_limit("html_depth", max_depth)

    @classmethod
    def limit_options(cls, limits: Limits) -> dict[str, Any]:
        return {**super().limit_options(limits), "max_depth": limits.html_depth}

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        import lxml.etree

        text, undeclared = _decode(data, media_type, self.encoding)
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
        if undeclared is not None and self.encoding != "utf-8":
            metadata["encoding"] = undeclared
        title = root.find(".//title")
        if title is not None:
            value = " ".join(str(title.xpath("string()")).split())
            if value:
                metadata["title"] = value
        lang = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
        if lang and lang.strip():
            metadata["lang"] = lang.strip()
        # The page's ASCII, lower-cased (other characters dropped, which can only add matches):
        # enough to tell which attribute names it ever spells.
        names = text.encode("ascii", "ignore").lower()
        content = _content_root(root, names)
        _prune(content, names, deadline, abort)
        deadline.check()
        out = _Walker(self._max_depth, deadline, abort, media_type).walk(content)
        if len(out) > self._max_bytes:
            raise ParseError(
                f"the text is longer than max_bytes={self._max_bytes}",
                reason="too_large",
                media_type=media_type,
            )
        return ParsedDocument(out, metadata, "text/html", markdown=True)


def _decode(data: bytes, media_type: str | None, fallback: str) -> tuple[str, str | None]:
    """The page's text, and the codec ``fallback`` chose when the page declares no charset
    (``None`` when it declares one)."""
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
    if encoding is None:
        text, used = decode_text(data, encoding=fallback, media_type=media_type)
        if "\x00" in text:
            raise ParseError("the text holds NUL bytes", reason="nul", media_type=media_type)
        return text.replace("\r\n", "\n").replace("\r", "\n"), used
    codec = _text_codec(encoding)
    if codec is None:
        raise ParseError(
            "the declared charset is not a text encoding Python knows",
            reason="encoding",
            media_type=media_type,
        )
    try:
        text = data.decode(codec.name)
    except UnicodeError as exc:  # punycode and idna raise a bare UnicodeError
        where = f" (first bad byte at offset {exc.start})" if hasattr(exc, "start") else ""
        raise ParseError(
            f"the bytes are not valid {codec.name}{where}",
            reason="decode",
            media_type=media_type,
        ) from None
    if "\x00" in text:
        raise ParseError("the text holds NUL bytes", reason="nul", media_type=media_type)
    return text.replace("\r\n", "\n").replace("\r", "\n"), None


def _text_codec(name: str) -> codecs.CodecInfo | None:
    """The codec for a declared charset, or None if it is unknown or not a text encoding.

    ``codecs.lookup`` also knows bytes-to-bytes and str-to-str codecs (``base64``, ``zip``,
    ``rot13``...), which ``bytes.decode`` refuses with a ``LookupError``, and ``undefined``,
    which refuses everything: a page that declares one is treated as an unknown charset.
    """
    try:
        codec = codecs.lookup(name)
    except LookupError:
        return None
    if not getattr(codec, "_is_text_encoding", True) or codec.name == "undefined":
        return None
    return codec


def _content_root(root: Any, names: bytes) -> Any:
    """The first visible ``<main>``, ``[role=main]``, ``<article>``, ``<body>``, else ``root``."""
    for tag in ("main", "role", "article", "body"):
        if tag == "role":
            # An attribute name is never escaped, so a page that never spells it has none;
            # the XPath scan of the whole tree is skipped then.
            found = root.xpath("//*[@role='main']") if b"role" in names else ()
        else:
            found = root.iter(tag)  # document order, as //tag
        for element in found:
            if _visible(element):
                return element
    return root


# (id(node), is_text) -> (node, is_text, pieces): see _drop
_Moved = dict[tuple[int, bool], tuple[Any, bool, list[str]]]


def _prune(content: Any, names: bytes, deadline: Deadline, abort: Abort | None) -> None:
    """Drop chrome and hidden elements (tails kept), then unwrap inline tags, in place."""
    import lxml.etree

    lxml.etree.strip_elements(content, *DROP, with_tail=False)
    # Only ``hidden``, ``aria-hidden`` or a non-empty ``style`` hide an element, and attribute
    # names are never escaped: a page that never spells them skips the scan. A Python pass
    # over the elements, not XPath: libxml2 merges a union (and the parents of an attribute
    # node-set) with a quadratic duplicate scan (18,000 elements carrying all three took
    # 260 s), and attribute results cost a smart string each.
    hidden: list[Any] = []
    if b"hidden" in names or _STYLE_ATTR.search(names):
        for n, element in enumerate(content.iter(lxml.etree.Element)):
            if n % 4096 == 0:
                deadline.check()
                check_abort(abort)
            # ``attrib`` first: most elements have none, and it is the cheapest test.
            if element.attrib and element is not content and not _visible(element):
                hidden.append(element)
    # Tails of dropped elements are collected per receiving node and joined once at the end:
    # appending each to the node's text in turn re-read and re-wrote a growing string,
    # quadratic in a run of hidden siblings.
    moved: _Moved = {}
    for n, element in enumerate(hidden):
        if n % 4096 == 4095:
            deadline.check()
            check_abort(abort)
        _drop(element, moved)
    for node, is_text, pieces in moved.values():
        if is_text:
            node.text = "".join(pieces)
        else:
            node.tail = "".join(pieces)
    lxml.etree.strip_tags(content, *INLINE)


def _drop(element: Any, moved: _Moved) -> None:
    """Remove ``element`` and its subtree; its tail is owed to the node before it.

    ``moved`` maps ``(id(node), is_text)`` to the node, whether its ``text`` (a parent) or
    its ``tail`` (the previous sibling) receives, and the pieces it will be set to. Elements
    may come in any order: an element whose own tail is still owed pieces (a later sibling
    dropped first) hands them on with its tail; pieces owed to a node in a dropped subtree
    land there, harmlessly. ``moved`` holds every node it names, so no ``id`` is reused.
    """
    parent = element.getparent()
    if parent is None:
        return
    own = moved.pop((id(element), False), None)
    tail = "".join(own[2]) if own is not None else element.tail
    if tail:
        previous = element.getprevious()
        node, is_text = (parent, True) if previous is None else (previous, False)
        entry = moved.get((id(node), is_text))
        if entry is None:
            entry = (node, is_text, [(node.text if is_text else node.tail) or ""])
            moved[(id(node), is_text)] = entry
        entry[2].append(tail)
    parent.remove(element)


def _visible(element: Any) -> bool:
    if element.get("hidden") is not None:
        return False
    if (element.get("aria-hidden") or "").strip().lower() == "true":
        return False
    style = element.get("style")
    return not (style and _HIDDEN_STYLE.search(style))


# What the walk does at an element's start and end (see _Walker.walk); other tags only add
# their text.
_BLOCK, _TERM, _LIST, _HEADING, _ITEM, _CELL, _BREAK, _ROW, _PRE = range(1, 10)
KINDS: dict[str, int] = {tag: _BLOCK for tag in BLOCKS}
KINDS.update(dict.fromkeys(("dt", "dd"), _TERM))
KINDS.update(dict.fromkeys(("ul", "ol"), _LIST))
KINDS.update(dict.fromkeys(HEADINGS, _HEADING))
KINDS.update({"li": _ITEM, "td": _CELL, "th": _CELL, "br": _BREAK, "tr": _ROW, "pre": _PRE})


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

    # Allow-listed function shape (pyproject [tool.ruff.lint]): one streaming walk keeps its state in locals; splitting it would scatter the state.
    def walk(self, top: Any) -> str:  # noqa: C901, PLR0915
        # The hot loop of the parser: state in locals, one dict lookup per element, and an
        # element with children is revisited after them to close it.
        lines, inline, items, lists = self.lines, self.inline, self.items, self.lists
        add, flush, blank, close = inline.append, self.flush, self.blank, self.close
        kinds, max_depth = KINDS, self.max_depth
        # (element, depth) to open it; (element, -1 - kind) to close it after its children
        stack: list[tuple[Any, int]] = [(top, 0)]
        push, pop, extend = stack.append, stack.pop, stack.extend
        steps = 0
        while stack:
            element, depth = pop()
            if depth < 0:
                if depth != -1:
                    close(element, -1 - depth)
                tail = element.tail
                if tail:
                    add(tail)
                continue
            steps += 1
            if steps % 4096 == 0:
                self.deadline.check()
                check_abort(self.abort)
            if depth > max_depth:
                raise ParseError(
                    f"the document nests deeper than {max_depth} elements",
                    reason="too_deep",
                    media_type=self.media_type,
                )
            tag = element.tag  # libxml2's HTML parser gives lower-case names
            if not isinstance(tag, str) or tag in DROP:
                if element is not top:
                    tail = element.tail
                    if tail:
                        add(tail)
                continue
            kind = kinds.get(tag, 0)
            if kind in (_ROW, _PRE):
                if kind == _ROW:
                    flush()
                    self.table_row(element)
                else:
                    self.pre(element)
                tail = element.tail
                if tail:
                    add(tail)
                continue
            if kind:
                flush()
                if kind in (_BLOCK, _HEADING):
                    blank()
                elif kind == _LIST:
                    blank()
                    lists.append([tag == "ol", 0])
                elif kind == _ITEM:
                    ordered = bool(lists) and lists[-1][0]
                    if lists:
                        lists[-1][1] += 1
                    marker = f"{lists[-1][1]}. " if ordered else "- "
                    items.append([marker, "  " * max(0, len(lists) - 1), False])
            text = element.text
            children = element[::-1]  # a slice costs lxml less than reversed() or len()
            if not children:  # a leaf: no need to come back for it
                if text:
                    add(text)
                if kind:
                    close(element, kind)
                tail = element.tail
                if tail:
                    add(tail)
                continue
            push((element, -1 - kind))
            if text:
                add(text)
            extend(zip(children, repeat(depth + 1)))
        flush()
        while lines and lines[-1] == "":
            lines.pop()
        return "\n".join(lines)

    def flush(self) -> None:
        inline = self.inline
        if not inline:
            return
        text = " ".join("".join(inline).split())
        inline.clear()
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

    def close(self, element: Any, kind: int) -> None:
        if kind == _HEADING:
            text = " ".join("".join(self.inline).split())
            self.inline.clear()
            if text:
                self.blank()
                self.lines.append("#" * HEADINGS[element.tag] + " " + text)
                self.blank()
        elif kind == _ITEM:
            self.flush()
            self.items.pop()
        elif kind == _CELL:
            self.flush()
        elif kind in (_BLOCK, _TERM, _LIST):
            self.flush()
            if kind == _LIST and self.lists:
                self.lists.pop()
            if kind != _TERM:
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
