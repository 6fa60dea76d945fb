"""Idle benchmark: what an embedded ``decide serve`` costs while nobody calls it.

Run on demand (not a test):

    .venv/bin/python benchmarks/idle.py [--seconds 30] [--settle 10]

It starts two embedded services side by side, each on a data folder of its own, one with the
webhook delivery loop polling at its busy tick all the time (``DECIDE_WEBHOOK_IDLE_SECONDS=0.5``,
the loop before it backed off) and one with the default, waits until both are ready and
``--settle`` seconds more, then reads each process's CPU time (and its runner's) over the
same ``--seconds`` and prints the share of one core each used. Both are measured in the same
window, so a noisy host moves them alike: compare the ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.local import await_ready

SETUPS = {"webhook loop every 0.5 s (before)": {"DECIDE_WEBHOOK_IDLE_SECONDS": "0.5"},
          "webhook loop backing off to 4 s (default)": {}}
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """The process's user and system time, and its children's that are alive (the runner)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def start(folder: Path, extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "DECIDE_DATA_DIR": str(folder), **extra}
    process = subprocess.Popen([sys.executable, "-m", "decide", "serve", "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        started = {name: start(Path(folder) / str(index), extra)
                   for index, (name, extra) in enumerate(SETUPS.items())}
        try:
            for name, (process, url) in started.items():
                if not await_ready(url, gone=lambda process=process: process.poll() is not None):
                    raise SystemExit(f"{name}: the service did not get ready")
            time.sleep(args.settle)
            before = {name: cpu_seconds(process.pid) for name, (process, _) in started.items()}
            time.sleep(args.seconds)
            used = {name: cpu_seconds(process.pid) - before[name]
                    for name, (process, _) in started.items()}
        finally:
            for process, _ in started.values():
                process.terminate()
                process.wait(30)
    print(f"idle embedded `decide serve`, {args.seconds:.0f} s after {args.settle:.0f} s settled "
          f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    print("| setup | CPU-seconds | share of one core |")
    print("|---|---|---|")
    for name, seconds in used.items():
        print(f"| {name} | {seconds:.2f} | {seconds / args.seconds:.1%} |")
    print("reproduce: .venv/bin/python benchmarks/idle.py "
          f"--seconds {args.seconds:g} --settle {args.settle:g}")


if __name__ == "__main__":
    main()
