"""The outbox relay: mirrors policies into a corpus the host cannot join.

The service's public search runs on another machine over ragport's in-memory store (or any
store in another database), so its writes cannot join the service's transaction. Instead
``SqlPolicyRepository.save`` writes an outbox row in the same transaction as the policy, and
``relay`` applies the undone rows later, in order, and marks each done. Every application is
idempotent: the mirror is set from the policy's *current* row (a replace skipped by its
content hash when unchanged, a delete of what is gone deleting nothing), so a row applied
twice (the relay died after the write, before marking it) leaves the mirror the same, and a
row applied late (the relay was down) brings the mirror up to date.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from sqlalchemy import Engine, select, update

import ragport
from policy_service.adapters import outbox_table, policies_table
from ragport.ports.embedder import Embedder
from ragport.ports.store import ChunkStore

MIRROR = ragport.Scope("acme", "public", "policies")


def relay(
    engine: Engine,
    *,
    schema: str,
    mirror: ChunkStore,
    embedder: Embedder,
    after_write: Callable[[int], None] = lambda seq: None,
) -> int:
    """Apply every undone outbox row in order; returns how many were applied.

    ``after_write(seq)`` runs between a row's write to the mirror and its mark (the tests
    crash the relay there)."""
    outbox, policies = outbox_table(schema), policies_table(schema)
    with engine.connect() as conn:
        pending = conn.execute(
            select(outbox.c.seq, outbox.c.policy_id)
            .where(outbox.c.done == 0)
            .order_by(outbox.c.seq)
        ).all()
    for seq, policy_id in pending:
        with engine.connect() as conn:
            row = conn.execute(select(policies).where(policies.c.policy_id == policy_id)).one()
        _apply(mirror, embedder, policy_id, None if row.retracted else row.body, row.title)
        after_write(seq)
        with engine.begin() as conn:
            conn.execute(update(outbox).where(outbox.c.seq == seq).values(done=1))
    return len(pending)


def _apply(
    mirror: ChunkStore, embedder: Embedder, policy_id: str, body: str | None, title: str
) -> None:
    if body is None:  # retracted: the mirror forgets it (idempotent)
        ragport.application.delete_source(source_id=policy_id, store=mirror, scope=MIRROR)
        return
    document = f"# {title}\n\n{body}\n"
    ragport.application.replace_source(
        source_id=policy_id,
        chunks=ragport.domain.chunk_markdown(document, source_id=policy_id),
        content_hash=hashlib.sha256(document.encode()).hexdigest(),  # a replay is skipped
        embedder=embedder,
        store=mirror,
        scope=MIRROR,
    )
