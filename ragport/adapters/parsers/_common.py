"""What every parser shares: constructor caps, the byte check, abort, deadlines, decoding."""

from __future__ import annotations

import codecs
import functools
import math
import time
from importlib import metadata as _metadata
from typing import Any, ClassVar

from ragport.domain.errors import AbortedError, ParseError, RagportError, ValidationError
from ragport.domain.limits import (
    DEFAULT_CEILINGS,
    DEFAULT_LIMITS,
    HARD_LIMITS,
    Ceilings,
    Limits,
    check_ceilings,
    how_to_raise,
)
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

DEFAULT_TIMEOUT_S = DEFAULT_LIMITS.parse_ms / 1000
MAX_TIMEOUT_S = HARD_LIMITS.parse_ms / 1000
"""The default ceiling of ``timeout_s``; ``ceilings=Ceilings(parse_ms=...)`` raises it."""
DEFAULT_WALL_TIMEOUT_S = DEFAULT_LIMITS.parse_wall_ms / 1000
MAX_WALL_TIMEOUT_S = HARD_LIMITS.parse_wall_ms / 1000


def check_abort(abort: Abort | None) -> None:
    if abort is not None and abort.is_set():
        raise AbortedError("aborted by the caller")


@functools.cache
def library_version(distribution: str) -> str:
    """``major.minor`` of an installed distribution (part of a parser's ``id``), read once per
    process: the code a process runs is the version it imported, and reading the
    distribution's metadata costs about 0.25 ms, paid per document before (a parser's ``id``
    is read for every file an ingest or sync decides to skip or parse)."""
    try:
        version = _metadata.version(distribution)
    except _metadata.PackageNotFoundError:
        return "missing"
    return ".".join(version.split(".")[:2])


