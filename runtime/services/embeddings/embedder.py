"""The local embedder and the embedding model catalog.

Every embed call names its *purpose*: ``document`` when a note is written
(the backfill and the writer), ``query`` for recall, ``similarity`` for the query
rewriter's embedding gate. A model whose catalog entry carries task prompts
(EmbeddingGemma-style) gets the matching prefix in front of each text; every other
model receives the text unchanged.

The embedded provider (``memory.embeddings.provider = "local"``) runs one of
:data:`LOCAL_MODELS` in-process, with no network and no GPU (``providers.load_local``): by
default all-MiniLM-L6-v2 int8 (``minilm.MiniLMEmbedder``, a sentence model), or
:class:`LocalEmbedder`: the PyPI package ``wordllama`` (0.4), whose wheel ships the
``l2_supercat`` 256-d token embedding table and its tokenizer; its vectors are mean-pooled
token embeddings. Both are L2-normalised here, so a dot product
is the cosine.

Vectors cross process boundaries and land in ``memory_vectors.vector`` as
little-endian float32 blobs of ``dim * 4`` bytes (:func:`to_blob` / :func:`from_blob`).
Zero or non-finite vectors never produce NaN downstream: :func:`normalise_rows`
turns such rows into all-zero rows and :func:`cosine` scores them 0.0 (zero or non-finite
vectors score 0, never NaN: docs/architecture.md §4, "Embeddings").
"""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..config import LOCAL_EMBEDDING_MODELS

__all__ = [
    "CATALOG",
    "CatalogEntry",
    "DEFAULT_MIN_COSINE",
    "EmbeddingUnavailable",
    "GEMMA_PREFIXES",
    "InProcessEmbedder",
    "LOCAL_MODELS",
    "LocalEmbedder",
    "PURPOSES",
    "Purpose",
    "apply_prefix",
    "catalog_entry",
    "cosine",
    "from_blob",
    "normalise_rows",
    "to_blob",
]

Purpose = Literal["document", "query", "similarity"]
PURPOSES: tuple[str, ...] = ("document", "query", "similarity")
"""The three embed purposes, in a fixed order (docs/architecture.md §4, "Embeddings")."""

DEFAULT_MIN_COSINE = 0.35
"""Cosine floor for notes found by meaning alone (the catalog's ``minCosine``,
default 0.35)."""

GEMMA_PREFIXES: dict[str, str] = {
    "document": "title: none | text: ",
    "query": "task: search result | query: ",
    "similarity": "task: sentence similarity | query: ",
}
"""EmbeddingGemma's task prompts (its model card's ``prompts``), one per purpose."""


class EmbeddingUnavailable(Exception):
    """The embedder cannot be attached or stopped answering.

    ``code`` = ``"embeddings_unavailable"`` (a domain error: it becomes an ``Error``
    reply, never an actor crash). The message says why in one line, e.g.
    ``"wordllama is not installed (pip install 'atomic-agent[embedded]')"``.
    """

    code = "embeddings_unavailable"

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        """True when retrying cannot help before the configuration changes (no URL, a
        model without a known dimension, a missing package)."""


@dataclass(frozen=True)
class CatalogEntry:
    """One embedding model the runtime knows (an entry of :data:`CATALOG`).

    Attributes:
        id: model id, written to ``memory_vectors.model``.
        dim: vector dimension (float32 components).
        min_cosine: cosine floor for meaning-only recall hits (default 0.35).
        prefixes: task prefix per purpose (``document | query | similarity``); empty
            for models without task prompts, which get the text unchanged.
        chance_cosine: below this cosine (purpose ``similarity``) a message and a tool's
            description that share a word share it by chance, in another sense ("what is
            12 times 7?" and "Get the current time"): the agent does not offer that tool
            (docs/tools.md, "How a turn uses them"). None where not measured: no
            such check.
    """

    id: str
    dim: int
    min_cosine: float = DEFAULT_MIN_COSINE
    prefixes: dict[str, str] = field(default_factory=dict)
    chance_cosine: float | None = None

    def prefix(self, purpose: str) -> str:
        """The prefix for ``purpose`` ("" when the model has none).

        Raises:
            ValueError: ``purpose`` is not one of :data:`PURPOSES`.
        """
        _check_purpose(purpose)
        return self.prefixes.get(purpose, "")


