"""Third-party stores, embedders and parsers installed as entry points (issue 25).

Each test builds a tiny distribution in ``tmp_path`` (a module plus an ``*.dist-info`` holding
``METADATA`` and ``entry_points.txt``) and puts it on ``sys.path``, so ``importlib.metadata``
finds it exactly as it finds an installed wheel. Nothing is installed into the venv.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from ragport.adapters.memory import InMemoryStore
from ragport.adapters.parsers import TextParser, parser_for
from ragport.bootstrap import build_embedder, open_checkpoints, open_rag, open_stores, plugins
from ragport.domain import chunk_text
from ragport.domain.errors import ValidationError
from ragport.domain.model import Scope
from ragport.engine import BackendStore

MODULE = "acme_ragport_plugins"

# The third-party code: a store keeping one in-memory store per URL for the life of the
# process (so in-process commands see what the one before wrote), a full ``Stores``, an
# embedder of its own id, a parser, and four broken entry points.
SOURCE = """
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import (
    InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore,
)
from ragport.bootstrap import Stores
from ragport.ports.documents import ParsedDocument

STORES = {}
CALLS = []


def open_store(url):
    CALLS.append(url)
    return STORES.setdefault(url, InMemoryStore())


BACKENDS = {}


def open_backend(url):
    from ragport.adapters.memory.backend import MemoryBackend

    return BACKENDS.setdefault(url, MemoryBackend())


def open_full(url):
    CALLS.append(url)
    return Stores(InMemoryStore(), InMemoryStatusStore(), "acme full", InMemoryCheckpointStore())


class AcmeEmbedder:
    def __init__(self):
        self._inner = HashEmbedder(dimensions=64)

    @property
    def id(self):
        return "acme-v1:64"

    @property
    def dimensions(self):
        return 64

    def embed(self, texts):
        return self._inner.embed(texts)


def make_embedder():
    return AcmeEmbedder()


class AcmeParser:
    def __init__(self, max_bytes=1000, **options):
        self.options = options
        self._max_bytes = max_bytes

    @property
    def id(self):
        return "acme-v1"

    @property
    def max_bytes(self):
        return self._max_bytes

    def parse(self, data, *, media_type=None, abort=None):
        return ParsedDocument(data.decode().upper(), {}, "text/x-acme")


def make_parser(**options):
    return AcmeParser(**options)


class Overclaiming:
    # declares a lexical mode but its class defines no lexical_query (delegates the rest)

    def __init__(self, inner):
        self._inner = inner

    @property
    def capabilities(self):
        import attrs

        return attrs.evolve(self._inner.capabilities, lexical_modes=("bm25",))

    def __getattr__(self, name):
        return getattr(self._inner, name)


def open_overclaiming(url):
    return Overclaiming(STORES.setdefault(url, InMemoryStore()))


def raising(*args, **kwargs):
    raise RuntimeError("the plugin's message carries sk-SECRET-TOKEN")


def wrong_type(*args, **kwargs):
    return 42
"""

ENTRY_POINTS = {
    "ragport.stores": {
        "acme": f"{MODULE}:open_store",
        "acmefull": f"{MODULE}:open_full",
        "acmebackend": f"{MODULE}:open_backend",
        "memory": f"{MODULE}:open_store",  # a built-in scheme: never used
        "missing": "acme_no_such_module:open_store",
        "overclaim": f"{MODULE}:open_overclaiming",
        "raising": f"{MODULE}:raising",
        "wrongtype": f"{MODULE}:wrong_type",
    },
    "ragport.embedders": {
        "acme-embed": f"{MODULE}:make_embedder",
        "hash": f"{MODULE}:wrong_type",  # a built-in name: never used
        "raising-embed": f"{MODULE}:raising",
        "wrong-embed": f"{MODULE}:wrong_type",
    },
    "ragport.parsers": {
        "text/x-acme": f"{MODULE}:make_parser",
        "text/plain": f"{MODULE}:wrong_type",  # a built-in type: never used
        "text/x-broken": f"{MODULE}:raising",
    },
}


def build_distribution(
    root: Path,
    name: str,
    entry_points: Mapping[str, Mapping[str, str]],
    modules: Mapping[str, str] | None = None,
) -> None:
    """Write ``name``'s modules and its ``name-1.0.dist-info`` under ``root``."""
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(source, encoding="utf-8")
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8"
    )
    lines = []
    for group, entries in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")