def check_timeout(
    timeout_s: object,
    ceiling_s: float = MAX_TIMEOUT_S,
    *,
    field: str = "timeout_s",
    limit: str = "parse_ms",
) -> float:
    """``timeout_s`` as a float in (0, ``ceiling_s``]; else ``ValidationError(limit=limit)``."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise ValidationError(f"{field} must be a number", field=field, limit=limit)
    value = float(timeout_s)
    if not math.isfinite(value) or value <= 0 or value > ceiling_s:
        raise ValidationError(
            f"{field} must be above 0 and at most {ceiling_s:g}", field=field, limit=limit
        )
    return value


class Deadline:
    """The budget of one parse: ``seconds`` of CPU time, ``wall_seconds`` on the clock.

    CPU time, not the clock, is the budget, so a busy machine does not fail a document that
    parses fine on a quiet one; the clock is a backstop for a parse that waits without
    computing. ``check()`` counts the CPU time of the calling thread since the deadline was
    made (an in-process parser checks from the thread that parses; a thread waiting for the
    GIL uses none); a worker runner passes its worker's CPU time as ``cpu_used``.
    """

    def __init__(self, seconds: float, wall_seconds: float | None = None) -> None:
        self.seconds = seconds
        self.wall_seconds = DEFAULT_WALL_TIMEOUT_S if wall_seconds is None else wall_seconds
        self.at = time.monotonic() + self.wall_seconds
        self._cpu_start = time.thread_time()

    def remaining(self) -> float:
        """Seconds left on the clock (the backstop)."""
        return self.at - time.monotonic()

    def check(self, cpu_used: float | None = None) -> None:
        """``ParseError(reason="timeout")`` once past either budget."""
        used = time.thread_time() - self._cpu_start if cpu_used is None else cpu_used
        if used > self.seconds:
            raise ParseError(self.cpu_message(), reason="timeout")
        if time.monotonic() > self.at:
            raise ParseError(
                f"parsing took longer than {self.wall_seconds:g} s on the clock, the backstop "
                f"(raise wall_timeout_s: {how_to_raise('parse_wall_ms')})",
                reason="timeout",
            )

    def cpu_message(self) -> str:
        return (
            f"parsing used more than {self.seconds:g} s of CPU time "
            f"(raise timeout_s: {how_to_raise('parse_ms')})"
        )


class BaseParser:
    """Caps and the parse skeleton; subclasses implement ``_parse`` for one format.

    ``parse`` checks the type and size of the input and ``abort`` before calling ``_parse``,
    and ``abort`` and the deadline after it, so a result is returned whole or not at all.
    Whatever else ``_parse`` raises (``RecursionError``, ``MemoryError``, a library's
    ``KeyError``...) becomes ``ParseError(reason="malformed")`` naming only the exception's
    type, with no cause chained; ragport's own errors (``AbortedError``, a cap's
    ``ParseError``) pass as raised, and so do ``KeyboardInterrupt`` and ``SystemExit``.
    Libraries that cannot be interrupted run to completion in process (the deadline is checked
    between stages and during tree walks); the PDF and reST parsers run their library call in a
    worker process (``_worker.run_worker``) that is killed at the deadline or on abort.

    ``timeout_s`` is CPU seconds (``Limits.parse_ms``: the worker's CPU time, or the parsing
    thread's), ``wall_timeout_s`` the wall-clock backstop (``Limits.parse_wall_ms``); past
    either is ``ParseError(reason="timeout")``. ``max_bytes``, ``timeout_s`` and
    ``wall_timeout_s`` (and a subclass's page and inflation caps) are checked against
    ``ceilings`` (default ``DEFAULT_CEILINGS``, i.e. ``HARD_LIMITS``): an operator's
    ``Ceilings`` lets them go further, never past ``ABSOLUTE_CAPS``. ``limit_options`` gives
    the constructor options of a ``Limits`` (its caps and its ceilings).
    """

    name: ClassVar[str] = "base"
    version: ClassVar[int] = 1
    library: ClassVar[str | None] = None
    media_types: ClassVar[tuple[str, ...]] = ()
    bytes_limit: ClassVar[str] = "parse_bytes"
    """The ``Limits`` field ``max_bytes`` stands for (and is checked against the ceiling of)."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        wall_timeout_s: float = DEFAULT_WALL_TIMEOUT_S,
        ceilings: Ceilings = DEFAULT_CEILINGS,
    ) -> None:
        self._ceilings = check_ceilings(ceilings)
        self._max_bytes = ceilings.check(self.bytes_limit, max_bytes)
        self._timeout_s = check_timeout(timeout_s, ceilings.parse_ms / 1000)
        self._wall_timeout_s = check_timeout(
            wall_timeout_s,
            ceilings.of("parse_wall_ms") / 1000,
            field="wall_timeout_s",
            limit="parse_wall_ms",
        )

    @classmethod
    def limit_options(cls, limits: Limits) -> dict[str, Any]:
        """The constructor options ``limits`` gives this parser (subclasses add their own)."""
        return {
            "max_bytes": limits.parse_bytes,
            "timeout_s": limits.parse_ms / 1000,
            "wall_timeout_s": limits.parse_wall_ms / 1000,
            "ceilings": limits.ceilings,
        }

    @property
    def id(self) -> str:
        """Parser name and version, plus the library's ``major.minor`` when one is used."""
        base = f"{self.name}-v{self.version}"
        return f"{base}+{self.library}-{library_version(self.library)}" if self.library else base

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def timeout_s(self) -> float:
        """CPU seconds one parse may use."""
        return self._timeout_s

    @property
    def wall_timeout_s(self) -> float:
        """Seconds on the clock one parse may take, whatever its CPU time (the backstop)."""
        return self._wall_timeout_s

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(max_bytes={self._max_bytes}, timeout_s={self._timeout_s:g}, "
            f"wall_timeout_s={self._wall_timeout_s:g})"
        )

    def parse(
        self, data: bytes, *, media_type: str | None = None, abort: Abort | None = None
    ) -> ParsedDocument:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValidationError("data must be bytes", field="data")
        raw = bytes(data)
        if len(raw) > self._max_bytes:
            raise ParseError(
                f"document is {len(raw)} bytes, over max_bytes={self._max_bytes} "
                f"(raise it: {how_to_raise(self.bytes_limit)})",
                reason="too_large",
                media_type=media_type,
            )
        check_abort(abort)
        deadline = Deadline(self._timeout_s, self._wall_timeout_s)
        try:
            document = self._parse(raw, media_type=media_type, deadline=deadline, abort=abort)
        except RagportError:
            raise
        except Exception as exc:
            # One hostile document must be an item error, never a crash of the caller's loop;
            # a library's message may quote the input, so nothing is chained.
            raise failed(self.library or self.name, exc, media_type=media_type) from None
        check_abort(abort)
        deadline.check()
        if not document.text.strip():
            raise ParseError("the document has no text", reason="empty", media_type=media_type)
        self._check_text(document.text, media_type)
        return document

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        raise NotImplementedError

    def _check_text(self, text: str, media_type: str | None) -> None:
        """A cap on the text parsed (``BinaryParser``); the input cap bounds it elsewhere."""


class BinaryParser(BaseParser):
    """A format whose bytes are not its text (PDF, DOCX: fonts, images and zip structure are
    most of a file's bytes): the file may be up to ``max_bytes`` (default ``binary_bytes``,
    8 MiB, the ceiling of ``parse_bytes``), its text up to ``max_text_bytes`` (UTF-8; default
    ``parse_bytes``, 1 MiB), past which the parse is ``ParseError(reason="too_large")``
    naming the setting to raise."""

    bytes_limit = "binary_bytes"

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_LIMITS.binary_bytes,
        max_text_bytes: int = DEFAULT_LIMITS.parse_bytes,
        **options: Any,
    ) -> None:
        super().__init__(max_bytes=max_bytes, **options)
        self._max_text_bytes = self._ceilings.check("parse_bytes", max_text_bytes)

    @classmethod
    def limit_options(cls, limits: Limits) -> dict[str, Any]:
        return {
            **super().limit_options(limits),
            "max_bytes": limits.binary_bytes,
            "max_text_bytes": limits.parse_bytes,
        }

    @property
    def max_text_bytes(self) -> int:
        """The cap on the UTF-8 bytes of the extracted text."""
        return self._max_text_bytes

    def text_too_large(self, size: int | None, media_type: str | None) -> ParseError:
        """The refusal of text past ``max_text_bytes`` (``size``: its UTF-8 bytes, if known)."""
        counted = "" if size is None else f" is {size} bytes,"
        return ParseError(
            f"the extracted text{counted} over max_text_bytes={self._max_text_bytes} "
            f"(raise it: {how_to_raise('parse_bytes')})",
            reason="too_large",
            media_type=media_type,
        )

    def _check_text(self, text: str, media_type: str | None) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > self._max_text_bytes:
            raise self.text_too_large(size, media_type)


