"""Knowledge sync values: what a host's access mapping says about one external item."""

from __future__ import annotations

import attrs

from ragport.domain.model import _group_ids, _principal_ids

__all__ = ["Access"]


@attrs.frozen
class Access:
    """Who may see an item a connector lists: principal ids and group ids.

    A connector's host mapping (e.g. ``GoogleDriveConnector(resolve_access=...)``) returns one
    per item, or ``None`` to withhold the item (it is then not indexed). ``Access()`` (both
    empty) indexes the item with an empty grant: only trusted callers (``authorization=None``)
    see it. Ids follow the ``Grant`` rules (validated, at most the grant ceilings).
    """

    principal_ids: tuple[str, ...] = attrs.field(default=(), converter=_principal_ids)
    group_ids: tuple[str, ...] = attrs.field(default=(), converter=_group_ids)
