"""``decide calibrate``: per-type temperatures fitted on labeled examples, and confidence tiers.

The model reads every example once; each candidate temperature is then applied to those
readings (pure arithmetic), and each question type keeps the temperature with the lowest
negative log-likelihood of the gold answers. The tiers say from which confidence a pick can be
acted on automatically, from which it should be confirmed, and below which a person decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from decide.core.engine import Reading, assemble
from decide.core.profile import Profile
from decide.core.protocol import DecisionRequest, parse_request
from decide.quality.evaluate import score
from decide.quality.metrics import Scored, accuracy, ece, reliability

TYPES = ("choice", "noul", "score")
TEMPERATURE_GRID = tuple(round(0.05 * 1.05 ** step, 4) for step in range(160))
"""0.05 to about 114, 5% apart."""
AUTO_ACCURACY = 0.95
CONFIRM_ACCURACY = 0.80
MIN_TIER_EXAMPLES = 5
PROBABILITY_FLOOR = 1e-6

Read = Callable[[DecisionRequest], Reading]


@dataclass(frozen=True)
class Example:
    item: dict[str, Any]
    request: DecisionRequest
    reading: Reading

    @property
    def type(self) -> str:
        return str(self.item["question"]["type"])


def read_examples(items: Sequence[dict[str, Any]], read: Read,
                  progress: Callable[[int, int], None] | None = None) -> list[Example]:
    """Every labeled item read once by the model (``read`` is ``DecisionEngine.read``)."""
    examples = []
    for number, item in enumerate(items, start=1):
        request = parse_request({"state": item["state"], "questions": {"q": item["question"]}})
        examples.append(Example(item=item, request=request, reading=read(request)))
        if progress is not None:
            progress(number, len(items))
    return examples


def scored(examples: Sequence[Example], profile: Profile) -> list[Scored]:
    """The examples' answers under ``profile``'s temperatures."""
    found = []
    for example in examples:
        reading = example.reading
        answers = assemble(example.request.questions, reading.plan, reading.logits, profile,
                           reading.priors)
        found.append(score(example.item, example.item["question"],
                           answers["q"].to_wire()))
    return found


def log_loss(items: Sequence[Scored]) -> float:
    """Mean negative log-probability of the gold answer."""
    return -math.fsum(math.log(max(item.probabilities[item.gold], PROBABILITY_FLOOR))
                      for item in items) / len(items)


def with_temperature(profile: Profile, question_type: str, temperature: float) -> Profile:
    return replace(profile, temperature_by_type={**profile.temperature_by_type,
                                                 question_type: temperature})


def fit_temperatures(examples: Sequence[Example], profile: Profile) -> dict[str, float]:
    """For each question type with examples, the grid temperature of least log loss."""
    fitted = {}
    for question_type in TYPES:
        of_type = [example for example in examples if example.type == question_type]
        if not of_type:
            continue
        fitted[question_type] = min(
            TEMPERATURE_GRID,
            key=lambda t: log_loss(scored(of_type, with_temperature(profile, question_type, t))))
    return fitted


@dataclass(frozen=True)
class Tier:
    name: str
    threshold: float | None
    """The lowest confidence of the tier; None when no confidence reaches its accuracy."""
    share: float
    accuracy: float
    """Of the examples in the tier (at or above its threshold, below the tier above)."""
    share_above: float = 0.0
    accuracy_above: float = 0.0
    """Of all the examples at or above the threshold: what the threshold was chosen for."""


def threshold_for(items: Sequence[Scored], target: float) -> float | None:
    """The lowest confidence t such that the picks at or above t are right at least
    ``target`` of the time (over at least ``MIN_TIER_EXAMPLES`` examples)."""
    ranked = sorted(items, key=lambda item: item.confidence, reverse=True)
    best = None
    right = 0
    for count, item in enumerate(ranked, start=1):
        right += item.correct
        last_of_its_confidence = count == len(ranked) or ranked[count].confidence < item.confidence
        if last_of_its_confidence and count >= MIN_TIER_EXAMPLES and right / count >= target:
            best = item.confidence
    return best


def tiers(items: Sequence[Scored]) -> list[Tier]:
    """Act automatically / confirm / route to a person, by confidence of the pick."""
    auto = threshold_for(items, AUTO_ACCURACY)
    confirm = threshold_for(items, CONFIRM_ACCURACY)
    if auto is not None and confirm is not None:
        confirm = min(confirm, auto)
    found = []
    ceiling = math.inf
    for name, low in (("act automatically", auto), ("confirm", confirm), ("route to a person",
                                                                          0.0)):
        members = [] if low is None else [item for item in items
                                          if low <= item.confidence < ceiling]
        above = [] if low is None else [item for item in items if item.confidence >= low]
        found.append(Tier(name=name, threshold=low, share=len(members) / len(items),
                          accuracy=accuracy(members), share_above=len(above) / len(items),
                          accuracy_above=accuracy(above)))
        if low is not None:
            ceiling = low
    return found


def report(model: str, examples: Sequence[Example], before: Profile, after: Profile,
           fitted: dict[str, float]) -> str:
    """The fitted temperatures, the reliability table after fitting, and the tiers."""
    was, now = scored(examples, before), scored(examples, after)
    lines = [f"model {model}: {len(examples)} examples",
             "  temperatures: " + ", ".join(f"{kind} {value:g}"
                                            for kind, value in fitted.items()),
             f"  accuracy {accuracy(now):.3f}   log loss {log_loss(was):.3f} -> "
             f"{log_loss(now):.3f}   ECE {ece(was):.3f} -> {ece(now):.3f}",
             "  reliability after fitting (confidence of the pick):",
             "    bin       count  confidence  accuracy"]
    for row in reliability(now):
        if row.count:
            lines.append(f"    {row.low:.1f}-{row.high:.1f}  {row.count:>5}  "
                         f"{row.confidence:>10.3f}  {row.accuracy:>8.3f}")
    lines.append(f"  suggested tiers (accuracy targets {AUTO_ACCURACY:.0%} and "
                 f"{CONFIRM_ACCURACY:.0%}):")
    for tier in tiers(now):
        if tier.threshold is None:
            lines.append(f"    {tier.name:<18} no confidence reaches its accuracy on these "
                         "examples")
        else:
            lines.append(f"    {tier.name:<18} confidence >= {tier.threshold:.3f}: "
                         f"{tier.share:.0%} of examples (accuracy {tier.accuracy:.3f}); "
                         f"{tier.share_above:.0%} at or above it (accuracy "
                         f"{tier.accuracy_above:.3f})")
    return "\n".join(lines) + "\n"
