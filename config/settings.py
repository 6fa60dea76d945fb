"""The one settings class: everything configurable comes from ``DECIDE_*`` variables."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from decide.config.keys_file import read_keys
from decide.core.engine import Limits

AUTO_TOGETHER = 32
"""Jobs decoded together where the batched plan decodes and ``decode_together`` is 0: short
tickets of a few hundred tokens each fill a round of 4,096 tokens (``llm.batched``)."""

def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "decide"


class Settings(BaseSettings):
    """Read from the environment with the ``DECIDE_`` prefix (``DECIDE_DATA_DIR``...)."""

    model_config = SettingsConfigDict(env_prefix="DECIDE_", extra="ignore")

    data_dir: Path = Field(default_factory=_default_data_dir)
    """Where the embedded default model is assembled, and the embedded SQLite jobs file."""
    models_file: Path | None = None
    """A TOML or JSON file that configures models by name (see README, Configuration)."""
    threads: int | None = None
    """Threads per model when its configuration names none (default: all cores)."""
    cpu_variant: str = "auto"
    """Which llama.cpp build a runner loads: ``auto`` tries the faster variant where the host
    reports its extensions and keeps it once it passes the probe; ``baseline`` always loads the
    portable build (see ops/build-llama.sh); a build's name (``x86-64-v3``, ``x86-64-v4``)
    pins that build, so a fleet answers with the same bits, and a worker that cannot run it
    refuses to start (``runner.variants.pinned``)."""
    gpu_layers: int = 0
    """Layers offloaded to a GPU when a model's configuration names none (-1: all)."""
    decode_plan: Literal["auto", "exact", "batched"] = "auto"
    """How rows are decoded (SPEC §3.7). ``exact``: each row's numbers are the same bits
    whatever else is decoded with it (on a CPU, packed under the batching rule of
    ``llm.packing``; on a GPU, each row alone over its state). ``batched``: every row of a
    request in large multi-sequence batches (``llm.batched``), within SPEC §3.7's GPU tolerance
    of the exact answer. ``auto``: batched where layers are offloaded to a GPU, else exact. A
    request's ``"x_exact": true`` asks for the exact plan whatever this says."""
    decode_together: int = Field(default=0, ge=0, le=256)
    """Queued jobs of one lane a worker decodes together at most (batches across jobs,
    ``worker.together``): their rows share rounds of large batches where the batched plan
    decodes. 0: ``AUTO_TOGETHER`` where this configuration decodes by the batched plan
    (``decode_plan`` batched, or auto with ``gpu_layers`` set), else 1, one job at a time."""

    database_url: str | None = None
    """SQLAlchemy URL of the jobs store; none means SQLite under the data directory."""
    broker_url: str | None = None
    """Redis URL of the Celery broker; none means the embedded in-process worker."""
    api_keys: str = ""
    """Comma-separated API keys; empty (and no keys file) leaves the API open (any
    Authorization is ignored)."""
    api_keys_file: Path | None = None
    """A file of API keys, one a line, added to ``api_keys`` (``decide keys ensure FILE``)."""
    admin_keys: str = ""
    """Comma-separated keys (each also a valid API key) whose ``/v1/status`` shows every
    key's work; any other key sees only its own."""
    key_rows_per_minute: int = Field(default=60_000, ge=Limits.max_rows)
    """Rows one key may submit per minute through ``/v1/systemone``, ``/v1/jobs`` and
    ``/v1/batches`` (a sliding window); past it, 429 with ``Retry-After``. At least one
    request's worth (1,024 rows), so every valid request fits once the window has passed."""
    key_queued_rows: int = Field(default=1_000_000, ge=1)
    """Rows one key may have queued (both lanes, batches included); past it, 429. A key with
    nothing queued may always queue one request."""
    key_queued_bytes: int = Field(default=1024 ** 3, ge=1)
    """Stored bytes one key may have queued (both lanes, batches included: a job's stored
    request, a batch item's state and its share of the batch's questions); past it, 429. A key
    with nothing queued may always queue one request."""
    key_foreground_rows: int = Field(default=4_096, ge=1)
    """Foreground rows one key may have queued: the foreground lane is for sync calls and
    small jobs, so one key's flood cannot hold every other key's sync calls."""
    host: str = "127.0.0.1"
    port: int = 8000
    sync_wait_seconds: float = 60.0
    """How long ``POST /v1/systemone`` waits for its job before answering 504 with its id."""
    foreground_lane_rows: int = 20_000
    """Queued rows a model's foreground lane holds before new work gets 503 (SPEC §5)."""
    background_lane_rows: int = 5_000_000
    """Queued rows a model's background lane holds before new work gets 503."""
    worker_metrics_port: int = 9101
    """Where ``decide worker`` serves its Prometheus metrics (0: nowhere)."""
    retention_days: float = 30.0
    """Finished jobs older than this are purged."""
    runner_start_seconds: float = Field(default=600.0, gt=0)
    """How long a runner may take to load its model and pass its probe: one silent that long
    after its start is killed and its start counted failed (tried again after a back-off);
    a decision waits that long for a runner starting again after a crash."""
    runner_warm_reads: bool = True
    """Whether a runner, before it says it is ready, also decodes its probe from inside a read
    of it and as a taught read, making the contexts those reads decode in: the first call let
    in beside a long job and the first taught answer then cost what later ones do. Off, a start
    takes about 0.7 s of CPU less (1.7 against 2.4 CPU-seconds, 2 cores) and half the memory
    until the first nested or taught read; the nested read's check of a faster build's numbers
    is skipped, and those first reads pay for what they need instead (the test suite's
    setting, whose runners start about a hundred times)."""
    runner_nice: int = Field(default=0, ge=0, le=19)
    """The niceness a runner decodes at once its model is loaded and its probe passed (0 to
    19): on a machine shared with other work, decoding then yields the CPU to the front door
    and to other programs, and takes what they leave."""
    stall_seconds: float = Field(default=120.0, gt=0)
    """A decode whose runner sends no progress (a row begun, or the answer) for this long,
    plus 2 ms per byte of its request, is taken as hung: the runner is killed and the job takes
    the crash path (tried again on a new runner, ``worker_crashed`` after ``max_attempts``).
    ``/ready`` reports a decode without progress for half of that as stalled."""
    max_attempts: int = Field(default=3, ge=1)
    """How many times a job's own decode may crash (its decoding runner died, or hung and was
    killed) before the job ends ``failed`` with ``worker_crashed``: a job that crashes workers
    would otherwise crash every worker in turn, for ever. A worker that vanishes under a job
    counts no attempt (``store.recovery.VANISHED_CLAIMS_PER_ATTEMPT`` bounds those)."""
    webhook_allow_private: bool = False
    """Let webhooks reach private, loopback, link-local and other non-public addresses
    (refused by default: SSRF). ``webhook_allowed_cidrs`` allows chosen networks only."""
    webhook_allowed_cidrs: str = ""
    """Comma-separated networks (``10.1.0.0/16,127.0.0.1/32``) webhooks may reach although
    they are not public."""
    webhook_retry_seconds: float = Field(default=5.0, gt=0)
    """The wait before a failed webhook's second try; it doubles each try after."""
    webhook_retry_max_seconds: float = Field(default=3600.0, gt=0)
    """The longest wait between two tries of one webhook."""
    webhook_give_up_seconds: float = Field(default=86_400.0, gt=0)
    """How long a webhook is retried after its event before it is marked failed."""
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    """How long one try waits for the receiver's answer."""
    webhook_idle_seconds: float = Field(default=4.0, gt=0)
    """The longest wait between two rounds of the webhook delivery loop that find nothing to
    do (rounds that find work are half a second apart); a job that ends in the loop's own
    process, and a retry of its own, start a round at once (``webhooks.delivery``)."""

    @field_validator("webhook_allowed_cidrs")
    @classmethod
    def _networks_parse(cls, value: str) -> str:
        """A network that does not parse is refused at start, naming the setting (not a 500
        on every webhook URL later)."""
        for cidr in _split(value):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as error:
                raise ValueError(f"DECIDE_WEBHOOK_ALLOWED_CIDRS: {cidr!r} is not a network "
                                 f"such as 10.1.0.0/16 ({error})") from error
        return value

    @property
    def embedded(self) -> bool:
        """No broker: one process with an in-process worker, over SQLite unless a database
        is configured."""
        return self.broker_url is None

    @property
    def jobs_together(self) -> int:
        """``decode_together``, its 0 resolved (see there)."""
        if self.decode_together:
            return self.decode_together
        batched = self.decode_plan == "batched" or (self.decode_plan == "auto"
                                                    and self.gpu_layers != 0)
        return AUTO_TOGETHER if batched else 1

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'decide.db'}"

    def lane_rows(self, priority: str) -> int:
        return self.foreground_lane_rows if priority == "foreground" else self.background_lane_rows

    @property
    def webhook_cidr_list(self) -> list[str]:
        return _split(self.webhook_allowed_cidrs)

    @property
    def key_list(self) -> list[str]:
        from_file = read_keys(self.api_keys_file) if self.api_keys_file else []
        return _split(self.api_keys) + from_file

    @property
    def admin_key_list(self) -> list[str]:
        return _split(self.admin_keys)


def _split(keys: str) -> list[str]:
    return [key.strip() for key in keys.split(",") if key.strip()]
