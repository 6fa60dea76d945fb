"""A batch's results as CSV (and NDJSON, the default) over the real store, in-process."""

from __future__ import annotations

import asyncio
import csv
import io
import json

import httpx
import pytest

from decide.client import AsyncClient, Client, NotFoundError

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": None, "ship, \"fast\"": "parcels"}},
    "refund": {"type": "noul", "instructions": "Is it a refund request?"},
    "urgency": {"type": "score", "instructions": "How urgent?",
                "criteria": ["whenever", "soon", "now"]},
}


def submit(door, items):
    response = door.client.post("/v1/batches", json={"questions": QUESTIONS, "items": items})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_csv_results_have_a_header_and_one_row_per_item_in_order(open_door):
    items = [{"custom_id": f"t{n}", "state": f"ticket {n}"} for n in range(4)]
    items.append({"custom_id": "=comma, \"quote\"\nline", "state": "odd id"})
    batch_id = submit(open_door, items)
    response = open_door.client.get(f"/v1/batches/{batch_id}/results?format=csv")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == f'attachment; filename="{batch_id}.csv"'
    assert response.text.endswith("\r\n")
    rows = list(csv.reader(io.StringIO(response.text, newline="")))
    assert rows[0] == [
        "custom_id", "status", "error_type", "error_message",
        "team", "team.confidence", "team.p.billing", 'team.p.ship, "fast"',
        "refund", "urgency", "urgency.confidence", "urgency.p.0: whenever", "urgency.p.1: soon",
        "urgency.p.2: now"]
    # a custom_id a spreadsheet would run as a formula is quoted with a leading '
    assert [row[0] for row in rows[1:]] == [*(item["custom_id"] for item in items[:4]),
                                            "'=comma, \"quote\"\nline"]
    ndjson = [json.loads(line) for line in
              open_door.client.get(f"/v1/batches/{batch_id}/results").text.splitlines()]
    for row, line in zip(rows[1:], ndjson, strict=True):
        answers = line["result"]["answers"]
        team, urgency = answers["team"], answers["urgency"]
        assert row[1:4] == ["succeeded", "", ""]
        assert row[4] == team["choice"] and float(row[5]) == team["confidence"]
        assert [float(cell) for cell in row[6:8]] == list(team["probabilities"].values())
        assert float(row[8]) == answers["refund"]["noul"]
        assert float(row[9]) == urgency["score"] and float(row[10]) == urgency["confidence"]
        assert [float(cell) for cell in row[11:14]] == [
            urgency["probabilities"][key] for key in ("0", "1", "2")]


def test_a_cancelled_item_has_its_error_and_no_answers(open_door):
    open_door.worker.holding = True
    batch_id = submit(open_door, [{"custom_id": "first", "state": "decoded"},
                                  {"custom_id": "second", "state": "never decoded"}])
    first_job = open_door.worker.sent[0][0]
    assert open_door.worker.decode(first_job) == "succeeded"
    cancelled = open_door.client.post(f"/v1/batches/{batch_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    text = open_door.client.get(f"/v1/batches/{batch_id}/results",
                                params={"format": "csv"}).text
    header, first, second = csv.reader(io.StringIO(text, newline=""))
    assert first[:4] == ["first", "succeeded", "", ""] and first[4] in ("billing",
                                                                        'ship, "fast"')
    assert second[:3] == ["second", "cancelled", "cancelled"] and second[3]
    assert second[4:] == [""] * (len(header) - 4)


def test_ndjson_is_the_default_and_may_be_asked_for(open_door):
    batch_id = submit(open_door, [{"custom_id": "a", "state": "s"}])
    default = open_door.client.get(f"/v1/batches/{batch_id}/results")
    explicit = open_door.client.get(f"/v1/batches/{batch_id}/results?format=ndjson")
    assert default.headers["content-type"] == explicit.headers["content-type"] == (
        "application/x-ndjson")
    assert default.text == explicit.text
    assert json.loads(default.text)["custom_id"] == "a"


def test_another_format_is_a_422_naming_format(open_door):
    batch_id = submit(open_door, [{"custom_id": "a", "state": "s"}])
    response = open_door.client.get(f"/v1/batches/{batch_id}/results?format=xlsx")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "format"]


def test_another_keys_batch_reads_as_absent_in_csv_too(front_door):
    alpha, beta = front_door.keyed("key-alpha"), front_door.keyed("key-beta")
    response = front_door.client.post("/v1/batches", headers=alpha, json={
        "questions": QUESTIONS, "items": [{"custom_id": "a", "state": "s"}]})
    batch_id = response.json()["id"]
    assert front_door.client.get(f"/v1/batches/{batch_id}/results?format=csv",
                                 headers=beta).status_code == 404
    assert front_door.client.get(f"/v1/batches/{batch_id}/results?format=csv",
                                 headers=alpha).status_code == 200


