"""The console (issue 38) in Debian's chromium over a real ``decide serve``: a key signs in,
labels ten decisions from the keyboard through the label queue (and takes one back), reads a
decision's page, and another key is refused the first key's work; no page prints an error."""

from __future__ import annotations

import re

import pytest

from tests.api.conftest import KEYS
from tests.browser.conftest import ADMIN

pytestmark = pytest.mark.slow

REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
TICKETS = [
    "My card was charged twice for order A-{n}. Please refund the duplicate.",
    "Where is parcel {n}? The tracking page has not moved for a week.",
    "I want my money back for order {n}, the blender arrived broken.",
    "How do I change the e-mail address on account {n}?",
]


@pytest.fixture(scope="module")
def decided(console_server) -> list[str]:
    """Twelve decisions of key A's, asked through the API: their job ids."""
    with console_server.client(KEYS[0]) as client:
        return [client.post("/v1/systemone", json={
                    "state": TICKETS[number % len(TICKETS)].format(n=100 + number),
                    "questions": {"refund": REFUND}}).headers["X-Job-Id"]
                for number in range(12)]


def sign_in(page, server, key: str) -> None:
    page.goto(f"{server.url}/console#/overview")
    page.get_by_label("API key").fill(key)
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Overview").wait_for()


def test_a_key_signs_in_and_sees_its_lanes(page, console_server, decided):
    page.goto(f"{console_server.url}/console")
    page.get_by_label("API key").fill("not-a-key")
    page.keyboard.press("Enter")
    page.get_by_text("That key was refused.").wait_for()
    page.errors.clear()  # the refused sign-in's 401, printed by the browser itself
    sign_in(page, console_server, KEYS[0])
    assert page.locator("table tbody tr").count() == 2  # the default model's two lanes
    assert page.get_by_text("Your key's work.").is_visible()
    assert page.locator("#failures").inner_text() == "None."  # no decision of A's failed
    hour = re.match(r"(\d+) in the last hour", page.locator("#last-hour").inner_text())
    assert hour and int(hour.group(1)) >= len(decided)  # the chart's hour holds them
    assert page.errors == []


def test_ten_decisions_are_labelled_from_the_keyboard_and_one_taken_back(page, console_server,
                                                                          decided):
    sign_in(page, console_server, KEYS[0])
    page.keyboard.press("Tab")  # the header's links are reached by the keyboard
    page.goto(f"{console_server.url}/console#/label")
    page.get_by_label("Question").select_option("refund")
    page.get_by_role("button", name="Label it").press("Enter")
    progress = page.locator("#progress")
    progress.filter(has_text="0 labelled, 12 left").wait_for()
    shown = []
    for count in range(1, 11):
        shown.append(page.locator("#state").inner_text())
        page.keyboard.press("1" if wants_money(shown[-1]) else "2")
        progress.filter(has_text=f"{count} labelled").wait_for()
    page.keyboard.press("u")  # back to the tenth: a key press replaces its label
    page.get_by_text("Labelled: ").wait_for()
    tenth = page.locator("#state").inner_text()
    page.keyboard.press("2")
    progress.filter(has_text="10 labelled, 2 left").wait_for()
    assert len(set(shown)) == 10

    with console_server.client(KEYS[0]) as client:
        labels = {job: client.get(f"/v1/jobs/{job}/labels").json()["answers"] for job in decided}
        states = {job: client.get(f"/v1/jobs/{job}/request").json()["request"]["state"]
                  for job in decided}
    recorded = {states[job]: answer["refund"] for job, answer in labels.items() if answer}
    assert len(recorded) == 10
    assert recorded[tenth] == "no"  # replaced after u
    for state, answer in recorded.items():
        if state != tenth:
            assert answer == ("yes" if wants_money(state) else "no"), state
    assert page.errors == []


def wants_money(state: str) -> bool:
    return "refund" in state or "money back" in state


def reliability_count(page) -> int:
    """The labelled decisions the reliability diagram's table counts."""
    cells = page.locator("#reliability tbody tr td:first-child").all_inner_texts()
    return sum(int(cell) for cell in cells)


def test_teaching_from_the_labels_and_again_changes_the_fits_figures(page, console_server,
                                                                     decided):
    with console_server.client(KEYS[0]) as client:  # ten labelled (as the test above leaves)
        unlabelled = [job for job in decided
                      if not client.get(f"/v1/jobs/{job}/labels").json()["answers"]]
        for job in unlabelled[:len(unlabelled) - 2]:
            state = client.get(f"/v1/jobs/{job}/request").json()["request"]["state"]
            client.post(f"/v1/jobs/{job}/labels", json={"answers": {
                "refund": "yes" if wants_money(state) else "no"}})
    sign_in(page, console_server, KEYS[0])
    page.goto(f"{console_server.url}/console#/label?question=refund")
    page.locator("#progress").filter(has_text="0 labelled, 2 left").wait_for()
    page.get_by_role("button", name="Teach this question from its labels").click()
    heading = page.get_by_role("heading", name=re.compile(r"^Taught question tq_"))
    heading.wait_for(timeout=180_000)
    first = page.locator("#figures").inner_text()
    assert "version 1, ready, 10 examples" in page.get_by_text("version 1,").inner_text()
    assert reliability_count(page) == 10  # the diagram reads the ten labelled decisions

    page.goto(f"{console_server.url}/console#/label?question=refund")  # the last two, by key
    progress = page.locator("#progress")
    progress.filter(has_text="0 labelled, 2 left").wait_for()
    for count in (1, 2):
        state = page.locator("#state").inner_text()
        page.keyboard.press("1" if wants_money(state) else "2")
        progress.filter(has_text=f"{count} labelled").wait_for()
    page.get_by_role("link", name="Taught questions").click()
    page.get_by_role("link", name=re.compile(r"^tq_")).first.click()
    page.get_by_role("button", name="Teach again from labels").click()
    page.get_by_text("version 2,").wait_for(timeout=180_000)
    assert "version 2, ready, 12 examples" in page.get_by_text("version 2,").inner_text()
    again = page.locator("#figures").inner_text()
    assert again != first
    assert reliability_count(page) == 12
    assert page.get_by_role("link", name="version 1").is_visible()
    assert page.errors == []


