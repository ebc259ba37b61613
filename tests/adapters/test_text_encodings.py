"""Text, Markdown and reST in encodings other than UTF-8: refused by default, read with
``encoding="auto"`` (charset-normalizer) or a named codec, and the codec recorded."""

from __future__ import annotations

import pytest

from ragport.adapters.parsers import MarkdownParser, RstParser, TextParser, parser_for
from ragport.domain.errors import ParseError, ValidationError

FRENCH = "# Congés payés\n\nLes salariés ont droit à cinq semaines de congés après un an.\n"
CP1252 = (
    "Les salariés à temps partiel reçoivent une indemnité de congés payés. Le bureau ferme à "
    "18 h ; l’accès est réservé. Prix : 20 € – « offre » spéciale pour les employés. Même "
    "après la fermeture, la sécurité reste présente.\n"
) * 2


def test_latin1_markdown_is_refused_by_default_naming_the_offset():
    with pytest.raises(ParseError) as caught:
        MarkdownParser().parse(FRENCH.encode("latin-1"), media_type="text/markdown")
    assert caught.value.reason == "decode" and "offset" in str(caught.value)


@pytest.mark.parametrize("parser_cls", [TextParser, MarkdownParser])
def test_auto_reads_cp1252_and_records_the_codec(parser_cls):
    parsed = parser_cls(encoding="auto").parse(CP1252.encode("cp1252"), media_type=None)
    assert parsed.text == CP1252  # every accent, the euro sign and the typographic quote
    assert parsed.metadata["encoding"] == "cp1252"


def test_auto_keeps_utf8_as_utf8_and_records_it():
    parsed = MarkdownParser(encoding="auto").parse(FRENCH.encode(), media_type="text/markdown")
    assert parsed.text.startswith("# Congés") and parsed.metadata["encoding"] == "utf-8"
    assert parsed.metadata["title"] == "Congés payés"


def test_a_named_codec_reads_strictly():
    parser = MarkdownParser(encoding="latin-1")
    parsed = parser.parse(FRENCH.encode("latin-1"), media_type="text/markdown")
    assert parsed.text == FRENCH and parsed.metadata["encoding"] == "iso8859-1"
    with pytest.raises(ParseError) as caught:
        TextParser(encoding="ascii").parse(FRENCH.encode(), media_type=None)
    assert caught.value.reason == "decode"


def test_the_default_output_and_id_are_unchanged_and_other_choices_change_the_id():
    assert TextParser().parse(b"plain", media_type=None).metadata == {}
    ids = {TextParser().id, TextParser(encoding="auto").id, TextParser(encoding="cp1252").id}
    assert len(ids) == 3 and TextParser(encoding="UTF8").id == TextParser().id


def test_rst_reads_cp1252_with_auto():
    source = "Congés\n======\n\n" + CP1252
    parsed = RstParser(encoding="auto").parse(source.encode("cp1252"), media_type="text/x-rst")
    assert parsed.metadata["title"] == "Congés" and "réservé" in parsed.text
    assert parsed.metadata["encoding"] == "cp1252"


@pytest.mark.parametrize("bad", ["", "no-such-codec", "base64", "rot13", 8, None])
def test_a_bad_encoding_is_a_validation_error(bad):
    with pytest.raises(ValidationError) as caught:
        TextParser(encoding=bad)
    assert caught.value.field == "encoding"


def test_parser_for_passes_encoding_to_text_and_html_parsers_and_checks_it_for_all():
    """HTML takes encoding= too (for pages that declare no charset); PDF and DOCX do not.

    If this fails, check parser_for's EncodedTextParser branch and HtmlParser's base class."""
    assert parser_for("notes.md", encoding="auto").encoding == "auto"
    assert parser_for("page.html", encoding="auto").id != parser_for("page.html").id
    assert parser_for("a.pdf", encoding="auto").id == parser_for("a.pdf").id
    with pytest.raises(ValidationError):
        parser_for("page.html", encoding="no-such-codec")


_LEGACY_PAGE = (
    b"<html><head><title>Caf\xe9</title>"
    b'<meta http-equiv="Content-Type" content="text/html"></head>'
    b"<body><h1>Men\xfc</h1><p>Cr\xe8me br\xfbl\xe9e \x96 \x80 5</p></body></html>"
)


def test_an_undeclared_legacy_html_page_reads_with_encoding_and_fails_without():
    """A page with no BOM, no charset parameter and no <meta charset> (as libxslt's docs ship)
    in cp1252: strict UTF-8 refuses it naming the offset; encoding="auto" or "cp1252" reads
    it exactly and records the codec.

    If this fails, check _decode's fallback in ragport/adapters/parsers/html.py."""
    from ragport.adapters.parsers import HtmlParser

    with pytest.raises(ParseError) as caught:
        HtmlParser().parse(_LEGACY_PAGE, media_type="text/html")
    assert caught.value.reason == "decode" and "offset" in str(caught.value)
    for encoding in ("auto", "cp1252"):
        doc = HtmlParser(encoding=encoding).parse(_LEGACY_PAGE, media_type="text/html")
        assert "# Menü" in doc.text and "Crème brûlée – € 5" in doc.text
        assert doc.metadata["title"] == "Café"
        assert doc.metadata["encoding"] == "cp1252"


def test_a_declared_charset_wins_over_encoding():
    """A page that declares UTF-8 is read as UTF-8 whatever encoding= says, and records none.

    If this fails, check that _decode only falls back when nothing is declared."""
    from ragport.adapters.parsers import HtmlParser

    page = '<html><head><meta charset="utf-8"></head><body><p>Straße</p></body></html>'
    doc = HtmlParser(encoding="cp1252").parse(page.encode(), media_type="text/html")
    assert "Straße" in doc.text and "encoding" not in doc.metadata


def test_auto_refuses_nul_bytes_and_empty_guess():
    with pytest.raises(ParseError) as caught:
        TextParser(encoding="auto").parse("a\x00b".encode("utf-16-le"), media_type=None)
    assert caught.value.reason in ("nul", "decode")


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        ("Ça coûte 20 €, très cher. " * 50, "cp1252"),
        ("Это русский текст. Офис закрывается в шесть часов вечера. " * 5, "cp1251"),
        ("日本語のテキストです。東京の事務所は午後六時に閉まります。" * 5, "shift_jis"),
    ],
    ids=["french-cp1252", "russian-cp1251", "japanese-shift-jis"],
)
def test_auto_reads_common_legacy_encodings_exactly(text, codec):
    parsed = TextParser(encoding="auto").parse(text.encode(codec), media_type=None)
    assert parsed.text == text
