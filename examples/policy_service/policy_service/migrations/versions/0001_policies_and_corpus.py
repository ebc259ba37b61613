"""The policies table and ragport's corpus schema, in one migration transaction.

Revision ID: 0001
"""

from __future__ import annotations

from alembic import context, op
from policy_service.adapters import policies_table

from ragport.adapters.postgres import migrate

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _setting(name: str, default: str) -> str:
    config = context.config
    return str(config.attributes.get(name) or config.get_main_option(name) or default)


def upgrade() -> None:
    schema = _setting("schema", "policies")
    op.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    policies_table(schema).metadata.create_all(op.get_bind())  # policies and outbox
    # ragport's schema on the same connection, inside this migration's transaction: the
    # host's commit publishes both, a failure anywhere rolls both back.
    migrate(op.get_bind(), schema=_setting("corpus_schema", "policies_corpus"))


def downgrade() -> None:
    raise NotImplementedError("the corpus holds documents; drop its schema deliberately")
