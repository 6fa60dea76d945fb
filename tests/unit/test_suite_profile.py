"""The suite's own profile (``tests.support.suite_profile``): its summary of a recorded run."""

from __future__ import annotations

from tests.support.suite_profile import SAMPLE_SECONDS, file_seconds, kind_of, summary

T0 = 1_000.0


def recorded() -> tuple[list[dict], dict]:
    """Two processes over 30 s: a server file whose runner decodes, then waits with the cores
    half idle; a model file computing in its own process."""
    tests = [
        {"test": "tests/api/test_a.py::test_one", "start": T0, "end": T0 + 20, "cpu": 1.0},
        {"test": "tests/api/test_a.py::test_two", "start": T0 + 20, "end": T0 + 30, "cpu": 0.5},
        {"test": "tests/model/test_b.py::test_three", "start": T0, "end": T0 + 14, "cpu": 12.0},
    ]
    busy = [[T0 + SAMPLE_SECONDS * step, 1.0 if step < 30 else 0.25, SAMPLE_SECONDS]
            for step in range(60)]
    started = {
        "11": {"test": "tests/api/test_a.py::test_one (setup)", "cpu": 9.0,
               "command": "/v/bin/python -m decide serve --port 4000 ", "first": T0,
               "last": T0 + 30},
        "12": {"test": "tests/api/test_a.py::test_one (call)", "cpu": 14.0,
               "command": "/v/bin/python -m decide.runner.child 5 "},
        "13": {"test": None, "cpu": 50.0, "command": "/usr/bin/something-else "},
    }
    return tests, {"busy": busy, "started": started}


def test_the_summary_counts_the_cpu_by_who_used_it_and_by_file():
    tests, machine = recorded()
    lines = summary(tests, machine, cores=2)
    # 30 samples busy and 30 a quarter busy, half a second each, on 2 cores
    assert lines[0] == ("3 tests in 30 s on 2 cores: 38 CPU-seconds used (62% busy), "
                        "22 idle")
    assert lines[1] == "  the test processes' own: 14"
    assert "  runner: 14 (1 processes)" in lines  # recorded before lifetimes were
    assert "  decide serve: 9 (1 processes, 1.0 alive at a time)" in lines
    assert not any("something-else" in line for line in lines)  # not started by a test
    files = lines[lines.index("files by CPU-seconds (own + started; wall in its process):") + 1:]
    assert files[0].split() == ["24.5", "=", "1.5", "+", "23.0", "wall", "30.0",
                                "tests/api/test_a.py"]
    assert files[1].split()[-1] == "tests/model/test_b.py"


def test_the_cpu_used_counts_each_interval_as_long_as_it_was():
    """Reading /proc makes an interval a little longer than asked: counted at its length."""
    tests, machine = recorded()
    machine["busy"] = [[at, share, 0.6] for at, share, _ in machine["busy"]]
    assert summary(tests, machine, cores=2)[0].startswith(
        "3 tests in 30 s on 2 cores: 45 CPU-seconds used (62% busy)")


def test_the_windows_where_the_cores_idled_name_what_ran_then():
    tests, machine = recorded()
    lines = summary(tests, machine, cores=2)
    windows = lines[lines.index("windows of 15 s under 85% busy, and what ran:") + 1:]
    assert windows == ["     15 s  25%  tests/api/test_a.py"]


def test_a_started_process_is_known_by_its_command():
    assert kind_of("/v/bin/python -m decide.runner.child 3 ") == "runner"
    assert kind_of("/v/bin/python -m decide worker --model m ") == "decide worker"
    assert kind_of("/v/bin/python -m decide run --noul q? ") == "decide (other commands)"
    assert kind_of("/usr/lib/chromium/chromium --headless ") == "chromium"
    assert kind_of("/usr/bin/objdump -d lib.so ") == "objdump"


def test_the_processes_alive_at_a_time_are_counted_by_kind():
    """Two runners alive 15 s each, one after the other, and a third alive 30 s, in a 30 s
    run: two alive at a time."""
    tests, machine = recorded()
    machine["started"] = {
        str(pid): {"test": "tests/api/test_a.py::test_one (call)", "cpu": 1.0,
                   "command": "/v/bin/python -m decide.runner.child 5 ",
                   "first": first, "last": last}
        for pid, (first, last) in enumerate([(T0, T0 + 15), (T0 + 15, T0 + 30),
                                             (T0, T0 + 30)])}
    assert "  runner: 3 (3 processes, 2.0 alive at a time)" in summary(tests, machine, cores=2)


def test_each_files_seconds_are_its_tests_walls_summed_longest_first():
    tests, _ = recorded()
    assert list(file_seconds(tests).items()) == [("tests/api/test_a.py", 30.0),
                                                 ("tests/model/test_b.py", 14.0)]