def test_a_batch_longer_than_one_chunk_streams_every_row_in_order(open_door, monkeypatch):
    from decide.api.routes import batches as batch_routes

    monkeypatch.setattr(batch_routes, "CSV_ROWS_PER_CHUNK", 20)  # two whole chunks and a part
    items = [{"custom_id": f"n{n:04d}", "state": f"ticket {n}"} for n in range(45)]
    batch_id = submit(open_door, items)
    text = open_door.client.get(f"/v1/batches/{batch_id}/results?format=csv").text
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert [row[0] for row in rows[1:]] == [item["custom_id"] for item in items]


def test_the_client_streams_csv_results(open_door):
    batch_id = submit(open_door, [{"custom_id": "a", "state": "s"},
                                  {"custom_id": "b", "state": "t"}])
    def forward(request: httpx.Request) -> httpx.Response:
        """The client's request, answered by the in-process front door."""
        answer = open_door.client.request(request.method, request.url.path,
                                          params=request.url.params, headers=request.headers)
        return httpx.Response(answer.status_code, headers=answer.headers,
                              content=answer.content)

    with Client("http://decide.test", transport=httpx.MockTransport(forward)) as client:
        text = "".join(client.results_csv(batch_id))
        with pytest.raises(NotFoundError):
            "".join(client.results_csv("batch_missing"))
    assert text == open_door.client.get(f"/v1/batches/{batch_id}/results?format=csv").text
    assert [row[0] for row in csv.reader(io.StringIO(text, newline=""))] == [
        "custom_id", "a", "b"]


def test_the_async_client_streams_csv_results(open_door):
    batch_id = submit(open_door, [{"custom_id": "a", "state": "s"}])

    async def read() -> str:
        transport = httpx.ASGITransport(app=open_door.client.app)
        async with AsyncClient("http://decide.test", transport=transport) as client:
            return "".join([chunk async for chunk in client.results_csv(batch_id)])

    assert asyncio.run(read()) == open_door.client.get(
        f"/v1/batches/{batch_id}/results?format=csv").text


def test_every_text_cell_is_quoted_so_no_separator_splits_one(open_door):
    """A spreadsheet in a comma-decimal locale splits cells at ``;`` (or a tab): a text cell
    unquoted would give ``b;=c``'s ``=c`` a cell of its own, run as a formula. Every text
    cell is quoted, numbers are bare."""
    batch_id = submit(open_door, [{"custom_id": 'x;=HYPERLINK("http://evil","x")',
                                   "state": "s"}, {"custom_id": "tab\t=1", "state": "t"}])
    text = open_door.client.get(f"/v1/batches/{batch_id}/results?format=csv").text
    header_line, first_line, second_line = text.split("\r\n")[:3]
    assert header_line.startswith('"custom_id","status","error_type","error_message",')
    assert first_line.startswith('"x;=HYPERLINK(""http://evil"",""x"")","succeeded","",""')
    assert second_line.startswith('"tab\t=1","succeeded"')
    (row,) = csv.reader(io.StringIO(first_line, newline=""))
    numbers = [cell for cell in row if cell.replace(".", "", 1).isdigit()]
    assert numbers and all(f",{number}," in first_line + "," for number in numbers)
    texts = [cell for cell in row if cell not in numbers]
    assert all('"' + cell.replace('"', '""') + '"' in first_line for cell in texts)


def test_the_csv_is_written_a_chunk_of_rows_at_a_time_as_the_items_are_read():
    """Streamed: the first chunk is out after its rows' items were read, not the batch's
    (a batch of 100,000 items is never held whole)."""
    from decide.api.routes.batches import CSV_ROWS_PER_CHUNK, _csv

    read: list[int] = []

    def items():
        for number in range(2 * CSV_ROWS_PER_CHUNK + 50):
            read.append(number)
            yield {"custom_id": f"item-{number}", "status": "failed",
                   "error": {"error_type": "decode_error", "message": "m"}}

    chunks = _csv(QUESTIONS, items())
    first = next(chunks).decode()
    assert len(read) == CSV_ROWS_PER_CHUNK  # no item past the first chunk's was read yet
    assert first.count("\r\n") == CSV_ROWS_PER_CHUNK + 1  # the header and its rows
    rest = [chunk.decode() for chunk in chunks]
    assert [chunk.count("\r\n") for chunk in rest] == [CSV_ROWS_PER_CHUNK, 50]
    assert len(read) == 2 * CSV_ROWS_PER_CHUNK + 50
    assert rest[-1].splitlines()[-1].startswith('"item-449","failed","decode_error","m",')