def test_a_decision_page_shows_its_state_bars_and_label(page, console_server, decided):
    job = decided[0]
    with console_server.client(KEYS[0]) as client:
        client.post(f"/v1/jobs/{job}/labels", json={"answers": {"refund": "yes"}})
    sign_in(page, console_server, KEYS[0])
    page.goto(f"{console_server.url}/console#/decisions")
    answered = page.get_by_label("answered")
    answered.select_option("taught")  # every decision here was answered zero-shot
    page.get_by_text("0 of ").wait_for()
    answered.select_option("zero-shot")
    page.get_by_role("link", name=job).click()
    page.get_by_role("heading", name=f"Decision {job}").wait_for()
    assert "A-100" in page.locator(".state").inner_text()
    bars = page.get_by_role("img", name=re.compile(r"^(yes|no): \d+\.\d%$"))
    assert bars.count() == 2
    assert page.get_by_text("Labelled: yes").is_visible()
    assert page.errors == []


def test_another_key_is_refused_the_first_keys_work(page, console_server, decided):
    sign_in(page, console_server, KEYS[1])
    page.goto(f"{console_server.url}/console#/decisions")
    page.get_by_role("heading", name="Decisions").wait_for()
    assert page.get_by_role("link", name=decided[0]).count() == 0
    assert page.errors == []
    page.goto(f"{console_server.url}/console#/decisions/{decided[0]}")
    page.get_by_role("alert").filter(has_text=f"Not found: no job '{decided[0]}'").wait_for()
    assert page.locator(".state").count() == 0
    # the only errors: the browser's own lines for the API's 404s
    assert page.errors and all("404" in error for error in page.errors)


def test_the_console_fetches_nothing_from_elsewhere(console_server):
    with console_server.client() as client:
        page = client.get("/console")
        script = client.get("/console/app.js")
        assert client.get("/console/../pyproject.toml").status_code == 404
        assert client.get("/console/secret.py").status_code == 404
    assert page.status_code == 200 and script.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "http" not in page.text.replace(console_server.url, "")


def test_a_batch_is_sent_from_a_csv_followed_and_its_results_downloaded(page, console_server,
                                                                        tmp_path):
    states = tmp_path / "tickets.csv"
    states.write_text('custom_id,state\r\nt-1,"Refund my order, please."\r\n'
                      't-2,"Where is my parcel? It says ""shipped"" since Monday."\r\n'
                      't-3,The app crashes on start.\r\n', encoding="utf-8")
    sign_in(page, console_server, KEYS[0])
    page.get_by_role("link", name="Batches").click()
    page.get_by_role("heading", name="Batches").wait_for()
    page.get_by_label("States: a CSV with a state column, or JSONL").set_input_files(states)
    page.get_by_role("button", name="Send the batch").click()
    page.locator("#batch-status").filter(has_text="completed").wait_for(timeout=120_000)
    assert "3 succeeded" in page.locator("#batch-status").inner_text()
    with page.expect_download() as downloading:
        page.get_by_role("button", name="Download the results (CSV)").click()
    rows = downloading.value.path().read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith('"custom_id","status"')
    assert [row.split(",")[0] for row in rows[1:]] == ['"t-1"', '"t-2"', '"t-3"']
    assert page.errors == []


def test_a_bad_batch_file_is_refused_with_what_is_wrong(page, console_server, tmp_path):
    states = tmp_path / "tickets.csv"
    states.write_text("id,text\r\n1,hello\r\n", encoding="utf-8")
    sign_in(page, console_server, KEYS[0])
    page.goto(f"{console_server.url}/console#/batches")
    page.get_by_label("States: a CSV with a state column, or JSONL").set_input_files(states)
    page.get_by_role("button", name="Send the batch").click()
    page.get_by_role("alert").filter(has_text="the CSV needs a state column").wait_for()
    assert page.errors == []


def test_an_admin_key_sees_every_keys_decisions_and_who_asked(page, console_server, decided):
    sign_in(page, console_server, ADMIN)
    page.get_by_role("link", name="Decisions").click()
    page.get_by_text("Every key's decisions.").wait_for()
    assert page.get_by_role("columnheader", name="asked by").is_visible()
    page.get_by_role("link", name=decided[0]).click()
    page.get_by_role("heading", name=f"Decision {decided[0]}").wait_for()
    assert "A-100" in page.locator(".state").inner_text()
    assert page.errors == []
