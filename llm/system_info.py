"""llama.cpp's system-info line read, without loading llama.cpp (a test, or a report of another
process's build, reads it as text)."""

from __future__ import annotations


def enabled_features(system_info: str) -> list[str]:
    """``AVX2``... from llama.cpp's ``CPU : SSE3 = 1 | AVX = 1 | AVX512 = 0 |`` line."""
    features = []
    for part in system_info.replace("\n", "|").split("|"):
        name, _, flag = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and flag.strip() == "1":
            features.append(name)
    return features
