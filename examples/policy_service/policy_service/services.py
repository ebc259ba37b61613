"""The host's use cases: each one changes a ``Policy`` and its corpus in one unit of work.

- ``create`` / ``revise``: the text and who may read it in one write (``replace_source`` with
  its ``grant``); a revision retires the summaries of the old text (they are ``pinned``).
- ``share`` / ``unshare``: the grant alone; an unshare is immediate at the host's commit.
- ``summarise``: a summary stored as a derived record pinned to the revision it read.
- ``retract``: deletion propagation with the opt-in erasure layer: the text, its summaries
  and their statistics leave every table.
- ``ask``: retrieval for a user in some groups (grants enforced in the store).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ragport
from policy_service.domain import Policy, PolicyError
from ragport.application import DerivedErasureHandler, RagDeletionHandler
from ragport.ports.embedder import Embedder
from ragport.ports.store import ChunkStore


class PolicyRepository(Protocol):
    def get(self, policy_id: str) -> Policy | None: ...
    def save(self, policy: Policy) -> None: ...


class UnitOfWork(Protocol):
    policies: PolicyRepository
    corpus: ChunkStore
    scope: ragport.Scope

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> Any: ...
    def commit(self) -> None: ...


def _grant(policy: Policy) -> ragport.Grant:
    return ragport.Grant(policy.policy_id, group_ids=tuple(sorted(policy.groups)))


def _write_text(uow: UnitOfWork, policy: Policy, embedder: Embedder) -> None:
    document = f"# {policy.title}\n\n{policy.body}\n"
    ragport.application.replace_source(
        source_id=policy.policy_id,
        chunks=ragport.domain.chunk_markdown(document, source_id=policy.policy_id),
        content_hash=hashlib.sha256(document.encode()).hexdigest(),
        grant=_grant(policy),  # content and access in one write
        embedder=embedder,
        store=uow.corpus,
        scope=uow.scope,
    )


def _load(uow: UnitOfWork, policy_id: str) -> Policy:
    policy = uow.policies.get(policy_id)
    if policy is None:
        raise PolicyError("no such policy")
    return policy


def create(
    uow: UnitOfWork,
    *,
    policy_id: str,
    title: str,
    body: str,
    groups: Sequence[str],
    embedder: Embedder,
) -> None:
    with uow:
        if uow.policies.get(policy_id) is not None:
            raise PolicyError("the policy exists")
        policy = Policy(policy_id, title, body, groups=set(groups))
        uow.policies.save(policy)
        _write_text(uow, policy, embedder)
        uow.commit()


def revise(uow: UnitOfWork, *, policy_id: str, body: str, embedder: Embedder) -> None:
    with uow:
        policy = _load(uow, policy_id)
        policy.revise(body)
        uow.policies.save(policy)
        _write_text(uow, policy, embedder)  # retires the summaries pinned to the old text
        uow.commit()


def _set_groups(uow: UnitOfWork, policy_id: str, change: Callable[[Policy], None]) -> None:
    with uow:
        policy = _load(uow, policy_id)
        change(policy)
        uow.policies.save(policy)
        uow.corpus.set_source_access(uow.scope, [_grant(policy)])  # type: ignore[attr-defined]
        uow.commit()


def share(uow: UnitOfWork, *, policy_id: str, group: str) -> None:
    _set_groups(uow, policy_id, lambda policy: policy.share(group))


def unshare(uow: UnitOfWork, *, policy_id: str, group: str) -> None:
    _set_groups(uow, policy_id, lambda policy: policy.unshare(group))


def summarise(
    uow: UnitOfWork,
    *,
    policy_id: str,
    summarizer: Callable[[str], str],
    embedder: Embedder,
) -> None:
    with uow:
        policy = _load(uow, policy_id)
        read_at = uow.corpus.current_generation(uow.scope)
        ragport.application.index_derived(
            record_id=f"{policy_id}-summary",
            text=summarizer(policy.body),
            lineage=[policy_id],
            pinned=True,  # retired when the policy's text is revised
            as_of=read_at,  # refused if it was revised since this read
            embedder=embedder,
            store=uow.corpus,
            scope=uow.scope,
        )
        uow.commit()


def retract(uow: UnitOfWork, *, policy_id: str) -> None:
    with uow:
        policy = _load(uow, policy_id)
        policy.retract()
        uow.policies.save(policy)
        store, scope = uow.corpus, uow.scope
        ragport.application.create_deletion_propagator(
            scope=scope,
            store=store,
            authorization=None,
            as_owner=True,  # the host itself, acting for the document's owner
            handlers=[
                RagDeletionHandler(store=store, scope=scope),
                DerivedErasureHandler(store=store, scope=scope),
            ],
        ).propagate(policy_id)
        uow.commit()


def ask(
    store: ChunkStore, question: str, *, user: str, groups: Sequence[str], embedder: Embedder
) -> list[str]:
    """The source ids ``user`` (in ``groups``) may be answered from, best first."""
    result = ragport.application.retrieve_context(
        question,
        embedder=embedder,
        store=store,
        scope=ragport.Scope("acme", "policies", "handbook"),
        authorization=ragport.Authorization(user, "acme", group_ids=tuple(groups)),
        request=ragport.RetrievalRequest(lexical="auto", top_k=10),
    )
    return list(dict.fromkeys(hit.source_id for hit in result.hits))
