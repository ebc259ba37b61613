"""Loaders: a host function, files under a root, and the web against a real loopback server.

Web tests resolve made-up host names with an injected resolver that answers 127.0.0.1 and use
the explicit test-only ``allow_loopback=True``; the SSRF refusals use loopback-type answers
and never open a socket (the resolver or the client would record it).
"""

from __future__ import annotations

import os

import pytest
from fake_http import Reply

from ragport.adapters.loaders import (
    FileDocumentLoader,
    ResourceDocumentLoader,
    WebFetchDocumentLoader,
)
from ragport.domain.errors import LoadError, UrlRejectedError, ValidationError
from ragport.ports.documents import DocumentLoader, LoadedDocument

# --- ResourceDocumentLoader -----------------------------------------------------------------


def test_resource_loader_wraps_bytes_and_passes_documents_through():
    """bytes become a LoadedDocument; a LoadedDocument is returned as is.

    If this fails, check ResourceDocumentLoader.load.
    """
    doc = LoadedDocument(b"x", "text/plain", "s1", {"k": 1})
    loader = ResourceDocumentLoader(loader=lambda uri: doc if uri == "a" else b"raw")
    assert isinstance(loader, DocumentLoader)
    assert loader.load("a") is doc
    assert loader.load("b") == LoadedDocument(b"raw")


def test_resource_loader_failures_are_load_errors_without_their_message():
    """A failing or ill-typed function is LoadError; the foreign message is not kept.

    If this fails, check the except clauses of ResourceDocumentLoader.load.
    """

    def fails(uri):
        raise RuntimeError("SECRET CONTENT")

    with pytest.raises(LoadError) as info:
        ResourceDocumentLoader(loader=fails).load("a")
    assert info.value.reason == "failed" and info.value.__cause__ is None
    assert info.value.__suppress_context__
    with pytest.raises(LoadError) as info:
        ResourceDocumentLoader(loader=lambda uri: "a str").load("a")
    assert info.value.reason == "invalid"


# --- FileDocumentLoader ---------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "leave.md").write_text("# Leave\n")
    (root / "notes.txt").write_text("notes\n")
    (tmp_path / "outside.md").write_text("# Secret\n")
    return root


def test_file_loader_ids_are_root_relative_whatever_the_spelling(corpus):
    """``guides/leave.md``, ``./guides/../guides/leave.md`` and the absolute path are one id.

    If this fails, check FileDocumentLoader.resolve and source_id_for.
    """
    loader = FileDocumentLoader(root=corpus)
    for spelling in (
        "guides/leave.md",
        "./guides/../guides/leave.md",
        str(corpus / "guides" / "leave.md"),
    ):
        doc = loader.load(spelling)
        assert doc.source_id == "guides/leave.md"
        assert doc.media_type == "text/markdown" and doc.data == b"# Leave\n"
    assert loader.load("notes.txt").media_type == "text/plain"


def test_file_loader_refuses_escapes_through_dotdot_and_symlinks(corpus):
    """``..`` out of the root, an absolute path elsewhere and a symlink out are refused.

    If this fails, check the is_relative_to check in FileDocumentLoader.resolve.
    """
    os.symlink(corpus.parent / "outside.md", corpus / "link.md")
    os.symlink(corpus.parent, corpus / "up")
    loader = FileDocumentLoader(root=corpus)
    for escape in ("../outside.md", str(corpus.parent / "outside.md"), "link.md", "up/outside.md"):
        with pytest.raises(LoadError) as info:
            loader.load(escape)
        assert info.value.reason == "outside_root"
    with pytest.raises(LoadError) as info:
        loader.load("missing.md")
    assert info.value.reason == "not_found"


def test_file_loader_caps_size_before_reading(corpus):
    """A file over max_bytes is LoadError(too_large). If this fails, check the fstat check."""
    (corpus / "big.txt").write_bytes(b"x" * 2_000)
    with pytest.raises(LoadError) as info:
        FileDocumentLoader(root=corpus, max_bytes=1_000).load("big.txt")
    assert info.value.reason == "too_large"
    with pytest.raises(ValidationError):
        FileDocumentLoader(root=corpus / "nope")


# --- WebFetchDocumentLoader -----------------------------------------------------------------


