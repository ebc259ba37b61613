"""``CorpusRoots``: the root recorded for each corpus (``ragport ingest``)."""

from __future__ import annotations

import json
from pathlib import Path


class CorpusRoots:
    """The root recorded for each corpus on its first ingest, in the user's data directory.

    Keyed by store, schema and scope, so ``ragport ingest corpus`` and, later,
    ``cd corpus && ragport ingest nodejs`` name the same file with the same id.
    """

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            import platformdirs

            path = Path(platformdirs.user_data_dir("ragport")) / "corpus-roots.json"
        self.path = path

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def get(self, key: str) -> Path | None:
        value = self._load().get(key)
        return Path(value) if value else None

    def set(self, key: str, root: Path) -> None:
        data = self._load()
        data[key] = str(root)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)
