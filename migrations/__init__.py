"""Alembic migrations of the jobs store; ``decide migrate`` applies them (``migrations.apply``)."""