class Resolver:
    """Answers every name with fixed addresses and records what it was asked."""

    def __init__(self, *addresses: str):
        self.addresses = addresses
        self.asked: list[str] = []

    def __call__(self, host):
        self.asked.append(host)
        return self.addresses


def _web(resolver, **kwargs):
    return WebFetchDocumentLoader(resolver=resolver, allow_loopback=True, **kwargs)


def _port(server) -> int:
    return server.server_address[1]


def test_web_loader_fetches_from_the_checked_address_with_the_original_host(serve):
    """The request goes to the resolved address, with Host naming the original host.

    If this fails, check WebFetchDocumentLoader.load (target URL and headers).
    """
    server = serve(
        lambda r: Reply(body=b"<h1>Hi</h1>", headers={"Content-Type": "text/html; charset=utf-8"})
    )
    resolver = Resolver("127.0.0.1")
    with _web(resolver) as loader:
        doc = loader.load(f"http://docs.example.test:{_port(server)}/page?x=1#frag")
    assert doc.data == b"<h1>Hi</h1>"
    assert doc.media_type == "text/html; charset=utf-8"
    url = f"http://docs.example.test:{_port(server)}/page?x=1"
    assert doc.metadata == {"url": url, "citation": url, "untrusted": True}
    assert resolver.asked == ["docs.example.test"]
    (request,) = server.requests
    assert request["path"] == "/page?x=1"
    assert request["headers"]["Host"] == f"docs.example.test:{_port(server)}"


def test_web_loader_follows_redirects_revalidating_every_hop(serve):
    """Up to 5 redirects, each hop re-resolved; a hop to an inward address is refused.

    If this fails, check the redirect loop in WebFetchDocumentLoader.load.
    """
    target = serve(lambda r: Reply(body=b"final", headers={"Content-Type": "text/plain"}))
    hop = f"http://next.example.test:{_port(target)}/final"
    first = serve(lambda r: Reply(status=302, headers={"Location": hop}))
    resolver = Resolver("127.0.0.1")
    doc = _web(resolver).load(f"http://start.example.test:{_port(first)}/")
    assert doc.data == b"final" and doc.metadata["url"] == hop
    assert resolver.asked == ["start.example.test", "next.example.test"]

    inward = serve(lambda r: Reply(status=307, headers={"Location": "http://10.0.0.8/admin"}))
    with pytest.raises(UrlRejectedError) as info:
        _web(Resolver("127.0.0.1")).load(f"http://start.example.test:{_port(inward)}/")
    assert info.value.reason == "ip_literal"

    loop = serve(lambda r: Reply(status=301, headers={"Location": r["path"] + "x"}))
    with pytest.raises(UrlRejectedError) as info:
        _web(Resolver("127.0.0.1")).load(f"http://loop.example.test:{_port(loop)}/")
    assert info.value.reason == "redirects"
    assert len(loop.requests) == 6


def test_web_loader_streams_under_the_byte_cap(serve):
    """A 50 MB body is cut off at max_bytes with LoadError(too_large), chunked or not.

    If this fails, check the streaming loop in WebFetchDocumentLoader._read.
    """
    body = b"x" * 50_000_000
    plain = serve(lambda r: Reply(body=body, headers={"Content-Type": "text/plain"}))
    chunked = serve(
        lambda r: Reply(body=body[:3_000_000], chunked=True, headers={"Content-Type": "text/plain"})
    )
    for server in (plain, chunked):
        with pytest.raises(LoadError) as info:
            _web(Resolver("127.0.0.1")).load(f"http://big.example.test:{_port(server)}/")
        assert info.value.reason == "too_large"


