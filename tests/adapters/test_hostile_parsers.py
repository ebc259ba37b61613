"""Hostile parser input (issue 24): bombs within the caps, stray exceptions, odd charsets.

Every bomb runs in a child under a memory limit (tests/support/hostile.py) and must end in a
typed outcome, in time and in little memory.
"""

from __future__ import annotations

import builtins
import codecs
import encodings
import encodings.aliases
import io
import pkgutil
import textwrap
import zipfile
import zlib
from typing import Any

import pytest
from hostile import run_limited

from ragport.adapters.parsers import DocxParser, HtmlParser
from ragport.adapters.parsers._common import BaseParser, Deadline
from ragport.domain.errors import (
    AbortedError,
    ParseError,
    RagportError,
    ValidationError,
)
from ragport.ports.documents import ParsedDocument

CANARY = "QX7-CANARY-do-not-echo"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"

# --- helpers shared with the children (they import this module's source as text) ------------

DOCX_HELPERS = '''
import io, struct, zipfile, zlib

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"

def docx_parts():
    """The parts of a fresh python-docx document, by name."""
    import docx
    buffer = io.BytesIO()
    docx.Document().save(buffer)
    with zipfile.ZipFile(buffer) as archive:
        return {name: archive.read(name) for name in archive.namelist()}

def body_xml(body):
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'<w:document xmlns:w="{W}"><w:body>{body}</w:body></w:document>'
    ).encode()

def zip_bytes(entries):
    """A zip from (name, stored_bytes, method, stated_size, crc) entries, sizes as given."""
    out, central = io.BytesIO(), []
    for name, payload, method, size, crc in entries:
        offset = out.tell()
        raw = name.encode()
        out.write(struct.pack("<4s5H3L2H", b"PK\\x03\\x04", 20, 0, method, 0, 0, crc,
                              len(payload), size, len(raw), 0))
        out.write(raw)
        out.write(payload)
        central.append(struct.pack("<4s6H3L5H2L", b"PK\\x01\\x02", 20, 20, 0, method, 0, 0,
                                   crc, len(payload), size, len(raw), 0, 0, 0, 0, 0, offset)
                       + raw)
    start = out.tell()
    for record in central:
        out.write(record)
    out.write(struct.pack("<4s4H2LH", b"PK\\x05\\x06", 0, 0, len(central), len(central),
                          out.tell() - start, start, 0))
    return out.getvalue()

def deflated(data):
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()

def docx_with(document_xml):
    """A real docx whose word/document.xml is ``document_xml`` (honest sizes)."""
    parts = docx_parts()
    parts["word/document.xml"] = document_xml
    return zip_bytes([(name, deflated(data), 8, len(data), zlib.crc32(data))
                      for name, data in parts.items()])

def tc(text="", span=None, vmerge=None):
    props = ""
    if span is not None:
        props += f'<w:gridSpan w:val="{span}"/>'
    if vmerge is not None:
        props += "<w:vMerge/>" if vmerge == "continue" else f'<w:vMerge w:val="{vmerge}"/>'
    tcpr = f"<w:tcPr>{props}</w:tcPr>" if props else ""
    run = f"<w:r><w:t>{text}</w:t></w:r>" if text else ""
    return f"<w:tc>{tcpr}<w:p>{run}</w:p></w:tc>"

def table(rows):
    return "<w:tbl>" + "".join("<w:tr>" + "".join(r) + "</w:tr>" for r in rows) + "</w:tbl>"

def outcome(parser, data, **kwargs):
    from ragport.domain.errors import ParseError
    try:
        doc = parser.parse(data, **kwargs)
    except ParseError as exc:
        return {"error": "ParseError", "reason": exc.reason}
    except Exception as exc:
        return {"error": type(exc).__name__}
    return {"chars": len(doc.text), "text": doc.text[:200]}
'''
_helpers: dict[str, Any] = {}
exec(DOCX_HELPERS, _helpers)
docx_with = _helpers["docx_with"]
docx_parts = _helpers["docx_parts"]
body_xml = _helpers["body_xml"]
zip_bytes = _helpers["zip_bytes"]
deflated = _helpers["deflated"]
tc = _helpers["tc"]
table = _helpers["table"]


# --- item 7: every failure of a parser is a typed ParseError -----------------------------------


class _Raising(BaseParser):
    name = "raising"

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Any
    ) -> ParsedDocument:
        raise self.exc


