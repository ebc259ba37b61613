"""Answers in a Content-Encoding ragport did not ask for (it sends ``Accept-Encoding:
identity``) are refused on the header, before any byte is decoded: the web loader, the
shared ``post_json`` (HTTP embedders and rerankers) and the Drive client.

httpx decodes each raw chunk whole before a caller can count it, so a ~50 kB zstd body or a
~2 kB doubly gzipped one would become a 1 GiB allocation. The bombs are served over real
loopback HTTP by this process; each client runs in a child under ``RLIMIT_AS``
(tests/support/hostile.py), which reports its peak memory.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_http import Reply, bomb
from hostile import run_limited

from ragport.adapters._http import HttpFailure, post_json

# path segment -> Content-Encoding header; each body inflates to 1 GiB of zeros.
ENCODINGS = {
    "gzip": "gzip",
    "deflate": "deflate",
    "gzip2": "gzip, gzip",
    "zstd": "zstd",
    "br": "br",
}

_CHILD_PRELUDE = """
import os, json
URL = os.environ["BOMB_URL"]
def outcome(run):
    try:
        run()
    except Exception as exc:
        return {
            "error": type(exc).__name__,
            "reason": getattr(exc, "reason", None),
            "kind": getattr(exc, "kind", None),
            "retryable": getattr(exc, "retryable", None),
            "chained": exc.__cause__ is not None or exc.__context__ is not None,
        }
    return {"error": None}
"""

CLIENTS = {
    "web": """
from ragport.adapters.loaders import WebFetchDocumentLoader
host = URL.replace("127.0.0.1", "bomb.example.test")
loader = WebFetchDocumentLoader(resolver=lambda name: ["127.0.0.1"], allow_loopback=True)
emit({key: outcome(lambda: loader.load(f"{host}/{key}/page.html")) for key in KEYS})
""",
    "post_json": """
import time, httpx
from ragport.adapters._http import post_json
client = httpx.Client(follow_redirects=False, trust_env=False)
def post(key):
    post_json(client, f"{URL}/{key}/embed", {"inputs": ["a"]}, api_key=None, timeout_s=30,
              deadline=time.monotonic() + 30, max_bytes=4 << 20)
emit({key: outcome(lambda: post(key)) for key in KEYS})
""",
    "embedder": """
from ragport.adapters.embedders import HttpOptions, TeiEmbedder
def embed(key):
    TeiEmbedder(f"{URL}/{key}", dimensions=4, http=HttpOptions(allow_loopback=True)).embed(["a"])
emit({key: outcome(lambda: embed(key)) for key in KEYS})
""",
    "reranker": """
from ragport.adapters.rerankers import HttpOptions, TeiReranker
from ragport.contract_tests.reranker import contract_hits
def rerank(key):
    TeiReranker(f"{URL}/{key}", http=HttpOptions(allow_loopback=True)).rerank(
        "q", list(contract_hits()))
emit({key: outcome(lambda: rerank(key)) for key in KEYS})
""",
    "drive": """
from ragport.adapters.connectors import (
    DriveOptions, GoogleDriveConnector, HttpOptions, drive_permissions_access)
def listing(key):
    GoogleDriveConnector(token_provider=lambda: "t", resolve_access=drive_permissions_access,
                         base_url=f"{URL}/{key}", http=HttpOptions(allow_loopback=True),
                         options=DriveOptions(max_retries=0)).bootstrap()
emit({key: outcome(lambda: listing(key)) for key in KEYS})
""",
}

_NO = {"kind": None, "chained": False}
EXPECTED: dict[str, dict[str, Any]] = {
    "web": {"error": "LoadError", "reason": "encoding", "retryable": None, **_NO},
    "post_json": {
        "error": "HttpFailure",
        "reason": None,
        "kind": "encoding",
        "retryable": False,
        "chained": False,
    },
    "embedder": {"error": "EmbedderError", "reason": None, "retryable": False, **_NO},
    "reranker": {"error": "RerankError", "reason": None, "retryable": False, **_NO},
    "drive": {"error": "LoadError", "reason": "encoding", "retryable": None, **_NO},
}


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """Each encoding's 1 GiB bomb, built once for the module (a few seconds)."""
    return {key: bomb(header) for key, header in ENCODINGS.items()}


@pytest.fixture
def bomb_server(serve, bombs):
    """A loopback server answering every request under /<key>/ with that key's bomb."""

    def respond(request: dict[str, Any]) -> Reply:
        key = request["path"].split("/")[1]
        return Reply(
            200,
            bombs[key],
            headers={"Content-Type": "text/html", "Content-Encoding": ENCODINGS[key]},
        )

    return serve(respond)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_an_unasked_for_encoding_is_refused_before_decoding(client, bomb_server) -> None:
    """Every HTTP reader refuses a gzip/deflate/zstd/br answer with its own typed error,
    in bounded memory. If this fails, check that it reads ``iter_raw`` through
    ``ragport.adapters._http.read_body`` and never ``iter_bytes``/``read``/``json``."""
    code = _CHILD_PRELUDE + f"KEYS = {sorted(ENCODINGS)!r}\n" + CLIENTS[client]
    out = run_limited(
        code,
        memory_mb=1024,
        timeout_s=90,
        env={"BOMB_URL": bomb_server.url, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert out.result == {key: EXPECTED[client] for key in sorted(ENCODINGS)}
    assert out.peak_mb < 300


def test_identity_declared_explicitly_is_read(serve) -> None:
    """``Content-Encoding: identity`` (what was asked for) is read as it is. If this fails,
    check the encoding test in ``read_body``."""
    import time

    import httpx

    server = serve(
        lambda request: Reply(200, b'{"ok": 1}', headers={"Content-Encoding": "identity"})
    )
    with httpx.Client(trust_env=False) as client:
        body = post_json(
            client,
            server.url + "/x",
            {},
            api_key=None,
            timeout_s=5,
            deadline=time.monotonic() + 5,
            max_bytes=100,
        )
    assert json.loads(body) == {"ok": 1}


def test_an_encoded_body_under_the_ceiling_is_still_refused(serve) -> None:
    """A small gzip answer is refused too (the header decides, not the size): kind
    ``encoding``, not retryable. If this fails, check ``read_body``'s encoding test."""
    import gzip
    import time

    import httpx

    server = serve(
        lambda request: Reply(
            200, gzip.compress(b'{"ok": 1}'), headers={"Content-Encoding": "gzip"}
        )
    )
    with httpx.Client(trust_env=False) as client, pytest.raises(HttpFailure) as caught:
        post_json(
            client,
            server.url + "/x",
            {},
            api_key=None,
            timeout_s=5,
            deadline=time.monotonic() + 5,
            max_bytes=100,
        )
    assert caught.value.kind == "encoding"
    assert caught.value.retryable is False
