"""LocalReranker: lazy one-time loading, one score call per rerank, and the ONNX runtime.

The built-in runtime runs a tiny cross-encoder graph built here with ``onnx`` (an embedding
lookup, a masked mean and a linear layer) and a WordLevel ``tokenizers`` tokenizer: no model
weights are downloaded or shipped.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from ragport.adapters.rerankers import LocalReranker, OnnxCrossEncoderRuntime
from ragport.application.rerank import rerank_hits
from ragport.contract_tests.reranker import contract_hits
from ragport.domain.errors import AbortedError, RerankError, ValidationError

SPECIAL = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
WORDS = ("cats", "dogs", "leave", "parental", "weeks", "the")
# The tiny model's logit is the mean of its tokens' weights: "cats" pulls a pair up hard.
WEIGHTS = {"cats": 5.0, "parental": 2.0, "leave": 1.0}
SECRET_TEXT = "CONFIDENTIAL-merger-plan-zebra"


def build_tiny_cross_encoder(
    directory: Path,
    *,
    token_type_ids: bool = False,
    flat_output: bool = False,
    logits_width: int = 1,
    int32_inputs: bool = False,
) -> Path:
    """Write model.onnx and tokenizer.json for a deterministic toy cross-encoder."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = dict(SPECIAL)
    for word in WORDS:
        vocab[word] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", SPECIAL["[CLS]"]), ("[SEP]", SPECIAL["[SEP]"])],
    )
    tokenizer.save(str(directory / "tokenizer.json"))

    embedding = np.zeros((len(vocab), 2), dtype=np.float32)
    embedding[:, 1] = 1.0
    for word, weight in WEIGHTS.items():
        embedding[vocab[word], 0] = weight
    projection = np.zeros((2, logits_width), dtype=np.float32)
    projection[0, :] = 1.0
    id_type = TensorProto.INT32 if int32_inputs else TensorProto.INT64
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.INT64),
        helper.make_node("Gather", ["embedding", "ids"], ["vectors"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
        helper.make_node("Mul", ["vectors", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["total"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
        helper.make_node("Div", ["total", "count"], ["pooled"]),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", id_type, ["n", "length"]),
        helper.make_tensor_value_info("attention_mask", id_type, ["n", "length"]),
    ]
    pooled = "pooled"
    if token_type_ids:
        # Segment B counts a little: proves the runtime feeds real token_type_ids.
        inputs.append(helper.make_tensor_value_info("token_type_ids", id_type, ["n", "length"]))
        nodes += [
            helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMean", ["types"], ["segment"], axes=[1], keepdims=1),
            helper.make_node("Mul", ["segment", "pick0"], ["shift"]),
            helper.make_node("Add", ["pooled", "shift"], ["pooled_b"]),
        ]
        pooled = "pooled_b"
    output_shape: list[Any] = ["n"] if flat_output else ["n", logits_width]
    nodes.append(
        helper.make_node("MatMul", [pooled, "projection"], ["raw" if flat_output else "logits"])
    )
    if flat_output:
        nodes.append(helper.make_node("Squeeze", ["raw", "axis1"], ["logits"]))
    initializers = [
        numpy_helper.from_array(embedding, "embedding"),
        numpy_helper.from_array(projection, "projection"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        numpy_helper.from_array(np.array([0.5, 0.0], dtype=np.float32), "pick0"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, output_shape)],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by every onnxruntime the `local` extra allows
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / "model.onnx"))
    return directory


def reference_score(query: str, document: str) -> float:
    """What the tiny model computes: the mean weight over [CLS] q [SEP] d [SEP]."""
    tokens = [*query.lower().split(), *document.lower().split()]
    return sum(WEIGHTS.get(token, 0.0) for token in tokens) / (len(tokens) + 3)


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    return build_tiny_cross_encoder(tmp_path / "tiny-cross-encoder")


class FakeScorer:
    def __init__(self, answer: Any = None):
        self.calls: list[tuple[str, list[str]]] = []
        self.answer = answer

    def score(self, query: str, documents: Sequence[str]) -> Any:
        self.calls.append((query, list(documents)))
        if self.answer is not None:
            return self.answer
        return [float(len(doc)) for doc in documents]


class FakeRuntime:
    def __init__(self, scorer: Any = None, delay_s: float = 0.0):
        self.loads: list[str] = []
        self.scorer = scorer if scorer is not None else FakeScorer()
        self.delay_s = delay_s

    def load(self, model: str) -> Any:
        self.loads.append(model)
        time.sleep(self.delay_s)
        return self.scorer


TEXTS = ["the dogs", "parental leave weeks", "cats", "the cats and dogs", "leave"]


# --- lazy loading and the runtime port -------------------------------------------------


def test_the_constructor_touches_no_runtime():
    """Building a LocalReranker loads nothing, even for a model that does not exist.

    If this fails, check that LocalReranker.__init__ only validates its arguments.
    """
    runtime = FakeRuntime()
    reranker = LocalReranker("some/model", runtime=runtime)
    assert runtime.loads == []
    LocalReranker("/no/such/directory")  # the built-in runtime is not built or run either
    assert "loaded=False" in repr(reranker)


def test_loads_once_and_scores_all_candidates_in_one_call():
    """Two reranks load the model once and call score once each, with every document.

    If this fails, check LocalReranker._loaded (cached scorer) and rerank (one score call).
    """
    runtime = FakeRuntime()
    reranker = LocalReranker("m", runtime=runtime)
    for _ in range(2):
        reranker.rerank("q", contract_hits(TEXTS))
    assert runtime.loads == ["m"]
    assert runtime.scorer.calls == [("q", TEXTS), ("q", TEXTS)]


def test_no_hits_loads_nothing():
    """An empty candidate list returns [] without loading the model.

    If this fails, check rerank's early return.
    """
    runtime = FakeRuntime()
    assert LocalReranker("m", runtime=runtime).rerank("q", []) == []
    assert runtime.loads == []


def test_on_load_is_called_once_with_model_and_load_ms():
    """on_load(model=..., load_ms=...) runs once, after the first load, with the time taken.

    If this fails, check the on_load call in LocalReranker._loaded.
    """
    seen: list[dict[str, Any]] = []
    reranker = LocalReranker(
        "m", runtime=FakeRuntime(delay_s=0.02), on_load=lambda **kw: seen.append(kw)
    )
    reranker.rerank("q", contract_hits(TEXTS))
    reranker.rerank("q", contract_hits(TEXTS))
    reranker.load()
    assert len(seen) == 1
    assert seen[0]["model"] == "m"
    assert isinstance(seen[0]["load_ms"], float) and seen[0]["load_ms"] >= 15


def test_concurrent_first_calls_load_once():
    """Eight threads reranking at once on a fresh instance trigger a single load.

    If this fails, check the lock and the double check in LocalReranker._loaded.
    """
    runtime = FakeRuntime(delay_s=0.1)
    reranker = LocalReranker("m", runtime=runtime)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            reranker.rerank("q", contract_hits(TEXTS))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert runtime.loads == ["m"]
    assert len(runtime.scorer.calls) == 8


def test_answers_scored_pairs_best_first_with_stable_ties():
    """rerank returns (hit, score) pairs, highest first; equal scores keep input order.

    If this fails, check the sort in LocalReranker.rerank.
    """
    given = contract_hits(["a", "bbb", "cc", "dd", "e"])
    out = LocalReranker("m", runtime=FakeRuntime()).rerank("q", given)
    assert [hit.text for hit, _ in out] == ["bbb", "cc", "dd", "a", "e"]
    assert all(any(hit is g for g in given) for hit, _ in out)


@pytest.mark.parametrize(
    "answer",
    [
        [1.0, 2.0],  # too few
        [1.0] * 6,  # too many
        [1.0, math.nan, 2.0, 3.0, 4.0],
        [1.0, math.inf, 2.0, 3.0, 4.0],
        np.array([1.0, 2.0, np.nan, 3.0, 4.0], dtype=np.float32),
        [1.0, "2", 3.0, 4.0, 5.0],
        [True, 1.0, 2.0, 3.0, 4.0],
        42,
    ],
    ids=["short", "long", "nan", "inf", "numpy-nan", "string", "bool", "not-a-sequence"],
)
def test_a_malformed_score_answer_is_a_rerank_error_naming_the_model(answer):
    """A scorer answering the wrong number of scores or a non-finite one is RerankError.

    If this fails, check LocalReranker._check.
    """
    reranker = LocalReranker("acme/cross-encoder", runtime=FakeRuntime(FakeScorer(answer)))
    with pytest.raises(RerankError) as info:
        reranker.rerank("q", contract_hits(TEXTS))
    assert "acme/cross-encoder" in str(info.value)


def test_numpy_scores_are_accepted():
    """A scorer may answer a float32 numpy array; the pairs carry Python floats.

    If this fails, check LocalReranker._check for numpy scalar handling.
    """
    scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2], dtype=np.float32)
    out = LocalReranker("m", runtime=FakeRuntime(FakeScorer(scores))).rerank(
        "q", contract_hits(TEXTS)
    )
    assert [hit.text for hit, _ in out] == [TEXTS[i] for i in (1, 2, 3, 4, 0)]
    assert all(type(score) is float for _, score in out)


def test_a_failing_scorer_or_runtime_is_a_rerank_error_without_text():
    """Exceptions from load or score become RerankError naming the model, not their message.

    If this fails, check the except branches of LocalReranker._loaded and rerank.
    """

    class Boom:
        def load(self, model: str) -> Any:
            raise OSError(f"cannot read {SECRET_TEXT}")

        def score(self, query: str, documents: Sequence[str]) -> Any:
            raise RuntimeError(f"scoring {SECRET_TEXT}")

    with pytest.raises(RerankError) as info:
        LocalReranker("m1", runtime=Boom()).rerank("q", contract_hits(TEXTS))
    assert "m1" in str(info.value) and SECRET_TEXT not in str(info.value)

    class ScorerBoom:
        def load(self, model: str) -> Any:
            return Boom()

    with pytest.raises(RerankError) as info:
        LocalReranker("m2", runtime=ScorerBoom()).rerank("q", contract_hits(TEXTS))
    assert "m2" in str(info.value) and SECRET_TEXT not in str(info.value)


def test_a_failed_load_is_retried_and_on_load_waits_for_success():
    """A load that fails raises every time until it succeeds; on_load runs only then.

    If this fails, check that LocalReranker caches only a successful scorer.
    """

    class Flaky:
        def __init__(self) -> None:
            self.attempts = 0

        def load(self, model: str) -> Any:
            self.attempts += 1
            if self.attempts == 1:
                raise RerankError("not yet")
            return FakeScorer()

    seen: list[dict[str, Any]] = []
    runtime = Flaky()
    reranker = LocalReranker("m", runtime=runtime, on_load=lambda **kw: seen.append(kw))
    with pytest.raises(RerankError):
        reranker.rerank("q", contract_hits(TEXTS))
    assert seen == []
    assert reranker.rerank("q", contract_hits(TEXTS))
    assert runtime.attempts == 2 and len(seen) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": ""}, "model"),
        ({"model": "  "}, "model"),
        ({"model": 7}, "model"),
        ({"model": "m", "runtime": object()}, "runtime"),
        ({"model": "m", "runtime": FakeRuntime(), "cache_dir": "/tmp"}, "cache_dir"),
        (
            {"model": "m", "runtime": FakeRuntime(), "allow_remote_models": True},
            "allow_remote_models",
        ),
        ({"model": "m", "cache_dir": 3}, "cache_dir"),
        ({"model": "m", "on_load": "print"}, "on_load"),
    ],
)
def test_bad_arguments_are_validation_errors(kwargs, field):
    """Bad constructor arguments are ValidationError naming the argument.

    If this fails, check LocalReranker.__init__.
    """
    with pytest.raises(ValidationError) as info:
        LocalReranker(**kwargs)
    assert info.value.field == field


