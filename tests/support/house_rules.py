"""The house rules a reader relies on, measured over the installed layout (``lay_out``): no
module over ``MAX_MODULE_LINES``, no function over ``MAX_FUNCTION_LINES``, and no circle of
imports between the project's modules (an import inside a function counts: it is a circle a
reader still has to follow)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules(layout: Path) -> dict[str, Path]:
    """Every module under ``layout/decide`` by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted((layout / "decide").rglob("*.py")):
        parts = path.relative_to(layout).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def long_modules(layout: Path) -> list[str]:
    """``name: lines`` for each module over the limit."""
    return [f"{name}: {len(path.read_text().splitlines())} lines"
            for name, path in modules(layout).items()
            if len(path.read_text().splitlines()) > MAX_MODULE_LINES]


def long_functions(layout: Path) -> list[str]:
    """``module:line name: lines`` for each function (or method) over the limit."""
    found = []
    for name, path in modules(layout).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The project's modules that ``name`` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                elif base in known:
                    yield base


def import_graph(layout: Path) -> dict[str, set[str]]:
    """Module → the project's modules it imports. A package's ``__init__`` that an import of
    one of its submodules runs first is not counted as an edge of that import."""
    found = modules(layout)
    known = set(found)
    return {name: {target for target in imported_modules(name, path, known) if target != name}
            for name, path in found.items()}


def import_cycles(layout: Path) -> list[list[str]]:
    """Each group of modules that import one another, round and round (Tarjan's strongly
    connected components of more than one module)."""
    graph = import_graph(layout)
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                lowest[module] = min(lowest[module], lowest[target])
            elif target in on_stack:
                lowest[module] = min(lowest[module], index[target])
        if lowest[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


JOB_LIFE = "decide.store.job_life"
"""The one module that writes a job's status (issue 37, item 1)."""


def _updates_jobs(node: ast.AST) -> bool:
    """Whether a call chain starts from ``update(jobs)`` (``update(jobs).where(...)...``)."""
    while isinstance(node, ast.Call | ast.Attribute):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "update" and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "jobs"):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _writes_status(call: ast.Call) -> bool:
    keys = [keyword.arg for keyword in call.keywords]
    spread = [keyword.value for keyword in call.keywords if keyword.arg is None]
    named = [key.value for value in [*call.args, *spread] if isinstance(value, ast.Dict)
             for key in value.keys if isinstance(key, ast.Constant)]
    return "status" in keys or "status" in named


def status_writes(layout: Path) -> list[str]:
    """``module:line`` of each ``update(jobs)...values(status=...)`` outside ``JOB_LIFE``."""
    found = []
    for name, path in modules(layout).items():
        if name == JOB_LIFE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "values" and _updates_jobs(node.func.value)
                    and _writes_status(node)):
                found.append(f"{name}:{node.lineno}")
    return found


JOB_LIFE = "decide.store.job_life"
"""The one module that counts a job's end (``count_ends``; issue 37, item 1)."""


def ends_counted_outside_job_life(layout: Path) -> list[str]:
    """``module:line`` of each use of the finished-jobs counter outside ``JOB_LIFE``
    (``metrics`` declares it)."""
    return [f"{name}:{number}" for name, path in modules(layout).items()
            if name not in (JOB_LIFE, "decide.metrics")
            for number, line in enumerate(path.read_text().splitlines(), start=1)
            if "jobs_finished" in line]


INTAKE = "decide.api.intake"
"""The one module that counts, backlogs and sends new work (issue 37, item 2)."""
SENDS_NEW_WORK = ("jobs_submitted", ".backlog.add(", ".queue.send(", ".queue.batch_stored(",
                  ".quotas.admission(")


def new_work_outside_intake(layout: Path) -> list[str]:
    """``module:line`` of each admission, count, backlog or send of new work outside
    ``INTAKE`` (``metrics`` declares the counter)."""
    found = []
    for name, path in modules(layout).items():
        if name in (INTAKE, "decide.metrics"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if any(pattern in line for pattern in SENDS_NEW_WORK):
                found.append(f"{name}:{number}")
    return found
