"""Apply the Alembic migrations to a database (``decide migrate``, and the embedded start-up).
The scripts are this package's own folder, so nothing below the migrations needs to know
where they are."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from decide.store.db import make_engine

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> list[str]:
    """Bring the database at ``url`` to the newest revision; the revisions applied, oldest
    first (none when it was there already)."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    before = current_revision(url)
    command.upgrade(alembic_config(url), "head")
    script = ScriptDirectory.from_config(alembic_config(url))
    head = script.get_current_head()
    if before == head:
        return []
    walked = script.iterate_revisions(head, before or "base")
    return [revision.revision for revision in reversed(list(walked))]


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def require_head(url: str) -> None:
    """Refuse to serve a database that ``decide migrate`` has not brought up to date."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    current = current_revision(url)
    if current != head:
        raise SystemExit(f"the database is at revision {current or 'none'}, not {head}: "
                         "run `decide migrate` first")
