"""HttpOptions and DriveOptions (issue 42): the HTTP adapters' transport and the Drive
connector's settings as values; the flat keywords of before warn and still work."""

from __future__ import annotations

import inspect
from typing import Any

import httpx
import pytest

from ragport.adapters.connectors import DriveOptions, GoogleDriveConnector, HttpOptions
from ragport.adapters.embedders import OpenAICompatibleEmbedder, TeiEmbedder
from ragport.domain.errors import ValidationError

LOOPBACK = "http://127.0.0.1:9"


def _drive(**kwargs: Any) -> GoogleDriveConnector:
    return GoogleDriveConnector(
        token_provider=lambda: "t", resolve_access=lambda f: None, base_url=LOOPBACK, **kwargs
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("allow_loopback", 1),
        ("timeout_s", 0),
        ("timeout_s", float("nan")),
        ("timeout_s", True),
        ("max_response_bytes", 0),
        ("max_concurrency", "4"),
    ],
)
def test_http_options_check_their_fields(field: str, value: object) -> None:
    """A field of the wrong kind or range is refused by name. If this fails, check the
    converters in adapters/http_options.py."""
    with pytest.raises(ValidationError) as caught:
        HttpOptions(**{field: value})  # type: ignore[arg-type]
    assert caught.value.field == field


def test_the_options_reach_the_embedder() -> None:
    """allow_loopback, timeout, concurrency and an injected client come from http=. If this
    fails, check _HttpEmbedder.__init__."""
    with pytest.raises(ValidationError) as caught:
        TeiEmbedder(LOOPBACK, dimensions=8)  # plain http to loopback needs allow_loopback
    assert caught.value.field == "base_url"
    client = httpx.Client()
    embedder = TeiEmbedder(
        LOOPBACK,
        dimensions=8,
        http=HttpOptions(allow_loopback=True, timeout_s=5, max_concurrency=2, client=client),
    )
    assert "timeout_s=5" in repr(embedder) and "max_concurrency=2" in repr(embedder)
    embedder.close()
    assert not client.is_closed  # an injected client stays open
    client.close()
    with pytest.raises(ValidationError) as caught:
        TeiEmbedder(LOOPBACK, dimensions=8, http=HttpOptions(allow_loopback=True, timeout_s=601))
    assert caught.value.field == "timeout_s"


@pytest.mark.parametrize("cls", [TeiEmbedder, OpenAICompatibleEmbedder])
def test_the_flat_transport_keywords_still_work_and_warn(cls: type) -> None:
    """client=, allow_loopback=, timeout_s=, max_concurrency= of before: DeprecationWarning,
    same effect. If this fails, check the keyword_folds on the embedder's __init__."""
    args = (LOOPBACK,) if cls is TeiEmbedder else (LOOPBACK, "m")
    with pytest.warns(DeprecationWarning, match="HttpOptions"):
        embedder = cls(*args, dimensions=8, allow_loopback=True, timeout_s=7, max_concurrency=3)
    assert "timeout_s=7" in repr(embedder) and "max_concurrency=3" in repr(embedder)
    embedder.close()
    assert len(inspect.signature(cls).parameters) <= 10


def test_drive_options_reach_the_connector() -> None:
    """DriveOptions' numbers are checked when the connector is built; HttpOptions' transport
    too. If this fails, check GoogleDriveConnector.__init__."""
    connector = _drive(http=HttpOptions(allow_loopback=True), options=DriveOptions(page_size=7))
    assert connector._page_size == 7
    connector.close()
    with pytest.raises(ValidationError) as caught:
        _drive(http=HttpOptions(allow_loopback=True), options=DriveOptions(page_size=0))
    assert caught.value.field == "page_size"
    with pytest.raises(ValidationError) as caught:
        _drive(http=HttpOptions(allow_loopback=True, max_concurrency=2))
    assert caught.value.field == "http"
    with pytest.raises(ValidationError) as caught:
        _drive(http=HttpOptions(allow_loopback=True), options={"page_size": 7})  # type: ignore[arg-type]
    assert caught.value.field == "options"


def test_drive_flat_keywords_still_work_and_warn() -> None:
    """The seventeen keywords of before fold into http= and options=. If this fails, check
    the keyword_folds on GoogleDriveConnector.__init__."""
    with pytest.warns(DeprecationWarning) as caught:
        connector = _drive(allow_loopback=True, page_size=9, max_retries=0, timeout_s=3)  # type: ignore[call-arg]
    assert {"HttpOptions", "DriveOptions"} <= {
        word for w in caught for word in ("HttpOptions", "DriveOptions") if word in str(w.message)
    }
    assert (connector._page_size, connector._max_retries, connector._timeout) == (9, 0, 3.0)
    connector.close()
    assert len(inspect.signature(GoogleDriveConnector).parameters) <= 10


def test_the_http_rerankers_take_http_options_and_fold_the_flat_keywords() -> None:
    """Rerankers take http=HttpOptions (their budget stays timeout_ms); the flat keywords
    warn and still work. If this fails, check the rerankers' keyword_folds and
    _HttpReranker.__init__."""
    from ragport.adapters.rerankers import OpenAICompatibleReranker, TeiReranker

    tei = TeiReranker(LOOPBACK, http=HttpOptions(allow_loopback=True, max_concurrency=2))
    assert "max_concurrency=2" in repr(tei)
    tei.close()
    with pytest.warns(DeprecationWarning, match="HttpOptions"):
        old = OpenAICompatibleReranker(LOOPBACK, "m", allow_loopback=True, max_response_bytes=4096)  # type: ignore[call-arg]
    assert "max_response_bytes=4096" in repr(old)
    old.close()
    for http in (HttpOptions(allow_loopback=True, timeout_s=2), HttpOptions(max_concurrency=2)):
        with pytest.raises(ValidationError) as caught:
            OpenAICompatibleReranker("https://r.example.com", "m", http=http)
        assert caught.value.field == "http"