def _on_path(monkeypatch: pytest.MonkeyPatch, root: Path) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(root))
    plugins.clear_cache()
    yield
    monkeypatch.undo()
    for module in [m for m in sys.modules if m.startswith(MODULE)]:
        del sys.modules[module]
    plugins.clear_cache()


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The acme distribution on sys.path; its folder (also the tests' working folder)."""
    root = tmp_path / "site"
    root.mkdir()
    build_distribution(root, "acme-ragport-plugins", ENTRY_POINTS, {MODULE: SOURCE})
    yield from _on_path(monkeypatch, root)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment for in-process commands: no store from outside, a private data folder."""
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / ".git").mkdir()  # ragport.toml is looked for up to here, no further
    (work / "docs" / "zebra.md").write_text("# Zebras\n\nZebras have black and white stripes.\n")
    (work / "docs" / "penguin.md").write_text("# Penguins\n\nPenguins live in the south.\n")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "RAGPORT_TEST_CWD": str(work),
    }


def _module():  # the plugin's module as the plugin loaded it
    return sys.modules[MODULE]


SCOPE = Scope("acme", "handbook", "main")


def test_open_rag_with_a_plugin_store_and_embedder(acme):
    """``open_rag("acme://...", embedder="acme-embed")`` writes to the plugin's store with the
    plugin's embedder, and a bare ChunkStore gets in-memory status and checkpoint stores.

    If this fails, check ragport.bootstrap.stores._plugin_stores and plugins.load_embedder.
    """
    with open_rag("acme://one", scope=SCOPE, embedder="acme-embed") as rag:
        chunks = chunk_text("Zebras have stripes.", source_id="zebra")
        rag.replace_source(source_id="zebra", chunks=chunks)
        hits = rag.retrieve("stripes").hits
        assert [h.source_id for h in hits] == ["zebra"]
        assert rag.embedder.id == "acme-v1:64"
        assert rag.status_store is not None
    store = _module().STORES["acme://one"]
    assert {e for e, _ in store.list_embedders(SCOPE)} == {"acme-v1:64"}
    with open_stores("acme://one") as stores:
        assert stores.chunks is store
        assert "in memory" in stores.description
        checkpoints = open_checkpoints(stores)
        assert checkpoints.get("c", SCOPE).version == 0
    with open_stores("acmefull://x") as stores:  # a plugin's own Stores is used as it is
        assert stores.description == "acme full"


def test_a_plugin_returning_a_storage_backend_runs_on_the_engine(acme):
    """A ``ragport.stores`` callable may return a bare ``StorageBackend`` (the narrow port):
    ``open_rag`` wraps it in ``BackendStore`` and everything above runs on it.

    If this fails, check ragport.bootstrap.stores._plugin_stores (the StorageBackend branch).
    """
    with open_rag("acmebackend://one", scope=SCOPE, embedder="acme-embed") as rag:
        chunks = chunk_text("Zebras have stripes.", source_id="zebra")
        rag.replace_source(source_id="zebra", chunks=chunks)
        assert [h.source_id for h in rag.retrieve("stripes").hits] == ["zebra"]
    with open_stores("acmebackend://one") as stores:
        assert isinstance(stores.chunks, BackendStore)
        assert stores.chunks.backend is _module().BACKENDS["acmebackend://one"]
        assert stores.chunks.current_generation(SCOPE) == 1


def test_cli_ingest_and_query_through_a_plugin(acme, cli_env):
    """``ragport ingest --store acme://cli --embedder acme-embed`` then ``ragport query`` (no
    --embedder: the corpus's embedder id is the plugin's) find the document.

    If this fails, check the --embedder option (no fixed choices), cli.config._embedder's
    plugin lookup and open_stores' plugin branch.
    """
    store = ("--store", "acme://cli")
    done = run_cli(cli_env, "ingest", *store, "--embedder", "acme-embed", "docs", "--json")
    assert done.returncode == 0, done.stderr
    found = run_cli(cli_env, "query", *store, "black and white stripes", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits[0]["source_id"].endswith("zebra.md")
    assert len(_module().CALLS) == 2  # the factory ran once per command


def test_ragport_toml_names_a_plugin_store_and_embedder(acme, cli_env):
    """``store = "acme://toml"`` and ``embedder = "acme-embed"`` in ragport.toml are used with
    no flags; ``ragport config --json`` lists every installed plugin and its status.

    If this fails, check bootstrap.config.load_config's embedder check (plugin names) and
    cli.config._config_show.
    """
    work = Path(cli_env["RAGPORT_TEST_CWD"])
    (work / "ragport.toml").write_text('store = "acme://toml"\nembedder = "acme-embed"\n')
    assert run_cli(cli_env, "ingest", "docs").returncode == 0
    found = run_cli(cli_env, "query", "penguins in the south", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["source_id"].endswith("penguin.md")
    store = _module().STORES["acme://toml"]
    assert {e for e, _ in store.list_embedders(Scope("local", "default", "default"))} == {
        "acme-v1:64"
    }
    shown = run_cli(cli_env, "config", "--json")
    assert shown.returncode == 0, shown.stderr
    status = {(p["group"], p["name"]): p["status"] for p in json.loads(shown.stdout)["plugins"]}
    assert status[("ragport.stores", "acme")] == "available"
    assert status[("ragport.stores", "memory")] == "shadowed"
    assert status[("ragport.embedders", "hash")] == "shadowed"
    assert status[("ragport.parsers", "text/plain")] == "shadowed"
    text = run_cli(cli_env, "config")
    assert "acme_ragport_plugins:open_store" in text.stdout


def test_built_ins_come_first(acme):
    """A plugin named ``memory``, ``hash`` or ``text/plain`` is never used, never imported.

    If this fails, check that open_stores, build_embedder and parser_for try their built-ins
    before plugins.load (and plugins.BUILTIN_SCHEMES / BUILTIN_EMBEDDERS).
    """
    with open_stores("memory://") as stores:
        assert type(stores.chunks) is InMemoryStore
    assert build_embedder("hash").id.startswith("hash-v1:256")
    assert isinstance(parser_for("text/plain"), TextParser)
    assert MODULE not in sys.modules  # nothing of the plugin was imported
    assert plugins.load_store_factory("memory") is None
    assert plugins.load_embedder("hash") is None


def test_a_plugin_parser_after_the_built_ins(acme):
    """``parser_for("text/x-acme")`` is the plugin's parser, given the options of limits=.

    If this fails, check ragport.adapters.parsers._plugin_parser.
    """
    from ragport.domain.limits import DEFAULT_LIMITS

    parser = parser_for("text/x-acme; charset=utf-8", limits=DEFAULT_LIMITS)
    assert parser.id == "acme-v1"
    assert parser.max_bytes == DEFAULT_LIMITS.parse_bytes
    assert parser.parse(b"zebra").text == "ZEBRA"
    with pytest.raises(ValidationError) as broken:
        parser_for("text/x-broken")
    assert broken.value.field == "parser"
    assert "sk-SECRET" not in str(broken.value)


@pytest.mark.parametrize(
    ("url", "raised"),
    [
        ("missing://x", "ModuleNotFoundError"),
        ("raising://x", "RuntimeError"),
        ("wrongtype://x", "returned a int"),
    ],
)
def test_a_broken_store_plugin_is_a_typed_error_naming_it(acme, url, raised):
    """A store plugin that does not import, raises or returns the wrong type is a
    ValidationError(field="store") naming the entry point, without the plugin's message.

    If this fails, check plugins.load (_entry_points._load) and stores._plugin_stores.
    """
    with pytest.raises(ValidationError) as caught, open_stores(url):
        pass
    error = caught.value
    assert error.field == "store"
    assert url.split(":")[0] in str(error) and raised in str(error)
    assert "sk-SECRET" not in str(error)
    assert error.__cause__ is None and error.__context__ is None


@pytest.mark.parametrize(
    ("name", "raised"), [("raising-embed", "RuntimeError"), ("wrong-embed", "not an Embedder")]
)
def test_a_broken_embedder_plugin_is_a_typed_error_naming_it(acme, name, raised):
    """An embedder plugin that raises or returns no Embedder is a ValidationError naming it.

    If this fails, check plugins.load_embedder.
    """
    with pytest.raises(ValidationError) as caught:
        build_embedder(name)
    assert caught.value.field == "embedder"
    assert name in str(caught.value) and raised in str(caught.value)
    assert "sk-SECRET" not in str(caught.value)


def test_broken_and_unknown_plugins_through_the_cli(acme, cli_env):
    """``ragport query --store raising://x`` exits 2 naming the plugin; an unknown scheme or
    embedder exits 2 listing what is installed.

    If this fails, check cli._exit_code for ValidationError and stores._plugin_stores.
    """
    done = run_cli(cli_env, "query", "--store", "raising://x", "anything")
    assert done.returncode == 2
    assert "'raising'" in done.stderr and "RuntimeError" in done.stderr
    assert "sk-SECRET" not in done.stderr
    unknown = run_cli(cli_env, "query", "--store", "nosuch://x", "anything")
    assert unknown.returncode == 2 and "acme" in unknown.stderr
    embedder = run_cli(cli_env, "ingest", "--store", "acme://e", "--embedder", "nope", "docs")
    assert embedder.returncode == 2 and "acme-embed" in embedder.stderr


def test_two_distributions_offering_one_name_are_refused(acme, tmp_path, monkeypatch):
    """When two distributions both offer ``acme``, asking for it is an error naming both.

    If this fails, check _entry_points.load's collision check.
    """
    other = tmp_path / "other"
    other.mkdir()
    build_distribution(other, "other-plugins", {"ragport.stores": {"acme": "other_mod:f"}})
    monkeypatch.syspath_prepend(str(other))
    plugins.clear_cache()
    with pytest.raises(ValidationError) as caught, open_stores("acme://x"):
        pass
    assert "other_mod:f" in str(caught.value) and "open_store" in str(caught.value)
    rows = [p for p in plugins.installed_plugins() if p.name == "acme"]
    assert {p.status for p in rows} == {"conflict"}


def test_the_cli_checks_lexical_search_with_supports(acme, cli_env):
    """``ragport query --mode hybrid`` on a plugin store that declares a lexical mode but does
    not define lexical_query is refused by the CLI's own check (``supports``: declared *and*
    defined) as ValidationError(field="mode"), and --mode vector still answers.

    If this fails, check cli.query._lexical_for (supports(store, "lexical"), not the declared
    lexical_modes alone).
    """
    store = ("--store", "overclaim://q")
    assert run_cli(cli_env, "ingest", *store, "--embedder", "hash", "docs").returncode == 0
    hybrid = run_cli(cli_env, "query", *store, "--mode", "hybrid", "zebra stripes")
    assert hybrid.returncode == 2
    assert "ValidationError" in hybrid.stderr and "--mode hybrid" in hybrid.stderr
    vector = run_cli(cli_env, "query", *store, "zebra stripes", "--json")
    assert vector.returncode == 0, vector.stderr


# -- the SQLite example of docs/adapters.md, registered by its own pyproject.toml ---------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sqlite_store"


@pytest.fixture
def sqlite_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example's dist-info, built from the entry points its pyproject.toml declares."""
    import tomllib

    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    root = tmp_path / "site"
    root.mkdir()
    build_distribution(root, project["name"], project["entry-points"])
    # the module itself: examples/sqlite_store is on pytest's pythonpath already; put it on
    # sys.path here too so the test does not depend on that setting
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield from _on_path(monkeypatch, root)


