"""The compose stack starts on a clean Docker host: every named volume a service of ours writes
is mounted where the image has a directory owned by ``decide`` (a new named volume takes that
directory's ownership; a mount point the image lacks is created root-owned, and the service,
running as ``decide``, cannot write it). Checked without a Docker engine."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "ops" / "Dockerfile").read_text()


def stage(target: str) -> str:
    """The Dockerfile stage named ``target``, from its FROM to the next."""
    for part in re.split(r"^(?=FROM )", DOCKERFILE, flags=re.MULTILINE):
        if re.match(rf"FROM \S+ AS {re.escape(target)}\s*$", part.splitlines()[0]):
            return part
    raise AssertionError(f"no stage {target} in ops/Dockerfile")


def owned_by_decide_before_user(stage_text: str) -> set[str]:
    """Directories the stage's RUN instructions before ``USER decide`` both create
    (``mkdir``) and give to ``decide`` (``chown decide...``)."""
    before_user = stage_text.split("\nUSER decide")[0].replace("\\\n", " ")
    created: set[str] = set()
    chowned: set[str] = set()
    for run in re.findall(r"^RUN (.+)$", before_user, re.MULTILINE):
        for command in re.split(r"&&|;", run):
            words = [word for word in shlex.split(command) if not word.startswith("-")]
            if words[:1] == ["mkdir"]:
                created |= set(words[1:])
            if words[:1] == ["chown"] and words[1].split(":")[0] == "decide":
                chowned |= set(words[2:])
    return created & chowned


def our_services() -> dict[str, dict]:
    """The services that run the image ops/Dockerfile builds."""
    return {name: service for name, service in COMPOSE["services"].items()
            if isinstance(service.get("build"), dict)
            and service["build"].get("dockerfile") == "ops/Dockerfile"}


def writable_named_mounts(service: dict) -> dict[str, str]:
    """Named volume → where the service mounts it read-write."""
    mounts = {}
    for entry in service.get("volumes", []):
        name, path, *mode = entry.split(":")
        if name in (COMPOSE.get("volumes") or {}) and "ro" not in mode:
            mounts[name] = path
    return mounts


def test_every_volume_a_service_of_ours_writes_is_a_directory_decide_owns_in_its_image():
    checked = []
    for name, service in our_services().items():
        owned = owned_by_decide_before_user(stage(service["build"]["target"]))
        for volume, path in writable_named_mounts(service).items():
            assert path in owned, (f"service {name} writes volume {volume} at {path}, which "
                                   f"ops/Dockerfile does not create and chown to decide "
                                   f"before USER decide (it has {sorted(owned)})")
            checked.append(volume)
    assert {"api-keys", "model-cache"} <= set(checked), checked


def test_the_keys_service_writes_the_file_the_api_reads_into_the_volume_it_mounts():
    services = COMPOSE["services"]
    keys_service = services["keys"]
    assert keys_service["command"][:3] == ["decide", "keys", "ensure"]
    written = PurePosixPath(keys_service["command"][3])
    mount = PurePosixPath(writable_named_mounts(keys_service)["api-keys"])
    assert written.parent == mount, (written, mount)
    assert "user" not in keys_service  # it runs as the image's user, decide
    read = PurePosixPath(services["api"]["environment"]["DECIDE_API_KEYS_FILE"])
    assert f"api-keys:{read.parent}:ro" in services["api"]["volumes"]
    assert read.name == written.name
