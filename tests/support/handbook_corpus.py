"""A small granted corpus the integration faces are tested on (provider, LangChain,
LlamaIndex, MCP): three sources the staff group may read and one only the CEO may read."""

from __future__ import annotations

import ragport
from ragport.ports.embedder import Embedder
from ragport.ports.status import IngestionStatusStore
from ragport.ports.store import ChunkStore

SCOPE = ragport.Scope("acme", "kb", "handbook")
OTHER_SCOPE = ragport.Scope("acme", "kb", "archive")
ALICE = ragport.Authorization("alice", "acme", group_ids=("staff",))
MALLORY = ragport.Authorization("mallory", "acme")
DENIED_SOURCE = "merger-plans"
SECRET_WORD = "zanzibar"  # appears only in the denied source

DOCUMENTS = {
    "leave-policy": (
        "# Leave\n\n## Parental leave\n\nParental leave lasts up to 16 weeks at full pay.\n\n"
        "## Vacation\n\nVacation days accrue monthly and carry over until March.\n"
    ),
    "expenses": (
        "# Expenses\n\n## Approval\n\nA payment above 10000 euros needs approval by two "
        "directors.\n\n## Travel\n\nTravel is booked through the travel desk.\n"
    ),
    "onboarding": (
        "# Onboarding\n\n## First week\n\nNew staff meet their buddy and collect a badge.\n\n"
        "## Laptop\n\nLaptops are handed out on the first day.\n"
    ),
    DENIED_SOURCE: (
        "# Merger\n\n## Project zanzibar\n\nThe zanzibar merger closes in June; the payment "
        "approval and vacation freeze are secret.\n"
    ),
}


def build_handbook(
    store: ChunkStore,
    embedder: Embedder,
    scope: ragport.Scope = SCOPE,
    status_store: IngestionStatusStore | None = None,
) -> None:
    """Index every document (small Markdown chunks) and grant it: staff may read all but the
    merger plans, which only the principal ``ceo`` may read."""
    for source_id, text in DOCUMENTS.items():
        chunks = ragport.domain.chunk_markdown(text, source_id=source_id, size=120, overlap=0)
        ragport.application.replace_source(
            source_id=source_id,
            chunks=chunks,
            embedder=embedder,
            store=store,
            scope=scope,
            write_options=ragport.WriteOptions(status_store=status_store),
        )
    store.set_source_access(
        scope,
        [
            ragport.Grant(source_id, group_ids=("staff",))
            for source_id in DOCUMENTS
            if source_id != DENIED_SOURCE
        ]
        + [ragport.Grant(DENIED_SOURCE, principal_ids=("ceo",))],
    )
