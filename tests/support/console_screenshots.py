"""The README's screenshots of the console, taken in Debian's chromium over a real ``decide
serve`` holding a few decisions, some of them labelled:

    .venv/bin/python -m tests.support.console_screenshots docs/console
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.api.conftest import Server

KEY = "key-screenshots"
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "team": {"type": "choice", "instructions": "Which team should handle it?",
             "criteria": ["billing", "shipping", "technical", "accounts"]},
}
TICKETS = [
    "My card was charged twice for order A-104. Please refund the duplicate.",
    "Where is parcel 7781? The tracking page has not moved for a week.",
    "The app crashes every time I open the settings page on Android 14.",
    "I want my money back for the blender, it arrived broken.",
    "How do I change the e-mail address on my account?",
    "You billed me after I cancelled. Return the money or I dispute it.",
]


def take(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as root:
        server = Server(Path(root), {"DECIDE_API_KEYS": KEY})
        try:
            with server.client(KEY) as client:
                jobs = [client.post("/v1/systemone", json={"state": ticket,
                                                            "questions": QUESTIONS}
                                    ).headers["X-Job-Id"] for ticket in TICKETS]
                for job, answer in zip(jobs, ("yes", "no", "no", "yes", "no"), strict=False):
                    client.post(f"/v1/jobs/{job}/labels", json={"answers": {"refund": answer}})
                taught = client.post("/v1/questions", json={
                    "question": QUESTIONS["refund"], "from_labels": True}).json()["id"]
                client.get(f"/v1/questions/{taught}?wait=60")
                batch = client.post("/v1/batches", json={"questions": QUESTIONS, "items": [
                    {"custom_id": f"t-{number}", "state": ticket}
                    for number, ticket in enumerate(TICKETS)]}).json()["id"]
                while client.get(f"/v1/batches/{batch}").json()["status"] == "in_progress":
                    time.sleep(0.5)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                    args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1100, "height": 700})
                page.goto(f"{server.url}/console")
                page.get_by_label("API key").fill(KEY)
                page.keyboard.press("Enter")
                page.get_by_role("heading", name="Overview").wait_for()
                page.screenshot(path=folder / "overview.png")
                for name, route, heading in (
                        ("decisions", "#/decisions", "Decisions"),
                        ("decision", f"#/decisions/{jobs[0]}", f"Decision {jobs[0]}"),
                        ("label_queue", "#/label?question=team", "Label queue: team"),
                        ("taught", f"#/taught/{taught}", f"Taught question {taught}"),
                        ("batches", "#/batches", "Batches")):
                    page.goto(f"{server.url}/console{route}")
                    page.get_by_role("heading", name=heading).wait_for()
                    page.screenshot(path=folder / f"{name}.png",
                                    full_page=name in ("decision", "taught", "batches"))
                browser.close()
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="the console's screenshots for the README")
    parser.add_argument("folder", type=Path)
    take(parser.parse_args().folder)


if __name__ == "__main__":
    main()