def test_web_loader_refuses_errors_and_unlisted_media_types(serve):
    """HTTP 404 is LoadError(http_status); image/png is LoadError(media_type).

    If this fails, check WebFetchDocumentLoader._read.
    """
    missing = serve(lambda r: Reply(status=404, body=b"no", headers={"Content-Type": "text/plain"}))
    image = serve(lambda r: Reply(body=b"\x89PNG", headers={"Content-Type": "image/png"}))
    for server, reason in ((missing, "http_status"), (image, "media_type")):
        with pytest.raises(LoadError) as info:
            _web(Resolver("127.0.0.1")).load(f"http://x.example.test:{_port(server)}/")
        assert info.value.reason == reason


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "scheme"),
        ("ftp://files.example.test/a", "scheme"),
        ("gopher://x.example.test/", "scheme"),
        ("http://user:pw@docs.example.test/", "credentials"),
        ("http://localhost:8080/", "localhost"),
        ("http://api.localhost/", "localhost"),
        ("http://127.0.0.1/", "ip_literal"),
        ("http://[::1]/", "ip_literal"),
        ("http://[::ffff:127.0.0.1]/", "ip_literal"),
        ("http://2130706433/", "ip_literal"),
        ("http://0x7f.1/", "ip_literal"),
        ("http://169.254.169.254/latest/meta-data/", "ip_literal"),
        ("", "malformed"),
    ],
)
def test_web_loader_refuses_urls_before_resolving(url, reason):
    """Schemes, credentials, localhost and IP literals are refused before any lookup.

    If this fails, check WebFetchDocumentLoader._parse and _check.
    """
    resolver = Resolver("93.184.216.34")
    with pytest.raises(UrlRejectedError) as info:
        WebFetchDocumentLoader(resolver=resolver).load(url)
    assert info.value.reason == reason
    assert resolver.asked == []


@pytest.mark.parametrize(
    "answer",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
        "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "2001:db8::1",
    ],
)  # fmt: skip
def test_web_loader_refuses_hosts_resolving_inward(answer):
    """A name resolving to a private, loopback, link-local, multicast, unspecified or reserved
    address (IPv4-mapped unwrapped) is refused, and no request is sent.

    If this fails, check check_address.
    """
    sent = []

    class Client:
        def build_request(self, *a, **k):
            sent.append(a)

        def send(self, *a, **k):
            sent.append(a)

    resolver = Resolver("93.184.216.34", answer)  # one bad answer among good ones is enough
    with pytest.raises(UrlRejectedError) as info:
        WebFetchDocumentLoader(client=Client(), resolver=resolver).load(
            "https://docs.example.test/"
        )
    assert info.value.reason == "address"
    assert sent == []


def test_loopback_needs_the_explicit_test_allowance():
    """Without allow_loopback a loopback answer is refused like any inward address.

    If this fails, check the allow_loopback branch of check_address.
    """
    with pytest.raises(UrlRejectedError) as info:
        WebFetchDocumentLoader(resolver=Resolver("127.0.0.1")).load("http://docs.example.test/")
    assert info.value.reason == "address"
    with pytest.raises(UrlRejectedError) as info:
        _web(Resolver("10.0.0.1")).load("http://docs.example.test/")
    assert info.value.reason == "address"


def test_unresolvable_hosts_are_refused():
    """A resolver error or an empty answer is UrlRejectedError(unresolvable).

    If this fails, check the resolver call in _check.
    """

    def broken(host):
        raise OSError("no such host")

    for resolver in (broken, Resolver()):
        with pytest.raises(UrlRejectedError) as info:
            WebFetchDocumentLoader(resolver=resolver).load("http://nowhere.example.test/")
        assert info.value.reason == "unresolvable"


@pytest.fixture
def tls_server(tmp_path):
    """A loopback HTTPS FakeServer whose certificate names docs.example.test only."""
    import shutil
    import ssl
    import subprocess
    import threading

    from fake_http import FakeServer, stop

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=docs.example.test", "-addext", "subjectAltName=DNS:docs.example.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = FakeServer(lambda r: Reply(body=b"secure", headers={"Content-Type": "text/plain"}))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield server, cert
    stop(server)


def test_https_connects_to_the_checked_address_but_verifies_the_original_name(tls_server):
    """TLS goes to the resolved 127.0.0.1 yet checks the certificate against the URL's host.

    If this fails, check the sni_hostname extension in WebFetchDocumentLoader.load.
    """
    import ssl

    import httpx

    server, cert = tls_server
    trust = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(verify=trust, trust_env=False) as client:
        loader = WebFetchDocumentLoader(
            client=client, resolver=Resolver("127.0.0.1"), allow_loopback=True
        )
        doc = loader.load(f"https://docs.example.test:{_port(server)}/")
        assert doc.data == b"secure"
        with pytest.raises(LoadError) as info:  # the certificate does not name this host
            loader.load(f"https://other.example.test:{_port(server)}/")
        assert info.value.reason == "transport"