def _builtin_exceptions() -> list[BaseException]:
    found: list[BaseException] = []
    for value in vars(builtins).values():
        if not (isinstance(value, type) and issubclass(value, Exception)):
            continue
        for args in ((CANARY,), ()):
            try:
                found.append(value(*args))
                break
            except TypeError:
                continue
    found += [
        UnicodeDecodeError("utf-8", CANARY.encode(), 0, 1, CANARY),
        ExceptionGroup(CANARY, [ValueError(CANARY)]),
    ]
    return found


BUILTIN_EXCEPTIONS = _builtin_exceptions()


def test_the_builtin_exception_list_is_complete_enough():
    """The parametrisation below covers the builtin exception types that matter most."""
    names = {type(exc).__name__ for exc in BUILTIN_EXCEPTIONS}
    assert {"RecursionError", "MemoryError", "KeyError", "TypeError", "ValueError"} <= names
    assert {"IndexError", "UnicodeDecodeError", "OSError", "AssertionError"} <= names
    assert len(names) > 50


@pytest.mark.parametrize("exc", BUILTIN_EXCEPTIONS, ids=lambda exc: type(exc).__name__)
def test_every_builtin_exception_from_a_parser_becomes_a_parse_error(exc):
    """A builtin exception out of `_parse` is ParseError(reason="malformed"), no text chained.

    If this fails, check BaseParser.parse in ragport/adapters/parsers/_common.py.
    """
    with pytest.raises(ParseError) as info:
        _Raising(exc).parse(b"some text", media_type="text/plain")
    error = info.value
    assert error.reason == "malformed" and error.media_type == "text/plain"
    assert error.__cause__ is None and error.__suppress_context__
    assert CANARY not in str(error) and CANARY not in repr(error.args)


