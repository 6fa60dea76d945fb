"""``make test``'s first step: the tools and services the suite uses for real, checked before
anything runs. A fresh machine missing one stops here at once, told what to install and why,
rather than failing tests one by one after minutes (``.ci/run`` installs and starts them all).
"""

from __future__ import annotations

import os
import shutil
import sys

import psycopg

from tests.support.own_servers import postgres_bin_dir

TOOLS = {
    "redis-server": ("redis-server", "test clusters run a Redis server of their own"),
    "promtool": ("prometheus", "ops/ alert rules and scrape config are checked with it"),
    "docker-compose": ("docker-compose", "docker-compose.yml is validated with it"),
    "faketime": ("faketime", "a worker whose clock is 30 s off (tests/distributed)"),
    "unshare": ("util-linux", "a worker as PID 1 of its own PID namespace"),
    "objdump": ("binutils", "the installed llama.cpp build is read for its instructions"),
    "chromium": ("chromium", "the console is tested in a real browser (tests/browser)"),
}


def missing() -> list[str]:
    problems = [f"  {command:<15} (Debian package {package}): {why}"
                for command, (package, why) in TOOLS.items() if shutil.which(command) is None]
    if postgres_bin_dir() is None:
        problems.append("  initdb, pg_ctl    (Debian package postgresql): a fault test restarts "
                        "a PostgreSQL server of its own")
    admin = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
    try:
        psycopg.connect(f"{admin}/postgres", connect_timeout=3).close()
    except psycopg.Error as error:
        problems.append(f"  PostgreSQL at {admin} (DECIDE_TEST_POSTGRES): the jobs store is "
                        f"tested on it, and it does not answer ({str(error).strip()[:80]})")
    return problems


def main() -> int:
    problems = missing()
    if not problems:
        return 0
    print("make test: the test suite uses these for real, and this machine lacks them:\n"
          + "\n".join(problems)
          + "\n\nInstall them (Debian/Ubuntu: apt-get install postgresql redis-server "
            "prometheus docker-compose faketime util-linux binutils) and start PostgreSQL, "
            "or run .ci/run, which installs and starts everything and then runs make test.",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
