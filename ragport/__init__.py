"""ragport: a hexagonal domain core for retrieval-augmented generation.

It turns documents a host owns into cited, access-checked context for a language model and
keeps that context correct when documents are replaced, renamed, revoked or deleted.
Importing ragport has no side effects: no engines, no network, no environment reads.

The top level is what a newcomer needs (docs/index.md groups it):

- the facade: ``open_rag`` (a ``Rag`` over the stores of a URL) and ``Rag`` (every lifecycle
  operation as a typed method); ``ragport.aio.AsyncRag`` is the same as coroutines;
- the values users construct: ``Scope``, ``Authorization``, ``Grant``, ``Chunk``, ``Rename``,
  ``RetrievalRequest``, ``WriteOptions``, ``Runtime``, ``Limits``;
- the results users read: ``RetrievalResult``, ``Hit``, ``Citation``, ``AccessDenial``,
  ``ReplaceResult``, ``SyncResult``;
- the errors commonly caught, under ``RagportError`` (the whole tree: ``ragport.domain.errors``).

Everything else lives in the layer that defines it: the functional use cases and their results
in ``ragport.application``, the domain model in ``ragport.domain``, every error in
``ragport.domain.errors``, the wiring in ``ragport.bootstrap``, adapters in
``ragport.adapters.<technology>``. ``Rag`` and ``open_rag`` are the wired ones
(``ragport.bootstrap``): ``parser=`` defaults to ``ragport.adapters.parsers.parser_for``.

Names that left the top level (``_MOVED``) still resolve, with a ``DeprecationWarning`` naming
their home, for one release (docs/deprecations.md).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

from ragport.application import (
    ReplaceResult,
    RetrievalRequest,
    RetrievalResult,
    Runtime,
    SyncResult,
    WriteOptions,
)
from ragport.bootstrap.stores import Rag, open_rag
from ragport.domain import (
    AbortedError,
    AccessDenial,
    AccessDeniedError,
    Authorization,
    CapabilityError,
    Chunk,
    Citation,
    EmbedderMismatchError,
    ForgottenError,
    Grant,
    Hit,
    Limits,
    ParseError,
    RagportError,
    Rename,
    Scope,
    StoreError,
    ValidationError,
)
from ragport.domain.deprecation import REMOVED_IN as _REMOVED_IN

__version__ = "0.1.0.dev0"

__all__ = [  # grouped in the module docstring and docs/index.md
    "AbortedError",
    "AccessDenial",
    "AccessDeniedError",
    "Authorization",
    "CapabilityError",
    "Chunk",
    "Citation",
    "EmbedderMismatchError",
    "ForgottenError",
    "Grant",
    "Hit",
    "Limits",
    "ParseError",
    "Rag",
    "RagportError",
    "Rename",
    "ReplaceResult",
    "RetrievalRequest",
    "RetrievalResult",
    "Runtime",
    "Scope",
    "StoreError",
    "SyncResult",
    "ValidationError",
    "WriteOptions",
    "__version__",
    "open_rag",
]

_HOMES: dict[str, tuple[str, ...]] = {
    "ragport.domain": (
        "ABSOLUTE_CAPS",
        "Access",
        "AccessDecision",
        "Capabilities",
        "Ceilings",
        "DEFAULT_CEILINGS",
        "DEFAULT_LIMITS",
        "FusedCandidate",
        "HARD_LIMITS",
        "IngestionStatus",
        "Provenance",
        "Record",
        "StatusPage",
        "Tombstone",
        "Trust",
        "chunk_markdown",
        "chunk_text",
        "fuse_reciprocal_rank",
        "is_valid_content_hash",
        "tokenize_lexical",
    ),
    "ragport.domain.errors": (
        "EmbedderError",
        "LineageChangedError",
        "LoadError",
        "PropagationError",
        "ReplicaLagError",
        "RerankError",
        "ScopeError",
        "SyncCursorError",
        "UrlRejectedError",
    ),
    "ragport.application": (
        "CompactResult",
        "ContextBlock",
        "DeletionPropagator",
        "Evidence",
        "IndexResult",
        "PropagationResult",
        "RagContextProvider",
        "RagDeletionHandler",
        "RenameBatchResult",
        "RenameEvent",
        "RenameFailure",
        "RepointResult",
        "RollbackResult",
        "SharedGeneration",
        "SyncFailure",
        "apply_source_renames",
        "compact",
        "create_deletion_propagator",
        "delete_source",
        "estimate_tokens",
        "evidence_from_citation",
        "index_chunks",
        "index_derived",
        "list_ingestion_status",
        "publish_generation",
        "replace_source",
        "repoint_source",
        "rerank_hits",
        "retrieve_context",
        "rollback_generation",
    ),
    "ragport.bootstrap": (
        "replace_document",
        "sync_knowledge",
    ),
}
_MOVED: dict[str, str] = {name: home for home, names in _HOMES.items() for name in names}
"""Names that left the top level, each with the module it is imported from now."""

if TYPE_CHECKING:
    # Type checkers see the moved names as they were (their DeprecationWarning is a run-time
    # one): a host's mypy run stays green for the release they keep working.
    from ragport.application import CompactResult as CompactResult
    from ragport.application import ContextBlock as ContextBlock
    from ragport.application import DeletionPropagator as DeletionPropagator
    from ragport.application import Evidence as Evidence
    from ragport.application import IndexResult as IndexResult
    from ragport.application import PropagationResult as PropagationResult
    from ragport.application import RagContextProvider as RagContextProvider
    from ragport.application import RagDeletionHandler as RagDeletionHandler
    from ragport.application import RenameBatchResult as RenameBatchResult
    from ragport.application import RenameEvent as RenameEvent
    from ragport.application import RenameFailure as RenameFailure
    from ragport.application import RepointResult as RepointResult
    from ragport.application import RollbackResult as RollbackResult
    from ragport.application import SharedGeneration as SharedGeneration
    from ragport.application import SyncFailure as SyncFailure
    from ragport.application import apply_source_renames as apply_source_renames
    from ragport.application import compact as compact
    from ragport.application import create_deletion_propagator as create_deletion_propagator
    from ragport.application import delete_source as delete_source
    from ragport.application import estimate_tokens as estimate_tokens
    from ragport.application import evidence_from_citation as evidence_from_citation
    from ragport.application import index_chunks as index_chunks
    from ragport.application import index_derived as index_derived
    from ragport.application import list_ingestion_status as list_ingestion_status
    from ragport.application import publish_generation as publish_generation
    from ragport.application import replace_source as replace_source
    from ragport.application import repoint_source as repoint_source
    from ragport.application import rerank_hits as rerank_hits
    from ragport.application import retrieve_context as retrieve_context
    from ragport.application import rollback_generation as rollback_generation
    from ragport.bootstrap import replace_document as replace_document
    from ragport.bootstrap import sync_knowledge as sync_knowledge
    from ragport.domain import ABSOLUTE_CAPS as ABSOLUTE_CAPS
    from ragport.domain import DEFAULT_CEILINGS as DEFAULT_CEILINGS
    from ragport.domain import DEFAULT_LIMITS as DEFAULT_LIMITS
    from ragport.domain import HARD_LIMITS as HARD_LIMITS
    from ragport.domain import Access as Access
    from ragport.domain import AccessDecision as AccessDecision
    from ragport.domain import Capabilities as Capabilities
    from ragport.domain import Ceilings as Ceilings
    from ragport.domain import FusedCandidate as FusedCandidate
    from ragport.domain import IngestionStatus as IngestionStatus
    from ragport.domain import Provenance as Provenance
    from ragport.domain import Record as Record
    from ragport.domain import StatusPage as StatusPage
    from ragport.domain import Tombstone as Tombstone
    from ragport.domain import Trust as Trust
    from ragport.domain import chunk_markdown as chunk_markdown
    from ragport.domain import chunk_text as chunk_text
    from ragport.domain import fuse_reciprocal_rank as fuse_reciprocal_rank
    from ragport.domain import is_valid_content_hash as is_valid_content_hash
    from ragport.domain import tokenize_lexical as tokenize_lexical
    from ragport.domain.errors import EmbedderError as EmbedderError
    from ragport.domain.errors import LineageChangedError as LineageChangedError
    from ragport.domain.errors import LoadError as LoadError
    from ragport.domain.errors import PropagationError as PropagationError
    from ragport.domain.errors import ReplicaLagError as ReplicaLagError
    from ragport.domain.errors import RerankError as RerankError
    from ragport.domain.errors import ScopeError as ScopeError
    from ragport.domain.errors import SyncCursorError as SyncCursorError
    from ragport.domain.errors import UrlRejectedError as UrlRejectedError


if not TYPE_CHECKING:  # to a type checker a name ragport never had stays an error

    def __getattr__(name: str) -> object:
        """A name that left the top level: warn, naming its home, then return it from there."""
        home = _MOVED.get(name)
        if home is None:
            raise AttributeError(f"module 'ragport' has no attribute {name!r}")
        warnings.warn(
            f"ragport.{name} has moved out of the top level: import it from {home} "
            f"({home}.{name}); the top-level alias will be removed in ragport {_REMOVED_IN} "
            "(docs/deprecations.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
