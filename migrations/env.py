"""Alembic environment: the URL comes from the caller (``migrations.apply``) or the DECIDE_*
settings."""

from __future__ import annotations

from alembic import context

from decide.config.settings import Settings
from decide.store.db import make_engine
from decide.store.tables import metadata

url = context.config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url
engine = make_engine(url)

with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=metadata,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
