"""``ParserContract``: the promises of ``ragport.ports.documents.Parser`` as pytest tests.

Subclass it and supply a ``parser`` fixture; override ``parser_sample`` with valid input for
your format (bytes and media type), and ``make_parser`` if your constructor differs from
``YourParser(max_bytes=..., timeout_s=...)``::

    class TestMyParser(ParserContract):
        @pytest.fixture
        def parser(self):
            return MyParser()

        @pytest.fixture
        def parser_sample(self):
            return Sample(b"...valid bytes...", "application/x-mine")

Override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.errors import AbortedError, ParseError, ValidationError
from ragport.domain.limits import HARD_LIMITS
from ragport.ports.documents import ParsedDocument, Parser

__all__ = ["CANARY", "ParserContract", "Sample"]

CANARY = "QX7-CANARY-do-not-echo"
"""A marker put into refused input: it must not appear in any error, message or cause."""

INVALID = b"\xc3\x28 caf\xe9 \x80\x81 " + CANARY.encode() + b" \xff"
"""Bytes no format ragport reads accepts: invalid UTF-8, not a PDF, not a zip."""

NESTED = (
    b"<div>" * 5_000 + b"x",
    b"---\na: " + b"[" * 2_000 + b"\n---\nx\n",
    b"[" * 5_000 + b"x" + b"]" * 5_000,
    b"{" * 5_000 + b"x" + b"}" * 5_000,
    b"> " * 5_000 + b"x\n",
    b"".join(b"  " * i + b"- x\n\n" for i in range(300)),
    b"".join(b" " * i + b"x\n\n" for i in range(400)),
)
"""Input nested thousands deep (markup, YAML front matter, brackets, quotes, indentation):
past Python's default recursion limit for any recursive reader. Added in contract 1.19."""


@attrs.frozen
class Sample:
    """Valid input for the parser under test."""

    data: bytes
    media_type: str | None = None


class _FlipAbort:
    """Not set on its first ``is_set()`` call (the check before parsing), set afterwards."""

    def __init__(self) -> None:
        self.calls = 0

    def is_set(self) -> bool:
        self.calls += 1
        return self.calls > 1


class _SetAbort:
    def is_set(self) -> bool:
        return True


def _chain_text(exc: BaseException) -> str:
    """Everything a traceback of ``exc`` would print, causes and shown contexts included."""
    return "".join(traceback.format_exception(exc)) + repr(exc.args)


