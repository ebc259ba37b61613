"""CorpusSettings and CorpusSettingsStore: the versioned record, merging updates by
compare-and-set, refusing what this ragport cannot read, and the roots of older ragports."""

from __future__ import annotations

import json

import pytest

from ragport.adapters.memory import InMemoryCheckpointStore
from ragport.bootstrap.corpus_settings import (
    SETTINGS_ID,
    CorpusSettings,
    CorpusSettingsStore,
    carry_recorded_roots,
)
from ragport.bootstrap.roots import CorpusRoots
from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import Scope

SCOPE = Scope("t", "r", "kb")
OTHER = Scope("t", "r", "kb2")


def test_updates_merge_and_stay_per_scope(tmp_path):
    """An update records its fields over the stored ones; another scope is untouched.

    If this fails, check CorpusSettingsStore.update in ragport/bootstrap/corpus_settings.py.
    """
    home = CorpusSettingsStore(InMemoryCheckpointStore())
    assert home.get(SCOPE) == CorpusSettings()
    home.update(SCOPE, CorpusSettings(root=str(tmp_path), encoding="iso8859-1"))
    home.update(SCOPE, CorpusSettings(max_bytes=2_000_000, timeout=90))
    assert home.get(SCOPE) == CorpusSettings(
        root=str(tmp_path), encoding="iso8859-1", max_bytes=2_000_000, timeout=90.0
    )
    home.update(SCOPE, CorpusSettings(encoding="utf-8"))
    assert home.get(SCOPE).encoding == "utf-8"
    assert home.get(OTHER) == CorpusSettings()


@pytest.mark.parametrize(
    "stored",
    [
        {"version": 2, "encoding": "utf-8"},
        {"version": 1, "chunker": "semantic"},
        {"version": 1, "max_bytes": -5},
        {"version": 1, "timeout": "soon"},
        [1, 2],
    ],
)
def test_a_record_this_ragport_cannot_read_is_refused(stored):
    """Another version, an unknown key or a bad value: ValidationError(field=corpus_settings),
    never settings half read.

    If this fails, check CorpusSettings.decode in ragport/bootstrap/corpus_settings.py.
    """
    checkpoints = InMemoryCheckpointStore()
    assert checkpoints.compare_and_set(SETTINGS_ID, SCOPE, 0, json.dumps(stored))
    with pytest.raises(ValidationError) as caught:
        CorpusSettingsStore(checkpoints).get(SCOPE)
    assert caught.value.field == "corpus_settings"


def test_an_update_that_keeps_losing_its_compare_and_set_is_a_store_error():
    """A record that changes under every attempt: StoreError, not a silently lost update.

    If this fails, check the retry loop of CorpusSettingsStore.update.
    """

    class Racing(InMemoryCheckpointStore):
        def compare_and_set(self, connector_id, scope, expected_version, cursor):
            # another command always records its own change first
            other = CorpusSettings(overlap=expected_version + 1).encode()
            super().compare_and_set(connector_id, scope, expected_version, other)
            return False

    with pytest.raises(StoreError):
        CorpusSettingsStore(Racing()).update(SCOPE, CorpusSettings(size=500))


def test_a_root_of_an_older_ragport_is_read_and_moves_into_the_store(tmp_path):
    """A root only in the data-directory file is the recorded root; the next update writes it
    into the store; a store without kept checkpoints keeps the root in the file only.

    If this fails, check CorpusSettingsStore.get/update and settings_store.
    """
    roots = CorpusRoots(tmp_path / "corpus-roots.json")
    roots.set("key", tmp_path)
    checkpoints = InMemoryCheckpointStore()
    home = CorpusSettingsStore(checkpoints, roots=roots, key="key")
    assert home.get(SCOPE).root == str(tmp_path)
    home.update(SCOPE, CorpusSettings(root=str(tmp_path)))
    assert CorpusSettings.decode(checkpoints.get(SETTINGS_ID, SCOPE).cursor, corpus="kb") == (
        CorpusSettings(root=str(tmp_path))
    )
    bare = CorpusSettingsStore(None, roots=roots, key="other")
    assert not bare.keeps_settings
    bare.update(SCOPE, CorpusSettings(root=str(tmp_path / "x"), size=10))
    assert roots.get("other") == tmp_path / "x"
    assert bare.get(SCOPE) == CorpusSettings(root=str(tmp_path / "x"))


def test_roots_of_an_older_ragport_are_carried_into_the_store_for_a_dump(tmp_path):
    """carry_recorded_roots records the file's roots of this store and schema whose corpus
    has none in the store (so `db dump` carries them), and leaves other stores' keys alone.

    If this fails, check carry_recorded_roots in ragport/bootstrap/corpus_settings.py.
    """
    roots = CorpusRoots(tmp_path / "corpus-roots.json")
    roots.set("abc|ragport|t|r|kb", tmp_path / "a")
    roots.set("abc|ragport|t|r|kb2", tmp_path / "b")
    roots.set("abc|other|t|r|kb", tmp_path / "c")
    roots.set("abc|ragport|bad key", tmp_path / "d")
    checkpoints = InMemoryCheckpointStore()
    home = CorpusSettingsStore(checkpoints)
    home.update(OTHER, CorpusSettings(root=str(tmp_path / "kept")))
    assert carry_recorded_roots(checkpoints, roots, prefix="abc|ragport|") == 1
    assert home.get(SCOPE).root == str(tmp_path / "a")
    assert home.get(OTHER).root == str(tmp_path / "kept")
    assert carry_recorded_roots(checkpoints, roots, prefix="abc|ragport|") == 0


def test_a_recorded_value_no_longer_allowed_is_named_as_recorded():
    """A check failing on an option taken from the recorded settings stays a ValidationError
    of that field (exit 2) and says where the value came from; another field's is unchanged.

    If this fails, check CorpusOptions.checked in ragport/cli/settings.py.
    """
    from ragport.cli.settings import CorpusOptions

    options = CorpusOptions(
        CorpusSettingsStore(None), CorpusSettings(max_bytes=9), CorpusSettings(), ("max_bytes",)
    )

    raised: list[ValidationError] = []

    def refuse(field: str):
        def check():
            raised.append(ValidationError("past the ceiling", field=field, limit="parse_bytes"))
            raise raised[-1]

        return check

    with pytest.raises(ValidationError) as caught:
        options.checked(refuse("max_bytes"))
    assert (caught.value.field, caught.value.limit) == ("max_bytes", "parse_bytes")
    assert caught.value is not raised[-1]  # re-raised, saying the value was recorded
    with pytest.raises(ValidationError) as caught:
        options.checked(refuse("encoding"))
    assert caught.value is raised[-1]  # given here: as it was
    assert options.checked(lambda: 5) == 5