def decode_utf8(data: bytes, *, media_type: str | None = None) -> str:
    """Strict UTF-8 with a leading BOM dropped; ``ParseError(reason="decode")`` otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(
            f"the bytes are not valid UTF-8 (first bad byte at offset {exc.start})",
            reason="decode",
            media_type=media_type,
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


# EBCDIC code pages: charset-normalizer can rank one first for ASCII-heavy Western bytes, and
# no file on a modern system is in one; name the codec to read such a file.
_NEVER_GUESSED = ("cp037", "cp273", "cp424", "cp500", "cp875", "cp1026", "cp1140")
AUTO = "auto"
"""``encoding="auto"``: UTF-8 when the bytes are UTF-8, else the best guess of
charset-normalizer (Latin-1, cp1252, Shift-JIS, ...)."""


def check_encoding(encoding: object) -> str:
    """``"utf-8"``, ``"auto"`` or a Python text codec name; anything else is a
    ``ValidationError(field="encoding")``. Returns the canonical name."""
    if not isinstance(encoding, str) or not encoding.strip() or len(encoding) > 64:
        raise ValidationError("encoding must be 'auto' or a text codec name", field="encoding")
    if encoding.strip().lower() == AUTO:
        return AUTO
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        info = None
    # bytes-to-bytes codecs (base64, zlib) and str-to-str ones (rot13) read no text
    if info is None or not getattr(info, "_is_text_encoding", True):
        raise ValidationError(
            f"{encoding[:64]!r} is not a text encoding Python knows", field="encoding"
        )
    name = info.name
    return "utf-8" if name == "utf-8" else name


def decode_text(data: bytes, *, encoding: str, media_type: str | None) -> tuple[str, str]:
    """The text of ``data`` and the encoding it was read with (``encoding`` checked by
    ``check_encoding``). Strict: bytes the encoding cannot read are ``ParseError(reason=
    "decode")``, never replaced. A UTF-8 BOM is dropped."""
    if encoding == "utf-8":
        return decode_utf8(data, media_type=media_type), "utf-8"
    if encoding == AUTO:
        try:
            return decode_utf8(data, media_type=media_type), "utf-8"
        except ParseError:
            pass
        try:
            from charset_normalizer import from_bytes
        except ImportError:
            raise ParseError(
                "encoding='auto' needs charset-normalizer: pip install 'ragport[detect]'",
                reason="dependency",
                media_type=media_type,
            ) from None
        matches = from_bytes(data, cp_exclusion=list(_NEVER_GUESSED))
        best = matches.best()
        if best is None:
            raise ParseError(
                "no text encoding reads these bytes", reason="decode", media_type=media_type
            )
        plausible = {codecs.lookup(m.encoding).name for m in matches}
        # Legacy Western files are nearly always Windows-1252; charset-normalizer often ranks
        # a sibling code page (cp1250) first on short French or German text.
        encoding = "cp1252" if "cp1252" in plausible else codecs.lookup(best.encoding).name
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ParseError(
            f"the bytes are not valid {encoding} (first bad byte at offset {exc.start})",
            reason="decode",
            media_type=media_type,
        ) from None
    return (text[1:] if text.startswith("\ufeff") else text), encoding


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def failed(library: str, exc: BaseException, *, media_type: str | None) -> ParseError:
    """The one translation of a library exception: its type name, never its message."""
    return ParseError(
        f"{library} could not read the document ({type(exc).__name__})",
        reason="malformed",
        media_type=media_type,
    )


class EncodedTextParser(BaseParser):
    """A parser of text bytes in one ``encoding``: ``"utf-8"`` (the default, strict),
    ``"auto"`` (UTF-8, else the best guess of charset-normalizer) or a Python codec name.
    Any choice but the default is part of the parser's ``id`` (so changing it re-parses) and
    is recorded as ``metadata["encoding"]`` (the codec that read the bytes)."""

    def __init__(self, *, encoding: str = "utf-8", **options: Any) -> None:
        super().__init__(**options)
        self._encoding = check_encoding(encoding)

    @property
    def id(self) -> str:
        base = super().id
        return base if self._encoding == "utf-8" else f"{base}+encoding-{self._encoding}"

    @property
    def encoding(self) -> str:
        return self._encoding

    def _text(self, data: bytes, media_type: str | None, metadata: dict[str, Any]) -> str:
        text, used = decode_text(data, encoding=self._encoding, media_type=media_type)
        if self._encoding != "utf-8":
            metadata["encoding"] = used
        text = normalise_newlines(text)
        if "\x00" in text:
            raise ParseError("the text holds NUL bytes", reason="nul", media_type=media_type)
        return text
