"""LocalReranker: a cross-encoder behind the ``LocalRerankRuntime`` port, loaded lazily, once.

The built-in runtime, ``OnnxCrossEncoderRuntime``, runs an ONNX cross-encoder from a local
directory holding ``model.onnx`` and ``tokenizer.json`` (Hugging Face ``tokenizers`` format)
with onnxruntime; it needs the ``local`` extra (``pip install 'ragport[local]'``). No
cross-encoder weights ship with ragport, and nothing is ever downloaded: a hub model id is a
``RerankError`` telling you to export the model to a directory and point ``model=`` at it.
There is no lexical fallback: a reranker that cannot load fails loudly.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragport.domain.errors import AbortedError, RerankError, ValidationError, raise_unchained
from ragport.domain.model import Hit
from ragport.ports.rerank import LocalRerankRuntime, RerankScorer, SupportsInterruptibleScore
from ragport.ports.runtime import Abort

__all__ = ["LocalReranker", "OnnxCrossEncoderRuntime"]

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
_INSTALL = "pip install 'ragport[local]'"
_ID_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_ONNX_INTS = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
# Padded tokens per cross-encoder batch: about 4-8 pairs of a 1,000-character chunk and a query
# (docs/rerankers.md, "Time budget", measured the batch sizes).
BATCH_TOKENS = 2_048
# An "org/name" or "name" hub id, as opposed to something written as a filesystem path.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def _fix_hint() -> str:
    return f"point model= at a local directory containing {MODEL_FILE} and {TOKENIZER_FILE}"


class _Never:
    """A stop signal that is never set (a plain ``score`` or ``rerank`` runs to the end)."""

    def is_set(self) -> bool:
        return False


_NEVER = _Never()


def _batches(
    order: np.ndarray, lengths: np.ndarray, max_rows: int, max_tokens: int
) -> list[np.ndarray]:
    """Rows in length order, cut at ``max_rows`` rows or ``max_tokens`` padded tokens (rows x
    the widest row); a row wider than ``max_tokens`` is a batch of its own."""
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < max_rows:
            if (end - start + 1) * int(lengths[order[end]]) > max_tokens:  # sorted: widest last
                break
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


class _OnnxCrossEncoder:
    """A loaded session and tokenizer: scores (query, document) pairs, read-only after load.

    Pairs are sorted by length and cut into batches of at most ``batch_size`` pairs and
    ``batch_tokens`` padded tokens, each padded to its longest pair only; ``stop`` is checked
    before each batch (``SupportsInterruptibleScore``).
    """

    def __init__(self, model: str, session: Any, tokenizer: Any, batching: tuple[int, int]):
        self._model = model
        self._session = session
        self._tokenizer = tokenizer
        self._batch_size, self._batch_tokens = batching
        self._inputs = {i.name: _ONNX_INTS[i.type] for i in session.get_inputs()}
        self._output = session.get_outputs()[0].name
        padding = tokenizer.padding
        self._pad_id = int(padding["pad_id"]) if padding else 0

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        return self.score_interruptible(query, documents, _NEVER)

    def score_interruptible(self, query: str, documents: Sequence[str], stop: Abort) -> list[float]:
        docs = list(documents)
        if not docs:
            return []
        encodings = self._tokenizer.encode_batch([(query, doc) for doc in docs])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(docs))
        out = np.zeros(len(docs), dtype=np.float64)
        order = np.argsort(lengths, kind="stable")
        for rows in _batches(order, lengths, self._batch_size, self._batch_tokens):
            if stop.is_set():
                raise AbortedError("rerank stopped between cross-encoder batches")
            out[rows] = self._run(rows, [encodings[row] for row in rows], lengths)
        return [float(value) for value in out]

    def _run(self, rows: np.ndarray, encodings: list[Any], lengths: np.ndarray) -> np.ndarray:
        """The logits of one batch (``rows`` in ``lengths``), padded to its longest pair."""
        width = max(1, int(lengths[rows].max()))
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for slot, (row, encoding) in enumerate(zip(rows, encodings, strict=True)):
            n = int(lengths[row])
            ids[slot, :n] = encoding.ids
            mask[slot, :n] = 1
            types[slot, :n] = encoding.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        inputs = {name: feed[name].astype(dtype) for name, dtype in self._inputs.items()}
        (logits,) = self._session.run([self._output], inputs)
        logits = np.asarray(logits, dtype=np.float64)
        if logits.shape not in ((len(rows),), (len(rows), 1)):
            raise RerankError(
                f"reranker model {self._model!r} produced logits of shape "
                f"{tuple(logits.shape)}; expected ({len(rows)}, 1) or ({len(rows)},)"
            )
        return logits.reshape(len(rows))


class OnnxCrossEncoderRuntime:
    """Loads an ONNX cross-encoder from a local directory (``model.onnx`` + ``tokenizer.json``).

    ``model`` is that directory, or a name resolved under ``cache_dir`` (``cache_dir/model``).
    The graph takes ``input_ids`` and, if it declares them, ``attention_mask`` and
    ``token_type_ids`` (int64 or int32) and returns logits of shape ``(n, 1)`` or ``(n,)``.
    Pairs are truncated (longest first) to ``max_tokens`` unless ``tokenizer.json`` sets its
    own truncation. ``threads`` sets onnxruntime's intra-op threads (default: its own choice).
    A batch holds at most ``batch_size`` pairs and ``batch_tokens`` padded tokens (rows x its
    longest pair): small batches run faster on a CPU and bound how long a stopped rerank takes
    to end (docs/rerankers.md, "Time budget"). Building the runtime imports nothing; ``load``
    does the work.
    """

    def __init__(
        self,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        allow_remote_models: bool = False,
        threads: int | None = None,
        max_tokens: int = 512,
        batch_size: int = 32,
        batch_tokens: int = BATCH_TOKENS,
    ):
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise ValidationError("cache_dir must be a path", field="cache_dir")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256
        ):
            raise ValidationError("threads must be None or an integer in 1..256", field="threads")
        for name, value, high in (
            ("max_tokens", max_tokens, 8_192),
            ("batch_size", batch_size, 128),
            ("batch_tokens", batch_tokens, 1_048_576),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= high:
                raise ValidationError(f"{name} must be an integer in 2..{high}", field=name)
        self._cache_dir = None if cache_dir is None else Path(cache_dir)
        self._allow_remote_models = allow_remote_models is True
        self._threads = threads
        self._max_tokens = max_tokens
        self._batching = (batch_size, batch_tokens)

    def __repr__(self) -> str:
        return (
            f"OnnxCrossEncoderRuntime(cache_dir={self._cache_dir!r}, "
            f"allow_remote_models={self._allow_remote_models}, threads={self._threads})"
        )

    def resolve(self, model: str) -> Path:
        """The local directory ``model`` names, or a ``RerankError`` saying how to fix it."""
        path = Path(model).expanduser()
        candidates = [path]
        if self._cache_dir is not None and not path.is_absolute():
            candidates.insert(0, self._cache_dir / path)
        for directory in candidates:
            if directory.is_dir():
                for name in (MODEL_FILE, TOKENIZER_FILE):
                    if not (directory / name).is_file():
                        raise RerankError(
                            f"reranker model {model!r}: {name} is missing from its directory; "
                            f"{_fix_hint()}"
                        )
                return directory
        if _HUB_ID.fullmatch(model) and not model.startswith("."):
            if self._allow_remote_models:
                raise RerankError(
                    f"reranker model {model!r} is not a local directory, and remote model "
                    "loading is not supported (ragport never downloads models: it runs "
                    f"offline); export the model to ONNX and {_fix_hint()}"
                )
            raise RerankError(
                f"reranker model {model!r} is not a local directory and remote models are not "
                f"allowed (allow_remote_models=False); export the model to ONNX and {_fix_hint()}"
            )
        raise RerankError(f"reranker model directory {model!r} does not exist; {_fix_hint()}")

    def load(self, model: str) -> RerankScorer:
        directory = self.resolve(model)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise RerankError(
                f"reranker model {model!r} needs the 'local' extra "
                f"({exc.name or 'a module'} is not installed): {_INSTALL}"
            ) from exc
        try:
            tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        except Exception as exc:  # tokenizers raises its own untyped Exception
            raise RerankError(
                f"reranker model {model!r}: {TOKENIZER_FILE} could not be read "
                f"({type(exc).__name__}); {_fix_hint()}"
            ) from exc
        if tokenizer.truncation is None:
            tokenizer.enable_truncation(max_length=self._max_tokens, strategy="longest_first")
        tokenizer.no_padding()  # padded per batch, to the longest pair in it
        options = ort.SessionOptions()
        if self._threads is not None:
            options.intra_op_num_threads = self._threads
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                str(directory / MODEL_FILE),
                sess_options=options,
                providers=["CPUExecutionProvider"],
            )
        except Exception as exc:  # onnxruntime's errors are not a public hierarchy
            raise RerankError(
                f"reranker model {model!r}: {MODEL_FILE} could not be loaded ({type(exc).__name__})"
            ) from exc
        inputs = {i.name: i.type for i in session.get_inputs()}
        if (
            "input_ids" not in inputs
            or not set(inputs) <= set(_ID_INPUTS)
            or any(kind not in _ONNX_INTS for kind in inputs.values())
            or not session.get_outputs()
        ):
            raise RerankError(
                f"reranker model {model!r} has inputs {sorted(inputs)}; a cross-encoder takes "
                "integer input_ids (and optionally attention_mask, token_type_ids)"
            )
        return _OnnxCrossEncoder(model, session, tokenizer, self._batching)


OnLoad = Callable[..., object]


class LocalReranker:
    """A cross-encoder run in process: every candidate is scored in one ``scorer.score`` call
    (``score_interruptible`` when the scorer has it, as the built-in one does, so that a
    rerank the seam stopped waiting for ends at the next batch: ``SupportsInterruptibleRerank``).

    The constructor only checks its arguments. The first ``rerank`` (or ``load()``) calls
    ``runtime.load(model)`` once per instance, under a lock, then ``on_load(model=...,
    load_ms=...)`` once. ``runtime=None`` uses ``OnnxCrossEncoderRuntime(cache_dir=...,
    allow_remote_models=...)``; those two arguments belong to that runtime, so passing them
    with your own ``runtime`` is a ``ValidationError``. A load failure, a scorer that raises,
    answers the wrong number of scores or a non-finite one is a ``RerankError`` naming the
    model (a failed load is retried on the next call). Returns ``(hit, score)`` pairs, highest
    first; equal scores keep the input order.
    """

    def __init__(
        self,
        model: str,
        *,
        runtime: LocalRerankRuntime | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        allow_remote_models: bool = False,
        on_load: OnLoad | None = None,
    ):
        if (
            not isinstance(model, str)
            or not model.strip()
            or len(model) > 4_096
            or not model.isprintable()
        ):
            raise ValidationError("model must be a non-empty printable string", field="model")
        if runtime is not None and not callable(getattr(runtime, "load", None)):
            raise ValidationError("runtime must have a load(model) method", field="runtime")
        if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
            raise ValidationError("cache_dir must be a path", field="cache_dir")
        if runtime is not None and cache_dir is not None:
            raise ValidationError(
                "cache_dir configures the built-in runtime; configure your runtime instead",
                field="cache_dir",
            )
        if runtime is not None and allow_remote_models:
            raise ValidationError(
                "allow_remote_models configures the built-in runtime; configure your runtime "
                "instead",
                field="allow_remote_models",
            )
        if on_load is not None and not callable(on_load):
            raise ValidationError("on_load must be callable", field="on_load")
        self._model = model
        self._runtime = runtime
        self._cache_dir = cache_dir
        self._allow_remote_models = allow_remote_models is True
        self._on_load = on_load
        self._lock = threading.Lock()
        self._scorer: RerankScorer | None = None

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"LocalReranker(model={self._model!r}, loaded={self._scorer is not None})"

    def load(self) -> None:
        """Load the model now (idempotent), e.g. to fail fast at start-up."""
        self._loaded()

    def _loaded(self) -> RerankScorer:
        scorer = self._scorer
        if scorer is not None:
            return scorer
        with self._lock:
            if self._scorer is None:
                runtime = self._runtime or OnnxCrossEncoderRuntime(
                    cache_dir=self._cache_dir, allow_remote_models=self._allow_remote_models
                )
                started = time.perf_counter()
                try:
                    loaded = runtime.load(self._model)
                except RerankError:
                    raise
                except Exception as exc:
                    raise RerankError(
                        f"reranker model {self._model!r} failed to load ({type(exc).__name__})"
                    ) from exc
                if not callable(getattr(loaded, "score", None)):
                    raise RerankError(
                        f"the runtime returned no scorer for reranker model {self._model!r}"
                    )
                load_ms = (time.perf_counter() - started) * 1000
                self._scorer = loaded
                if self._on_load is not None:
                    self._on_load(model=self._model, load_ms=load_ms)
            return self._scorer

    def rerank(self, query: str, hits: Sequence[Hit]) -> list[tuple[Hit, float]]:
        return self.rerank_interruptible(query, hits, _NEVER)

    def rerank_interruptible(
        self, query: str, hits: Sequence[Hit], stop: Abort
    ) -> list[tuple[Hit, float]]:
        """As ``rerank``; a scorer with ``score_interruptible`` (the built-in one) stops between
        its batches once ``stop`` is set (``AbortedError``), any other scores in one call."""
        hits = list(hits)
        if not hits:
            return []
        scorer = self._loaded()
        if stop.is_set():
            raise AbortedError("rerank stopped after loading the model")
        texts = [hit.text for hit in hits]
        try:
            if isinstance(scorer, SupportsInterruptibleScore):
                answer = scorer.score_interruptible(query, texts, stop)
            else:
                answer = scorer.score(query, texts)
        except (RerankError, AbortedError):
            raise
        except Exception as exc:
            # By type only, unchained: a runtime's error may quote the documents it scored.
            raise_unchained(
                RerankError(
                    f"reranker model {self._model!r} failed while scoring ({type(exc).__name__})"
                )
            )
        scores = self._check(answer, len(hits))
        order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable: ties keep order
        return [(hits[i], scores[i]) for i in order]

    def _check(self, answer: object, count: int) -> list[float]:
        try:
            values = list(answer)  # type: ignore[call-overload]
        except TypeError:
            raise RerankError(
                f"reranker model {self._model!r} returned something other than a sequence"
            ) from None
        if len(values) != count:
            raise RerankError(
                f"reranker model {self._model!r} returned {len(values)} scores for "
                f"{count} documents"
            )
        scores: list[float] = []
        for value in values:
            if isinstance(value, bool | np.bool_) or not isinstance(
                value, int | float | np.integer | np.floating
            ):
                raise RerankError(f"reranker model {self._model!r} returned a non-numeric score")
            number = float(value)
            if not math.isfinite(number):
                raise RerankError(f"reranker model {self._model!r} returned a non-finite score")
            scores.append(number)
        return scores
