"""muser's compiled core. Use the public names in `muser`, not these."""

from collections.abc import Callable, Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


class GgufFile:
    """
    A parsed, memory-mapped GGUF file. Immutable; safe to share across threads.
    """

    @staticmethod
    def open(path: str) -> GgufFile:
        """Map and validate a GGUF file. Raises ModelFormatError on any defect."""

    @property
    def version(self) -> int: ...

    @property
    def alignment(self) -> int: ...

    @property
    def data_offset(self) -> int: ...

    @property
    def path(self) -> str: ...

    def metadata(self) -> dict:
        """
        All metadata as a dict (a copy). Strings that are not UTF-8 come back as bytes.
        """

    def tensor_infos(self) -> list:
        """
        [(name, ggml_type_id, shape in ggml order, offset, n_bytes), ...] in file order.
        """

    def tensor_bytes(self, name: str) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,), writable=False)]:
        """Read-only uint8 view of a tensor's raw bytes; keeps the file mapped."""

def available_backends() -> list[str]:
    """Backend names this build can run here (besides 'auto')."""

def backends() -> list[tuple[str, bool, str]]:
    """
    Every backend muser knows, in 'auto' preference order: (name, usable here, why not).
    """

def resolve_backend(name: str) -> str:
    """
    The backend Engine(backend=name) would run ('auto' resolved); ValueError saying why for an unusable or unknown name.
    """

class SessionSnapshot:
    """
    A frozen copy of a session (KV, tokens, logits). Immutable; restore it into any session of the same engine and max_context, any number of times.
    """

    @property
    def n_past(self) -> int: ...

    @property
    def nbytes(self) -> int:
        """Bytes of memory the snapshot holds."""

class Session:
    """
    One resident sequence. Calls on one session are serialized; a failed call leaves tokens, n_past and logits unchanged.
    """

    def prefill(self, tokens: Sequence[int], cancel: CancelToken | None = None) -> None:
        """
        Append tokens (chunks of 512 rows, 64 while a decoder waits); releases the GIL.
        A cancelled token stops it at a chunk boundary with Cancelled, Ctrl-C with KeyboardInterrupt;
        either way the state is unchanged.
        """

    def decode(self, token: int) -> None:
        """Append one token; releases the GIL."""

    def truncate(self, n: int) -> None:
        """Keep the first n tokens; logits become those of position n - 1."""

    def snapshot(self) -> SessionSnapshot:
        """Copy KV, tokens and logits into a SessionSnapshot."""

    def restore(self, snapshot: SessionSnapshot) -> None:
        """Replace this session's state with a copy of the snapshot."""

    @property
    def logits(self) -> object:
        """
        Next-token logits of the last position: a new float32 array (n_vocab,) the caller owns, or None before the first token.
        """

    @property
    def id(self) -> int:
        """This session's key in the engine's decode rotation."""

    @property
    def tokens(self) -> list[int]:
        """The token history (a copy)."""

    @property
    def n_past(self) -> int: ...

    @property
    def max_context(self) -> int: ...

    @property
    def kv_bytes(self) -> int:
        """Bytes of memory the KV state holds."""

