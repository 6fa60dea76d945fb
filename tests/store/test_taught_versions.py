"""Versions of taught questions on both databases (issue 34, item 3): teaching one question
again numbers its versions 1, 2, …, also when two teachings race (the unique index and a
retry); the answering rule picks the newest ready version; and migration 0013 numbers the
rows that were there before it."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from alembic import command

from decide.migrations.apply import alembic_config, upgrade
from decide.store.db import make_engine
from decide.teach import records as taught_records

QUESTION = {"type": "noul", "instructions": "?"}
EXAMPLES = [{"state": "s", "answer": "yes"}]


def create(db, owner="key-a", key="k"):
    record, _ = taught_records.create_taught(db, owner=owner, model="m", match_key=key,
                                             question=QUESTION, examples=EXAMPLES,
                                             from_labels=False, rows=1, input_tokens=1,
                                             example_count=1)
    return record


def ready(db, record, used=True):
    taught_records.finish_fit(db, record.id, readout={}, fit={"gate": {"used": used}},
                              model_identity="sha256:x", error=None)


def test_versions_count_per_owner_and_question_even_when_teachings_race(db):
    assert [create(db).version for _ in range(2)] == [1, 2]
    assert create(db, key="other").version == 1 and create(db, owner="key-b").version == 1
    made: list[int] = []
    threads = [threading.Thread(target=lambda: made.append(create(db, key="race").version))
               for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(made) == list(range(1, 13))


def test_the_newest_ready_version_answers_if_it_is_used(db):
    first, second, third = create(db), create(db), create(db)
    assert taught_records.answering(db, owner="key-a", match_keys=["k"]) == {}
    ready(db, first)
    assert taught_records.answering(db, owner="key-a", match_keys=["k"])["k"][0] == first.id
    ready(db, third)  # second still fitting: the newest ready one answers
    assert taught_records.answering(db, owner="key-a", match_keys=["k"])["k"][0] == third.id
    assert taught_records.superseded_by(db, first).id == third.id
    ready(db, second, used=False)  # an older version ending changes nothing
    assert taught_records.answering(db, owner="key-a", match_keys=["k"])["k"][0] == third.id
    fourth = create(db)
    ready(db, fourth, used=False)  # the newest ready one unused: zero-shot
    assert taught_records.answering(db, owner="key-a", match_keys=["k"]) == {}
    assert taught_records.answering_ids(db, [first, second, third, fourth]) == set()


def test_the_migration_numbers_the_rows_made_before_it(postgres_url, tmp_path):
    for url in (f"sqlite:///{tmp_path / 'jobs.db'}", postgres_url):
        command.upgrade(alembic_config(url), "0012")
        engine = make_engine(url)
        with engine.begin() as connection:
            for number, (owner, key) in enumerate([("a", "k"), ("a", "k"), ("a", "j"),
                                                   ("b", "k"), ("a", "k")]):
                connection.execute(sa.text(
                    "INSERT INTO taught_questions (id, owner, model, match_key, question, "
                    "examples, example_count, from_labels, status, created_at) VALUES "
                    f"('tq_{number}', '{owner}', 'm', '{key}', '{{}}', '[]', 0, false, "
                    "'ready', 0)"))
        upgrade(url)
        with engine.connect() as connection:
            versions = dict(connection.execute(sa.text(
                "SELECT id, version FROM taught_questions")).all())
        engine.dispose()
        assert versions == {"tq_0": 1, "tq_1": 2, "tq_2": 1, "tq_3": 1, "tq_4": 3}