CATALOG: dict[str, CatalogEntry] = {
    entry.id: entry
    for entry in (
        # wordllama l2_supercat, 256-d, no task prompts (the default before MiniLM: static
        # token embeddings, ~100x faster, weaker on paraphrases).
        CatalogEntry("wordllama-l2-supercat-256", 256),
        # all-MiniLM-L6-v2 as int8 ONNX, in-process (runtime/services/embeddings/minilm.py), 384-d.
        # Its cosines run lower than the default floor assumes: on bench/embedders.py's
        # paraphrase set the right pairs score 0.20-0.66 (10 of 12 at >= 0.25) and the
        # wrong pairs at most 0.33 (95th percentile 0.19), so its floor is 0.25.
        # Tools (bench/tools.py's messages and the conversation sets' user turns, against
        # mcp-server-time's and mcp-server-git's tools): a message that needs a tool it
        # shares a word with scores 0.29-0.69 with that tool's description; a shared word
        # in another sense ("12 times 7", "add the requests library") 0.03-0.09. The
        # chance floor sits at half the lowest right pair.
        CatalogEntry("all-minilm-l6-v2-int8", 384, min_cosine=0.25, chance_cosine=0.15),
        # EmbeddingGemma: task prompts per purpose, 768-d.
        CatalogEntry("embeddinggemma-300m", 768, prefixes=GEMMA_PREFIXES),
        # Models commonly served by embedding servers: no prefixes.
        CatalogEntry("nomic-embed-text-v1.5", 768),
        CatalogEntry("bge-small-en-v1.5", 384),
        CatalogEntry("bge-m3", 1024),
    )
}
"""Known models by id. Unknown ids have no prefixes and the default floor."""


LOCAL_MODELS: tuple[str, ...] = LOCAL_EMBEDDING_MODELS
"""Models the ``local`` provider runs in-process (``memory.embeddings.model``)."""


def _check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise ValueError(f"embed purpose must be one of {', '.join(PURPOSES)}; got {purpose!r}")


def catalog_entry(model: str) -> CatalogEntry | None:
    """The catalog entry of ``model``, or None for a model the catalog does not know."""
    return CATALOG.get(model)