# --- the built-in ONNX runtime ---------------------------------------------------------


def test_the_onnx_runtime_scores_pairs_like_the_graph(tiny_model):
    """The built-in runtime feeds (query, document) pairs and returns the graph's logits.

    If this fails, check _OnnxCrossEncoder.score: pair encoding, padding and the mask.
    """
    given = contract_hits(TEXTS)
    out = LocalReranker(str(tiny_model)).rerank("parental leave", given)
    expected = sorted(TEXTS, key=lambda t: -reference_score("parental leave", t))
    assert [hit.text for hit, _ in out] == expected
    for hit, score in out:
        assert score == pytest.approx(reference_score("parental leave", hit.text), abs=1e-5)


def test_a_document_scores_the_same_alone_and_in_a_batch(tiny_model):
    """Padding never changes a score: each document alone equals its score in the batch.

    If this fails, check the attention mask and per-batch padding in _OnnxCrossEncoder.
    """
    scorer = OnnxCrossEncoderRuntime(batch_size=2).load(str(tiny_model))
    batch = scorer.score("cats", TEXTS)
    single = [scorer.score("cats", [text])[0] for text in TEXTS]
    np.testing.assert_allclose(batch, single, rtol=0, atol=1e-6)


class CountingStop:
    """A stop signal that counts its checks and reads as set from check number ``set_at``."""

    def __init__(self, set_at: int | None = None):
        self.checks = 0
        self.set_at = set_at

    def is_set(self) -> bool:
        self.checks += 1
        return self.set_at is not None and self.checks >= self.set_at


