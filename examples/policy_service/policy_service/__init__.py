"""A small policy-documents service that embeds ragport (docs/hosts.md, "A host service").

Its own domain (``domain``: a ``Policy`` aggregate), its own table and unit of work
(``adapters``: SQLAlchemy Core on PostgreSQL, and in-memory fakes for unit tests), its own
use cases (``services``) and an Alembic migration that brings ragport's schema up with its
own (``migrations``). ragport's corpus follows the host's state exactly: every service call
writes the policy row and the corpus in one transaction of the host's (PostgreSQL:
``PostgresStore.joined``), so the host's commit publishes both and its rollback discards both.
"""
