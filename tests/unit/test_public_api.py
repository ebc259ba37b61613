"""The public names of API.md stay importable, and importing ragport has no side effects."""

from __future__ import annotations

import subprocess
import sys

import ragport

API_NAMES = {
    "Scope", "Authorization", "Grant", "Chunk", "Limits", "DEFAULT_LIMITS", "HARD_LIMITS", "Hit",
    "Citation", "Provenance", "Trust", "AccessDenial", "Rename", "ValidationError", "ScopeError",
    "CapabilityError", "EmbedderMismatchError", "RerankError", "ParseError", "UrlRejectedError",
    "SyncCursorError", "AccessDeniedError", "PropagationError", "AbortedError", "RagportError",
    "chunk_text", "chunk_markdown", "index_chunks", "replace_source", "delete_source",
    "replace_document", "LoadError",
    "retrieve_context", "list_ingestion_status", "rollback_generation", "compact",
    "RagContextProvider", "ContextBlock", "Evidence", "evidence_from_citation",
}  # fmt: skip


def test_every_api_name_is_exported_from_ragport():
    """Every name API.md fixes is in ``ragport.__all__`` and resolves.

    If this fails, check ragport/__init__.py against shared/API.md.
    """
    missing = API_NAMES - set(ragport.__all__)
    assert not missing
    for name in ragport.__all__:
        assert getattr(ragport, name) is not None


def test_names_are_importable_from_the_layer_that_defines_them():
    """Domain names come from ragport.domain, use cases from ragport.application.

    If this fails, check the re-exports in ragport/domain/__init__.py and application/__init__.py.
    """
    from ragport import application, domain

    assert domain.Scope is ragport.Scope and domain.chunk_markdown is ragport.chunk_markdown
    assert application.replace_source is ragport.replace_source
    assert application.RagContextProvider is ragport.RagContextProvider
    assert application.evidence_from_citation is ragport.evidence_from_citation
    assert application.replace_document is ragport.replace_document
    assert domain.errors.EmbedderMismatchError.code == "ERR_RAG_EMBEDDER_MISMATCH"


def test_all_errors_share_one_root():
    """Every exported error class derives from RagportError.

    If this fails, check the class bases in ragport/domain/errors.py.
    """
    errors = [getattr(ragport, n) for n in ragport.__all__ if n.endswith("Error")]
    assert len(errors) >= 11
    assert all(issubclass(e, ragport.RagportError) for e in errors)


def test_import_opens_no_socket_and_reads_no_environment():
    """Importing ragport (and its in-memory adapters) opens no socket and starts no thread.

    If this fails, look for work done at import time in the module the traceback names.
    """
    code = (
        "import socket, threading\n"
        "def refuse(*a, **k): raise RuntimeError('socket opened at import')\n"
        "socket.socket = refuse\n"
        "before = threading.active_count()\n"
        "import ragport, ragport.adapters.memory, ragport.adapters.embedders, ragport.bootstrap\n"
        "assert threading.active_count() == before\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_import_loads_no_framework():
    """``import ragport`` (and ``ragport.integrations``) imports no LangChain, LlamaIndex or MCP.

    If this fails, look for a framework import outside ragport/integrations/<framework>.py.
    """
    code = (
        "import sys, ragport, ragport.integrations, ragport.bootstrap\n"
        "loaded = [m for m in ('langchain_core', 'llama_index', 'mcp', 'pydantic') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_ragport_ports_exports_every_public_name_of_every_port_module():
    """``ragport.ports.__all__`` is exactly the union of the port modules' ``__all__``.

    If this fails, re-export the new port name in ragport/ports/__init__.py.
    """
    import importlib
    import pkgutil

    import ragport.ports

    expected: set[str] = set()
    for info in pkgutil.iter_modules(ragport.ports.__path__):
        module = importlib.import_module(f"ragport.ports.{info.name}")
        expected.update(module.__all__)
    assert set(ragport.ports.__all__) == expected
    for name in expected:
        assert getattr(ragport.ports, name) is not None, name
