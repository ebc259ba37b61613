"""Composition root: build adapters from a URL or config and bind them to the use cases.

The only package (with ``cli``) that imports both ``application`` and ``adapters``. Nothing
here runs at import time; optional adapters are imported when a URL asks for them.

Modules: ``stores`` (stores, checkpoints, embedders and a ``Rag`` from a URL), ``ingest``
(the file walk and ``ingest_files``: the file loader and ragport's parsers wired to
``ragport.application.ingest``), ``syncing`` (``sync_connector``: ``sync_knowledge`` with
ragport's parsers), ``corpus`` (listing and re-embedding a corpus), ``roots`` and
``corpus_settings`` (what ``ragport ingest`` records per corpus), ``evaluate`` (the bounded
read of ``ragport eval``'s files), ``config`` (``ragport.toml``), ``plugins`` (stores,
embedders and parsers installed as entry points). The demo lives in ``ragport.demo``.
Every name is importable from ``ragport.bootstrap`` itself.
"""

from __future__ import annotations

from ragport.bootstrap.config import (
    CONFIG_FILE,
    CliConfig,
    LimitsConfig,
    QueryDefaults,
    find_config,
    load_config,
)
from ragport.bootstrap.corpus import (
    FORGOTTEN,
    ReindexResult,
    SourceRow,
    list_sources,
    reindex_corpus,
)
from ragport.bootstrap.ingest import (
    DOCUMENT_SUFFIXES,
    MARKDOWN_SUFFIXES,
    Candidate,
    CorpusRoots,
    FileOutcome,
    collect_documents,
    default_root,
    demo_documents,
    ingest_files,
    ingest_limits,
    ingest_text,
    walk_documents,
)
from ragport.bootstrap.plugins import InstalledPlugin, installed_plugins
from ragport.bootstrap.plugins import clear_cache as clear_plugin_cache
from ragport.bootstrap.stores import (
    EMBEDDED,
    Rag,
    Stores,
    build_embedder,
    embedder_name_for,
    open_checkpoints,
    open_rag,
    open_stores,
    postgres_url,
    replace_document,
    sync_knowledge,
)
from ragport.bootstrap.syncing import sync_connector

__all__ = [
    "CONFIG_FILE",
    "DOCUMENT_SUFFIXES",
    "EMBEDDED",
    "FORGOTTEN",
    "MARKDOWN_SUFFIXES",
    "Candidate",
    "CliConfig",
    "CorpusRoots",
    "FileOutcome",
    "InstalledPlugin",
    "LimitsConfig",
    "QueryDefaults",
    "Rag",
    "ReindexResult",
    "SourceRow",
    "Stores",
    "build_embedder",
    "clear_plugin_cache",
    "collect_documents",
    "default_root",
    "demo_documents",
    "embedder_name_for",
    "find_config",
    "ingest_files",
    "ingest_limits",
    "ingest_text",
    "installed_plugins",
    "list_sources",
    "load_config",
    "open_checkpoints",
    "open_rag",
    "open_stores",
    "postgres_url",
    "reindex_corpus",
    "replace_document",
    "sync_connector",
    "sync_knowledge",
    "walk_documents",
]