@pytest.mark.parametrize(
    "exc",
    [
        AbortedError("stop"),
        ValidationError("bad", field="x"),
        ParseError("cap", reason="timeout"),
        RagportError("ours"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_ragport_errors_from_a_parser_pass_unchanged(exc):
    """AbortedError and ragport's own errors leave parse as they were raised."""
    with pytest.raises(type(exc)) as info:
        _Raising(exc).parse(b"some text")
    assert info.value is exc


def test_base_exceptions_that_are_not_errors_are_not_swallowed():
    """KeyboardInterrupt and SystemExit are not parse failures: they pass through."""
    for exc in (KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(exc)):
            _Raising(exc).parse(b"some text")


def test_deeply_nested_front_matter_is_a_parse_error():
    """Front matter nested ~900 deep (PyYAML recursion) is ParseError, in a child.

    If this fails, check _front_matter in text.py and BaseParser.parse.
    """
    out = run_limited(
        """
        from ragport.adapters.parsers import MarkdownParser
        from ragport.domain.errors import ParseError
        results = []
        for depth in (900, 2_000):
            for opener in ("[", "{a: ", "- "):
                if opener == "- ":
                    front = "".join("  " * i + "-\\n" for i in range(depth)) + "  " * depth + "x"
                else:
                    front = "a: " + opener * depth
                data = ("---\\n" + front + "\\n---\\n# Title\\ntext\\n").encode()
                try:
                    MarkdownParser(max_bytes=8_000_000, timeout_s=20).parse(data)
                    results.append("parsed")
                except ParseError as exc:
                    results.append(exc.reason)
                except BaseException as exc:
                    results.append(type(exc).__name__)
        emit(results)
        """,
        memory_mb=1024,
        timeout_s=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.result == ["front_matter"] * 6
    assert out.peak_mb < 400


# --- item 6: the DOCX zip bomb that lies about its size ---------------------------------------


def test_docx_part_that_inflates_past_its_stated_size_is_a_bomb():
    """A part stating 1,000 bytes that inflates to 256 MiB is refused, in little memory.

    If this fails, check DocxParser._check_archive: it must count real inflated bytes.
    """
    out = run_limited(
        DOCX_HELPERS
        + textwrap.dedent(
            """
        from ragport.adapters.parsers import DocxParser
        parts = docx_parts()
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        zeros = bytes(1 << 20)
        bomb = b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()
        entries = [(n, deflated(d), 8, len(d), zlib.crc32(d)) for n, d in parts.items()
                   if n != "word/document.xml"]
        entries.append(("word/document.xml", bomb, 8, 1000, zlib.crc32(bytes(1000))))
        data = zip_bytes(entries)
        emit({"size": len(data), **outcome(DocxParser(timeout_s=10), data)})
        """
        ),
        memory_mb=1024,
        timeout_s=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.result["size"] < 1_000_000
    assert out.result["error"] == "ParseError" and out.result["reason"] == "bomb"
    assert out.peak_mb < 200


def test_docx_small_size_lie_and_foreign_compression_are_refused():
    """A part inflating past its stated size is a bomb; bzip2 / lzma parts are malformed.

    If this fails, check DocxParser._check_archive.
    """
    parts = docx_parts()
    parts["word/document.xml"] = body_xml("<w:p><w:r><w:t>Hello</w:t></w:r></w:p>")
    entries = [
        (name, deflated(data), 8, len(data), zlib.crc32(data)) for name, data in parts.items()
    ]
    assert DocxParser().parse(zip_bytes(entries)).text == "Hello"
    lie = [e if e[0] != "word/document.xml" else (e[0], e[1], 8, 10, e[4]) for e in entries]
    with pytest.raises(ParseError) as info:
        DocxParser().parse(zip_bytes(lie))
    assert info.value.reason == "bomb"
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", method) as archive:
            for name, data in parts.items():
                archive.writestr(name, data)
        with pytest.raises(ParseError) as info:
            DocxParser().parse(buffer.getvalue())
        assert info.value.reason == "malformed"


def test_docx_honest_archive_with_text_still_parses():
    """A docx written by our own zip helper (honest sizes) parses to its text."""
    data = docx_with(body_xml("<w:p><w:r><w:t>Hello there</w:t></w:r></w:p>"))
    assert DocxParser().parse(data).text == "Hello there"


# --- item 8: DOCX table bombs within the caps --------------------------------------------------


def _docx_child(build: str, *, timeout_s: float = 5) -> Any:
    return run_limited(
        DOCX_HELPERS
        + textwrap.dedent(
            f"""
        import time
        from ragport.adapters.parsers import DocxParser
        data = {build}
        started = time.monotonic()
        result = outcome(DocxParser(timeout_s={timeout_s}), data)
        emit({{"size": len(data), "seconds": time.monotonic() - started, **result}})
        """
        ),
        memory_mb=1024,
        timeout_s=timeout_s + 25,
    )


def test_docx_huge_grid_span_is_refused():
    """`<w:gridSpan w:val="2147483647">` is ParseError(too_large), not 3 GB and MemoryError.

    If this fails, check _table_rows in docx.py (MAX_TABLE_COLUMNS).
    """
    out = _docx_child('docx_with(body_xml(table([[tc("x", span=2**31 - 1)]])))')
    assert out.returncode == 0, out.stderr
    assert out.result["error"] == "ParseError" and out.result["reason"] == "too_large"
    assert out.result["seconds"] < 5 + 1
    assert out.peak_mb < 200


def test_docx_many_wide_grid_spans_are_refused_fast():
    """A 1 kB table of cells spanning 1,000,000 columns each is refused at once, not in 27 s.

    If this fails, check _table_rows in docx.py.
    """
    out = _docx_child('docx_with(body_xml(table([[tc("x", span=10**6)] * 60] * 4)))')
    assert out.returncode == 0, out.stderr
    assert out.result["error"] == "ParseError" and out.result["reason"] == "too_large"
    assert out.result["seconds"] < 5 + 1
    assert out.peak_mb < 200


def test_docx_tall_vertical_merge_is_linear():
    """150 rows x 40 columns of vMerge (3.4 kB) parse in well under a second, not 240 s.

    If this fails, check _table_rows in docx.py: a continued cell must not search upwards.
    """
    build = (
        'docx_with(body_xml(table([[tc(f"c{i}", vmerge="restart") for i in range(40)]]'
        ' + [[tc(vmerge="continue")] * 40] * 149)))'
    )
    out = _docx_child(build)
    assert out.returncode == 0, out.stderr
    assert out.result["size"] < 50_000  # the whole compressed docx
    assert "error" not in out.result
    assert out.result["text"].startswith("c0 | c1 | c2")
    assert out.result["seconds"] < 2
    assert out.peak_mb < 200


def test_docx_vertical_merge_that_repeats_text_past_the_cap_is_refused():
    """Long merged cells repeated down thousands of rows hit the output cap, fast.

    If this fails, check MAX_TEXT_CHARS and the running count in docx.py.
    """
    build = (
        'docx_with(body_xml(table([[tc("w" * 20_000, vmerge="restart") for i in range(40)]]'
        ' + [[tc(vmerge="continue")] * 40] * 3_000)))'
    )
    out = _docx_child(build)
    assert out.returncode == 0, out.stderr
    assert out.result["size"] < 200_000
    assert out.result["error"] == "ParseError" and out.result["reason"] == "too_large"
    assert out.result["seconds"] < 5 + 1
    assert out.peak_mb < 300


def test_docx_legit_merged_table_renders_as_before():
    """A python-docx table with horizontal and vertical merges renders as it always did.

    If this fails, check _table_rows in docx.py against python-docx's own row.cells.
    """
    import docx

    document = docx.Document()
    document.add_paragraph("Before")
    grid = document.add_table(rows=4, cols=3)
    for r in range(4):
        for c in range(3):
            grid.cell(r, c).text = f"r{r}c{c}"
    grid.cell(0, 0).merge(grid.cell(0, 1))  # horizontal
    grid.cell(1, 2).merge(grid.cell(3, 2))  # vertical
    grid.cell(2, 0).merge(grid.cell(3, 1))  # a block
    document.add_paragraph("After")
    buffer = io.BytesIO()
    document.save(buffer)
    text = DocxParser().parse(buffer.getvalue()).text
    assert text.splitlines() == [
        "Before",
        "",
        "r0c0 r0c1 | r0c2",
        "r1c0 | r1c1 | r1c2 r2c2 r3c2",
        "r2c0 r2c1 r3c0 r3c1 | r1c2 r2c2 r3c2",
        "r2c0 r2c1 r3c0 r3c1 | r1c2 r2c2 r3c2",
        "",
        "After",
    ]


def test_docx_grid_before_and_ragged_rows_resolve_merges_like_python_docx():
    """gridBefore offsets and a continued cell with no cell above behave as in python-docx.

    If this fails, check the grid offsets in _table_rows (docx.py).
    """
    before = '<w:tr><w:trPr><w:gridBefore w:val="1"/></w:trPr>'
    xml = (
        "<w:tbl>"
        + before
        + tc("a", vmerge="restart")
        + tc("b")
        + "</w:tr><w:tr>"
        + tc("z")
        + tc(vmerge="continue")
        + tc("c")
        + "</w:tr></w:tbl>"
    )
    assert DocxParser().parse(docx_with(body_xml(xml))).text.splitlines() == ["a | b", "z | a | c"]
    orphan = table([[tc("a"), tc(vmerge="continue")]])
    with pytest.raises(ParseError) as info:
        DocxParser().parse(docx_with(body_xml(orphan)))
    assert info.value.reason == "malformed"


# --- item 8: HTML hidden siblings --------------------------------------------------------------

HIDDEN_SIBLINGS = """
import time
from ragport.adapters.parsers import HtmlParser
size, unit = {size}, {unit!r}
data = b"<html><body><div>" + unit * ((size - 40) // len(unit)) + b"</div></body></html>"
started, cpu = time.monotonic(), time.thread_time()
try:
    doc = HtmlParser(max_bytes=8_388_608, timeout_s={timeout}).parse(data)
    result = {{"tails": doc.text.count("t"), "x": doc.text.count("x")}}
except Exception as exc:
    result = {{"error": type(exc).__name__, "reason": getattr(exc, "reason", None)}}
emit({{"n": (size - 40) // len(unit), "seconds": time.monotonic() - started,
      "cpu": time.thread_time() - cpu, **result}})
"""
SIBLINGS = b"<p hidden>x</p>t "
ALL_THREE = b"<p hidden aria-hidden=true style=display:none>x</p>t "


@pytest.mark.parametrize("unit", [SIBLINGS, ALL_THREE], ids=["hidden", "all-three"])
def test_html_one_megabyte_of_hidden_siblings_parses_whole_and_fast(unit):
    """1 MB of consecutive hidden siblings parses in seconds (was 22+ s), tails kept.

    If this fails, check _prune / _drop in html.py: no XPath union, tails joined once.
    """
    code = HIDDEN_SIBLINGS.format(size=1_000_000, unit=unit, timeout=10)
    out = run_limited(code, memory_mb=1536, timeout_s=40)
    assert out.returncode == 0, out.stderr
    assert "error" not in out.result, out.result
    assert out.result["tails"] == out.result["n"] and out.result["x"] == 0
    assert out.result["seconds"] < 5
    assert out.peak_mb < 500


@pytest.mark.parametrize("unit", [SIBLINGS, ALL_THREE], ids=["hidden", "all-three"])
def test_html_eight_mib_of_hidden_siblings_ends_typed_within_the_deadline(unit):
    """8 MiB (the hard max_bytes) of hidden siblings: the whole text or a timeout, within the
    10 s budget of CPU time (timeout_s counts the parsing thread's CPU, not the clock).

    If this fails, check the deadline checks in _prune (html.py) and that it stays linear.
    """
    code = HIDDEN_SIBLINGS.format(size=8_388_608, unit=unit, timeout=10)
    out = run_limited(code, memory_mb=2048, timeout_s=120)
    assert out.returncode == 0, out.stderr
    if "error" in out.result:
        assert out.result == {**out.result, "error": "ParseError", "reason": "timeout"}
    else:
        assert out.result["tails"] == out.result["n"] and out.result["x"] == 0
    assert out.result["cpu"] < 10 + 1.5
    assert out.peak_mb < 1500


def test_html_hidden_siblings_between_visible_text_keep_order():
    """Tails of dropped siblings stay in document order around the visible text."""
    page = (
        b"<div>a<p hidden>x</p>b<span aria-hidden=true>y</span>c<i>d</i>"
        b"<b style='display:none'>z<em hidden>q</em>w</b>e<u hidden>v</u>f</div>"
    )
    assert HtmlParser().parse(page).text == "abcdef"


# --- item 9: charsets that are not text encodings ---------------------------------------------


def _codec_names() -> list[str]:
    names = set(encodings.aliases.aliases) | set(encodings.aliases.aliases.values())
    names |= {m.name for m in pkgutil.iter_modules(encodings.__path__)}
    names |= {"rot13", "rot_13", "base64", "zip", "hex", "bz2", "quopri", "uu", "punycode"}
    names |= {"undefined", "idna", "zlib", "base64_codec", "hex_codec", "uu_codec"}
    found = []
    for name in sorted(names):
        try:
            codecs.lookup(name)
        except LookupError:
            continue
        found.append(name)
    return found


CODEC_NAMES = _codec_names()
NON_TEXT = [name for name in CODEC_NAMES if not codecs.lookup(name)._is_text_encoding]


def test_the_codec_enumeration_finds_the_non_text_codecs():
    """The stdlib's bytes-to-bytes and str-to-str codecs are all in NON_TEXT."""
    codec_names = {codecs.lookup(name).name for name in NON_TEXT}
    assert {"rot-13", "base64", "zlib", "hex", "bz2", "quopri", "uu"} <= codec_names
    assert len(NON_TEXT) >= 18


@pytest.mark.parametrize("name", NON_TEXT)
def test_html_non_text_charset_is_refused_like_an_unknown_one(name):
    """A `<meta charset>` or media-type charset naming a non-text codec is reason="encoding".

    If this fails, check _decode in html.py (CodecInfo._is_text_encoding).
    """
    page = b"<p>caf\xc3\xa9</p>"
    with pytest.raises(ParseError) as info:
        HtmlParser().parse(f'<meta charset="{name}">'.encode() + page)
    assert info.value.reason == "encoding"
    with pytest.raises(ParseError) as info:
        HtmlParser().parse(page, media_type=f"text/html; charset={name}")
    assert info.value.reason == "encoding"


@pytest.mark.parametrize("name", ["punycode", "undefined", "idna"])
def test_html_text_codecs_that_raise_unicode_error_are_typed(name):
    """punycode, undefined and idna end in a typed ParseError, never a raw UnicodeError."""
    for data in (b"<p>caf\xc3\xa9 \xff\xfe</p>", b"<p>plain</p>"):
        for kwargs in ({"media_type": f"text/html; charset={name}"}, {}):
            payload = data if kwargs else f'<meta charset="{name}">'.encode() + data
            try:
                HtmlParser().parse(payload, **kwargs)
            except ParseError as exc:
                assert exc.reason in {"decode", "encoding"}


def test_html_every_stdlib_codec_name_gives_a_document_or_a_parse_error():
    """Whatever charset a page declares, parse returns a document or raises ParseError."""
    page = b"<p>caf\xc3\xa9 \x80</p>"
    outcomes = set()
    for name in CODEC_NAMES:
        for data, kwargs in (
            (f'<meta charset="{name}">'.encode() + page, {}),
            (page, {"media_type": f"text/html; charset={name}"}),
        ):
            try:
                HtmlParser().parse(data, **kwargs)
                outcomes.add("ok")
            except ParseError as exc:
                outcomes.add(exc.reason)
    assert outcomes <= {"ok", "decode", "encoding", "nul", "empty"}
    assert {"ok", "encoding"} <= outcomes
