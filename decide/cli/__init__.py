"""The ``decide`` command (SPEC §7): ``main`` parses and dispatches; ``remote`` talks to a
running service through ``decide.client``; commands that load a model or run the service import
the server's layers only when they run."""
