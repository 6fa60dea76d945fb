"""Option labels (SPEC §3.4): ``A``..``Z`` then ``AA``..``ZZ``, each a single token."""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from decide.core.errors import ModelRefused

LABEL_COUNT = 255


class Tokenizer(Protocol):
    """The only view of a vocabulary the core needs."""

    @property
    def bos_id(self) -> int | None:
        """The BOS token when the GGUF asks for one at the start of a prompt, else None."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``: no BOS added, special-token text left as plain text."""
        ...


@dataclass(frozen=True)
class Labels:
    """The label texts and their token ids, in option order."""

    texts: tuple[str, ...]
    ids: tuple[int, ...]


def label_candidates() -> Iterator[str]:
    """``A``..``Z``, then ``AA``, ``AB``, .. ``ZZ``."""
    letters = string.ascii_uppercase
    yield from letters
    for first in letters:
        for second in letters:
            yield first + second


def pick_labels(tokenizer: Tokenizer, model_name: str, count: int = LABEL_COUNT) -> Labels:
    """The first ``count`` candidates that tokenize to exactly one token."""
    texts: list[str] = []
    ids: list[int] = []
    for candidate in label_candidates():
        tokens = tokenizer.tokenize(candidate)
        if len(tokens) == 1:
            texts.append(candidate)
            ids.append(tokens[0])
            if len(texts) == count:
                return Labels(texts=tuple(texts), ids=tuple(ids))
    raise ModelRefused(
        f"model {model_name!r} cannot serve decisions: its vocabulary has only {len(texts)} "
        f"single-token option labels among A..Z and AA..ZZ, and {count} are needed"
    )
