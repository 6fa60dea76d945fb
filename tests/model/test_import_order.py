"""Every in-process decode path loads llama.cpp before numpy, or anything else that loads a
BLAS (issue 36): on a CUDA host whose numpy brought its own OpenBLAS and libgfortran, `decide
run` segfaulted in the model load because numpy came first.

Each command runs in a fresh interpreter with an import watcher. Once llama.cpp is loaded the
order is settled, so the commands other than ``run`` stop at their handler (what they do
after it cannot change which came first); ``decide run`` answers for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.model

BLAS_LOADERS = ("numpy", "scipy", "sklearn", "torch")

WATCHER = textwrap.dedent("""
    import json, sys
    from importlib.abc import MetaPathFinder

    seen = []

    class Watch(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in ("llama_cpp",) + BLAS_LOADERS and top not in seen:
                seen.append(top)
            return None

    sys.meta_path.insert(0, Watch())
    from decide.cli import main as cli

    argv = json.loads(sys.argv[1])
    if not STOP_AT_HANDLER:
        status = cli.main(argv)
    else:
        parser_build = cli.build_parser

        def stubbed():
            parser = parser_build()
            for command in parser.commands.values():
                command.set_defaults(handler=lambda args: 0)
            return parser

        cli.build_parser = stubbed
        status = cli.main(argv)
    print("ORDER " + json.dumps(seen), flush=True)
    sys.exit(status)
""")


def first_loads(argv: list[str], *, stop_at_handler: bool, tmp_path) -> list[str]:
    code = (f"BLAS_LOADERS = {BLAS_LOADERS!r}\nSTOP_AT_HANDLER = {stop_at_handler!r}\n"
            + WATCHER)
    done = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "DECIDE_URL": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("ORDER "))
    return json.loads(line.removeprefix("ORDER "))


def test_decide_run_loads_llama_cpp_before_numpy_and_answers(tmp_path):
    seen = first_loads(["run", "My card was charged twice.", "--noul", "A refund?"],
                       stop_at_handler=False, tmp_path=tmp_path)
    assert seen[0] == "llama_cpp", seen
    assert "numpy" in seen  # the decode used it, after llama.cpp


@pytest.mark.parametrize("argv", [
    ["eval"],
    ["calibrate", "--examples", "examples.jsonl"],
    ["teach", "examples.jsonl"],
    ["mcp"],
], ids=lambda argv: argv[0])
def test_every_in_process_command_loads_llama_cpp_first(argv, tmp_path):
    seen = first_loads(argv, stop_at_handler=True, tmp_path=tmp_path)
    assert seen and seen[0] == "llama_cpp", seen
    assert not any(name in seen for name in BLAS_LOADERS) or (
        seen.index("llama_cpp") < min(seen.index(name) for name in BLAS_LOADERS if name in seen))


def test_the_watcher_sees_numpy_first_where_it_comes_first(tmp_path):
    """The check can fail: a process that imports numpy before the command is caught."""
    code = (f"BLAS_LOADERS = {BLAS_LOADERS!r}\nSTOP_AT_HANDLER = True\n"
            + WATCHER.replace("from decide.cli import main as cli",
                              "import numpy\nfrom decide.cli import main as cli"))
    done = subprocess.run([sys.executable, "-c", code, json.dumps(["eval"])],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    line = next(line for line in done.stdout.splitlines() if line.startswith("ORDER "))
    assert json.loads(line.removeprefix("ORDER "))[0] == "numpy"


def test_the_service_and_the_commands_that_run_here_leave_httpx_out():
    """``decide serve``'s and ``decide worker``'s imports (``decide run``'s too) hold no HTTP
    client: httpx brings rich and pygments (its own command line), a tenth of a CPU-second of
    every start, and only the commands that go through ``--url`` and a webhook's first send
    need it (``decide.client`` names its clients lazily)."""
    code = ("import sys\n"
            "import decide.cli.main, decide.cli.service, decide.launch.embedded\n"
            "import decide.launch.celery_worker, decide.client, decide.client.errors\n"
            "print(sorted(name for name in ('httpx', 'rich') if name in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, timeout=120)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr[-2000:]
