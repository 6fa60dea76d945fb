"""Where the suite's time goes, measured in one run: a pytest plugin and its summary.

Record a run (any selection; the first stage of ``make test`` here), then summarise it:

    .venv/bin/python -m pytest -p tests.support.suite_profile --suite-profile=/tmp/profile \\
        -n 3 --dist loadfile --no-loadscope-reorder -m "not serial" -q
    .venv/bin/python -m tests.support.suite_profile /tmp/profile

and, from a first stage run as ``make test`` runs it, ``--file-seconds tests/file_seconds.json``
records each file's wall seconds, which ``tests/conftest.py`` hands the files out by.

Every test process writes each test's wall time and the CPU time its own process spent in it
(``tests-<process>.json``). The process that started pytest reads ``/proc`` twice a second
(``machine.json``): how busy the cores were over each interval, and every process the tests
started, by the test whose environment it inherited (``PYTEST_CURRENT_TEST``), its CPU time
when last seen, and when it was first and last seen (how many of each kind were alive at a
time). A process that lived under half a second may be missed, and one's last half
second is not counted; reading ``/proc`` costs about one percent of a core. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

SAMPLE_SECONDS = 0.5
WINDOW_SECONDS = 15
"""The summary's windows of the run, where it names what ran while the cores idled."""
IDLE_BELOW = 0.85
"""A window busier than this (the cores' share in use) is not reported as idling."""
KINDS = (("decide.runner.child", "runner"), (" serve", "decide serve"),
         (" worker", "decide worker"), ("decide", "decide (other commands)"),
         ("postgres", "postgres"), ("chromium", "chromium"), ("redis-server", "redis-server"))
"""A started process's kind: the first of these found in its command line."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-profile", metavar="FOLDER",
                     help="record where the run's time goes into FOLDER "
                          "(summary: python -m tests.support.suite_profile FOLDER)")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Recorder:
    """One test process's record of its tests; in the process that started pytest, the
    ``/proc`` reader too."""

    def __init__(self, folder: Path, name: str, reads_proc: bool) -> None:
        self.folder, self.name = folder, name
        self.tests: list[dict] = []
        self.machine: dict = {"busy": [], "started": {}}
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_proc, daemon=True) if reads_proc \
            else None
        if self._reader is not None:
            self._reader.start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        started, cpu = time.time(), _own_cpu()
        yield
        self.tests.append({"test": item.nodeid, "start": started, "end": time.time(),
                           "cpu": _own_cpu() - cpu})

    def pytest_unconfigure(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"tests-{self.name}.json").write_text(json.dumps(self.tests))
        if self._reader is not None:
            self._stop.set()
            self._reader.join()
            (self.folder / "machine.json").write_text(json.dumps(self.machine))

    def _read_proc(self) -> None:
        ticks, before, last = os.sysconf("SC_CLK_TCK"), _cores_busy(), time.time()
        while not self._stop.wait(SAMPLE_SECONDS):
            now, at = _cores_busy(), time.time()
            spent = now[1] - before[1]
            # the interval as it was: reading /proc makes it a little longer than asked
            self.machine["busy"].append([at, (now[0] - before[0]) / max(spent, 1), at - last])
            before, last = now, at
            for pid in filter(str.isdigit, os.listdir("/proc")):
                _note_process(self.machine["started"], pid, ticks, at)


def _cores_busy() -> tuple[int, int]:
    """The cores' busy and total jiffies since boot."""
    values = [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)


def _note_process(started: dict, pid: str, ticks: int, now: float) -> None:
    """Remember a process a test started (its test, command line, CPU time so far, and when
    it was first and last seen)."""
    try:
        known = started.get(pid)
        if known is None:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            test = next((entry.split(b"=", 1)[1].decode() for entry in environment
                         if entry.startswith(b"PYTEST_CURRENT_TEST=")), None)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            known = started[pid] = {"test": test, "command": command.decode(errors="replace"),
                                    "cpu": 0.0, "first": now, "last": now}
        if known["test"] is not None:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            known["cpu"] = (int(fields[11]) + int(fields[12])) / ticks
            known["last"] = now
    except OSError:  # gone meanwhile, or not ours to read
        pass


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("--suite-profile")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        config.pluginmanager.register(Recorder(Path(folder), worker or "main",
                                               reads_proc=worker is None), "suite-profile")


def kind_of(command: str) -> str:
    return next((kind for mark, kind in KINDS if mark in command),
                Path(command.split(" ", 1)[0]).name or "?")


def file_of(test: str) -> str:
    return test.split("::", 1)[0]


