"""Each command of ``decide`` names its own handler: the base install's in
``decide.cli.main`` and ``decide.cli.teaching``, the server's through one explicit table,
``decide.cli.service.SERVER_COMMANDS`` (nothing is found by a function's name)."""

from __future__ import annotations

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