def _plugin_section_commands() -> list[list[str]]:
    """The ``ragport`` lines of the sh block in docs/adapters.md's plugin section."""
    page = (EXAMPLE.parents[1] / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = page.split("## Installing an adapter as a plugin", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("ragport ")]


def test_the_sqlite_example_runs_from_ragport_store_sqlite(sqlite_example, cli_env, tmp_path):
    """The commands of docs/adapters.md's plugin section (``ragport ingest --store
    sqlite:///...``, ``query``, ``config``) run on the example store, registered only
    through its pyproject entry point; the SQLite file keeps the chunks.

    If this fails, check examples/sqlite_store/pyproject.toml's [project.entry-points],
    ragport_sqlite.open_sqlite_store, and that the page's block still matches.
    """
    db = tmp_path / "handbook.db"
    commands = _plugin_section_commands()
    assert [c[0] for c in commands] == ["ingest", "query", "config"]
    for args in commands:
        args = [a.replace("/tmp/handbook.db", str(db)) for a in args]
        done = run_cli(cli_env, *args)
        assert done.returncode == 0, (args, done.stderr)
        if args[0] == "query":
            assert "zebra.md" in done.stdout
        if args[0] == "config":
            assert "ragport_sqlite:open_sqlite_store" in done.stdout
    assert db.stat().st_size > 0
    found = run_cli(cli_env, "query", "--store", f"sqlite://{db}", "penguins", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["source_id"].endswith("penguin.md")


def test_the_distribution_builder_is_what_importlib_metadata_reads(tmp_path, monkeypatch):
    """Without the dist-info on sys.path, ``acme://`` is an unknown scheme (the tests above
    pass because of the entry points, not by accident).

    If this fails, check that plugins.clear_cache() forgets the groups it read.
    """
    plugins.clear_cache()
    with pytest.raises(ValidationError) as caught, open_stores("acme://x"):
        pass
    assert caught.value.field == "store"
    assert "unsupported" in str(caught.value)
