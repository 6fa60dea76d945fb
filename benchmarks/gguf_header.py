"""What a runner's first fit pays to read the model's output head (issue 24): the hidden-state
projection built from ``llm.gguf_header`` (the header read straight from the file), against
``gguf.GGUFReader``'s whole-file parse that it replaced, in one run on the embedded default.

Run on demand (not a test):

    .venv/bin/python benchmarks/gguf_header.py [--repeat 3]

It prints the median of each, their ratio, and whether the two projections are the same bit
for bit (rows and pseudo-inverse).
"""

from __future__ import annotations

import argparse
import statistics
import time

import gguf
import numpy as np

from decide.config.settings import Settings
from decide.llm.catalog import install_embedded_default
from decide.llm.hidden import HEAD_TENSORS, HiddenProjection


def seconds(work, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def whole_file_parse(path) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
    """The head's tensor and type as ``gguf.GGUFReader`` gives them (every field parsed)."""
    reader = gguf.GGUFReader(str(path))
    head = next(tensor for tensor in reader.tensors if tensor.name in HEAD_TENSORS)
    return np.asarray(head.data), head.tensor_type


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    path = install_embedded_default(Settings().data_dir)
    header = seconds(lambda: HiddenProjection.from_gguf(path), repeat)
    parse = seconds(lambda: whole_file_parse(path), repeat)
    projection = HiddenProjection.from_gguf(path)
    data, kind = whole_file_parse(path)
    rows = np.asarray(gguf.quants.dequantize(data[projection.rows], kind), dtype=np.float32)
    same = np.array_equal(np.linalg.pinv(rows.reshape(len(projection.rows), projection.size)
                                         .astype(np.float64)), projection._pinv)
    print(f"{path.name}: the projection from llm.gguf_header {header:.2f} s; "
          f"gguf.GGUFReader's parse alone {parse:.2f} s ({parse / header:.0f}x); "
          f"the same pseudo-inverse: {same}  (median of {repeat})")
    print(f"reproduce: .venv/bin/python benchmarks/gguf_header.py --repeat {repeat}")


if __name__ == "__main__":
    main()