def apply_prefix(entry: CatalogEntry, texts: list[str], purpose: str) -> list[str]:
    """Return ``texts`` with ``entry``'s prefix for ``purpose`` in front of each one.

    Models without task prompts get the same strings back.

    Raises:
        ValueError: unknown purpose.
    """
    prefix = entry.prefix(purpose)
    return [prefix + t for t in texts] if prefix else list(texts)


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise each row of an ``(n, dim)`` array into a new float32 array.

    A row that is all zero or contains NaN/inf becomes all zero (it then scores 0.0
    against everything), so the result is always finite.
    """
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"expected an (n, dim) array, got shape {arr.shape}")
    out = np.zeros_like(arr)
    if arr.size == 0:
        return out
    # Squares summed in float64 cannot overflow for finite float32 input; a NaN or inf
    # component makes the row's norm NaN or inf, so ``good`` excludes it.
    with np.errstate(all="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", arr, arr, dtype=np.float64))
    good = np.isfinite(norms) & (norms > 0.0)
    out[good] = arr[good] / norms[good, None]
    return out


def cosine(a: Any, b: Any) -> float:
    """Cosine similarity of two vectors in [-1, 1].

    Returns 0.0 — never NaN — when either vector is zero, contains NaN/inf, or the
    shapes differ (a vector of another model's dimension never matches).
    """
    va = np.asarray(a, dtype=np.float64).ravel()
    vb = np.asarray(b, dtype=np.float64).ravel()
    if va.shape != vb.shape or va.size == 0:
        return 0.0
    if not (np.isfinite(va).all() and np.isfinite(vb).all()):
        return 0.0
    na, nb = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0 or not np.isfinite(na * nb):
        return 0.0
    value = float(np.dot(va, vb) / (na * nb))
    if not np.isfinite(value):
        return 0.0
    return max(-1.0, min(1.0, value))


def to_blob(vector: np.ndarray) -> bytes:
    """One vector as little-endian float32 bytes (``dim * 4`` bytes), the
    ``memory_vectors.vector`` format."""
    return np.asarray(vector, dtype="<f4").ravel().tobytes()


def from_blob(blob: bytes, dim: int | None = None) -> np.ndarray:
    """Decode a :func:`to_blob` blob into a float32 vector.

    Raises:
        ValueError: the length is not a multiple of 4, or not ``dim * 4`` when given.
    """
    if len(blob) % 4 or (dim is not None and len(blob) != dim * 4):
        raise ValueError(f"vector blob of {len(blob)} bytes does not hold {dim or '?'} float32")
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


class InProcessEmbedder(abc.ABC):
    """What the in-process embedders share (:class:`LocalEmbedder`, ``minilm``'s
    ``MiniLMEmbedder``): ``model``, ``dim``, ``entry``, and :meth:`embed` /
    :meth:`similarity` over the subclass's ``_raw(texts) -> (n, dim)`` float32."""

    model: str
    dim: int
    entry: CatalogEntry

    @abc.abstractmethod
    def _raw(self, texts: list[str]) -> np.ndarray:
        """The model's vectors of ``texts``, ``(len(texts), dim)`` float32, any norm."""

    def embed(self, texts: list[str], purpose: str) -> np.ndarray:
        """Embed ``texts`` for ``purpose``.

        Args:
            texts: the strings (any length: wordllama does not truncate, MiniLM reads
                the first 256 tokens).
            purpose: ``"document" | "query" | "similarity"``; selects the
                catalog prefix (none for the local models).

        Returns:
            float32 array of shape ``(len(texts), dim)``, rows L2-normalised; a text
            with nothing to embed gives an all-zero row (wordllama), never NaN.

        Raises:
            ValueError: unknown purpose or a non-string text.
            EmbeddingUnavailable: the model raised while embedding.
        """
        _check_purpose(purpose)
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a list of strings")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            raw = self._raw(apply_prefix(self.entry, texts, purpose))
        except Exception as exc:  # noqa: BLE001 - translate once, at the boundary
            raise EmbeddingUnavailable(f"{self.model} failed to embed: {type(exc).__name__}: {exc}") from None
        if raw.shape != (len(texts), self.dim):
            raise EmbeddingUnavailable(
                f"{self.model} returned shape {raw.shape}, expected ({len(texts)}, {self.dim})"
            )
        return normalise_rows(raw)

    def similarity(self, a: str, b: str) -> float:
        """Cosine of two texts embedded with purpose ``similarity`` (rewriter gate)."""
        va, vb = self.embed([a, b], "similarity")
        return cosine(va, vb)


class LocalEmbedder(InProcessEmbedder):
    """In-process embedder over wordllama's bundled ``l2_supercat`` model.

    Attributes:
        model: ``"wordllama-l2-supercat-256"`` (the ``memory_vectors.model`` id).
        dim: 256.
        entry: its :class:`CatalogEntry` (no task prefixes, ``min_cosine`` 0.35).

    Construct with :meth:`load` (blocking, ~0.5 s plus the import: call it from a
    worker thread in an actor). ``embed`` is thread-safe (a lock serialises calls:
    one embed at a time).
    """

    MODEL_ID = "wordllama-l2-supercat-256"
    DIM = 256

    def __init__(self, inference: Any, entry: CatalogEntry | None = None) -> None:
        """Wrap an already loaded wordllama inference object (see :meth:`load`)."""
        self._wl = inference
        self.entry = entry or CATALOG[self.MODEL_ID]
        self.model = self.entry.id
        self.dim = self.entry.dim
        self._lock = threading.Lock()

    @classmethod
    def load(cls) -> LocalEmbedder:
        """Load the bundled model offline and check its dimension.

        wordllama's own ``load()`` looks for the tokenizer under ``tokenizer/`` (the
        wheel ships ``tokenizers/``) and then tries Hugging Face; passing the package
        folder as ``cache_dir`` with ``disable_download=True`` finds both shipped files
        and never touches the network.

        Raises:
            EmbeddingUnavailable: wordllama is not installed, its files are missing or
                unreadable, or the model's dimension is not 256.
        """
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError as exc:
            raise EmbeddingUnavailable(
                f"wordllama is not installed ({exc}); install the 'embedded' extra "
                "(pip install 'atomic-agent[embedded]') or set memory.embeddings.enabled=false",
                permanent=True) from None
        package_dir = Path(wordllama.__file__).parent
        try:
            wl = WordLlama.load(config="l2_supercat", dim=cls.DIM, cache_dir=package_dir,
                                disable_download=True)
        except Exception as exc:  # noqa: BLE001 - any load failure means "unavailable"
            raise EmbeddingUnavailable(
                f"wordllama model l2_supercat_{cls.DIM} failed to load from {package_dir}: "
                f"{type(exc).__name__}: {exc}", permanent=True) from None
        embedder = cls(wl)
        probe = embedder._raw(["probe"])
        if probe.shape != (1, cls.DIM):
            raise EmbeddingUnavailable(
                f"wordllama returned vectors of shape {probe.shape}, expected (1, {cls.DIM})",
                permanent=True)
        return embedder

    def _raw(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return np.asarray(self._wl.embed(texts, norm=False), dtype=np.float32)