def test_the_onnx_runtime_checks_stop_before_each_bounded_batch(tiny_model):
    """Batches hold at most batch_size pairs and batch_tokens padded tokens; stop is checked
    before each one, and once set no further batch runs (AbortedError). The scores are those
    of score().

    If this fails, check _batches and _OnnxCrossEncoder.score_interruptible in local.py.
    """
    texts = [*TEXTS, "cats " * 20]  # pairs of 5, 5, 6, 7, 8 and 24 tokens
    whole = OnnxCrossEncoderRuntime().load(str(tiny_model)).score("cats", texts)
    scorer = OnnxCrossEncoderRuntime(batch_size=2, batch_tokens=16).load(str(tiny_model))
    never = CountingStop()
    scores = scorer.score_interruptible("cats", texts, never)
    np.testing.assert_allclose(scores, whole, rtol=0, atol=1e-6)
    # In length order, at most 2 rows and 16 padded tokens: [5 5] [6 7] [8] [24] (2 x 24 > 16).
    assert never.checks == 4
    stopped = CountingStop(set_at=2)
    with pytest.raises(AbortedError):
        scorer.score_interruptible("cats", texts, stopped)
    assert stopped.checks == 2  # one batch ran, then the stop held back the other three


def test_a_stopped_local_rerank_scores_nothing_after_loading():
    """LocalReranker.rerank_interruptible with stop set: the model loads, nothing is scored
    (AbortedError); a scorer without score_interruptible is called once with every text.

    If this fails, check LocalReranker.rerank_interruptible in local.py.
    """
    runtime = FakeRuntime()
    reranker = LocalReranker("m", runtime=runtime)
    with pytest.raises(AbortedError):
        reranker.rerank_interruptible("q", contract_hits(TEXTS), CountingStop(set_at=1))
    assert runtime.loads == ["m"] and runtime.scorer.calls == []
    reranker.rerank_interruptible("q", contract_hits(TEXTS), CountingStop())
    assert runtime.scorer.calls == [("q", TEXTS)]