class Engine:
    """A mapped GGUF model with its backend. Thread-safe."""

    def __init__(self, path: str, threads: int | None = None, backend: str = 'auto', null_step_seconds: float = 0.0, null_prefill_seconds_per_row: float = 0.0) -> None:
        """
        Map and validate a GGUF model. Raises ModelFormatError for a bad or unsupported file.
        """

    @property
    def config(self) -> dict:
        """Hyperparameters, special tokens and chat template (a new dict)."""

    def metadata(self) -> dict:
        """All GGUF metadata (a copy)."""

    @property
    def path(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def threads(self) -> int: ...

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer (immutable, shared)."""

    def session(self, max_context: int | None = None) -> Session:
        """
        A new session of up to max_context positions (default min(4096, training context)).
        """

    def decode_group(self, sessions: Sequence[Session], tokens: Sequence[int]) -> None:
        """
        Append tokens[i] to sessions[i] for 1..4 distinct sessions in one weight pass.
        Checks everything first: on any error no session changes. Releases the GIL.
        """

    @property
    def schedule_recorder(self) -> ScheduleRecorder:
        """This engine's schedule recorder (see muser.testing)."""

    def hidden_states(self, texts: Sequence[Sequence[int]], cancel: CancelToken | None = None) -> list:
        """
        Final hidden states after the output norm, one float32 array (n_tokens, n_embd) per text.
        Texts are packed into prefill forwards under the scheduler. Releases the GIL.
        """

    def scheduler_stats(self) -> dict:
        """
        Accelerator permits granted so far: counts, rows, wait and hold times (a new dict).
        """

def snapshot_export(snapshot: SessionSnapshot) -> dict:
    """
    A snapshot as plain arrays: max_context, tokens (int32), logits (float32 or None) and per layer {ring, first_position, k, v} (uint16 f16 bits, rows x width). Copies.
    """

def snapshot_import(engine: Engine, max_context: int, tokens: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)], logits: Annotated[NDArray[numpy.float32], dict(shape=(None,), order='C', device='cpu', writable=False)] | None, rings: Sequence[bool], first_positions: Sequence[int], k: Sequence[Annotated[NDArray[numpy.uint16], dict(shape=(None, None), order='C', device='cpu', writable=False)]], v: Sequence[Annotated[NDArray[numpy.uint16], dict(shape=(None, None), order='C', device='cpu', writable=False)]]) -> SessionSnapshot:
    """
    The inverse of snapshot_export, for `engine`: a SessionSnapshot to restore into a session with the same max_context. Checks every count and width (ValueError naming the first mismatch).
    """

PREFILL_CHUNK_ROWS: int = 512

PREFILL_CHUNK_ROWS_CONTENDED: int = 64

MAX_DECODE_GROUP_ROWS: int = 4

MAX_STEP_ROWS: int = 512

MAX_SLOTS: int = 4

DEFAULT_MAX_WAITING: int = 64

DEFAULT_MAX_CONTEXT: int = 4096

DEFAULT_BATCH_WINDOW_US: float = 250.0

class Permit:
    """
    Ownership of the accelerator. Release by leaving its `with` block or calling release().
    """

    @property
    def held(self) -> bool: ...

    @property
    def kind(self) -> str: ...

    def release(self) -> None: ...

    def poison(self, reason: str) -> None:
        """
        Mark the accelerator unhealthy and release; every later acquire raises Unhealthy.
        """

    def __enter__(self) -> Permit: ...

    def __exit__(self, arg0: object | None, arg1: object | None, arg2: object | None, /) -> None: ...

class AcceleratorScheduler:
    """
    One owner of one accelerator: decode rotation and prefill priority.
    Thread-safe; acquire_* block with the GIL released.
    """

    def __init__(self) -> None: ...

    def acquire_decode(self, sequence_id: int) -> Permit: ...

    def acquire_decode_group(self, sequence_ids: Sequence[int]) -> Permit: ...

    def acquire_prefill(self) -> Permit: ...

    def has_waiting_decode(self) -> bool: ...

    @property
    def poisoned(self) -> bool: ...

    @property
    def poison_reason(self) -> str: ...

    def waiting_decode(self) -> list[int]: ...

    def stats(self) -> dict: ...

    @staticmethod
    def select_next_decode(waiting: Sequence[int], last_decode: int | None) -> int | None:
        """The pure rotation rule: which waiting sequence decodes next."""

    @staticmethod
    def prefill_chunk_rows(decode_waiting: bool, remaining_rows: int) -> int:
        """The pure chunking rule: rows in the next prefill chunk."""

