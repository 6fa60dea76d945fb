"""The jobs store: SQLAlchemy tables, the engine factory and job transitions (SPEC §4)."""
