"""The dependency direction of DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ["protocol", "questions", "render", "labels", "rows", "profile", "readout", "engine",
        "display", "errors"]
FRAMEWORKS = {"sqlalchemy", "celery", "kombu", "redis", "fastapi", "starlette", "llama_cpp",
              "prometheus_client", "httpx", "uvicorn", "psycopg", "alembic", "infra", "store",
              "api", "worker", "launch"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_core_imports_no_framework_and_no_outer_layer():
    for name in CORE:
        leaked = imported_roots(ROOT / "decide" / f"{name}.py") & FRAMEWORKS
        assert not leaked, f"decide/{name}.py imports {sorted(leaked)}"


def test_api_and_worker_never_import_each_other():
    for package, other in (("api", "worker"), ("worker", "api")):
        for path in (ROOT / package).rglob("*.py"):
            assert other not in imported_roots(path), f"{path.relative_to(ROOT)} imports {other}"


def test_only_the_gguf_module_and_the_worker_touch_llama_cpp():
    allowed = {ROOT / "infra" / "gguf.py", *(ROOT / "worker").rglob("*.py")}
    for package in ("decide", "api", "infra", "store", "launch"):
        for path in (ROOT / package).rglob("*.py"):
            if path not in allowed:
                assert "llama_cpp" not in imported_roots(path), path.relative_to(ROOT)