class ScheduleRecorder:
    """
    An engine's scheduling event log (permits, admissions, decode groups, cancellations, notes).
    Events are tuples (seq, time_ns, kind, subject, pool, slot, rows, sessions, slots, what, detail).
    Thread-safe; cheap when not recording.
    """

    def start(self) -> None:
        """Clear and start recording; ValueError if already recording."""

    def stop(self) -> list:
        """Stop recording; returns every event, oldest first."""

    def events(self) -> list:
        """The events so far (a copy)."""

    @property
    def recording(self) -> bool: ...

    @property
    def dropped(self) -> int:
        """Events lost because the log was full."""

    def note(self, what: str, subject: int = 0, pool: int = 0, slot: int = -1, detail: str = '') -> None:
        """Record a note from Python (a request's start, admission, end)."""

class CancelToken:
    """
    A sticky, thread-safe cancellation flag shared by a request and what it waits on.
    With a parent it also reads as cancelled once the parent is; with a deadline,
    once the deadline has passed.
    """

    def __init__(self, parent: CancelToken | None = None) -> None: ...

    def cancel(self) -> None: ...

    def set_deadline(self, seconds: float) -> None:
        """Reads as cancelled `seconds` from now on."""

    @property
    def cancelled(self) -> bool: ...

    @property
    def deadline_passed(self) -> bool: ...

ADMISSION_FCFS_ABOVE_WAITERS: int = 128

ADMISSION_MAX_PASSED_OVER: int = 4

def next_waiter(waiters: Sequence[tuple[int, int]]) -> int:
    """
    The admission rule: index of the waiter admitted next, given (cached_prefix, passed_over)
    per waiter in arrival order.
    """

class SlotAdmission:
    """
    First-come-first-served admission to 1..4 slots with a bounded queue.
    Thread-safe; acquire() blocks with the GIL released.
    """

    def __init__(self, slots: int, max_waiting: int) -> None: ...

    def acquire(self, timeout: float | None = None, cancel: CancelToken | None = None, prefix_lengths: Sequence[int] | None = None) -> int:
        """
        Returns a slot index. Raises Overloaded, TimeoutError, Cancelled or Unhealthy.
        """

    def release(self, slot: int) -> None: ...

    def mark_unhealthy(self, reason: str) -> None: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def waiting(self) -> int: ...

    @property
    def slots(self) -> int: ...

    @property
    def max_waiting(self) -> int: ...

    def stats(self) -> dict: ...

class SlotPool:
    """
    1..4 resident sessions of one engine with admission, prefix reuse, decode
    batching and context shift. Thread-safe; blocking calls release the GIL.
    """

    def __init__(self, engine: Engine, slots: int, max_waiting: int, max_context: int, batch_window_us: float = 250.0) -> None: ...

    def acquire(self, prompt: Sequence[int], timeout: float | None = None, cancel: CancelToken | None = None) -> tuple[int, int]:
        """
        Admit the caller: (slot, reused_prompt_tokens). Raises Overloaded, TimeoutError, Cancelled, Unhealthy.
        """

    def release(self, slot: int, healthy: bool = True) -> None: ...

    def session(self, slot: int) -> Session:
        """The session now serving `slot`."""

    def prefill(self, slot: int, tokens: Sequence[int], cancel: CancelToken | None = None) -> None:
        """
        Append tokens to the slot's session (chunked; Ctrl-C and `cancel` stop it at a chunk boundary,
        state unchanged). Raises Unhealthy once the pool latched.
        """

    def decode(self, slot: int, token: int, cancel: CancelToken | None = None) -> None:
        """
        One decode step of `slot`, packed with concurrent steps of other slots.
        """

    def context_shift(self, slot: int, n_keep: int, cancel: CancelToken | None = None) -> int:
        """
        Keep n_keep tokens and the newest half of the rest, rebuilt aside then swapped in; returns n_past.
        """

    def mark_unhealthy(self, reason: str) -> None: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def unhealthy_reason(self) -> str:
        """Why the pool latched ('' while healthy)."""

    @property
    def waiting(self) -> int:
        """Callers waiting for a slot now."""

    @property
    def slots(self) -> int: ...

    @property
    def max_context(self) -> int: ...

    @property
    def id(self) -> int:
        """Process-unique pool id (labels its events in schedule recordings)."""

    def stats(self) -> dict: ...

