"""Each command of ``decide`` names its own handler: the base install's in
``decide.cli.main`` and ``decide.cli.teaching``, the server's through one explicit table,
``decide.cli.service.SERVER_COMMANDS`` (nothing is found by a function's name)."""

from __future__ import annotations

import subprocess
import sys

from decide.cli.main import build_parser
from decide.cli.service import SERVER_COMMANDS

BASE_COMMANDS = {"run", "submit", "job", "batch", "results", "eval", "teach", "status"}


def test_every_command_has_a_handler():
    commands = build_parser().commands
    assert set(commands) == BASE_COMMANDS | set(SERVER_COMMANDS)
    for name, command in commands.items():
        assert callable(command.get_default("handler")), name


def test_a_server_command_is_resolved_through_the_service_table_only_when_it_runs():
    commands = build_parser().commands
    for name in SERVER_COMMANDS:
        handler = commands[name].get_default("handler")
        assert handler.__module__ == "decide.cli.main", name
        assert handler.__qualname__.startswith("_in_service"), name
    assert not BASE_COMMANDS & set(SERVER_COMMANDS)


def test_the_service_commands_module_leaves_the_stores_migrations_to_migrate():
    """Alembic (and SQLAlchemy under it) took ``decide run`` about 0.45 s of its 2 s on 2 cores,
    for a command that never touches the store: only ``decide migrate`` imports them here."""
    code = ("import sys, decide.cli.service\n"
            "print(sorted(m for m in ('alembic', 'sqlalchemy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
