"""Apply the Alembic migrations to a database (``decide migrate``, and the embedded start-up)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

SCRIPT_LOCATION = str(Path(migrations.__file__).resolve().parent)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Bring the database at ``url`` to the newest revision (a no-op when it is there)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), "head")


def require_head(url: str) -> None:
    """Refuse to serve a database that ``decide migrate`` has not brought up to date."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from store.db import make_engine

    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    if current != head:
        raise SystemExit(f"the database is at revision {current or 'none'}, not {head}: "
                         "run `decide migrate` first")