def summary(tests: list[dict], machine: dict, cores: int) -> list[str]:
    """The summary's lines: the run, its CPU by who used it, the files that used most, and
    the windows where the cores idled with what ran then."""
    start, end = min(t["start"] for t in tests), max(t["end"] for t in tests)
    busy = [(share, seconds) for at, share, seconds in machine["busy"] if start <= at <= end]
    sampled = sum(seconds for _, seconds in busy)
    used = sum(share * seconds for share, seconds in busy) * cores
    own = sum(t["cpu"] for t in tests)
    by_kind: Counter[str] = Counter()
    starts: Counter[str] = Counter()
    alive: Counter[str] = Counter()  # seconds alive, summed over the kind's processes
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for process in machine["started"].values():
        if process["test"] is None:
            continue
        kind = kind_of(process["command"])
        by_kind[kind] += process["cpu"]
        starts[kind] += 1
        alive[kind] += process.get("last", 0.0) - process.get("first", 0.0)
        by_file[file_of(process["test"])]["started"] += process["cpu"]
    for test in tests:
        by_file[file_of(test["test"])]["own"] += test["cpu"]
        by_file[file_of(test["test"])]["wall"] += test["end"] - test["start"]
    lines = [f"{len(tests)} tests in {end - start:.0f} s on {cores} cores: "
             f"{used:.0f} CPU-seconds used ({used / max(sampled * cores, 1e-9):.0%} busy), "
             f"{(end - start) * cores - used:.0f} idle",
             f"  the test processes' own: {own:.0f}"]
    lines += [f"  {kind}: {cpu:.0f} ({starts[kind]} processes"
              + (f", {alive[kind] / (end - start):.1f} alive at a time)" if alive[kind] else ")")
              for kind, cpu in by_kind.most_common()]
    lines.append("files by CPU-seconds (own + started; wall in its process):")
    ranked = sorted(by_file.items(), key=lambda pair: -(pair[1]["own"] + pair[1]["started"]))
    lines += [f"  {spent['own'] + spent['started']:6.1f} = {spent['own']:5.1f} + "
              f"{spent['started']:5.1f}  wall {spent['wall']:5.1f}  {name}"
              for name, spent in ranked[:20]]
    lines.append(f"windows of {WINDOW_SECONDS} s under {IDLE_BELOW:.0%} busy, and what ran:")
    lines += idle_windows(tests, machine["busy"], start)
    return lines


def idle_windows(tests: list[dict], busy: list[list[float]], start: float) -> list[str]:
    """Each window of the run under ``IDLE_BELOW`` busy, with the files that ran in it."""
    found = []
    windows: dict[int, list[float]] = defaultdict(list)
    for at, share, _ in busy:
        if at >= start:
            windows[int((at - start) // WINDOW_SECONDS)].append(share)
    for window, shares in sorted(windows.items()):
        share = sum(shares) / len(shares)
        if share >= IDLE_BELOW:
            continue
        low, high = start + window * WINDOW_SECONDS, start + (window + 1) * WINDOW_SECONDS
        files = sorted({file_of(t["test"]) for t in tests if t["start"] < high and
                        t["end"] > low})
        found.append(f"  {window * WINDOW_SECONDS:5d} s {share:4.0%}  {', '.join(files)}")
    return found


def file_seconds(tests: list[dict]) -> dict[str, float]:
    """Each file's wall seconds in the recorded run (its tests' sum), longest first: what
    ``tests/conftest.py`` orders the files by."""
    seconds: Counter[str] = Counter()
    for test in tests:
        seconds[file_of(test["test"])] += test["end"] - test["start"]
    return {name: round(spent, 1) for name, spent in seconds.most_common()}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.suite_profile")
    parser.add_argument("folder", help="the folder a run recorded into (--suite-profile)")
    parser.add_argument("--file-seconds", metavar="JSON",
                        help="also write each file's wall seconds there "
                             "(tests/file_seconds.json, the order files are handed out in)")
    args = parser.parse_args(argv)
    tests = [test for path in sorted(Path(args.folder).glob("tests-*.json"))
             for test in json.loads(path.read_text())]
    if not tests:
        raise SystemExit(f"no test was recorded in {args.folder}")
    machine = json.loads((Path(args.folder) / "machine.json").read_text())
    print("\n".join(summary(tests, machine, os.cpu_count() or 1)))
    if args.file_seconds:
        measured = (f"{time.strftime('%Y-%m-%d', time.gmtime(min(t['start'] for t in tests)))}"
                    f", {os.cpu_count()} cores, {_cpu_name()}")
        Path(args.file_seconds).write_text(json.dumps(
            {"measured": measured, "seconds": file_seconds(tests)}, indent=1) + "\n")


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "an unnamed CPU"


if __name__ == "__main__":
    main(sys.argv[1:])
