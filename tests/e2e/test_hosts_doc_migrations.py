"""docs/hosts.md, "Migrations": its ```python migrations blocks run here as written, each on a
fresh database of the test server (so the page's names, ``ragport`` and ``extensions``, are
used verbatim). (The ```python host blocks run in test_hosts_doc.py, the plain ```python
blocks in test_docs_examples.py.)

The Alembic recipe: a small Alembic environment in a temporary folder, with the page's
``env.py`` and ragport revision and a host revision before it, upgraded to head on the
database; ``alembic check`` (autogenerate) then finds nothing to do, and finds ragport's tables
to drop when the page's ``include_name`` line is taken out. A failing revision after
ragport's rolls ragport's migrations back with it.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_databases import fresh_database
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from ragport.adapters.postgres.schema import LATEST_VERSION, current_version

ROOT = Path(__file__).resolve().parents[2]
PAGE = "docs/hosts.md"
BLOCK = re.compile(r"^```python migrations\n(.*?)^```$", re.S | re.M)
DEPLOY = "# your deploy step (DATABASE_URL: postgresql+psycopg://user:password@host/db)"
PENDING = "# after the deploy step above: nothing is pending any more"
REVISION = "# migrations/versions/0002_ragport.py"
ENV_PY = "# migrations/env.py"
RUN_HERE = (DEPLOY, PENDING, REVISION, ENV_PY)
FILTER_LINE = '            include_name=alembic_include_name("ragport"),\n'


def _block(first_line: str) -> str:
    """The page's ```python migrations block whose first line is ``first_line``."""
    blocks = BLOCK.findall((ROOT / PAGE).read_text(encoding="utf-8"))
    found = [b for b in blocks if b.splitlines()[0] == first_line]
    assert len(found) == 1, f"{PAGE}: no single block starting {first_line!r}"
    return str(found[0])


def test_every_python_block_of_the_page_is_run_by_a_test():
    """Each python fence of docs/hosts.md is one a test runs: plain (test_docs_examples.py),
    ``host`` (test_hosts_doc.py) or ``migrations`` (here), and every ``migrations`` block is
    one this module runs.

    If this fails, give the new block one of those fences (and run it), or run it here.
    """
    page = (ROOT / PAGE).read_text(encoding="utf-8")
    fences = set(re.findall(r"^```python(.*)$", page, re.M))
    assert fences <= {"", " host", " migrations"}, fences
    firsts = [b.splitlines()[0] for b in BLOCK.findall(page)]
    assert sorted(firsts) == sorted(RUN_HERE)


@pytest.fixture
def database(pg_url: str) -> Iterator[str]:
    """A fresh database's SQLAlchemy URL (psycopg 3), without the vector extension."""
    with fresh_database(pg_url) as url:
        yield make_url(url).set(drivername="postgresql+psycopg").render_as_string(False)


def _state(url: str) -> tuple[int, str | None, bool]:
    """(ragport's schema version, the extension's schema, whether ``policies`` exists)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            extension = conn.execute(
                text(
                    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                    "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
                )
            ).scalar()
            policies = conn.execute(text("SELECT to_regclass('public.policies')")).scalar()
            return current_version(conn, "ragport"), extension, policies is not None
    finally:
        engine.dispose()


def test_the_deploy_step_and_the_pending_sql_run(database, monkeypatch, capsys):
    """The page's ``migrate`` deploy step and its ``pending_sql`` check run as written.

    If this fails, the page and ``ragport.adapters.postgres.migrate``/``pending_sql``
    disagree: fix whichever is wrong.
    """
    monkeypatch.setenv("DATABASE_URL", database)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    exec(compile(_block(DEPLOY), PAGE, "exec"), namespace)
    assert namespace["applied"] == list(range(1, LATEST_VERSION + 1))
    assert _state(database) == (LATEST_VERSION, "extensions", True)
    exec(compile(_block(PENDING), PAGE, "exec"), namespace)
    assert "ragport migrations applied" in capsys.readouterr().out
    namespace["engine"].dispose()  # type: ignore[attr-defined]


def _alembic_env(tmp_path: Path, url: str, env_py: str) -> object:
    """An Alembic environment: alembic.ini, the given env.py, the host's revision 0001 and
    the page's 0002; the host's models in ``service/tables.py``."""
    from alembic.config import Config

    (tmp_path / "migrations" / "versions").mkdir(parents=True)
    (tmp_path / "migrations" / "env.py").write_text(env_py, encoding="utf-8")
    (tmp_path / "migrations" / "versions" / "0001_service.py").write_text(
        textwrap.dedent('''\
            """The host's own table."""
            import sqlalchemy as sa
            from alembic import op

            revision = "0001_service"
            down_revision = None


            def upgrade() -> None:
                op.create_table("policies", sa.Column("id", sa.Text, primary_key=True))
            '''),
        encoding="utf-8",
    )
    (tmp_path / "migrations" / "versions" / "0002_ragport.py").write_text(
        _block(REVISION), encoding="utf-8"
    )
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "service" / "tables.py").write_text(
        textwrap.dedent("""\
            import sqlalchemy as sa

            metadata = sa.MetaData()
            sa.Table("policies", metadata, sa.Column("id", sa.Text, primary_key=True))
            """),
        encoding="utf-8",
    )
    config = Config()
    config.set_main_option("script_location", str(tmp_path / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@pytest.mark.filterwarnings("ignore:Did not recognize type:sqlalchemy.exc.SAWarning")
def test_the_alembic_recipe_upgrades_and_autogenerate_leaves_ragport_alone(
    database, tmp_path, monkeypatch
):
    """``alembic upgrade head`` with the page's revision brings ragport's schema to the latest
    version (extension in ``extensions``); ``alembic check`` with the page's env.py proposes
    nothing, and without its ``include_name`` line proposes to drop ragport's tables.

    If this fails, check docs/hosts.md's recipe against ``migrate`` and
    ``alembic_include_name``.
    """
    from alembic import command
    from alembic.util import AutogenerateDiffsDetected

    env_py = _block(ENV_PY)
    assert FILTER_LINE in env_py
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _alembic_env(tmp_path, database, env_py)
    command.upgrade(config, "head")
    assert _state(database) == (LATEST_VERSION, "extensions", True)
    command.check(config)  # raises AutogenerateDiffsDetected on any proposed operation
    (tmp_path / "migrations" / "env.py").write_text(env_py.replace(FILTER_LINE, ""), "utf-8")
    with pytest.raises(AutogenerateDiffsDetected) as raised:
        command.check(config)
    proposed = str(raised.value)
    for table in ("records", "record_vectors", "grants", "tombstones", "schema_migrations"):
        assert f"Table('{table}'" in proposed and "remove_table" in proposed


def test_a_failing_revision_after_ragports_rolls_it_back(database, tmp_path, monkeypatch):
    """Alembic runs the revisions in one transaction: a revision failing after the page's
    ragport revision leaves no ragport schema, no host table and no extension behind.

    If this fails, check that ``migrate`` commits nothing and uses only ``op.get_bind()``.
    """
    from alembic import command

    monkeypatch.syspath_prepend(str(tmp_path))
    config = _alembic_env(tmp_path, database, _block(ENV_PY))
    (tmp_path / "migrations" / "versions" / "0003_broken.py").write_text(
        textwrap.dedent("""\
            revision = "0003_broken"
            down_revision = "0002_ragport"


            def upgrade() -> None:
                raise RuntimeError("a later revision fails")
            """),
        encoding="utf-8",
    )
    with pytest.raises(RuntimeError):
        command.upgrade(config, "head")
    assert _state(database) == (0, None, False)
