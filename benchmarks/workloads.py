"""What several benchmarks measure alike, so their figures compare: the short-ticket workload
(``service.py``, ``gpu_check.py``) and the quality summary of the taught-question runs
(``taught.py``, ``taught_baselines.py``). Pure: importing it loads no model."""

from __future__ import annotations

from typing import Any

QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which department should handle this?",
                   "criteria": {"billing": "money that moved", "technical": "something broken",
                                "sales": "buying more", "account": "access and settings"}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["can wait", "needs an answer today", "blocks the customer now"]},
}
"""Three questions of a short ticket: a described 4-way choice, a yes/no, a 3-level score."""
PROBLEMS = ["was charged twice for order", "cannot log in since the update of",
            "wants to upgrade the plan for", "reports the export failing for",
            "asks about the invoice of", "says the dashboard is slow for"]


def ticket(index: int) -> str:
    return (f"Ticket {index}: the customer {PROBLEMS[index % len(PROBLEMS)]} account "
            f"A-{1000 + index}. They wrote in on day {index % 28 + 1} and expect an answer.")


def quality_summary(report: Any) -> dict[str, Any]:
    """``decide.quality.evaluate``'s summary, with the accuracy outside the factual domain
    (where no readout beats a coin on the embedded model)."""
    summary = report.summary()
    outside = [item for item in report.scored if item.domain != "factual"]
    summary["accuracy_outside_factual"] = round(
        sum(item.probabilities.index(max(item.probabilities)) == item.gold
            for item in outside) / len(outside), 4)
    return summary
