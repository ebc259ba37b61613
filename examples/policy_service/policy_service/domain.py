"""The host's domain: a policy document, revised, shared with groups, retracted. No ragport."""

from __future__ import annotations

from dataclasses import dataclass, field


class PolicyError(Exception):
    """A rule of the domain was broken (the service maps it to its API's errors)."""


@dataclass
class Policy:
    """A policy document: ``revision`` counts its texts; ``groups`` may read it."""

    policy_id: str
    title: str
    body: str
    revision: int = 1
    groups: set[str] = field(default_factory=set)
    retracted: bool = False

    def revise(self, body: str) -> None:
        self._require_live()
        if body == self.body:
            raise PolicyError("a revision must change the text")
        self.body = body
        self.revision += 1

    def share(self, group: str) -> None:
        self._require_live()
        self.groups.add(group)

    def unshare(self, group: str) -> None:
        self._require_live()
        self.groups.discard(group)

    def retract(self) -> None:
        self._require_live()
        self.retracted = True

    def _require_live(self) -> None:
        if self.retracted:
            raise PolicyError("the policy was retracted")
