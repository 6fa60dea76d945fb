"""``decide status``: the lanes of a running service as a table, for people without Grafana."""

from __future__ import annotations

from typing import Any

HEADER = ("model", "workers", "lane", "queued", "running", "oldest", "jobs/min", "tokens/s")
OWN_SCOPE = ("(this key's jobs only; an admin key, one of DECIDE_ADMIN_KEYS, sees every "
             "key's)")


def render_status(report: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [HEADER]
    for model in report["models"]:
        name = model["name"] + (" *" if model["default"] else "")
        minute = model["last_minute"]
        for index, (lane, figures) in enumerate(model["lanes"].items()):
            first = index == 0
            rows.append((
                name if first else "", str(model["workers"]) if first else "", lane,
                str(figures["queued"]), str(figures["running"]),
                f"{figures['oldest_queued_age_seconds']:.1f}s",
                str(minute["jobs"]) if first else "",
                f"{minute['tokens_per_second']:.1f}" if first else ""))
    widths = [max(len(row[column]) for row in rows) for column in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(width) if column < 3 else cell.rjust(width)
                       for column, (cell, width) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    if report.get("scope") == "own":  # the queued and running columns count this key's alone
        lines.append(OWN_SCOPE)
    return "\n".join(lines) + "\n"
