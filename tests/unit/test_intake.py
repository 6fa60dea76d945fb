"""One way in (``api.intake.take_in``, issue 37, item 2): new work admitted against the key's
quota, stored, then counted, added to its lane's backlog and sent; a replay none of these."""

from __future__ import annotations

from types import SimpleNamespace

from decide import metrics
from decide.api.intake import Intake, Stored, take_in


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args)) or f"{name}-made"


def context():
    quotas, backlog, queue = Recorder(), Recorder(), Recorder()
    return SimpleNamespace(quotas=quotas, backlog=backlog, queue=queue)


def submitted(model: str, priority: str) -> float:
    return metrics.jobs_submitted.labels(model, priority)._value.get()


def test_new_work_is_admitted_stored_counted_backlogged_and_sent():
    ctx = context()
    before = submitted("m-intake", "foreground")
    given = []
    value, admission = take_in(ctx, Intake("alice", "m-intake", "foreground", 7),
                               lambda admit: given.append(admit) or Stored("job", ["j1"]))
    assert value == "job" and admission == "admission-made" == given[0]
    assert ctx.quotas.calls == [("admission", "alice", "foreground", 7)]
    assert ctx.backlog.calls == [("add", "m-intake", "foreground", 7)]
    assert ctx.queue.calls == [("send", "j1", "m-intake", "foreground", "alice")]
    assert submitted("m-intake", "foreground") == before + 1


def test_a_batch_is_sent_as_one_message_and_counted_per_item():
    ctx = context()
    before = submitted("m-intake", "background")
    take_in(ctx, Intake("bob", "m-intake", "background", 30, batch=True),
            lambda admit: Stored("batch", ["j1", "j2", "j3"]))
    assert ctx.queue.calls == [("batch_stored", ["j1", "j2", "j3"], "m-intake", "background",
                                "bob")]
    assert submitted("m-intake", "background") == before + 3


def test_a_replay_is_neither_admitted_counted_nor_sent():
    ctx = context()
    value, admission = take_in(ctx, Intake("alice", "m-intake", "foreground", 7),
                               lambda admit: Stored(("old", admit)), admit=False)
    assert value == ("old", None) and admission is None
    assert ctx.quotas.calls == ctx.backlog.calls == ctx.queue.calls == []