@pytest.mark.parametrize(
    "variant",
    [{"token_type_ids": True}, {"flat_output": True}, {"int32_inputs": True}],
    ids=["token-type-ids", "logits-(n,)", "int32-inputs"],
)
def test_graph_variants_are_supported(tmp_path, variant):
    """Graphs with token_type_ids, (n,) logits or int32 inputs are scored too.

    If this fails, check the input feed and the logits shape check in _OnnxCrossEncoder.
    """
    model = build_tiny_cross_encoder(tmp_path / "variant", **variant)
    out = LocalReranker(str(model)).rerank("q", contract_hits(TEXTS))
    assert out[0][0].text == "cats"
    if variant.get("token_type_ids"):
        # mean(token_type_ids) * 0.5 is added: every score moves up by a positive amount.
        plain = reference_score("q", "cats")
        assert out[0][1] > plain


def test_logits_of_the_wrong_width_are_a_rerank_error(tmp_path):
    """A classifier with two logits per pair is not a cross-encoder score: RerankError.

    If this fails, check the logits shape check in _OnnxCrossEncoder.score.
    """
    model = build_tiny_cross_encoder(tmp_path / "wide", logits_width=2)
    with pytest.raises(RerankError) as info:
        LocalReranker(str(model)).rerank("q", contract_hits(TEXTS))
    assert str(model) in str(info.value)


def test_the_onnx_runtime_through_the_seam_and_with_cache_dir(tiny_model):
    """A model name resolves under cache_dir; rerank_hits returns the same objects.

    If this fails, check OnnxCrossEncoderRuntime.resolve.
    """
    given = contract_hits(TEXTS)
    reranker = LocalReranker(tiny_model.name, cache_dir=tiny_model.parent)
    out = rerank_hits("cats", given, reranker=reranker)
    assert out[0].text == "cats"
    assert sorted(map(id, out)) == sorted(map(id, given))


