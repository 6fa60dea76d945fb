"""``decide mcp`` without ``--url``: the embedded service in this process, without its HTTP
door, and the MCP tools answered through the front door's own functions (``FrontDoorTools``),
as ``/mcp`` answers them. So every in-process call enters the service as every other door's
does (``api.intake``): a ``decide`` is a sync call's job, ``submit_job`` a job, ``teach`` a
taught question fitted by the worker; quotas, idempotency keys, labels, versions, which taught
question answers, webhooks and metrics are the service's.

Its jobs and taught questions live in a SQLite file in a temporary folder of this process,
removed when it ends, or by the next one to start where it was killed (the service's own
database, under ``DECIDE_DATA_DIR``, may have a worker of its own running on it). The worker
decodes in its runner child, which loads the default model before the tools answer (a model
that cannot be loaded ends ``decide mcp`` with the reason). When the client leaves, the calls
in flight end at once (``cancelled``), and ``close`` stops the worker: a decode in progress
stops before its next row. The tools act as the one owner of an open service
(``api.auth.PUBLIC_OWNER``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from decide.api import mcp_tools
from decide.api.auth import PUBLIC_OWNER
from decide.api.mcp_door import FrontDoorTools
from decide.api.mcp_server import ToolFailure
from decide.config.settings import Settings
from decide.core.errors import ConfigError
from decide.launch.common import shut_down
from decide.launch.embedded import EmbeddedService, embedded_service

T = TypeVar("T")
DATABASE_FILE = "mcp.db"
FOLDER_PREFIX = "decide-mcp-"
"""The temporary folder's name: this prefix, the process's number, a random part."""
LOAD_MARGIN_SECONDS = 5.0
"""The tools wait at start for the worker's runner to load the default model (a second or
two for the embedded default) up to its own start bound (``DECIDE_RUNNER_START_SECONDS``)
and this margin; a model that cannot be loaded is said at once."""


def local_settings(settings: Settings, folder: Path) -> Settings:
    """``settings`` with this process's own database in ``folder``, the per-minute quota
    window in memory (no broker: the worker is in-process), and no keys (the tools act as
    the open service's one owner: a keys file set up for ``decide serve`` is not read)."""
    return settings.model_copy(update={"database_url": f"sqlite:///{folder / DATABASE_FILE}",
                                       "broker_url": None, "api_keys": "",
                                       "api_keys_file": None, "admin_keys": ""})


def remove_abandoned_folders(parent: Path) -> list[Path]:
    """Remove the folders that in-process tools killed without a chance to close (SIGKILL)
    left in ``parent``: those whose process (the number in their name) is gone."""
    removed = []
    for folder in parent.glob(f"{FOLDER_PREFIX}*-*"):
        number = folder.name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
        if number.isdigit() and not running(int(number)) and folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def running(pid: int) -> bool:
    """Whether a process numbered ``pid`` exists (any host: no ``/proc`` needed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class LocalTools:
    """The tools over the embedded service started here (``build`` makes it: the real one by
    default); ``stop_decoding`` when the client has left, ``close`` at the end."""

    def __init__(self, settings: Settings | None = None,
                 build: Callable[[Settings], EmbeddedService] = embedded_service) -> None:
        remove_abandoned_folders(Path(tempfile.gettempdir()))
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        try:
            self.service = build(local_settings(settings or Settings(), self.folder))
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        try:
            problem = self.service.loaded(self.service.context.settings.runner_start_seconds
                                          + LOAD_MARGIN_SECONDS)
        except BaseException:  # interrupted while the model loads
            self.close()
            raise
        if problem is not None:
            self.close()
            raise ConfigError(f"decide mcp: the default model is not loaded: {problem}")
        self._tools = FrontDoorTools(ctx=self.service.context, owner=PUBLIC_OWNER)
        self._calls: set[anyio.CancelScope] = set()
        self._closing = False

    @property
    def model_names(self) -> list[str]:
        return sorted(self.service.context.catalog.models)

    def stop_decoding(self) -> None:
        """The client is gone (called on the event loop): every call in flight ends now,
        ``cancelled``, and no other starts."""
        self._closing = True
        for scope in list(self._calls):
            scope.cancel()

    def close(self) -> None:
        """Stop the worker (a decode in progress stops before its next row) and the webhook
        sender, close the store, and remove this process's database."""
        self._closing = True
        try:
            shut_down(self.service.context, self.service.stop)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    async def _unless_closing(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call``'s answer, or ``cancelled`` once the client has left."""
        if not self._closing:
            with anyio.CancelScope() as scope:
                self._calls.add(scope)
                try:
                    return await call()
                finally:
                    self._calls.discard(scope)
        raise ToolFailure("cancelled: decide mcp is stopping; the call was not answered")

    async def decide(self, body: dict[str, Any], priority: str) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.decide(body, priority))

    async def rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.rerank(body))

    async def submit_job(self, job: mcp_tools.JobArguments) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.submit_job(job))

    async def get_job(self, job_id: str, wait: float | None) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.get_job(job_id, wait))

    async def teach(self, body: dict[str, Any], wait: float | None) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.teach(body, wait))

    async def get_taught(self, taught_id: str, wait: float | None) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.get_taught(taught_id, wait))

    async def label(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._unless_closing(lambda: self._tools.label(job_id, body))
