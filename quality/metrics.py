"""Quality figures over scored items: pure arithmetic, no model and no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

BINS = 10


@dataclass(frozen=True)
class Scored:
    """One decision as evaluated: its options in the order shown, the probabilities the
    service gave them (same order), and the index of the gold option."""

    item_id: str
    domain: str
    options: tuple[str, ...]
    probabilities: tuple[float, ...]
    gold: int

    @property
    def pick(self) -> int:
        """The most probable option, the first on a tie."""
        best = 0
        for index, value in enumerate(self.probabilities):
            if value > self.probabilities[best]:
                best = index
        return best

    @property
    def correct(self) -> bool:
        return self.pick == self.gold

    @property
    def confidence(self) -> float:
        return self.probabilities[self.pick]


def accuracy(items: Sequence[Scored]) -> float:
    return sum(item.correct for item in items) / len(items) if items else 0.0


def brier(items: Sequence[Scored]) -> float:
    """Mean over items of Σ_k (p_k − [k = gold])², the multi-class Brier score."""
    if not items:
        return 0.0
    return sum(sum((p - (index == item.gold)) ** 2 for index, p in enumerate(item.probabilities))
               for item in items) / len(items)


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    confidence: float
    accuracy: float


def reliability(items: Sequence[Scored], bins: int = BINS) -> list[Bin]:
    """Items binned by the confidence of their pick (equal-width bins over [0, 1])."""
    table = []
    for index in range(bins):
        low, high = index / bins, (index + 1) / bins
        inside = [item for item in items
                  if low <= item.confidence < high or (index == bins - 1 and item.confidence == 1)]
        if inside:
            table.append(Bin(low, high, len(inside),
                             sum(item.confidence for item in inside) / len(inside),
                             accuracy(inside)))
        else:
            table.append(Bin(low, high, 0, 0.0, 0.0))
    return table


def ece(items: Sequence[Scored], bins: int = BINS) -> float:
    """Expected calibration error: Σ_b (n_b / N) |accuracy_b − confidence_b|."""
    if not items:
        return 0.0
    return sum(b.count / len(items) * abs(b.accuracy - b.confidence)
               for b in reliability(items, bins))


def position_shares(items: Sequence[Scored]) -> dict[int, dict[int, float]]:
    """For each option count n: the share of picks at each position."""
    shares: dict[int, dict[int, float]] = {}
    for n in sorted({len(item.options) for item in items}):
        group = [item for item in items if len(item.options) == n]
        counts = Counter(item.pick for item in group)
        shares[n] = {position: counts.get(position, 0) / len(group) for position in range(n)}
    return shares


def worst_position_ratio(items: Sequence[Scored]) -> float:
    """The largest share of picks at one position, over its fair share 1/n."""
    return max((share * n for n, table in position_shares(items).items()
                for share in table.values()), default=0.0)


def rotation_survival(pairs: Sequence[tuple[Scored, Scored]]) -> float:
    """How often the option picked survives when the same options are shown rotated."""
    if not pairs:
        return 0.0
    return sum(first.options[first.pick] == rotated.options[rotated.pick]
               for first, rotated in pairs) / len(pairs)