class ParserContract(ContractSuite):
    """Caps, strict decoding, abort, determinism, no text in errors, no partial result, and
    no exception but ParseError on deeply nested input."""

    parser = required_fixture(
        "ParserContract", "parser", "return (or yield, then clean up) the Parser under test"
    )

    @pytest.fixture
    def parser_sample(self) -> Sample:
        """Valid input for the parser: UTF-8 text by default. Override it for your format."""
        return Sample(
            "# Leave policy\n\nParental leave lasts sixteen weeks. Zürich ✓\n".encode(),
            "text/plain",
        )

    @pytest.fixture
    def make_parser(self, parser: Parser) -> Callable[..., Parser]:
        """Builds the parser with other caps: ``make_parser(max_bytes=..., timeout_s=...)``."""
        return lambda **caps: type(parser)(**caps)

    def test_satisfies_the_parser_protocol(self, parser: Parser) -> None:
        """Checks ``Parser.id``, ``Parser.max_bytes``, ``Parser.parse``: the adapter defines every
        member; ``id`` is a non-blank string and ``max_bytes`` a positive int.

        If this fails, check every member of ragport.ports.documents.Parser.
        """
        assert isinstance(parser, Parser)
        assert isinstance(parser.id, str) and parser.id.strip()
        assert isinstance(parser.max_bytes, int) and parser.max_bytes > 0

    def test_sample_parses_to_text_and_json_metadata(
        self, parser: Parser, parser_sample: Sample
    ) -> None:
        """Checks ``Parser.parse``: the sample gives a ``ParsedDocument`` whose text is a non-blank
        str with ``\\n`` line breaks (no ``\\r``) and no NUL, whose metadata is JSON-serialisable,
        and whose ``pages``, when set, join with form feeds to the text.

        If this fails, check `parser_sample` (is it valid input?), then the parse result: text
        must be a non-empty str without `\\r` or NUL, metadata a JSON-serialisable mapping,
        and `pages`, when set, must join with form feeds to `text`.
        """
        doc = parser.parse(parser_sample.data, media_type=parser_sample.media_type)
        assert isinstance(doc, ParsedDocument)
        assert isinstance(doc.text, str) and doc.text.strip()
        assert "\r" not in doc.text and "\x00" not in doc.text
        json.dumps(dict(doc.metadata))
        if doc.pages:
            assert "\f".join(doc.pages) == doc.text

    def test_parse_is_deterministic_and_leaves_the_input_alone(
        self, parser: Parser, parser_sample: Sample
    ) -> None:
        """Checks ``Parser.parse``, ``Parser.id``: parsing the same bytes again gives an equal
        ``ParsedDocument``, and ``id`` reads the same each time.

        If this fails, check for per-call state, randomness, dict-order or time in the result.
        """
        first = parser.parse(parser_sample.data, media_type=parser_sample.media_type)
        data = bytearray(parser_sample.data)
        again = parser.parse(bytes(data), media_type=parser_sample.media_type)
        assert again == first
        assert bytes(data) == parser_sample.data
        assert parser.id == parser.id

    def test_input_past_max_bytes_is_refused_whole(
        self, parser: Parser, parser_sample: Sample
    ) -> None:
        """Checks ``Parser.max_bytes``, ``Parser.parse``: input one byte over ``max_bytes`` raises
        ``ParseError(reason="too_large")`` and returns no text.

        If this fails, check that the size is checked before parsing and that nothing is
        truncated to fit.
        """
        data = parser_sample.data * (parser.max_bytes // max(1, len(parser_sample.data)) + 1)
        data = (data + b" " * parser.max_bytes)[: parser.max_bytes + 1]
        with pytest.raises(ParseError) as info:
            parser.parse(data, media_type=parser_sample.media_type)
        assert info.value.reason == "too_large"

    def test_a_cap_just_below_the_sample_refuses_it(
        self, make_parser: Callable[..., Parser], parser_sample: Sample
    ) -> None:
        """Checks ``Parser.max_bytes``, ``Parser.parse``: with ``max_bytes`` one below the sample's
        size the sample is refused (``too_large``), not cut; with exactly its size it parses.

        If this fails, check the byte check in parse (`len(data) > max_bytes`) and `make_parser`.
        """
        small = make_parser(max_bytes=len(parser_sample.data) - 1)
        with pytest.raises(ParseError) as info:
            small.parse(parser_sample.data, media_type=parser_sample.media_type)
        assert info.value.reason == "too_large"
        exact = make_parser(max_bytes=len(parser_sample.data))
        assert exact.parse(parser_sample.data, media_type=parser_sample.media_type).text.strip()

    def test_caps_are_validated(self, make_parser: Callable[..., Parser]) -> None:
        """Checks ``Parser.max_bytes``: the constructor refuses ``max_bytes`` above
        ``HARD_LIMITS.parse_bytes``, ``max_bytes=0`` and ``timeout_s=0`` with ``ValidationError``.

        If this fails, check the constructor's validation (ragport.domain.limits.check_limit).
        """
        with pytest.raises(ValidationError):
            make_parser(max_bytes=HARD_LIMITS.parse_bytes + 1)
        with pytest.raises(ValidationError):
            make_parser(max_bytes=0)
        with pytest.raises(ValidationError):
            make_parser(timeout_s=0)

    def test_undecodable_bytes_are_refused(self, parser: Parser, parser_sample: Sample) -> None:
        """Checks ``Parser.parse``: bytes that are not valid input (invalid UTF-8, not a PDF, not a
        zip) raise ``ParseError``; nothing is guessed or replaced.

        If this fails, check the decoding: `errors="strict"`, no fallback charset, no
        replacement characters, and that an unreadable file is an error, not empty text.
        """
        with pytest.raises(ParseError):
            parser.parse(INVALID, media_type=parser_sample.media_type)

    def test_deeply_nested_input_is_a_document_or_a_parse_error(
        self, parser: Parser, parser_sample: Sample
    ) -> None:
        """Checks ``Parser.parse``: input nested thousands deep gives a ``ParsedDocument`` or raises
        ``ParseError``, never another exception.

        If this fails, check recursive code in the parser and its library (a YAML loader, a
        markup tree builder, a recursive descent): every failure, RecursionError and
        MemoryError included, must become a ParseError, with `from None` when the library's
        message could quote the document.
        """
        for data in NESTED:
            try:
                doc = parser.parse(data[: parser.max_bytes], media_type=parser_sample.media_type)
            except ParseError:
                continue
            except Exception as exc:
                pytest.fail(f"deeply nested input raised {type(exc).__name__}, not ParseError")
            assert isinstance(doc, ParsedDocument)

    def test_empty_input_is_refused(self, parser: Parser, parser_sample: Sample) -> None:
        """Checks ``Parser.parse``: empty input raises ``ParseError``: an empty document is never an
        empty index.

        If this fails, check that parse refuses input without text.
        """
        with pytest.raises(ParseError):
            parser.parse(b"", media_type=parser_sample.media_type)

    def test_errors_carry_no_document_text(self, parser: Parser, parser_sample: Sample) -> None:
        """Checks ``Parser.parse``: a refusal (undecodable or oversized input) does not quote the
        input: not in the message, the args, the causes or the contexts.

        If this fails, check error messages and chaining: translate library exceptions with
        `raise ParseError(...) from None` when their message could quote the document.
        """
        oversized = (CANARY.encode() + b" ") * (parser.max_bytes // (len(CANARY) + 1) + 2)
        for data in (INVALID, oversized):
            with pytest.raises(ParseError) as info:
                parser.parse(data, media_type=parser_sample.media_type)
            assert CANARY not in _chain_text(info.value)

    def test_abort_is_checked_before_parsing(self, parser: Parser, parser_sample: Sample) -> None:
        """Checks ``Parser.parse``: an ``abort`` signal already set raises ``AbortedError`` before
        any work.

        If this fails, check that parse calls `abort.is_set()` first.
        """
        with pytest.raises(AbortedError):
            parser.parse(parser_sample.data, media_type=parser_sample.media_type, abort=_SetAbort())

    def test_abort_set_during_parsing_returns_nothing(
        self, parser: Parser, parser_sample: Sample
    ) -> None:
        """Checks ``Parser.parse``: an ``abort`` set after the first check raises ``AbortedError``
        instead of returning a result (``abort.is_set()`` is asked at least twice).

        If this fails, check that parse looks at `abort.is_set()` again after parsing.
        """
        abort: Any = _FlipAbort()
        with pytest.raises(AbortedError):
            parser.parse(parser_sample.data, media_type=parser_sample.media_type, abort=abort)
        assert abort.calls >= 2
