"""The ParserContract can fail: deliberately broken parsers are caught by the right tests."""

from __future__ import annotations

import pytest

from ragport.contract_tests import ParserContract, Sample
from ragport.domain.errors import ParseError
from ragport.ports.documents import ParsedDocument

SAMPLE = Sample(b"# Title\n\nSome text.\n", "text/plain")


class TruncatingParser:
    """Cuts oversized input to fit, decodes with replacement and quotes the input in errors."""

    id = "broken-v1"

    def __init__(self, *, max_bytes: int = 1024, timeout_s: float = 30) -> None:
        self.max_bytes = max_bytes

    def parse(self, data, *, media_type=None, abort=None):
        if not data:
            raise ParseError(f"empty input {data!r}")
        text = data[: self.max_bytes].decode("utf-8", errors="replace")
        return ParsedDocument(text)


class LeakyParser(TruncatingParser):
    """Refuses properly but puts the document into the message and ignores abort."""

    def parse(self, data, *, media_type=None, abort=None):
        if len(data) > self.max_bytes:
            raise ParseError(f"too large: {data[:80]!r}", reason="too_large")
        try:
            return ParsedDocument(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError("bad bytes", reason="decode") from exc


FAILURE = (AssertionError, pytest.fail.Exception, ParseError)


@pytest.mark.parametrize(
    "test",
    [
        "test_input_past_max_bytes_is_refused_whole",
        "test_undecodable_bytes_are_refused",
        "test_caps_are_validated",
    ],
)
def test_a_truncating_parser_fails_the_contract(test):
    """A parser that truncates and guesses fails the cap, decoding and validation tests.

    If this fails, a contract test no longer checks what its docstring promises.
    """
    suite = ParserContract()
    parser = TruncatingParser()
    args = {
        "test_input_past_max_bytes_is_refused_whole": (parser, SAMPLE),
        "test_undecodable_bytes_are_refused": (parser, SAMPLE),
        "test_caps_are_validated": (lambda **caps: TruncatingParser(**caps),),
    }[test]
    with pytest.raises(FAILURE):
        getattr(suite, test)(*args)


@pytest.mark.parametrize(
    "test", ["test_errors_carry_no_document_text", "test_abort_is_checked_before_parsing"]
)
def test_a_leaky_parser_fails_the_contract(test):
    """Text in a message or a chained cause, and an ignored abort, fail the contract.

    If this fails, check _chain_text and the abort tests in ragport/contract_tests/parser.py.
    """
    suite = ParserContract()
    with pytest.raises(FAILURE):
        getattr(suite, test)(LeakyParser(), SAMPLE)


class RecursingParser(LeakyParser):
    """Reads brackets by recursive descent and lets RecursionError out, as PyYAML did."""

    def parse(self, data, *, media_type=None, abort=None):
        def depth(i: int) -> int:
            return 1 + depth(i + 1) if data[i : i + 1] in (b"[", b"{") else 0

        depth(0)
        return super().parse(data, media_type=media_type, abort=abort)


def test_a_recursing_parser_fails_the_nesting_contract():
    """A parser whose RecursionError escapes fails the deep-nesting test, with pytest.fail.

    If this fails, check test_deeply_nested_input_is_a_document_or_a_parse_error.
    """
    suite = ParserContract()
    with pytest.raises(pytest.fail.Exception):
        suite.test_deeply_nested_input_is_a_document_or_a_parse_error(RecursingParser(), SAMPLE)
    suite.test_deeply_nested_input_is_a_document_or_a_parse_error(LeakyParser(), SAMPLE)