class DecodeBatcher:
    """
    Coalesces concurrent decode steps into groups of up to max_rows rows.
    run_group(rows) receives [(slot_id, token), ...] in rotation order;
    its exception reaches every owner of that group.
    """

    def __init__(self, run_group: Callable, window_us: float = 250.0, max_rows: int = 4) -> None: ...

    def submit(self, slot_id: int, token: int, cancel: CancelToken | None = None) -> None:
        """Blocks until this row ran in some group; rethrows that group's error."""

    def add_participant(self) -> None: ...

    def remove_participant(self) -> None: ...

    def notify_cancelled(self) -> None: ...

    @property
    def window_us(self) -> float: ...

    @property
    def max_rows(self) -> int: ...

    def stats(self) -> dict: ...

class Tokenizer:
    """
    Text <-> token ids from a GGUF vocabulary, identical to llama.cpp's tokenizer.
    Immutable; safe to share across threads. Encoding and decoding release the GIL.
    """

    def __init__(self, gguf_file: GgufFile) -> None:
        """
        Build from an opened GgufFile. Raises ModelFormatError naming the tokenizer key that is
        missing, malformed or unsupported.
        """

    @staticmethod
    def from_file(path: str) -> Tokenizer:
        """
        Open a GGUF file and build its tokenizer (ModelFormatError on a bad file).
        """

    def encode(self, text: object, add_special: bool = True, parse_special: bool = False, cancel: CancelToken | None = None) -> list[int]:
        """
        Token ids of `text` (str, or bytes taken as UTF-8 even when invalid).
        add_special: add BOS/EOS as the vocabulary asks. parse_special: let control-token texts
        in `text` become those tokens (user-defined tokens are always recognised).
        cancel: a CancelToken checked every few kilobytes of work; once it reads as cancelled
        (or its deadline passes) encoding stops with Cancelled.
        """

    def decode(self, tokens: Sequence[int], remove_special: bool = True, unparse_special: bool = False) -> str:
        """
        Text of `tokens` (llama_detokenize semantics); invalid UTF-8 becomes U+FFFD.
        Raises ValueError for an id outside [0, n_vocab).
        """

    def decode_bytes(self, tokens: Sequence[int], remove_special: bool = True, unparse_special: bool = False) -> bytes:
        """Like decode() but returns the raw bytes (possibly not valid UTF-8)."""

    def token_bytes(self, special: bool = False) -> list:
        """
        Bytes each token contributes inside a text, for every id (control and unknown tokens
        are empty unless special=True).
        """

    def piece(self, id: int, special: bool = False) -> bytes:
        """token_bytes(special)[id] for one token."""

    def token_text(self, id: int) -> bytes:
        """The token's text as stored in the vocabulary (bytes)."""

    def token_types(self) -> list[int]:
        """
        Effective GGUF token type of every id: 1 normal, 2 unknown, 3 control, 4 user-defined,
        5 unused, 6 byte (0 undefined), after llama.cpp's load-time corrections.
        """

    def is_eog(self, id: int) -> bool:
        """Whether the id ends generation."""

    @staticmethod
    def known_pre_tokenizers() -> list[str]:
        """
        Every tokenizer.ggml.pre value supported for byte-level BPE vocabularies.
        """

    @property
    def n_vocab(self) -> int: ...

    @property
    def bos_id(self) -> int:
        """-1 when absent"""

    @property
    def eos_id(self) -> int:
        """-1 when absent"""

    @property
    def eot_id(self) -> int:
        """-1 when absent"""

    @property
    def unk_id(self) -> int:
        """-1 when absent"""

    @property
    def pad_id(self) -> int:
        """-1 when absent"""

    @property
    def eog_ids(self) -> list[int]:
        """End-of-generation ids, ascending."""

    @property
    def add_bos(self) -> bool: ...

    @property
    def add_eos(self) -> bool: ...

    @property
    def add_space_prefix(self) -> bool: ...

    @property
    def model(self) -> str:
        """tokenizer.ggml.model: 'llama' or 'gpt2'"""

    @property
    def pre(self) -> str:
        """tokenizer.ggml.pre as stored ('' when absent)"""