def test_a_missing_model_directory_is_a_loud_rerank_error(tmp_path):
    """A directory that does not exist is RerankError naming the model and the fix.

    If this fails, check OnnxCrossEncoderRuntime.resolve.
    """
    missing = str(tmp_path / "nowhere")
    with pytest.raises(RerankError) as info:
        LocalReranker(missing).rerank("q", contract_hits(TEXTS))
    assert missing in str(info.value) and "model=" in str(info.value)


@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json"])
def test_a_missing_model_file_is_a_loud_rerank_error(tiny_model, name):
    """A model directory without model.onnx or tokenizer.json is RerankError naming the file.

    If this fails, check the file checks in OnnxCrossEncoderRuntime.resolve.
    """
    (tiny_model / name).unlink()
    with pytest.raises(RerankError) as info:
        LocalReranker(str(tiny_model)).rerank("q", contract_hits(TEXTS))
    assert name in str(info.value) and str(tiny_model) in str(info.value)


def test_a_corrupt_model_file_is_a_rerank_error(tiny_model):
    """Bytes that are not an ONNX graph are RerankError naming the model.

    If this fails, check the InferenceSession error branch in OnnxCrossEncoderRuntime.load.
    """
    (tiny_model / "model.onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(RerankError) as info:
        LocalReranker(str(tiny_model)).rerank("q", contract_hits(TEXTS))
    assert str(tiny_model) in str(info.value)


@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers"])
def test_a_missing_runtime_names_the_extra(tiny_model, monkeypatch, module):
    """Without onnxruntime or tokenizers, loading is RerankError naming ragport[local].

    If this fails, check the ImportError branch in OnnxCrossEncoderRuntime.load.
    """
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(RerankError) as info:
        LocalReranker(str(tiny_model)).rerank("q", contract_hits(TEXTS))
    assert "ragport[local]" in str(info.value) and str(tiny_model) in str(info.value)


@pytest.mark.parametrize("allow", [False, True])
def test_a_hub_model_id_is_refused_offline(allow):
    """A hub id is RerankError either way: never a download, never a lexical fallback.

    If this fails, check the hub-id branch of OnnxCrossEncoderRuntime.resolve.
    """
    model = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    with pytest.raises(RerankError) as info:
        LocalReranker(model, allow_remote_models=allow).rerank("q", contract_hits(TEXTS))
    message = str(info.value)
    assert model in message and "model=" in message
    assert ("not supported" in message) is allow


# --- a rerank given up on while inside onnxruntime, at interpreter exit -----------------

_EXIT_CHILD = """
import sys, time
import onnxruntime as ort
from ragport.application.rerank import rerank_hits
from ragport.contract_tests.reranker import contract_hits
from ragport.domain.errors import RerankError

MODEL = open(sys.argv[1], "rb").read()

class Loading:
    '''Builds onnxruntime sessions (native calls of a few ms each) for up to 1.5 s.'''

    def _load(self, stop):
        end = time.monotonic() + 1.5
        try:
            while time.monotonic() < end and not stop():
                ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
        finally:
            sys.stdout.write("worker ended\\n")  # one write: print() writes its parts apart
            sys.stdout.flush()

    def rerank(self, query, hits):
        self._load(lambda: False)
        return list(hits)

class Interruptible(Loading):
    def rerank_interruptible(self, query, hits, stop):
        self._load(stop.is_set)
        return list(hits)

reranker = {"plain": Loading, "interruptible": Interruptible}[sys.argv[2]]()
try:
    rerank_hits("q", contract_hits(), reranker=reranker, max_ms=1)
except RerankError as exc:
    sys.stdout.write(f"RerankError {getattr(exc, 'reason', None)}\\n")  # one write, as above
    sys.stdout.flush()
"""


@pytest.mark.parametrize("kind", ["interruptible", "plain"])
def test_a_rerank_timed_out_inside_onnxruntime_ends_before_the_process_exits(tmp_path, kind):
    """A child times a rerank out (max_ms=1) while the reranker's thread is inside
    onnxruntime, then exits: the process waits for the thread (which ends at once when
    interruptible), and exits 0. Before, the daemon thread came back from onnxruntime during
    interpreter finalization, was ended by pthread_exit, and the unwinding through C++ frames
    called std::terminate: exit 134 ("terminate called without an active exception").

    If this fails, check that the worker of ragport/application/rerank.py is not a daemon
    thread and that rerank_hits sets its stop event when it stops waiting.
    """
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "identity.onnx"
    path.write_bytes(model.SerializeToString())
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_CHILD, str(path), kind],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(done.stdout.splitlines()) == ["RerankError timeout", "worker ended"]
