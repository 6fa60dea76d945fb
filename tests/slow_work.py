"""Jobs that keep a worker busy for a while, for tests about waiting, lanes and cancelling."""

from __future__ import annotations


def distinct_nouls(count: int) -> dict[str, dict]:
    """``count`` yes/no questions with distinct texts. Questions with the same text share one
    read of their question piece (and their priors), so a job of many identical questions
    takes the model almost no time; distinct ones take it about 10 ms a row on 2 cores."""
    return {f"q{i}": {"type": "noul",
                      "instructions": f"Does line {i} of the message ask for a refund?"}
            for i in range(count)}
