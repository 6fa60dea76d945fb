"""A GGUF file's header, read straight from the file: its metadata scalars and where each tensor
lies, without loading llama.cpp and without decoding the vocabulary's arrays.

``gguf.GGUFReader`` builds a Python object for every element of every metadata array, which
for a 262,144-token vocabulary takes some 20 s of CPU; the few fields and tensors read here
need a fraction of a second. Arrays are stepped over (their elements are not kept).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

STRING, ARRAY = 8, 9
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
"""GGUF value type → its struct format (strings and arrays apart)."""
DEFAULT_ALIGNMENT = 32
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    ggml_type: int
    shape: tuple[int, ...]
    """llama.cpp's order: ``shape[0]`` varies fastest (a row's length)."""
    offset: int
    """From the start of the file."""


@dataclass(frozen=True)
class GgufHeader:
    values: dict[str, object]
    """Each metadata key's value; None for an array."""
    tensors: dict[str, TensorInfo]


class _Cursor:
    def __init__(self, data: mmap.mmap, at: int) -> None:
        self.data = data
        self.at = at

    def unpack(self, layout: str) -> tuple:
        values = struct.unpack_from(layout, self.data, self.at)
        self.at += struct.calcsize(layout)
        return values

    def string(self) -> str:
        (length,) = self.unpack("<Q")
        text = self.data[self.at:self.at + length].decode("utf-8", "replace")
        self.at += length
        return text

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` strings without decoding them (a vocabulary's 262,144 tokens:
        a tenth of the time their decoding took, which was most of a runner's model load)."""
        at, data, read_length = self.at, self.data, _LENGTH.unpack_from
        for _ in range(count):
            at += 8 + read_length(data, at)[0]
        self.at = at

    def value(self, kind: int) -> object:
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            element, count = self.unpack("<IQ")
            if element in SCALARS:
                self.at += struct.calcsize(SCALARS[element]) * count
            elif element == STRING:
                self.skip_strings(count)
            else:
                for _ in range(count):
                    self.value(element)
            return None
        return self.unpack(SCALARS[kind])[0]


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF at ``path``; ``ValueError`` when it is not one (or v1)."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        cursor = _Cursor(data, 4)
        version, tensor_count, kv_count = cursor.unpack("<IQQ")
        if version < 2:
            raise ValueError(f"{path}: GGUF v1 is not read here")
        values: dict[str, object] = {}
        for _ in range(kv_count):
            key = cursor.string()
            (kind,) = cursor.unpack("<I")
            values[key] = cursor.value(kind)
        placed: list[tuple[str, int, tuple[int, ...], int]] = []
        for _ in range(tensor_count):
            name = cursor.string()
            (dims,) = cursor.unpack("<I")
            shape = cursor.unpack(f"<{dims}Q")
            kind, offset = cursor.unpack("<IQ")
            placed.append((name, kind, shape, offset))
        alignment = values.get("general.alignment") or DEFAULT_ALIGNMENT
        assert isinstance(alignment, int)
        start = -(-cursor.at // alignment) * alignment
    return GgufHeader(values=values, tensors={
        name: TensorInfo(ggml_type=kind, shape=shape, offset=start + offset)
        for name, kind, shape, offset in placed})
