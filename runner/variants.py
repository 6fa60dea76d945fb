"""Which llama.cpp build a runner loads: the fastest one this host may run, proven by the probe.

``ops/build-llama.sh`` installs llama-cpp-python for a portable baseline (x86-64-v3: AVX2, no
AVX-512, no AMX) and, beside it, the libraries of a faster variant (x86-64-v4: AVX-512 with
VBMI and VNNI, never AMX). A variant is a candidate only where the kernel reports every
extension it needs (Linux hides those whose register state the OS does not enable), and it is
kept only once a runner has loaded it and decoded the probe right in its own process
(``runner.client.Runner`` falls back to the next candidate when that runner dies or
answers wrong numbers). The installed baseline is always the last candidate.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

LIBRARY_PATH_VARIABLE = "LLAMA_CPP_LIB_PATH"
"""llama-cpp-python loads its libraries from this folder when it is set."""
VARIANTS_DIR = Path(sys.prefix) / "lib" / "decide-llama-variants"


@dataclass(frozen=True)
class Variant:
    name: str
    library_path: Path | None
    """The folder of its libraries; None for the build llama-cpp-python loads by default."""
    needs: frozenset[str] = frozenset()
    """CPU flags (as /proc/cpuinfo names them) the host must report."""


X86_64_V4 = Variant("x86-64-v4", VARIANTS_DIR / "x86-64-v4", frozenset({
    "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd",
    "avx512vbmi", "avx512_vnni"}))
FASTER = (X86_64_V4,)


def installed_baseline() -> str:
    marker = Path(sys.prefix) / ".llama-baseline"
    return marker.read_text().strip() if marker.exists() else "installed"


def host_flags() -> frozenset[str]:
    """The CPU flags the kernel reports for this host (empty where it reports none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


AUTO, BASELINE = "auto", "baseline"
"""``DECIDE_CPU_VARIANT``'s two policies; any other value pins the build of that name."""


class BuildUnavailable(ValueError):
    """The build an operator pinned cannot run here: the worker refuses to start."""


def _installed_here(variant: Variant) -> bool:
    return variant.library_path is not None and (variant.library_path / "libllama.so").exists()


def candidates(flags: frozenset[str], choice: str = AUTO,
               faster: tuple[Variant, ...] = FASTER) -> list[Variant]:
    """Builds to try, fastest first (of ``faster``, this installation's own); the installed one
    last. ``choice`` "baseline" (or an operator's own ``LLAMA_CPP_LIB_PATH``) leaves only the
    installed one; a build's name leaves only that build (``pinned``, before any library
    path in the environment: the runner's environment then points at the pinned build)."""
    if choice not in (AUTO, BASELINE):
        return [pinned(choice, flags, faster)]
    installed = Variant(installed_baseline(), None)
    if LIBRARY_PATH_VARIABLE in os.environ:  # chosen already: by an operator, or in-process
        chosen = Path(os.environ[LIBRARY_PATH_VARIABLE])
        known = {variant.library_path: variant for variant in faster}
        return [known.get(chosen, Variant(f"{LIBRARY_PATH_VARIABLE}={chosen}", chosen))]
    if choice == BASELINE:
        return [installed]
    usable = [variant for variant in faster if _installed_here(variant) and variant.needs <= flags]
    return [*usable, installed]


def pinned(name: str, flags: frozenset[str], faster: tuple[Variant, ...] = FASTER) -> Variant:
    """The one build a fleet pinned (``DECIDE_CPU_VARIANT=<name>``), so every worker answers
    with the same bits: the installed baseline by its name, or a faster variant this
    installation has and this host can run. Never a fallback: anything else is
    ``BuildUnavailable``, naming what is missing and what to pin instead."""
    installed = Variant(installed_baseline(), None)
    if name == installed.name:
        return installed
    here = [installed.name, *(variant.name for variant in faster if _installed_here(variant))]
    instead = f"this installation has {', '.join(here)}; pin one of them, or auto"
    variant = next((variant for variant in faster if variant.name == name), None)
    if variant is None or not _installed_here(variant):
        why = ("is not a llama.cpp build this installation has" if variant is None else
               "is not installed here (ops/build-llama.sh builds it unless "
               "DECIDE_CPU_VARIANTS=none)")
        raise BuildUnavailable(f"DECIDE_CPU_VARIANT={name}: {name} {why}; {instead}")
    missing = variant.needs - flags
    if missing:
        raise BuildUnavailable(
            f"DECIDE_CPU_VARIANT={name}: this host cannot run {name}: its CPU (or its OS) does "
            f"not report {', '.join(sorted(missing))}; pin {installed.name}, the portable "
            f"baseline, for a fleet of mixed hosts, or run these workers where the CPU has them")
    return variant


def environment_for(variant: Variant) -> dict[str, str]:
    """The runner's environment: the variant's libraries, or llama-cpp-python's default."""
    environment = dict(os.environ)
    environment.pop(LIBRARY_PATH_VARIABLE, None)
    if variant.library_path is not None:
        environment[LIBRARY_PATH_VARIABLE] = str(variant.library_path)
    return environment


PROOF_FILE = "llama-build.json"
"""Under the data directory: which build a runner proved on this host, for in-process use."""


def host_key(flags: frozenset[str], faster: tuple[Variant, ...] = FASTER) -> str:
    """What a proof holds for: this installation's llama.cpp builds on this CPU."""
    import hashlib

    builds = []
    for variant in faster:
        library = (variant.library_path or Path()) / "libggml-cpu.so"
        if library.exists():  # a rebuilt variant must prove itself again
            stat = library.stat()
            builds.append(f"{variant.name}:{stat.st_size}:{stat.st_mtime_ns}")
    material = "\n".join([sys.prefix, installed_baseline(), " ".join(sorted(flags)), *builds])
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def record_proof(data_dir: Path, variant: Variant, *, flags: frozenset[str] | None = None,
                 faster: tuple[Variant, ...] = FASTER) -> None:
    """A runner passed its probe with ``variant``: in-process decoding uses the same build.
    ``flags``: the host's CPU flags (``host_flags()`` when None)."""
    try:
        host = host_key(host_flags() if flags is None else flags, faster)
        data_dir.mkdir(parents=True, exist_ok=True)
        temporary = data_dir / f".{PROOF_FILE}.{os.getpid()}"
        temporary.write_text(json.dumps({"host": host, "variant": variant.name}))
        temporary.replace(data_dir / PROOF_FILE)
    except OSError:  # an unwritable data directory costs only the in-process speed-up
        pass


def proven_variant(data_dir: Path, choices: list[Variant], *,
                   flags: frozenset[str] | None = None,
                   faster: tuple[Variant, ...] = FASTER) -> Variant | None:
    """The build a runner proved here, when it is among ``choices``; None when unproven.
    ``flags``: the host's CPU flags (``host_flags()`` when None)."""
    try:
        proof = json.loads((data_dir / PROOF_FILE).read_text())
    except (OSError, ValueError):
        return None
    if proof.get("host") != host_key(host_flags() if flags is None else flags, faster):
        return None
    return next((variant for variant in choices if variant.name == proof.get("variant")), None)
