"""c128: DeepSeek-V4's c128 KV compression (every 128 tokens of a request become one KV vector by
a per-channel softmax pooling), from Python.

A ctypes binding over libc128.so, the C ABI of ``c128.cuh``; the API mirrors the C one:

- kernels: :func:`decode`, :func:`prefill` (and :class:`Decode` / :class:`Prefill`, the same
  launches with their tensors checked and bound once, for the hot path), with other engines'
  state layouts (:class:`StateLayout`), output rows by index (``output_index``) and DeepSeek-V4
  cache entries written in the launch (:class:`Entry`) as keyword arguments;
- planning: :func:`plan_decode`, :func:`plan_prefill` (host planner), :func:`plan_decode_device`,
  :func:`plan_prefill_device` (the device planners, for CUDA graphs), :func:`check_decode_plans`,
  :func:`check_prefill_plans` (the plan checker and its :class:`PlanReport`),
  :func:`requests_from_lens` (requests from an engine's seq_lens / query_start arrays);
- introspection: :func:`instances`, :func:`build_info`, ``__version__``;
- :func:`c128.sglang.compress_forward`: SGLang's ``compress_forward`` for ratio 128, and
  :func:`c128.sglang.compress_forward_norm_rope_store`: it and SGLang's
  ``compress_norm_rope_store`` in one launch.

Tensors come from any framework: PyTorch tensors, and anything with ``__dlpack__`` (CuPy, JAX,
NumPy, ...), ``__cuda_array_interface__`` or ``__array_interface__``. CUDA tensors launch the
kernels on ``stream`` (default: PyTorch's current stream for PyTorch tensors, CuPy's for CuPy
arrays, else the legacy default stream); host arrays (NumPy, CPU tensors) run the host runner,
the same kernel code on the CPU, synchronously. NumPy has no bfloat16: a uint16 array holds bf16
bit patterns (:func:`bf16_from_float`, :func:`bf16_to_float`).

Calls allocate nothing (c128.sglang.compress_norm_rope_store, which stages its windows, excepted;
and a cache-entry launch given no ``Entry.workspace`` makes or grows its stream's workspace, see
:class:`Entry`), never synchronise, and can be captured in CUDA graphs (warm up once
before capturing). Launches are asynchronous: keep the tensors alive, and unchanged in place,
until the work on the stream is done, as with any CUDA kernel. Every argument the binding refuses
raises ``ValueError`` or ``TypeError`` naming the argument; a status of the library raises
:class:`Error`, which carries it.
"""

from __future__ import annotations

import numbers
import sys
import threading
from ctypes import addressof, byref, c_int32, create_string_buffer
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from . import _lib
from ._lib import Error, Status, library_path
from ._tensor import (CPU, View, _torch_raw, _torch_raw_functions, current_device_check, current_stream,
                      current_stream_function, describe, stream_handle, view)

__all__ = [
    "__version__", "Error", "Status", "F32", "BF16", "WINDOW", "FAST_BOUND", "MAX_PREFILL_ROWS",
    "MAX_DECODE_GROUP", "MAX_PREFILL_GROUP", "Instance", "BuildInfo", "HostOptions", "PlanReport", "Ring",
    "PrefillPlans", "StateLayout", "Entry", "OUTPUT_KINDS", "ROPE_DIMS", "entry_workspace_bytes",
    "requests_from_lens", "instances",
    "find_instance", "build_info", "decode", "prefill", "Decode", "Prefill",
    "check_decode_plans", "check_prefill_plans", "requests", "plan_decode", "plan_prefill", "plan_workspace_size",
    "plan_decode_device", "plan_prefill_device", "decode_group_size", "prefill_group_size", "bf16_from_float",
    "bf16_to_float", "library_path", "sglang", "DECODE_PLAN_DTYPE", "COMPRESS_PLAN_DTYPE", "WRITE_PLAN_DTYPE", "REQUEST_DTYPE",
]

# ---- constants (c128.cuh >>config, >>dtypes) -------------------------------------------------------
F32 = 0  #: C128_F32 (cudaDataType_t CUDA_R_32F)
BF16 = 14  #: C128_BF16 (CUDA_R_16BF)
WINDOW = 128  #: tokens per compressed vector = rows per state page
MAX_PREFILL_ROWS = 65536  #: input rows and plans of one prefill call (ragged_id is a u16)
MAX_DECODE_GROUP = 32  #: largest requests_per_block
MAX_PREFILL_GROUP = 32  #: largest windows_per_block
FAST_BOUND = 4e-6  #: C128_FAST_BOUND: |GPU - host runner| per unit of (1 + max |kv|) in fast-math builds
DECODE_PLAN_BYTES, COMPRESS_PLAN_BYTES, WRITE_PLAN_BYTES, REQUEST_BYTES = 16, 16, 8, 12

_DTYPE_NAMES = {F32: "f32", BF16: "bf16"}
# Element dtypes of state, input and output: uint16 holds bf16 bits (NumPy has no bfloat16).
_ELEMENT = {"f32": F32, "bf16": BF16, "u16": BF16}
_MATH = {1: "fast", 2: "exact"}
_EPILOGUE = {1: "two_warp", 2: "legacy"}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


# ---- introspection --------------------------------------------------------------------------------
class Instance(NamedTuple):
    """One compiled instance (c128_instance_info); dtypes as 'f32' / 'bf16'."""

    name: str
    head_dim: int
    state_dtype: str
    input_dtype: str
    output_dtype: str
    num_split: int
    row_elems: int
    page_elems: int


class BuildInfo(NamedTuple):
    """How libc128.so was compiled (c128_build_info). ``math`` is 'fast' (the GPU's exp2 unit:
    within FAST_BOUND * (1 + max |kv|) of the host runner) or 'exact' (the GPU reproduces the
    host runner bit for bit); ``epilogue`` is 'two_warp' or 'legacy'."""

    version: str
    version_number: int
    math: str
    epilogue: str
    instance_count: int


def build_info() -> BuildInfo:
    """How the loaded libc128.so was compiled."""
    info = _lib.BuildInfo()
    _lib.check(_lib.build_info_get(byref(info)), "c128_build_info_get")
    return BuildInfo(info.version.decode(), info.version_number, _MATH.get(info.math, str(info.math)),
                     _EPILOGUE.get(info.epilogue, str(info.epilogue)), info.instance_count)


def instances() -> List[Instance]:
    """Every compiled instance, in table order."""
    out = []
    for i in range(_lib.instance_count()):
        info = _lib.InstanceInfo()
        _lib.check(_lib.instance_info_get(i, byref(info)), "c128_instance_info_get")
        out.append(Instance(info.name.decode(), info.head_dim, _DTYPE_NAMES[info.state_dtype],
                            _DTYPE_NAMES[info.input_dtype], _DTYPE_NAMES[info.output_dtype], info.num_split,
                            info.row_elems, info.page_elems))
    return out


def _dtype_code(dtype: Any, name: str) -> int:
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    text = str(dtype).replace("torch.", "")
    codes = {"f32": F32, "float32": F32, "bf16": BF16, "bfloat16": BF16}
    if text in codes:
        return codes[text]
    raise TypeError(f"{name}: expected 'f32' or 'bf16' (or a dtype code), got {dtype!r}")


def find_instance(head_dim: int, state_dtype: Any, input_dtype: Any, output_dtype: Any) -> Optional[Instance]:
    """The compiled instance for (head_dim, dtypes), or None. Dtypes: 'f32'/'bf16', F32/BF16."""
    codes = [_dtype_code(d, n) for d, n in [(state_dtype, "state_dtype"), (input_dtype, "input_dtype"),
                                            (output_dtype, "output_dtype")]]
    _int(head_dim, "head_dim", _INT32)
    for c, n in zip(codes, ["state_dtype", "input_dtype", "output_dtype"]):
        _int(c, n, _INT32)
    index = _lib.find_instance(head_dim, *codes)
    return None if index < 0 else instances()[index]


def decode_group_size(batch: int, head_dim: int, sm_count: int) -> int:
    """Requests per decode block chosen when requests_per_block is 0 (c128_decode_group_size)."""
    return _lib.decode_group_size(_int(batch, "batch", _INT64), _int(head_dim, "head_dim", _INT32),
                                  _int(sm_count, "sm_count", _INT32))


def prefill_group_size(num_compress: int, head_dim: int, sm_count: int) -> int:
    """Compress windows per block chosen when windows_per_block is 0 (c128_prefill_group_size)."""
    return _lib.prefill_group_size(_int(num_compress, "num_compress", _INT64), _int(head_dim, "head_dim", _INT32),
                                   _int(sm_count, "sm_count", _INT32))


def entry_workspace_bytes(jobs: int, head_dim: int) -> int:
    """Bytes of a cache-entry launch's workspace (:class:`Entry` ``workspace``) for ``jobs``
    decode requests (the batch) or compress plans (prefill: len(compress_plans)): a counter and
    head_dim floats a job (c128_entry_workspace_bytes; -1 for a negative count or a head_dim out
    of range)."""
    return _lib.entry_workspace_bytes(_int(jobs, "jobs", _INT64), _int(head_dim, "head_dim", _INT32))


# ---- argument checks ------------------------------------------------------------------------------
def _int(value: Any, name: str, bounds: Tuple[int, int]) -> int:
    if isinstance(value, bool):  # an int subclass, but never a count or a size
        raise TypeError(f"{name}: expected an integer, got a bool")
    if not isinstance(value, int):
        try:
            value = value.__index__()  # NumPy integers
        except (AttributeError, TypeError):
            raise TypeError(f"{name}: expected an integer, got {describe(value)}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name}: {value} does not fit the C argument ({bounds[0]}..{bounds[1]})")
    return value


def _fmt(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _dev(device: Tuple[str, int]) -> str:
    return "host" if device[0] == CPU else f"cuda:{device[1]}"


def _shape_error(name: str, expected: str, v: View) -> ValueError:
    return ValueError(f"{name}: expected a contiguous tensor of shape {expected}, got {_fmt(v.shape)}")


def _contiguous(v: View, name: str) -> None:
    if not v.contiguous:
        raise ValueError(f"{name}: expected a contiguous (row-major, dense) tensor, got a strided one of shape "
                         f"{_fmt(v.shape)}")


def _aligned(v: View, name: str, align: int) -> None:
    if v.ptr % align:
        raise ValueError(f"{name}: the data pointer {v.ptr:#x} is not aligned to {align} bytes")


def _writable(v: View, name: str) -> None:
    if v.readonly:
        raise ValueError(f"{name}: the tensor is read-only, and the call writes it")


def _element(v: View, name: str) -> int:
    code = _ELEMENT.get(v.dtype)
    if code is None:
        raise TypeError(f"{name}: expected float32 or bfloat16 (uint16 bf16 bits for NumPy), got {v.dtype}")
    return code


def _records(v: View, name: str, record_bytes: int, what: str) -> int:
    """The record count of a plan / request tensor: [n, record_bytes / itemsize] of an integer
    dtype (SGLang's plans are uint8 [n, 16] and [n, 8]) or a 1-D array of records."""
    _contiguous(v, name)
    if v.dtype.startswith("void"):
        if v.itemsize != record_bytes or len(v.shape) != 1:
            raise ValueError(f"{name}: expected a 1-D array of {record_bytes}-byte {what} records, got "
                             f"{v.itemsize}-byte records of shape {_fmt(v.shape)}")
        return v.shape[0]
    if v.dtype[0] not in "iu":
        raise TypeError(f"{name}: expected an integer tensor of {what} records ([n, {record_bytes}] uint8 or "
                        f"[n, {record_bytes // 4}] int32), got {v.dtype}")
    if len(v.shape) != 2 or v.shape[1] * v.itemsize != record_bytes:
        raise ValueError(f"{name}: expected {what} records of {record_bytes} bytes, shape (n, "
                         f"{record_bytes // v.itemsize}) for {v.dtype}, got {_fmt(v.shape)}")
    return v.shape[0]


def _same_device(views: Sequence[Tuple[str, View]]) -> bool:
    """True when every view is on the first one's device; returns whether that is the host."""
    first_name, first = views[0]
    for name, v in views[1:]:
        if v.device != first.device:
            raise ValueError(f"{name}: on {_dev(v.device)}, but {first_name} is on {_dev(first.device)}; the "
                             f"tensors of a call must be on one device")
    return first.on_host


def _layout(layout: Any, args: Any) -> None:
    if layout is None:
        args.layout.rank, args.layout.size, args.layout.pages_per_rank = 0, 1, 0
        return
    if isinstance(layout, (tuple, list)):
        if len(layout) != 3:
            raise ValueError(f"layout: expected (rank, size, pages_per_rank), got {len(layout)} values")
        rank, size, pages = layout
    elif all(hasattr(layout, a) for a in ("rank", "size", "pages_per_rank")):
        rank, size, pages = layout.rank, layout.size, layout.pages_per_rank
    else:
        raise TypeError(f"layout: expected (rank, size, pages_per_rank), got {describe(layout)}")
    args.layout.rank = _int(rank, "layout.rank", _INT32)
    args.layout.size = _int(size, "layout.size", _INT32)
    args.layout.pages_per_rank = _int(pages, "layout.pages_per_rank", _INT32)


def _resolve_stream(stream: Any, first: Any) -> int:
    return current_stream(first) if stream is None else stream_handle(stream)


def _host_stream(stream: Any) -> None:
    if stream is not None and stream_handle(stream) != 0:
        raise ValueError("stream: host tensors run the host runner synchronously; pass no stream")


def _state_shape(s: View) -> int:
    """head_dim from a state [pages, 128, 2 * head_dim]."""
    if len(s.shape) != 3 or s.shape[1] != WINDOW or s.shape[2] <= 0 or s.shape[2] % 2:
        raise _shape_error("state", "(pages, 128, 2 * head_dim)", s)
    return s.shape[2] // 2


def _flag(value: Any, name: str) -> int:
    """A bool (or 0 / 1, NumPy bools too) as 0 or 1."""
    if isinstance(value, (bool, int)) or type(value).__name__ == "bool_":
        if value in (0, 1):
            return int(bool(value))
    raise TypeError(f"{name}: expected a bool, got {describe(value)}")


def _layout_state_shape(s: View, sl: "StateLayout", a: Optional[View] = None, stream: int = 0) -> int:
    """head_dim from a state of a state layout: [blocks, B, 2 * head_dim] (one plane) or [blocks,
    B, head_dim] (kv here, scores in sl.score_plane). A block_rows the library refuses is left to
    it (C128_ERROR_INVALID_STATE_LAYOUT), but the state must still have its rows."""
    if not isinstance(sl, StateLayout):
        raise TypeError(f"state_layout: expected c128.StateLayout, got {describe(sl)}")
    rows = _int(sl.block_rows, "state_layout.block_rows", _INT32) or WINDOW
    two = sl.score_plane is not None
    if two:
        view(sl.score_plane, "state_layout.score_plane", stream)  # a tensor, before its shape says anything
    bad_rows = len(s.shape) != 3 or (rows > 0 and s.shape[1] != rows)
    # ape [128, head_dim] names head_dim, so that a state of the other plane count is the state's error
    want = a.shape[1] if a is not None and len(a.shape) == 2 and a.shape[1] > 0 else None
    if two:
        if bad_rows or s.shape[2] <= 0 or (want is not None and s.shape[2] != want):
            raise _shape_error("state", f"(blocks, block_rows = {rows}, head_dim{f' = {want}' if want else ''}) "
                               f"(kv; scores in state_layout.score_plane)", s)
        return s.shape[2]
    if bad_rows or s.shape[2] <= 0 or s.shape[2] % 2 or (want is not None and s.shape[2] != 2 * want):
        hint = " (or head_dim with state_layout.score_plane)" if want and s.shape[2:] == (want,) else ""
        raise _shape_error("state", f"(blocks, block_rows = {rows}, 2 * head_dim{f' = {2 * want}' if want else ''})"
                           f"{hint}", s)
    return s.shape[2] // 2


_compiled: set = set()  # (head_dim, dtypes) found before: the table is fixed at build time


def _instance(head_dim: int, sd: int, idt: int, od: int) -> None:
    key = (head_dim, sd, idt, od)
    if key in _compiled:
        return
    if -(1 << 31) <= head_dim < 1 << 31 and _lib.find_instance(head_dim, sd, idt, od) >= 0:
        _compiled.add(key)
    else:
        raise ValueError(f"state, input, output: no compiled instance for head_dim {head_dim} with state "
                         f"{_DTYPE_NAMES[sd]}, input {_DTYPE_NAMES[idt]}, output {_DTYPE_NAMES[od]} "
                         f"(c128.instances() lists them)")


def _entry_output_dtype(head_dim: int, sd: int, idt: int) -> int:
    """The output dtype of a cache-entry launch (no output tensor): f32 where compiled, else bf16."""
    if -(1 << 31) <= head_dim < 1 << 31 and _lib.find_instance(head_dim, sd, idt, F32) < 0 and \
            _lib.find_instance(head_dim, sd, idt, BF16) >= 0:
        return BF16
    return F32


def _common(s: View, i: View, a: View, o: Optional[View], input_rows: Optional[int], output_rows_min: int,
            input_rows_name: str, sl: Optional["StateLayout"] = None) -> Tuple[int, int, int, int]:
    """Shapes, dtypes, contiguity, alignment of the four tensors (o None: a cache-entry launch);
    returns (head_dim, dtypes)."""
    head_dim = _state_shape(s) if sl is None else _layout_state_shape(s, sl, a)
    sd, idt = _element(s, "state"), _element(i, "input")
    od = _element(o, "output") if o is not None else _entry_output_dtype(head_dim, sd, idt)
    if a.dtype != "f32":
        raise TypeError(f"ape: expected float32 (c128 takes ape in f32 always), got {a.dtype}")
    if len(i.shape) != 2 or i.shape[1] != 2 * head_dim or (input_rows is not None and i.shape[0] != input_rows):
        rows = f"{input_rows_name}={input_rows}" if input_rows is not None else "rows"
        raise _shape_error("input", f"({rows}, 2 * head_dim = {2 * head_dim})", i)
    if a.shape != (WINDOW, head_dim):
        raise _shape_error("ape", f"(128, head_dim = {head_dim})", a)
    if o is not None and (len(o.shape) != 2 or o.shape[1] != head_dim or o.shape[0] < output_rows_min):
        raise _shape_error("output", f"(rows >= {output_rows_min}, head_dim = {head_dim})", o)
    for v, name in ((s, "state"), (i, "input"), (a, "ape"), (o, "output")):
        if v is not None:
            _contiguous(v, name)
    _aligned(s, "state", 2 * s.itemsize)
    _aligned(i, "input", 2 * i.itemsize)
    _aligned(a, "ape", 8)
    if o is not None:
        _aligned(o, "output", o.itemsize)
    _instance(head_dim, sd, idt, od)
    return head_dim, sd, idt, od


# ---- state layouts, output rows by index, cache entries (DESIGN 5.9, 5.10, 11) -----------------------
ROPE_DIMS = 64  #: C128_ROPE_DIMS: the RoPE channels of a cache entry (the last 64)
#: c128_output_kind values by name: what a compress event writes.
OUTPUT_KINDS = {"pooled": 0, "dsv4_fp8": 1, "dsv4_bf16": 2}


class StateLayout(NamedTuple):
    """How the state is stored (c128_state_layout, DESIGN 5.9). The default is today's (SGLang's)
    layout; pass one to :func:`decode`, :func:`prefill` (``state_layout=``) and to the planners
    (``Ring(state_layout=...)``) alike.

    - ``block_rows``: B, rows per block, a power of two in [8, 256] (0 or 128: pages of 128 rows).
      The state is then [blocks, B, 2 * head_dim], or [blocks, B, head_dim] with a score plane.
    - ``block_table``: int32 [table_rows, table_stride] of physical block ids (negative = none):
      plans name logical rows ``table_row << row_shift | position``, found at
      ``block_table[table_row][position // B] * B + position % B``. Device memory for GPU
      launches and device planners, host memory for the host runner, the host planners and the
      plan checkers. None: plans name physical rows of the B-row blocks.
    - ``row_shift``: log2 of the positions one table row maps (7..30); needed with a table.
    - ``score_plane``: scores in a tensor of their own, the state's shape and dtype (TensorRT-LLM's
      kv and score planes); None: each state row is kv | score.
    - ``score_block_table``: the score plane's own table (the block table's shape); None: the same.
    - ``score_biased``: stored scores hold score + ape[position % 128] (vLLM, TensorRT-LLM).
    """

    block_rows: int = WINDOW
    block_table: Any = None
    row_shift: int = 0
    score_plane: Any = None
    score_block_table: Any = None
    score_biased: bool = False


class Entry(NamedTuple):
    """The cache entries a compress event writes instead of a pooled row (c128_entry_args,
    DESIGN 11): RMSNorm, RoPE on the last 64 channels, UE8M0 FP8 of the others, stored into a
    paged cache, in the decode / prefill compress launch itself (head_dim <= 512). A launch
    whose group is at least head_dim / 64 (large batches and prefills) gives each block whole
    windows, which write their entries themselves; otherwise the blocks of a window leave their
    channels in a workspace and the last to arrive writes the entry. The same bytes either way.

    - ``kind``: ``"dsv4_fp8"`` (FlashMLA's sparse FP8 layout: head_dim - 64 e4m3 codes and 64
      bf16 RoPE values an entry, then the pages' scale bytes) or ``"dsv4_bf16"`` (head_dim bf16
      values an entry, the FP8 channels dequantised).
    - ``norm_weight``: gamma, float32 [head_dim] (holding bf16 values in DeepSeek-V4). A bf16
      weight is refused: convert it once at load time.
    - ``rope_table``: the layer's (cos, sin) table, float32 [positions, 64] (cos, sin interleaved
      per pair, SGLang's view of freqs_cis), float32 [positions, 32, 2], or complex64
      [positions, 32] (freqs_cis itself). A window at or past ``positions`` is skipped.
    - ``cache``: uint8 [cache_pages, page_bytes] (SGLang's kvcache), written; entry ``loc`` is
      slot ``loc % entries_per_page`` of page ``loc // entries_per_page``.
    - ``entries_per_page``: P, a power of two (SGLang's page_size).
    - ``eps``: the norm's epsilon (DeepSeek-V4: 1e-6).
    - ``page_bytes``: bytes per page; default: the cache's (its bytes / its first dimension).
      Needed for a 1-D cache. A multiple of 4, at least P entries (FP8 at head_dim 512: 584 P;
      FlashMLA and SGLang round 584 P up to a multiple of 576).
    - ``workspace``: the launch's scratch, a contiguous tensor of at least
      :func:`entry_workspace_bytes` (jobs, head_dim) bytes (jobs: the decode batch, or the
      prefill's compress plans), 16-byte aligned, on the state's device. Zero it once: every
      launch leaves it all zero (a refused one touches nothing), so one workspace serves any
      sequence of launches, of any job counts, CUDA graph replays included. One per stream at a
      time: launches that may run at the same time (on other streams, graphs replayed side by
      side) need one each. Too small: :class:`Error` C128_ERROR_WORKSPACE_TOO_SMALL; misaligned:
      C128_ERROR_MISALIGNED.
      Default (None): the binding's own workspace for the launch's stream (PyTorch or CuPy on
      the GPU, NumPy on the host, one a thread there), made zeroed on that stream by the first
      launch that needs it, replaced by one twice as large when a launch needs more, and kept
      for the process: no allocation once a stream's is large enough. A launch captured in a
      CUDA graph on a stream whose workspace is missing or too small gets one of its own, made
      and zeroed in the graph (PyTorch; CuPy refuses); a warm-up launch on the capture stream
      lets the captures share the stream's. A :class:`Decode` / :class:`Prefill` takes the
      workspace of the stream that is current when it is bound (host: one of its own); give it
      one of its own when it is called on another stream alongside cache-entry launches there.
    """

    kind: str
    norm_weight: Any
    rope_table: Any
    cache: Any
    entries_per_page: int
    eps: float = 1e-6
    page_bytes: Optional[int] = None
    workspace: Any = None


def _table(t: Any, name: str, stream: int) -> View:
    v = view(t, name, stream)
    if v.dtype not in ("i32", "u32"):
        raise TypeError(f"{name}: expected an int32 [rows, stride] table of block ids, got {v.dtype}")
    if len(v.shape) != 2:
        raise ValueError(f"{name}: expected an int32 [rows, stride] table of block ids, got shape {_fmt(v.shape)}")
    _contiguous(v, name)
    _aligned(v, name, 4)
    return v


def _where_read(v: View, name: str, device: Optional[Tuple[str, int]], host: bool, reader: str) -> None:
    """A table or index is read on `device` (None: anywhere), or on the host when `host`."""
    if host and not v.on_host:
        raise ValueError(f"{name}: on {_dev(v.device)}; {reader} reads it in host memory")
    if device is not None and v.device != device:
        raise ValueError(f"{name}: on {_dev(v.device)}, but state is on {_dev(device)}; the tensors of a call "
                         f"must be on one device")


def _state_layout_bind(dst: _lib.StateLayout, sl: Any, s: Optional[View], stream: int, checker: bool,
                       device: Optional[Tuple[str, int]], host_tables: bool, reader: str) -> list:
    """Fills dst (every field) from a StateLayout; returns the views to keep alive. `s` is the
    launch's state (None for a planner); tables are read on `device` or, `host_tables`, on the host.
    Returns (name, view) of each tensor it names."""
    if not isinstance(sl, StateLayout):
        raise TypeError(f"state_layout: expected c128.StateLayout, got {describe(sl)}")
    keep = []
    dst.block_rows = _int(sl.block_rows, "state_layout.block_rows", _INT32)
    dst.score_biased = _flag(sl.score_biased, "state_layout.score_biased")
    dst.score_plane = None
    if sl.score_plane is not None:
        p = view(sl.score_plane, "state_layout.score_plane", stream)
        if s is not None:
            if _ELEMENT.get(p.dtype, p.dtype) != _ELEMENT.get(s.dtype, s.dtype):
                raise TypeError(f"state_layout.score_plane: {p.dtype}, state {s.dtype}: the planes share a dtype")
            if p.shape != s.shape:
                raise ValueError(f"state_layout.score_plane: shape {_fmt(p.shape)}, state {_fmt(s.shape)}: the "
                                 f"planes share a shape")
            _contiguous(p, "state_layout.score_plane")
            _aligned(p, "state_layout.score_plane", 2 * p.itemsize)
            if not checker:
                _writable(p, "state_layout.score_plane")
                _where_read(p, "state_layout.score_plane", device, False, reader)
        dst.score_plane = p.ptr
        keep.append(("state_layout.score_plane", p))
    dst.row_shift = _int(sl.row_shift, "state_layout.row_shift", _INT32)
    dst.block_table, dst.table_rows, dst.table_stride = None, 0, 0
    dst.score_block_table = None
    table = None
    if sl.block_table is not None:
        table = _table(sl.block_table, "state_layout.block_table", stream)
        _where_read(table, "state_layout.block_table", device, host_tables, reader)
        dst.block_table, dst.table_rows, dst.table_stride = table.ptr, table.shape[0], table.shape[1]
        keep.append(("state_layout.block_table", table))
    if sl.score_block_table is not None:
        st = _table(sl.score_block_table, "state_layout.score_block_table", stream)
        _where_read(st, "state_layout.score_block_table", device, host_tables, reader)
        if table is not None and st.shape != table.shape:
            raise ValueError(f"state_layout.score_block_table: shape {_fmt(st.shape)}, block_table "
                             f"{_fmt(table.shape)}: the planes' tables share a shape")
        dst.score_block_table = st.ptr
        keep.append(("state_layout.score_block_table", st))
    return keep


def _per_row(obj: Any, name: str, meaning: str, rows: int, at_least: bool, stream: int,
             device: Optional[Tuple[str, int]], checker: bool) -> View:
    """An int64 array of one value per input row: `rows` or more (at_least), else at most `rows`;
    read on `device`, or (the checker) in host memory."""
    v = view(obj, name, stream)
    if v.dtype != "i64":
        raise TypeError(f"{name}: expected int64 ({meaning}), got {v.dtype}")
    if len(v.shape) != 1 or (v.shape[0] < rows if at_least else v.shape[0] > rows):
        raise ValueError(f"{name}: expected a contiguous int64 tensor of shape ({'>=' if at_least else '<='} {rows},) "
                         f"(one per input row), got {_fmt(v.shape)}")
    _contiguous(v, name)
    _aligned(v, name, 8)
    _where_read(v, name, None if checker else device, checker, "the plan checker")
    return v


def _index_bind(index: Any, rows: int, stream: int, device: Optional[Tuple[str, int]], checker: bool) -> View:
    return _per_row(index, "output_index", "an output row or cache entry per input row", rows, True, stream, device,
                    checker)


def _slots_bind(write_slots: Any, write_positions: Any, input_rows: int, stream: int,
                device: Optional[Tuple[str, int]], checker: bool) -> Tuple[View, View]:
    """The views of write_slots and write_positions (int64 [n <= input rows] each, n the same)."""
    if write_slots is None or write_positions is None:
        raise ValueError("write_slots, write_positions: give both (a token's physical state row and its position) "
                         "or neither")
    sv, pv = (_per_row(obj, name, "one per input row", input_rows, False, stream, device, checker)
              for obj, name in ((write_slots, "write_slots"), (write_positions, "write_positions")))
    if sv.shape != pv.shape:
        raise ValueError(f"write_positions: shape {_fmt(pv.shape)}, write_slots {_fmt(sv.shape)}: one position a slot")
    return sv, pv


def _real(value: Any, name: str) -> float:
    """A real number (NumPy scalars too) as a float; bools and everything else are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, got {describe(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}: {value} does not fit a float") from None


def _entry_bind(dst: _lib.EntryArgs, e: Any, head_dim: int, stream: int, checker: bool,
                device: Optional[Tuple[str, int]], jobs: int, first: Any, bound: bool) -> list:
    """Fills dst (every field) from an Entry; returns the views (and the automatic workspace) to
    keep alive. `jobs`: the launch's decode requests or compress plans; `first`: the state, whose
    framework makes an automatic workspace; `bound`: for a Decode / Prefill."""
    if not isinstance(e, Entry):
        raise TypeError(f"entry: expected c128.Entry, got {describe(e)}")
    if not isinstance(e.kind, str):
        raise TypeError(f"entry.kind: expected 'dsv4_fp8' or 'dsv4_bf16', got {describe(e.kind)}")
    kind = OUTPUT_KINDS.get(e.kind, 0)
    if kind == 0:
        raise ValueError(f"entry.kind: expected 'dsv4_fp8' or 'dsv4_bf16', got {e.kind!r}")
    w = view(e.norm_weight, "entry.norm_weight", stream)
    if w.dtype != "f32":
        raise TypeError(f"entry.norm_weight: expected float32 (c128 reads gamma in f32: convert it once at load "
                        f"time), got {w.dtype}")
    if w.shape != (head_dim,):
        raise _shape_error("entry.norm_weight", f"(head_dim = {head_dim},)", w)
    r = view(e.rope_table, "entry.rope_table", stream)
    if r.dtype == "c64" and len(r.shape) == 2 and r.shape[1] == ROPE_DIMS // 2:
        positions = r.shape[0]
    elif r.dtype == "f32" and (r.shape[1:] == (ROPE_DIMS,) or r.shape[1:] == (ROPE_DIMS // 2, 2)):
        positions = r.shape[0]
    elif r.dtype not in ("f32", "c64"):
        raise TypeError(f"entry.rope_table: expected float32 [positions, 64] (cos, sin interleaved) or complex64 "
                        f"[positions, 32], got {r.dtype}")
    else:
        raise _shape_error("entry.rope_table", "(positions, 64) float32, (positions, 32, 2) float32 or "
                           "(positions, 32) complex64", r)
    c = view(e.cache, "entry.cache", stream)
    if c.dtype not in ("u8", "i8"):
        raise TypeError(f"entry.cache: expected a uint8 [pages, page_bytes] cache, got {c.dtype}")
    page_bytes = None if e.page_bytes is None else _int(e.page_bytes, "entry.page_bytes", _INT64)
    if len(c.shape) >= 2:
        pages = c.shape[0]
        own = c.itemsize
        for extent in c.shape[1:]:
            own *= extent
        if page_bytes is not None and pages and page_bytes != own:
            raise ValueError(f"entry.page_bytes: {page_bytes}, but entry.cache holds {own} bytes a page "
                             f"(shape {_fmt(c.shape)})")
        page_bytes = own if page_bytes is None else page_bytes
    elif len(c.shape) == 1 and page_bytes is not None:
        pages = c.nbytes // page_bytes if page_bytes > 0 else 0
    else:
        raise _shape_error("entry.cache", "(pages, page_bytes) uint8 (or 1-D with entry.page_bytes)", c)
    for v, name in ((w, "entry.norm_weight"), (r, "entry.rope_table"), (c, "entry.cache")):
        _contiguous(v, name)
    _aligned(w, "entry.norm_weight", 4)
    _aligned(r, "entry.rope_table", 8)
    _aligned(c, "entry.cache", 4)
    if not checker:
        _writable(c, "entry.cache")
        for v, name in ((w, "entry.norm_weight"), (r, "entry.rope_table"), (c, "entry.cache")):
            _where_read(v, name, device, False, "")
    dst.kind = kind
    dst.norm_weight, dst.rope_table, dst.cache = w.ptr, r.ptr, c.ptr
    dst.norm_eps = _real(e.eps, "entry.eps")
    dst.rope_positions = positions
    dst.cache_pages = pages
    dst.entries_per_page = _int(e.entries_per_page, "entry.entries_per_page", _INT32)
    dst.page_bytes = page_bytes
    keep: list = [w, r, c]
    dst.workspace, dst.workspace_bytes = None, 0
    if e.workspace is not None:  # its size and alignment are the library's to refuse (with their statuses)
        ws = view(e.workspace, "entry.workspace", stream)
        _contiguous(ws, "entry.workspace")
        if not checker:
            _writable(ws, "entry.workspace")
            _where_read(ws, "entry.workspace", device, False, "")
        dst.workspace, dst.workspace_bytes = ws.ptr, ws.nbytes
        keep.append(ws)
    elif not checker and pages > 0 and device is not None:  # a launch that can write no entry reads none
        need = _lib.entry_workspace_bytes(jobs, head_dim)
        if need < 0:
            raise ValueError(f"entry: no workspace size for {jobs} jobs at head_dim {head_dim}")
        buf, ptr, size = _entry_workspace(first, device, stream, need, bound)
        dst.workspace, dst.workspace_bytes = ptr, size
        keep.append(buf)
    return keep


# ---- cache-entry workspaces (Entry.workspace None) ---------------------------------------------------------
# Every launch leaves its workspace all zero (a refused one touches nothing), so one workspace, zeroed when
# made, serves every launch of a stream, of any job count, with its plain pointer and full size: a stream
# runs its launches one after another.
_MIN_WORKSPACE = 1 << 16
# GPU workspaces by (framework, device index, stream handle): (buffer, pointer, bytes), made zeroed on their
# stream. A launch needing more replaces its stream's by one twice as large (a stream's add up to less than
# twice its largest). None is freed (_kept holds them all): a remembered launch struct or a captured CUDA
# graph may still name a replaced one (which stays zero and large enough for them), and a kernel in flight
# may still use it.
_workspaces: dict = {}
_kept: list = []
# The pointers of workspaces made for single launches captured in a CUDA graph (_torch_workspace): a struct
# naming one is never remembered, since only the graph's replays zero it.
_graph_workspaces: set = set()
_workspace_lock = threading.Lock()


def _grown(need: int, old: Optional[tuple]) -> int:
    """Bytes of a workspace replacing old (None, or too small) for a launch of `need` bytes."""
    return max(need, 2 * old[2] if old is not None else 0, _MIN_WORKSPACE)


def _entry_workspace(first: Any, device: Tuple[str, int], stream: int, need: int, bound: bool) -> tuple:
    """(buffer, pointer, bytes) of the binding's workspace for a launch of `need` bytes on `stream` (host:
    the calling thread's, or a bound launch's own)."""
    if device[0] == CPU:  # the host runner is synchronous: a thread's launches never overlap
        if bound:  # its own: a Decode / Prefill may be called from any thread
            return _host_workspace(first, need)
        got = getattr(_tls, "workspace", None)
        if got is None or got[2] < need:
            got = _tls.workspace = _host_workspace(first, _grown(need, got))
        return got
    framework = type(first).__module__.partition(".")[0]
    key = (framework, device[1], stream)
    got = _workspaces.get(key)
    if got is None or got[2] < need:
        with _workspace_lock:  # one maker at a time
            got = _make_workspace(first, framework, key, need, bound)
    return got


def _make_workspace(first: Any, framework: str, key: tuple, need: int, bound: bool) -> tuple:
    got = _workspaces.get(key)
    if got is not None and got[2] >= need:  # another thread made it meanwhile
        return got
    if framework == "torch":
        made, captured = _torch_workspace(key, _grown(need, got), need, bound)
    elif framework == "cupy":
        made, captured = _cupy_workspace(key, _grown(need, got)), False
    else:
        raise ValueError(f"entry.workspace: c128 makes GPU workspaces with PyTorch or CuPy; for {describe(first)} "
                         f"tensors pass entry.workspace (c128.entry_workspace_bytes(jobs, head_dim) = {need} bytes, "
                         f"zeroed once, 16-byte aligned, on the state's device)")
    _kept.append(made[0])
    if captured:
        _graph_workspaces.add(made[1])
    else:
        _workspaces[key] = made
    return made


def _host_workspace(first: Any, size: int) -> tuple:
    try:
        np = _numpy()
    except ImportError:
        np = None
    if np is None:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(first, torch.Tensor):
            raise ImportError("c128: a cache-entry launch on host arrays without entry.workspace needs NumPy")
        raw = torch.zeros(size + 16, dtype=torch.uint8)
        base = raw.data_ptr()
    else:
        raw = np.zeros(size + 16, np.uint8)
        base = raw.ctypes.data
    return raw, base + (-base) % 16, size


def _torch_workspace(key: tuple, size: int, need: int, bound: bool) -> Tuple[tuple, bool]:
    """A workspace of `size` bytes zeroed on the launch's stream (the zeroing ordered before the launch,
    the memory tied to that stream by PyTorch's allocator), and False. While the stream captures a CUDA
    graph: one of `need` bytes for this launch alone, made and zeroed in the graph (the zeroing runs
    when the graph replays, so nothing launched outside the graph may use it), and True."""
    torch = sys.modules["torch"]
    index, stream = key[1], key[2]
    dev = torch.device("cuda", index)
    with torch.cuda.device(index):
        s = torch.cuda.current_stream(dev)  # the usual case, a capture's too: PyTorch's own stream object
        if s.cuda_stream != stream:
            s = torch.cuda.default_stream(dev) if stream == 0 else torch.cuda.ExternalStream(stream, device=dev)
        with torch.cuda.stream(s):
            captured = torch.cuda.is_current_stream_capturing()
            if captured and bound:
                raise ValueError("entry.workspace: a Decode / Prefill bound while its stream captures a CUDA graph, "
                                 "which has no workspace large enough yet (one made now would be zeroed only when "
                                 "the graph replays): bind it before the capture, or pass entry.workspace")
            buf = torch.zeros(need if captured else size, dtype=torch.uint8, device=dev)  # 512-byte aligned
    return (buf, buf.data_ptr(), buf.numel()), captured


def _cupy_workspace(key: tuple, size: int) -> tuple:
    cupy = sys.modules["cupy"]
    index, stream = key[1], key[2]
    with cupy.cuda.Device(index):
        s = cupy.cuda.Stream.null if stream == 0 else cupy.cuda.ExternalStream(stream)
        capturing = getattr(s, "is_capturing", None)
        if capturing is not None and stream != 0 and capturing():
            raise ValueError(f"entry.workspace: stream {stream:#x} is capturing a CUDA graph and has no workspace "
                             f"large enough yet: launch once on it before capturing, or pass entry.workspace")
        with s:
            buf = cupy.zeros(size, cupy.uint8)
    return buf, int(buf.data.ptr), size


def _extras_bind(args: Any, s: View, head_dim: int, index_rows: int, state_layout: Any, output_index: Any,
                 entry: Any, stream: int, checker: bool, device: Tuple[str, int], jobs: int, first: Any,
                 bound: bool) -> list:
    """The new arguments of a launch, every field set (zero where None)."""
    keep: list = []
    if state_layout is not None:
        keep += [v for _, v in _state_layout_bind(args.state_layout, state_layout, s, stream, checker,
                                                  None if checker else device, checker, "the plan checker")]
    else:
        args.state_layout = _lib.StateLayout()
    if output_index is not None:
        v = _index_bind(output_index, index_rows, stream, device, checker)
        args.output_index = v.ptr
        keep.append(v)
    else:
        args.output_index = None
    if entry is not None:
        keep += _entry_bind(args.entry, entry, head_dim, stream, checker, device, jobs, first, bound)
    else:
        args.entry = _lib.EntryArgs()
    return keep


def _check_launch(status: int, function: str, args: Any, jobs: int, detail: Optional[str] = None) -> None:
    """Raise :class:`Error` unless status is C128_SUCCESS; a cache-entry workspace the library refused
    is named, with the bytes it needs."""
    if not status:
        return
    e = args.entry
    if detail is None and e.kind and e.workspace is not None:
        if status == Status.ERROR_WORKSPACE_TOO_SMALL:
            need = _lib.entry_workspace_bytes(jobs, args.head_dim)
            detail = (f"entry.workspace: {e.workspace_bytes} bytes, c128.entry_workspace_bytes({jobs}, "
                      f"{args.head_dim}) = {need}")
        elif status == Status.ERROR_MISALIGNED and e.workspace % 16:
            detail = f"entry.workspace: the data pointer {e.workspace:#x} is not aligned to 16 bytes"
    raise Error(status, function, detail)


class HostOptions(NamedTuple):
    """Options of the host runner (c128_host_options): record every state/output access and fail
    on a race (DESIGN 7), run blocks last to first, cap the race checker's shadow memory."""

    check_races: bool = False
    reverse_blocks: bool = False
    checker_limit_bytes: int = 0


def _host_options(options: Optional[HostOptions]) -> Tuple[Any, Any]:
    if options is None:
        return None, None
    if not isinstance(options, HostOptions):
        raise TypeError(f"host_options: expected c128.HostOptions, got {describe(options)}")
    o = _lib.HostOptions()
    o.check_races = 1 if options.check_races else 0
    o.reverse_blocks = 1 if options.reverse_blocks else 0
    o.checker_limit_bytes = _int(options.checker_limit_bytes, "host_options.checker_limit_bytes", (0, (1 << 64) - 1))
    message = create_string_buffer(512)
    o.message = addressof(message)
    o.message_size = len(message)
    return o, message


def _run_detail(message: Any) -> Optional[str]:
    if message is None:
        return None
    text = message.value.decode(errors="replace")
    return text or None



# ---- torch.compile: the operators of c128.torch stand in for the ctypes calls while Dynamo traces ----------
_is_compiling: list = []  # [torch.compiler.is_compiling], once PyTorch is imported


def _compiling() -> bool:
    """True while torch.compile traces (ctypes calls cannot be traced: the calls route to torch.ops.c128)."""
    if _is_compiling:
        return _is_compiling[0]()
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    compiler = getattr(torch, "compiler", None)
    if compiler is None or not hasattr(compiler, "is_compiling"):
        return False
    _is_compiling.append(compiler.is_compiling)
    return _is_compiling[0]()


def _ops() -> Any:
    """torch.ops.c128, once c128.torch has registered it."""
    if "c128.torch" not in sys.modules:
        raise RuntimeError("c128: import c128.torch before torch.compile traces a c128 call (it registers the "
                           "torch.ops.c128 operators that stand in for the ctypes calls)")
    return sys.modules["torch"].ops.c128


def _op_kwargs(layout: Any, state_layout: Any, output_index: Any, entry: Any, stream: Any,
               host_options: Any) -> dict:
    """The keyword arguments of torch.ops.c128.decode / prefill for a call's options."""
    if stream is not None or host_options is not None:
        raise ValueError("stream, host_options: a compiled call runs on PyTorch's current stream, with no host "
                         "options")
    kw: dict = {}
    if layout is not None:
        rank, size, pages = layout if isinstance(layout, (tuple, list)) else (layout.rank, layout.size,
                                                                               layout.pages_per_rank)
        kw.update(rank=rank, size=size, pages_per_rank=pages)
    if state_layout is not None:
        kw.update(block_rows=state_layout.block_rows, block_table=state_layout.block_table,
                  row_shift=state_layout.row_shift, score_plane=state_layout.score_plane,
                  score_block_table=state_layout.score_block_table, score_biased=bool(state_layout.score_biased))
    if output_index is not None:
        kw["output_index"] = output_index
    if entry is not None:
        kw.update(entry_kind=entry.kind, norm_weight=entry.norm_weight, rope_table=entry.rope_table, cache=entry.cache,
                  entries_per_page=entry.entries_per_page, eps=float(entry.eps), page_bytes=entry.page_bytes or 0)
        if entry.workspace is not None:
            kw["workspace"] = entry.workspace
    return kw

# ---- decode ------------------------------------------------------------------------------------------
_tls = threading.local()

# Launches of PyTorch CUDA tensors already checked, by every fact the checks read (pointer, shape,
# dtype, device, contiguity of each tensor; the options): a repeated call skips the checks and
# launches the struct it built. Bounded; structs are never changed once stored.
_launch_cache: dict = {}
_LAUNCH_CACHE_SIZE = 256


def _torch_cuda_key(tensors: tuple, options: tuple) -> Optional[tuple]:
    """The cache key of a call on PyTorch CUDA tensors (options: layout, group size, pdl), or None."""
    torch = sys.modules.get("torch")
    layout, group, pdl = options
    if torch is None or not (layout is None or type(layout) is tuple) or type(group) is not int:
        return None
    tensor_type = torch.Tensor
    key = []
    for t in tensors:
        if type(t) is not tensor_type or not t.is_cuda:
            return None
        key.append((t.data_ptr(), t.shape, t.dtype, t.get_device(), t.is_contiguous()))
    full = (tuple(key), layout, group, bool(pdl))
    try:
        hash(full)
    except TypeError:  # a layout of unhashable values: checked (and refused) the long way
        return None
    return full


def _torch_cuda_key_extra(tensors: tuple, options: tuple, state_layout: Any, output_index: Any,
                          entry: Any) -> Optional[tuple]:
    """The cache key of a call with a state layout, an output index or cache entries (None
    tensors allowed where they are optional: output with entries, the layout's and entry's
    optional tensors), or None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    sl_fields = entry_fields = ()
    more: tuple = (output_index,)
    if state_layout is not None:
        if type(state_layout) is not StateLayout:
            return None
        if type(state_layout.score_biased) not in (bool, int):  # checked (and refused) the long way
            return None
        more += (state_layout.block_table, state_layout.score_plane, state_layout.score_block_table)
        sl_fields = (state_layout.block_rows, state_layout.row_shift, bool(state_layout.score_biased))
    if entry is not None:
        if type(entry) is not Entry:
            return None
        more += (entry.norm_weight, entry.rope_table, entry.cache, entry.workspace)
        entry_fields = (entry.kind, entry.entries_per_page, entry.eps, entry.page_bytes)
    layout, group, pdl = options
    if not (layout is None or type(layout) is tuple) or type(group) is not int:
        return None
    tensor_type = torch.Tensor
    key = []
    for t in tensors + more:
        if t is None:
            key.append(None)
            continue
        if type(t) is not tensor_type or not t.is_cuda:
            return None
        key.append((t.data_ptr(), t.shape, t.dtype, t.get_device(), t.is_contiguous()))
    full = (tuple(key), layout, group, bool(pdl), sl_fields, entry_fields)
    try:
        hash(full)
    except TypeError:
        return None
    return full


# Calls on the same PyTorch tensor objects as a checked call (the hot path of an engine that keeps its
# buffers): found by the objects' ids, confirmed by a weak reference to each (the same object, alive),
# its data pointer and shape (a tensor given new storage, resized or transposed in place is checked
# again). The struct was filled by the full checks; options are part of the key.
_hits: dict = {}


class _Hit:
    __slots__ = ("refs", "facts", "ref", "device", "raw")

    def __init__(self, tensors: tuple, args: Any, device: Tuple[str, int]) -> None:
        import weakref

        self.refs = tuple(weakref.ref(t) for t in tensors)
        self.facts = tuple((t.data_ptr(), t.size()) for t in tensors)
        if not _tensor_methods:
            _tensor_methods.extend([type(tensors[0]).data_ptr, type(tensors[0]).size])
        self.ref = byref(args)  # keeps args alive
        self.device = device[1] if device[0] != CPU else -1
        torch = sys.modules["torch"]
        self.raw = _raw_stream(torch) if self.device >= 0 else None

    def same(self, tensors: tuple) -> bool:
        refs, (dp, size) = self.refs, _tensor_methods
        k = 0
        for t in tensors:
            ptr, shape = self.facts[k]
            if refs[k]() is not t or dp(t) != ptr or size(t) != shape:
                return False
            k += 1
        return True


_tensor_methods: list = []  # [torch.Tensor.data_ptr, torch.Tensor.size]: unbound, one lookup less a call


def _raw_stream(torch: Any) -> Any:
    return getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _hit_key(tensors: tuple, options: tuple) -> Optional[tuple]:
    """The identity key of a call on plain PyTorch tensors (or None: not cacheable)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor_type = torch.Tensor
    for t in tensors:
        if type(t) is not tensor_type:
            return None
    layout, group, pdl = options
    if not (layout is None or type(layout) is tuple) or type(group) is not int or type(pdl) is not bool:
        return None
    return tuple(map(id, tensors)) + options


def _remember_hit(key: tuple, tensors: tuple, args: Any, device: Tuple[str, int]) -> None:
    if len(_hits) >= _LAUNCH_CACHE_SIZE:
        _hits.clear()
    _hits[key] = _Hit(tensors, args, device)


def _launch_hit(hit: _Hit, function: Any, host_function: Any, name: str, stream: Any) -> bool:
    """Runs a remembered call; False when it cannot (the caller takes the long way, which raises)."""
    if hit.device < 0:
        if stream is not None:
            return False
        status = host_function(hit.ref, None)
        if status:
            raise Error(status, name + "_host")
        return True
    get = (_torch_raw or _torch_raw_functions(sys.modules["torch"]))[1]
    if get is not None and get() != hit.device:
        return False
    if stream is None:
        handle = hit.raw(hit.device) if hit.raw is not None else current_stream(hit.refs[0]())
    else:
        handle = stream_handle(stream)
    status = function(hit.ref, handle)
    if status:
        raise Error(status, name)
    return True


_sm_counts: dict = {}


def _sm_count(device: Tuple[str, int]) -> int:
    """The SM count of a CUDA device PyTorch knows (0: unknown; the library then asks the runtime)."""
    if device[0] == CPU:
        return 0
    count = _sm_counts.get(device[1])
    if count is None:
        count = 0
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available():
                count = int(torch.cuda.get_device_properties(device[1]).multi_processor_count)
        except Exception:  # noqa: BLE001 - any failure leaves the choice to the library
            count = 0
        _sm_counts[device[1]] = count
    return count


def _explicit_group(args: Any, device: Tuple[str, int], decode_launch: bool) -> None:
    """An automatic group size (0) made explicit with the value the library would pick (the same
    c128_*_group_size on the device's SM count), so that a launch of a remembered or bound struct
    does not ask the runtime for the device and its SM count each time."""
    field = "requests_per_block" if decode_launch else "windows_per_block"
    if getattr(args, field) != 0:
        return
    sm = _sm_count(device)
    if sm <= 0:
        return
    if decode_launch:
        setattr(args, field, _lib.decode_group_size(args.batch, args.head_dim, sm))
    else:
        setattr(args, field, _lib.prefill_group_size(args.num_compress, args.head_dim, sm))


def _remember(key: tuple, args: Any) -> None:
    if len(_launch_cache) >= _LAUNCH_CACHE_SIZE:
        _launch_cache.clear()
    _launch_cache[key] = byref(args)  # the byref keeps args alive


def _output_view(output: Any, entry: Any, stream: int) -> Optional[View]:
    """The output's view; None with cache entries (which write no output rows)."""
    if entry is None:
        return view(output, "output", stream)
    if output is not None:
        raise ValueError("output: a launch with cache entries (entry=...) writes entries, not output rows; pass "
                         "output=None")
    return None


def _decode_bind(args: _lib.DecodeArgs, state: Any, input: Any, ape: Any, output: Any, plans: Any, stream: int,
                 layout: Any, requests_per_block: Any, pdl: Any, checker: bool, extended: bool = False,
                 state_layout: Any = None, output_index: Any = None, entry: Any = None,
                 bound: bool = False) -> Tuple[bool, tuple]:
    """Checks and fills args; returns (on the host, the views to keep alive). `extended`: fill the
    state layout, output index and entry fields too (zero where None); without it they are left
    as they are (zero in the structs of calls that never pass them)."""
    s, i, a, p = (view(state, "state", stream), view(input, "input", stream), view(ape, "ape", stream),
                  view(plans, "plans", stream))
    o = _output_view(output, entry, stream)
    if checker:
        if not p.on_host:
            raise ValueError("plans: the checker reads plans in host memory; copy them to the host first")
        on_host = True
    else:
        on_host = _same_device([("state", s), ("input", i), ("ape", a), ("output", o), ("plans", p)] if o is not None
                               else [("state", s), ("input", i), ("ape", a), ("plans", p)])
    batch = _records(p, "plans", DECODE_PLAN_BYTES, "decode plan")
    head_dim, sd, idt, od = _common(s, i, a, o, batch, 0 if output_index is not None else batch, "batch",
                                    state_layout)
    _aligned(p, "plans", DECODE_PLAN_BYTES)
    if not checker:
        _writable(s, "state")
        if o is not None:
            _writable(o, "output")
    keep: tuple = (s, i, a, o, p)
    if extended:
        keep += tuple(_extras_bind(args, s, head_dim, batch, state_layout, output_index, entry, stream, checker,
                                   s.device, batch, state, bound))
    args.head_dim, args.state_dtype, args.input_dtype, args.output_dtype = head_dim, sd, idt, od
    args.state, args.state_pages = s.ptr, s.shape[0]
    args.input, args.ape = i.ptr, a.ptr
    args.output, args.output_rows = (o.ptr, o.shape[0]) if o is not None else (None, 0)
    args.plans, args.batch = p.ptr, batch
    _layout(layout, args)
    args.pdl = 1 if pdl else 0
    args.requests_per_block = _int(requests_per_block, "requests_per_block", _INT32)
    return on_host, keep


def decode(state: Any, input: Any, ape: Any, output: Any, plans: Any, *, stream: Any = None, layout: Any = None,
           requests_per_block: int = 0, pdl: bool = False, host_options: Optional[HostOptions] = None,
           state_layout: Optional[StateLayout] = None, output_index: Any = None,
           entry: Optional[Entry] = None) -> None:
    """One decode step: one new token per request (c128_decode, or c128_decode_host on the host).

    Args:
        state: [pages, 128, 2 * head_dim] f32 or bf16, the compression state (written); with a
            ``state_layout``, [blocks, block_rows, 2 * head_dim] (or [blocks, block_rows,
            head_dim] with a score plane).
        input: [batch, 2 * head_dim] f32 or bf16, kv | score of each request's new token.
        ape: [128, head_dim] float32, the position bias.
        output: [rows >= batch, head_dim] f32 or bf16; row b is written only when request b
            completed a window (its other rows are left as they are). None with ``entry``.
        plans: batch decode plans: uint8 [batch, 16] (SGLang's), int32 [batch, 4] or a
            DECODE_PLAN_DTYPE array.
        stream: CUDA stream (int handle, or an object with cuda_stream / ptr); default: PyTorch's
            current stream for PyTorch tensors, CuPy's for CuPy arrays, else the legacy default
            stream. Host tensors take no stream.
        layout: (rank, size, pages_per_rank) of a context-parallel state; default (0, 1, 0).
        requests_per_block: 1..32 requests per block, 0 = automatic.
        pdl: launch with programmatic dependent launch.
        host_options: HostOptions for the host runner.
        state_layout: a :class:`StateLayout` (blocks, block table, score plane, biased scores);
            default: today's layout.
        output_index: int64 [batch]: request b's window goes to output row (or cache entry)
            output_index[b] (SGLang's out_loc); indices outside the output (or cache) are
            skipped. Default: row b.
        entry: an :class:`Entry`: write DeepSeek-V4 cache entries instead of pooled rows.

    Raises:
        TypeError, ValueError: an argument the binding refuses (named in the message).
        Error: the library's status.
    """
    if _compiling():
        kw = _op_kwargs(layout, state_layout, output_index, entry, stream, host_options)
        op = _ops().decode_extended if state_layout is not None or output_index is not None or entry is not None \
            else _ops().decode
        op(state, input, ape, output, plans, requests_per_block=requests_per_block, pdl=pdl, **kw)
        return
    extended = state_layout is not None or output_index is not None or entry is not None
    hit_key = None
    if not extended and host_options is None:
        tensors = (state, input, ape, output, plans)
        try:
            hit = _hits.get((id(state), id(input), id(ape), id(output), id(plans), layout, requests_per_block, pdl))
        except TypeError:  # an unhashable option: the long way checks it
            hit = None
        if hit is not None and hit.same(tensors) and _launch_hit(hit, _lib.decode, _lib.decode_host, "c128_decode",
                                                                 stream):
            return
        hit_key = _hit_key(tensors, (layout, requests_per_block, pdl))
    launch_stream = None
    if not extended:
        key = _torch_cuda_key((state, input, ape, output, plans), (layout, requests_per_block, pdl))
    else:
        key = _torch_cuda_key_extra((state, input, ape, output, plans), (layout, requests_per_block, pdl),
                                    state_layout, output_index, entry)
        if key is not None and entry is not None and entry.workspace is None:  # the stream's workspace
            launch_stream = current_stream(state) if stream is None else stream_handle(stream)
            key += (launch_stream,)
    if key is not None:
        cached = _launch_cache.get(key)
        if cached is not None:  # the same tensors and options as a checked call: launch its struct
            current_device_check(state, "state")
            if launch_stream is None:
                launch_stream = current_stream(state) if stream is None else stream_handle(stream)
            status = _lib.decode(cached, launch_stream)
            if status:
                raise Error(status, "c128_decode")
            return
    if key is not None:
        args = _lib.DecodeArgs()
    else:
        name = "decode_extended" if extended else "decode"
        args = getattr(_tls, name, None)
        if args is None:
            args = _lib.DecodeArgs()
            setattr(_tls, name, args)
    handle = _resolve_stream(stream, state) if launch_stream is None else launch_stream
    on_host, keep = _decode_bind(args, state, input, ape, output, plans, handle, layout, requests_per_block, pdl,
                                 False, extended, state_layout, output_index, entry)
    if hit_key is not None:  # a struct of its own, remembered for the same tensor objects
        args = _lib.DecodeArgs.from_buffer_copy(args)
        _explicit_group(args, keep[0].device, True)
        _remember_hit(hit_key, (state, input, ape, output, plans), args, keep[0].device)
    if key is not None and not on_host and args.entry.workspace not in _graph_workspaces:
        _remember(key, args)
    if on_host:
        _host_stream(stream)
        options, message = _host_options(host_options)
        _check_launch(_lib.decode_host(byref(args), options), "c128_decode_host", args, args.batch,
                      _run_detail(message))
    else:
        current_device_check(state, "state")
        _check_launch(_lib.decode(byref(args), handle), "c128_decode", args, args.batch)
    del keep


class _Bound:
    """What Decode and Prefill share once their subclass's _bind has filled the argument struct:
    the device check and stream lookup, rebind, and the call (one C call, host or device)."""

    _names: Tuple[str, ...] = ()
    _extras = ("state_layout", "output_index", "entry")  # rebindable like the tensors
    _function = ""  # "decode" or "prefill": the C functions c128_<name> and c128_<name>_host
    _jobs = ""  # the struct's field that counts the jobs of a cache-entry launch (batch, num_compress)
    _launch: Any = None  # _lib's function of that name, and of the host runner
    _run_host: Any = None

    def _bind(self) -> None:
        raise NotImplementedError

    def _bound(self) -> None:
        state = self._tensors["state"]
        if not self._on_host:
            current_device_check(state, "state")
        self._stream = current_stream_function(state)

    def rebind(self, **tensors: Any) -> None:
        """Replace some of the bound tensors, or the state_layout, output_index or entry (all
        checks again; on failure the old ones stay)."""
        for name in tensors:
            if name not in self._tensors:
                raise TypeError(f"{name}: not a tensor of {type(self).__name__} "
                                f"({', '.join(self._names + self._extras)})")
        old = dict(self._tensors)
        self._tensors.update(tensors)
        try:
            self._bind()
        except Exception:
            self._tensors = old
            self._bind()
            raise

    def __call__(self, stream: Any = None, *, host_options: Optional[HostOptions] = None) -> None:
        """Launch (stream as in :func:`decode`, resolved at each call) or run on the host."""
        if _compiling():  # the operator of the same launch (its tensors as bound)
            t = self._tensors
            fn = decode if self._function == "decode" else prefill
            fn(*(t[n] for n in self._names), stream=stream, host_options=host_options,
               **{n: t[n] for n in self._extras}, **self._options)
            return
        if self._on_host:
            _host_stream(stream)
            options, message = _host_options(host_options)
            status = self._run_host(self._ref, options)
            if status:
                _check_launch(status, f"c128_{self._function}_host", self._args, getattr(self._args, self._jobs),
                              _run_detail(message))
            return
        status = self._launch(self._ref, self._stream() if stream is None else stream_handle(stream))
        if status:
            _check_launch(status, f"c128_{self._function}", self._args, getattr(self._args, self._jobs))


class Decode(_Bound):
    """A decode launch with its tensors checked and bound once: calling it launches
    c128_decode (or runs the host runner) with the prebuilt argument struct, a single C call.

    The arguments are :func:`decode`'s. The object keeps the tensors alive; their data must stay
    where it was (no resize_, set_) and each call reads their current contents, which makes it
    the natural body of a CUDA-graph step over static buffers. ``rebind(name=tensor, ...)``
    replaces some of them (all checks again).
    """

    _names = ("state", "input", "ape", "output", "plans")
    _function = "decode"
    _jobs = "batch"
    _launch = staticmethod(_lib.decode)
    _run_host = staticmethod(_lib.decode_host)

    def __init__(self, state: Any, input: Any, ape: Any, output: Any, plans: Any, *, layout: Any = None,
                 requests_per_block: int = 0, pdl: bool = False, state_layout: Optional[StateLayout] = None,
                 output_index: Any = None, entry: Optional[Entry] = None) -> None:
        self._tensors = dict(zip(self._names + self._extras,
                                 (state, input, ape, output, plans, state_layout, output_index, entry)))
        self._options = {"layout": layout, "requests_per_block": requests_per_block, "pdl": pdl}
        self._args = _lib.DecodeArgs()
        self._ref = byref(self._args)
        self._bind()

    def _bind(self) -> None:
        t = self._tensors
        handle = current_stream(t["state"])
        self._on_host, self._keep = _decode_bind(self._args, t["state"], t["input"], t["ape"], t["output"],
                                                 t["plans"], handle, self._options["layout"],
                                                 self._options["requests_per_block"], self._options["pdl"], False,
                                                 True, t["state_layout"], t["output_index"], t["entry"], True)
        _explicit_group(self._args, view(t["state"], "state").device, True)
        self._bound()

    @property
    def batch(self) -> int:
        return self._args.batch


# ---- prefill ------------------------------------------------------------------------------------------
def _prefill_bind(args: _lib.PrefillArgs, state: Any, input: Any, ape: Any, output: Any, compress_plans: Any,
                  write_plans: Any, stream: int, layout: Any, windows_per_block: Any, pdl: Any,
                  checker: bool, extended: bool = False, state_layout: Any = None, output_index: Any = None,
                  entry: Any = None, bound: bool = False, write_slots: Any = None,
                  write_positions: Any = None) -> Tuple[bool, tuple]:
    s, i, a = view(state, "state", stream), view(input, "input", stream), view(ape, "ape", stream)
    o = _output_view(output, entry, stream)
    slots = write_slots is not None or write_positions is not None
    if slots and write_plans is not None:
        raise ValueError("write_plans: None when write_slots and write_positions name the writes (one source)")
    c = view(compress_plans, "compress_plans", stream)
    w = None if slots else view(write_plans, "write_plans", stream)
    if checker:
        for v, name in ((c, "compress_plans"), (w, "write_plans")):
            if v is not None and not v.on_host:
                raise ValueError(f"{name}: the checker reads plans in host memory; copy them to the host first")
        on_host = True
    else:
        views = [("state", s), ("input", i), ("ape", a), ("output", o), ("compress_plans", c), ("write_plans", w)]
        on_host = _same_device([(n, v) for n, v in views if v is not None])
    num_compress = _records(c, "compress_plans", COMPRESS_PLAN_BYTES, "compress plan")
    head_dim, sd, idt, od = _common(s, i, a, o, None, 0 if output_index is not None else num_compress, "rows",
                                    state_layout)
    _aligned(c, "compress_plans", COMPRESS_PLAN_BYTES)
    if slots:
        sv, pv = _slots_bind(write_slots, write_positions, i.shape[0], stream, s.device, checker)
        args.write_plans, args.num_write = None, sv.shape[0]
        args.write_slots, args.write_positions = sv.ptr, pv.ptr
        w = (sv, pv)
    else:
        args.write_plans, args.num_write = w.ptr, _records(w, "write_plans", WRITE_PLAN_BYTES, "write plan")
        args.write_slots = args.write_positions = None
        _aligned(w, "write_plans", WRITE_PLAN_BYTES)
    if not checker:
        _writable(s, "state")
        if o is not None:
            _writable(o, "output")
    keep: tuple = (s, i, a, o, c, w)
    if extended:
        keep += tuple(_extras_bind(args, s, head_dim, i.shape[0], state_layout, output_index, entry, stream, checker,
                                   s.device, num_compress, state, bound))
    args.head_dim, args.state_dtype, args.input_dtype, args.output_dtype = head_dim, sd, idt, od
    args.state, args.state_pages = s.ptr, s.shape[0]
    args.input, args.input_rows = i.ptr, i.shape[0]
    args.ape = a.ptr
    args.output, args.output_rows = (o.ptr, o.shape[0]) if o is not None else (None, 0)
    args.compress_plans, args.num_compress = c.ptr, num_compress
    _layout(layout, args)
    args.pdl = 1 if pdl else 0
    args.windows_per_block = _int(windows_per_block, "windows_per_block", _INT32)
    return on_host, keep


def prefill(state: Any, input: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any, *,
            stream: Any = None, layout: Any = None, windows_per_block: int = 0, pdl: bool = False,
            host_options: Optional[HostOptions] = None, state_layout: Optional[StateLayout] = None,
            output_index: Any = None, entry: Optional[Entry] = None, write_slots: Any = None,
            write_positions: Any = None) -> None:
    """A prefill / extend / verify batch: the compress launch, then the write launch, on one
    stream (c128_prefill, or c128_prefill_host on the host).

    Args:
        state: [pages, 128, 2 * head_dim] f32 or bf16 (written); with a ``state_layout`` as in
            :func:`decode`.
        input: [rows <= 65536, 2 * head_dim] f32 or bf16, the batch's tokens, ragged.
        ape: [128, head_dim] float32.
        output: [rows >= len(compress_plans), head_dim]: row k <- compress plan k (with
            ``output_index``: any rows). None with ``entry``.
        compress_plans: uint8 [n, 16], int32 [n, 4] or COMPRESS_PLAN_DTYPE; every row is
            launched (sentinel rows are skipped on the device).
        write_plans: uint8 [m, 8], int32 [m, 2] or WRITE_PLAN_DTYPE; None with ``write_slots``.
        stream, layout, pdl, host_options, state_layout, entry: as in :func:`decode`.
        windows_per_block: 1..32 compress windows per block, 0 = automatic.
        output_index: int64 [input rows]: the window that ends at input row r (its plan's
            ragged_id) goes to output row (or cache entry) output_index[r], as SGLang indexes
            out_loc; outside the output (or cache): skipped. Default: row k for plan k.
        write_slots, write_positions: int64 [n <= input rows] each, in place of write plans (vLLM's
            slot_mapping and positions): input row t goes to PHYSICAL state row write_slots[t]
            (negative: not written; past the state: skipped), with ape row write_positions[t] % 128
            added where the state layout's scores are biased. Not on a sharded state.
    """
    slots = write_slots is not None or write_positions is not None
    extended = state_layout is not None or output_index is not None or entry is not None or slots
    if _compiling():
        kw = _op_kwargs(layout, state_layout, output_index, entry, stream, host_options)
        if slots:
            kw.update(write_slots=write_slots, write_positions=write_positions)
        op = _ops().prefill_extended if extended else _ops().prefill
        op(state, input, ape, output, compress_plans, write_plans, windows_per_block=windows_per_block, pdl=pdl, **kw)
        return
    hit_key = None
    if not extended and host_options is None:
        tensors = (state, input, ape, output, compress_plans, write_plans)
        try:
            hit = _hits.get((id(state), id(input), id(ape), id(output), id(compress_plans), id(write_plans), layout,
                             windows_per_block, pdl))
        except TypeError:
            hit = None
        if hit is not None and hit.same(tensors) and _launch_hit(hit, _lib.prefill, _lib.prefill_host,
                                                                 "c128_prefill", stream):
            return
        hit_key = _hit_key(tensors, (layout, windows_per_block, pdl))
    launch_stream = None
    if not extended:
        key = _torch_cuda_key((state, input, ape, output, compress_plans, write_plans),
                              (layout, windows_per_block, pdl))
    else:
        key = _torch_cuda_key_extra((state, input, ape, output, compress_plans, write_plans, write_slots,
                                     write_positions), (layout, windows_per_block, pdl), state_layout, output_index,
                                    entry)
        if key is not None and entry is not None and entry.workspace is None:  # the stream's workspace
            launch_stream = current_stream(state) if stream is None else stream_handle(stream)
            key += (launch_stream,)
    if key is not None:
        cached = _launch_cache.get(key)
        if cached is not None:
            current_device_check(state, "state")
            if launch_stream is None:
                launch_stream = current_stream(state) if stream is None else stream_handle(stream)
            status = _lib.prefill(cached, launch_stream)
            if status:
                raise Error(status, "c128_prefill")
            return
    if key is not None:
        args = _lib.PrefillArgs()
    else:
        name = "prefill_extended" if extended else "prefill"
        args = getattr(_tls, name, None)
        if args is None:
            args = _lib.PrefillArgs()
            setattr(_tls, name, args)
    handle = _resolve_stream(stream, state) if launch_stream is None else launch_stream
    on_host, keep = _prefill_bind(args, state, input, ape, output, compress_plans, write_plans, handle, layout,
                                  windows_per_block, pdl, False, extended, state_layout, output_index, entry, False,
                                  write_slots, write_positions)
    if hit_key is not None:
        args = _lib.PrefillArgs.from_buffer_copy(args)
        _explicit_group(args, keep[0].device, False)
        _remember_hit(hit_key, (state, input, ape, output, compress_plans, write_plans), args, keep[0].device)
    if key is not None and not on_host and args.entry.workspace not in _graph_workspaces:
        _remember(key, args)
    _prefill_call(args, on_host, state, handle, stream, host_options)
    del keep


def _prefill_call(args: _lib.PrefillArgs, on_host: bool, state: Any, handle: int, stream: Any = None,
                  host_options: Optional[HostOptions] = None) -> None:
    """The C call of a prefill whose struct _prefill_bind filled: the host runner where its tensors
    are host memory (no stream), else the launch on `handle`."""
    if on_host:
        _host_stream(stream)
        options, message = _host_options(host_options)
        _check_launch(_lib.prefill_host(byref(args), options), "c128_prefill_host", args, args.num_compress,
                      _run_detail(message))
    else:
        current_device_check(state, "state")
        _check_launch(_lib.prefill(byref(args), handle), "c128_prefill", args, args.num_compress)


class Prefill(_Bound):
    """A prefill launch with its tensors checked and bound once (see :class:`Decode`): tensors
    state, input, ape, output, compress_plans, write_plans (and state_layout, output_index,
    entry, write_slots, write_positions, keyword-only)."""

    _names = ("state", "input", "ape", "output", "compress_plans", "write_plans")
    _extras = _Bound._extras + ("write_slots", "write_positions")
    _function = "prefill"
    _jobs = "num_compress"
    _launch = staticmethod(_lib.prefill)
    _run_host = staticmethod(_lib.prefill_host)

    def __init__(self, state: Any, input: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any, *,
                 layout: Any = None, windows_per_block: int = 0, pdl: bool = False,
                 state_layout: Optional[StateLayout] = None, output_index: Any = None,
                 entry: Optional[Entry] = None, write_slots: Any = None, write_positions: Any = None) -> None:
        self._tensors = dict(zip(self._names + self._extras, (state, input, ape, output, compress_plans, write_plans,
                                                              state_layout, output_index, entry, write_slots,
                                                              write_positions)))
        self._options = {"layout": layout, "windows_per_block": windows_per_block, "pdl": pdl}
        self._args = _lib.PrefillArgs()
        self._ref = byref(self._args)
        self._bind()

    def _bind(self) -> None:
        t = self._tensors
        handle = current_stream(t["state"])
        self._on_host, self._keep = _prefill_bind(self._args, *(t[n] for n in self._names), handle,
                                                  self._options["layout"], self._options["windows_per_block"],
                                                  self._options["pdl"], False, True, t["state_layout"],
                                                  t["output_index"], t["entry"], True, t["write_slots"],
                                                  t["write_positions"])
        _explicit_group(self._args, view(t["state"], "state").device, False)
        self._bound()


# ---- the plan checker ---------------------------------------------------------------------------------
_PLAN_KINDS = {0: "decode", 1: "compress", 2: "write"}


class PlanReport(NamedTuple):
    """The plan checker's verdict: ``index`` of the first offending plan (-1 when every plan is
    fine), the array it is in (``kind``: 'decode', 'compress' or 'write') and why."""

    index: int
    kind: str
    message: str

    @property
    def ok(self) -> bool:
        return self.index < 0


def _report(status: int, report: _lib.PlanReport, message: Any, function: str, default_kind: str) -> PlanReport:
    if status == Status.ERROR_INVALID_PLAN:
        return PlanReport(report.index, _PLAN_KINDS.get(report.kind, str(report.kind)),
                          message.value.decode(errors="replace"))
    _lib.check(status, function)
    return PlanReport(-1, default_kind, "")


def _new_report() -> Tuple[_lib.PlanReport, Any]:
    message = create_string_buffer(256)
    report = _lib.PlanReport()
    report.index = -1
    report.message = addressof(message)
    report.message_size = len(message)
    return report, message


def check_decode_plans(state: Any, input: Any, ape: Any, output: Any, plans: Any, *, layout: Any = None,
                       requests_per_block: int = 0, state_layout: Optional[StateLayout] = None,
                       output_index: Any = None, entry: Optional[Entry] = None) -> PlanReport:
    """Checks decode plans held in host memory against the launch :func:`decode` would make with
    these arguments (c128_check_decode_plans). The tensors' shapes and dtypes are used, not their
    data, so they may live anywhere, except what the checker reads: the plans, the state
    layout's block tables and output_index, in host memory. Returns the :class:`PlanReport`;
    arguments the launch would refuse raise :class:`Error` with the launch's status."""
    args = _lib.DecodeArgs()
    _, keep = _decode_bind(args, state, input, ape, output, plans, 0, layout, requests_per_block, False, True, True,
                           state_layout, output_index, entry)
    report, message = _new_report()
    status = _lib.check_decode_plans(byref(args), byref(report))
    del keep
    return _report(status, report, message, "c128_check_decode_plans", "decode")


def check_prefill_plans(state: Any, input: Any, ape: Any, output: Any, compress_plans: Any, write_plans: Any, *,
                        layout: Any = None, windows_per_block: int = 0, state_layout: Optional[StateLayout] = None,
                        output_index: Any = None, entry: Optional[Entry] = None, write_slots: Any = None,
                        write_positions: Any = None) -> PlanReport:
    """Checks prefill plans held in host memory (c128_check_prefill_plans); see
    :func:`check_decode_plans`. Compress plans are checked before write plans (or write_slots,
    also read in host memory: a slot past the state, two tokens with one slot)."""
    args = _lib.PrefillArgs()
    _, keep = _prefill_bind(args, state, input, ape, output, compress_plans, write_plans, 0, layout,
                            windows_per_block, False, True, True, state_layout, output_index, entry, False,
                            write_slots, write_positions)
    report, message = _new_report()
    status = _lib.check_prefill_plans(byref(args), byref(report))
    del keep
    return _report(status, report, message, "c128_check_prefill_plans", "compress")


# ---- planners -----------------------------------------------------------------------------------------
@dataclass
class Ring:
    """Where requests' tokens live (c128_ring, DESIGN 5): ``state_pages`` logical pages (with a
    block table: the state's physical blocks); a ring of ``ring_tokens`` slots per request (a
    multiple of 128; 0 = 128, or 2^row_shift with a block table); ``speculative`` when the engine
    runs speculative decoding on it; an optional ``page_table`` int32 [num_pool, stride] (page of
    pool row r, ring chunk k). The default, Ring(state_pages), is the legacy layout (page = pool
    index).

    Other engines' layouts (DESIGN 5.9, 5.11):

    - ``write_all``: persist the last R tokens of every request, not only the open window's
      (vLLM and TensorRT-LLM keep every row);
    - ``state_layout``: the :class:`StateLayout` the launches get. With a block table, plans
      name logical rows (pool index = table row, R = 2^row_shift, no page_table) and every block
      a plan reads or writes must be allocated (C128_ERROR_BLOCK_MISSING otherwise);
    - ``null_block``: a block id that marks a missing block (vLLM's 0); None: none;
    - ``rope_positions``: > 0, every window must start below it, the rows of the cache entries'
      RoPE table (C128_ERROR_ROPE_TABLE_TOO_SHORT otherwise).

    Tables (page_table, the state layout's block tables) are read in host memory by the host
    planners and in device memory by the device planners (host arrays there run the planners'
    code on the CPU)."""

    state_pages: int
    ring_tokens: int = 0
    speculative: bool = False
    page_table: Any = None
    write_all: bool = False
    state_layout: Optional[StateLayout] = None
    null_block: Optional[int] = None
    rope_positions: int = 0


def _ring(ring: Any, on_host: bool, stream: int = 0) -> Tuple[_lib.Ring, List[Tuple[str, View]]]:
    """The C ring and the (name, view) of each table it names (the caller keeps them alive and,
    for the device planners, checks their device)."""
    if not isinstance(ring, Ring):
        raise TypeError(f"ring: expected c128.Ring, got {describe(ring)}")
    r = _lib.Ring()
    r.ring_tokens = _int(ring.ring_tokens, "ring.ring_tokens", _INT32)
    r.speculative = 1 if ring.speculative else 0
    r.state_pages = _int(ring.state_pages, "ring.state_pages", _INT64)
    r.write_all = _flag(ring.write_all, "ring.write_all")
    r.rope_positions = _int(ring.rope_positions, "ring.rope_positions", _INT64)
    if ring.null_block is not None:
        r.has_null_block, r.null_block = 1, _int(ring.null_block, "ring.null_block", _INT32)
    tables: List[Tuple[str, View]] = []
    where = "host" if on_host else "device"
    if ring.page_table is not None:
        table = view(ring.page_table, "ring.page_table", stream)
        if table.dtype not in ("i32", "u32") or len(table.shape) != 2:
            raise ValueError(f"ring.page_table: expected int32 [num_pool, stride], got {table.dtype} {_fmt(table.shape)}")
        _contiguous(table, "ring.page_table")
        _aligned(table, "ring.page_table", 4)
        if table.on_host != on_host:
            raise ValueError(f"ring.page_table: on {_dev(table.device)}; this planner reads {where} memory")
        r.page_table, r.num_pool, r.page_table_stride = table.ptr, table.shape[0], table.shape[1]
        tables.append(("ring.page_table", table))
    if ring.state_layout is not None:
        try:
            views = _state_layout_bind(r.state_layout, ring.state_layout, None, stream, False, None, False, "")
        except (TypeError, ValueError) as e:
            raise type(e)("ring." + str(e)) from None
        for name, v in views:
            if name != "state_layout.score_plane":  # the planners read only the score plane's pointer
                if v.on_host != on_host:
                    raise ValueError(f"ring.{name}: on {_dev(v.device)}; this planner reads {where} memory")
            tables.append(("ring." + name, v))
    return r, tables


def requests_from_lens(seq_lens: Any, query_start: Any, pool_indices: Any = None) -> Any:
    """A request array (int32 [n, 3], as :func:`requests` makes) from an engine's arrays
    (c128_requests_from_lens): request i = (pool_indices[i] (default i), seq_lens[i],
    query_start[i + 1] - query_start[i]). vLLM: seq_lens and query_start_loc; TensorRT-LLM:
    kv_lens and cu_seq_lens. ``query_start`` has n + 1 entries; None for a decode batch
    (extend_len 1). Host arrays, lists or 1-D integer tensors; :class:`Error`
    (C128_ERROR_NEGATIVE_SIZE) where query_start decreases. The device planners read the same
    arrays on the device (plan_*_device(seq_lens=...))."""
    np = _numpy()
    seq = _int32_array(seq_lens, "seq_lens")
    n = len(seq)
    qs = None if query_start is None else _int32_array(query_start, "query_start")
    if qs is not None and len(qs) != n + 1:
        raise ValueError(f"query_start: expected n + 1 = {n + 1} entries (seq_lens has {n}), got {len(qs)}")
    pool = None if pool_indices is None else _int32_array(pool_indices, "pool_indices")
    if pool is not None and len(pool) != n:
        raise ValueError(f"pool_indices: expected n = {n} entries (one per request), got {len(pool)}")
    out = np.zeros((n, 3), np.int32)
    _lib.check(_lib.requests_from_lens(seq.ctypes.data, None if qs is None else qs.ctypes.data,
                                       None if pool is None else pool.ctypes.data, n, out.ctypes.data),
               "c128_requests_from_lens")
    return out


def _int32_array(values: Any, name: str) -> Any:
    """values (a host tensor, array or sequence of integers) as a contiguous 1-D int32 NumPy array."""
    np = _numpy()
    if values is None or isinstance(values, (str, bytes, bool, int, float)):
        raise TypeError(f"{name}: expected a 1-D sequence or host array of integers, got {describe(values)}")
    if not isinstance(values, (list, tuple)):
        v = view(values, name)
        if not v.on_host:
            raise ValueError(f"{name}: on {_dev(v.device)}; requests_from_lens reads host memory (the device "
                             f"planners take device arrays: plan_*_device(seq_lens=...))")
    try:
        a = np.asarray(values)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: expected integers ({e})") from None
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        raise TypeError(f"{name}: expected integers, got {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {_fmt(a.shape)}")
    if a.size and (int(a.min()) < _INT32[0] or int(a.max()) > _INT32[1]):
        raise ValueError(f"{name}: values do not fit int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - numpy is present wherever tests run
        raise ImportError("c128: new plan arrays and list arguments need NumPy") from e
    return numpy


_np_dtypes: dict = {}


def _record_dtypes() -> dict:
    if not _np_dtypes:
        np = _numpy()
        _np_dtypes["DECODE_PLAN_DTYPE"] = np.dtype(
            [("seq_len", "<u4"), ("write_loc", "<i4"), ("read_page_0", "<i4"), ("read_page_1", "<i4")])
        _np_dtypes["COMPRESS_PLAN_DTYPE"] = np.dtype(
            [("seq_len", "<u4"), ("ragged_id", "<u2"), ("buffer_len", "<u2"), ("read_page_0", "<i4"),
             ("read_page_1", "<i4")])
        _np_dtypes["WRITE_PLAN_DTYPE"] = np.dtype([("ragged_id", "<u4"), ("write_loc", "<i4")])
        _np_dtypes["REQUEST_DTYPE"] = np.dtype([("pool_index", "<i4"), ("seq_len", "<i4"), ("extend_len", "<i4")])
    return _np_dtypes


def __getattr__(name: str) -> Any:
    """DECODE_PLAN_DTYPE, COMPRESS_PLAN_DTYPE, WRITE_PLAN_DTYPE, REQUEST_DTYPE: NumPy record
    dtypes of the plan and request layouts (created on first use: NumPy is optional)."""
    if name in ("DECODE_PLAN_DTYPE", "COMPRESS_PLAN_DTYPE", "WRITE_PLAN_DTYPE", "REQUEST_DTYPE"):
        return _record_dtypes()[name]
    raise AttributeError(f"module 'c128' has no attribute {name!r}")


def _new_records(n: int, dtype_name: str) -> Any:
    """A NumPy record array of n entries, aligned to the record size."""
    np = _numpy()
    dtype = _record_dtypes()[dtype_name]
    align = 16
    raw = np.empty(n * dtype.itemsize + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + n * dtype.itemsize].view(dtype)


def requests(pool_indices: Any, seq_lens: Any, extend_lens: Any = None) -> Any:
    """A request array (int32 [n, 3]: pool_index, seq_len, extend_len) from three sequences;
    extend_lens defaults to 1 each (a decode batch)."""
    np = _numpy()

    def column(values: Any, name: str) -> Any:
        try:
            return np.asarray(values, dtype=np.int64).reshape(-1)
        except OverflowError:
            raise ValueError(f"{name}: values do not fit int32") from None
        except (TypeError, ValueError) as e:
            raise TypeError(f"requests: expected three integer sequences ({e})") from e

    pool, seq = column(pool_indices, "pool_indices"), column(seq_lens, "seq_lens")
    ext = np.ones_like(seq) if extend_lens is None else column(extend_lens, "extend_lens")
    if not len(pool) == len(seq) == len(ext):
        raise ValueError(f"requests: pool_indices, seq_lens, extend_lens have lengths {len(pool)}, {len(seq)}, "
                         f"{len(ext)}")
    out = np.stack([pool, seq, ext], axis=1)
    for name, col in (("pool_indices", pool), ("seq_lens", seq), ("extend_lens", ext)):
        if len(col) and (col.min() < _INT32[0] or col.max() > _INT32[1]):
            raise ValueError(f"{name}: values do not fit int32")
    return np.ascontiguousarray(out, dtype=np.int32)


def _requests_view(reqs: Any, on_host: Optional[bool], stream: int) -> Tuple[View, Any, int]:
    """(view, the object to keep alive, count) of a request tensor; lists become NumPy arrays."""
    keep = reqs
    if isinstance(reqs, (list, tuple)):  # rows of (pool_index, seq_len, extend_len), range-checked by requests()
        np = _numpy()
        try:
            rows = np.asarray(reqs, dtype=np.int64).reshape(-1, 3)
        except OverflowError as e:
            raise ValueError(f"requests: values do not fit int32 ({e})") from e
        except (TypeError, ValueError) as e:
            raise TypeError(f"requests: expected [n, 3] integers (pool_index, seq_len, extend_len) ({e})") from e
        keep = requests(rows[:, 0], rows[:, 1], rows[:, 2])
    v = view(keep, "requests", stream)
    n = _records(v, "requests", REQUEST_BYTES, "request")
    if v.dtype not in ("i32", "u32", "void12"):
        raise TypeError(f"requests: expected int32 [n, 3] (pool_index, seq_len, extend_len), got {v.dtype}")
    _aligned(v, "requests", 4)
    if on_host is not None and v.on_host != on_host:
        raise ValueError("requests: the host planner reads host memory (plan_*_device takes device arrays)" if on_host
                         else "requests: on the host; the device planners take device arrays (or all host arrays)")
    return v, keep, n


def _plan_out(out: Any, name: str, n: int, record_bytes: int, what: str, on_host: Optional[bool],
              device: Optional[Tuple[str, int]], stream: int, need: str = "the batch") -> View:
    v = view(out, name, stream)
    rows = _records(v, name, record_bytes, what)
    if rows < n:
        raise ValueError(f"{name}: {rows} rows, {need} needs {n}")
    _aligned(v, name, record_bytes)
    _writable(v, name)
    if on_host is not None and v.on_host != on_host:
        raise ValueError(f"{name}: on {_dev(v.device)}; the host planner writes host memory")
    if device is not None and v.device != device:
        raise ValueError(f"{name}: on {_dev(v.device)}, requests on {_dev(device)}; one device per call")
    return v


def plan_decode(ring: Ring, requests: Any, out: Any = None) -> Any:
    """Plans a decode batch on the host (c128_plan_decode): one plan per request.

    Args:
        ring: the :class:`Ring`.
        requests: int32 [n, 3] (pool_index, seq_len, extend_len; extend_len ignored, seq_len 0 =
            padding row) in host memory, or a list of such triples.
        out: where to write the n plans (host, uint8 [>= n, 16], int32 [>= n, 4] or
            DECODE_PLAN_DTYPE); default: a new DECODE_PLAN_DTYPE array.

    Returns:
        out (or the new array). A refused batch raises :class:`Error` and leaves out untouched.
    """
    r, tables = _ring(ring, True)
    req, keep, n = _requests_view(requests, True, 0)
    if out is None:
        out = _new_records(n, "DECODE_PLAN_DTYPE")
    o = _plan_out(out, "out", n, DECODE_PLAN_BYTES, "decode plan", True, None, 0)
    _lib.check(_lib.plan_decode(byref(r), req.ptr, n, o.ptr), "c128_plan_decode")
    del keep, tables
    return out


class PrefillPlans(NamedTuple):
    """The prefill planner's output: the two plan arrays (``capacity`` rows each; padded with
    sentinels when asked) and how many plans of each it emitted. Launch
    ``compress[:num_compress]`` / ``write[:num_write]``, or the whole padded arrays."""

    compress: Any
    write: Any
    num_compress: int
    num_write: int


def plan_prefill(ring: Ring, requests: Any, *, verify: bool = False, capacity: Optional[int] = None,
                 pad_to_capacity: bool = False, compress: Any = None, write: Any = None) -> PrefillPlans:
    """Plans a prefill / extend / verify batch on the host (c128_plan_prefill).

    Args:
        ring: the :class:`Ring`.
        requests: int32 [n, 3] (pool_index, seq_len after the batch, extend_len) in host memory,
            or a list of such triples; {any, 0, 0} is an absent request.
        verify: a speculative verify batch (extend_len = drafts, root included).
        capacity: rows of each plan array; default: the given arrays' rows, else the batch's
            input rows (always enough) capped at 65536.
        pad_to_capacity: fill the arrays' tails with invalid sentinels (fixed-size launches).
        compress, write: where to write (host; uint8 [>= capacity, 16] / [>= capacity, 8],
            int32, or the record dtypes); default: new record arrays.
    """
    r, tables = _ring(ring, True)
    req, keep, n = _requests_view(requests, True, 0)
    if capacity is None:
        rows = []
        for name, arr in (("compress", compress), ("write", write)):
            if arr is not None:
                rows.append(_records(view(arr, name), name, COMPRESS_PLAN_BYTES if name == "compress"
                                     else WRITE_PLAN_BYTES, f"{name} plan"))
        if rows:
            capacity = min(rows)
        else:  # the batch's input rows: the extend_len column
            rows_total = 0
            if n > 0:
                table3 = (c_int32 * (3 * n)).from_address(req.ptr)
                rows_total = sum(max(table3[3 * k + 2], 0) for k in range(n))
            capacity = min(rows_total, MAX_PREFILL_ROWS)
    capacity = _int(capacity, "capacity", _INT64)
    allocate = 0 <= capacity <= MAX_PREFILL_ROWS  # the library refuses other capacities before writing
    if compress is None:
        compress = _new_records(capacity if allocate else 0, "COMPRESS_PLAN_DTYPE")
    if write is None:
        write = _new_records(capacity if allocate else 0, "WRITE_PLAN_DTYPE")
    need = capacity if allocate else 0
    c = _plan_out(compress, "compress", need, COMPRESS_PLAN_BYTES, "compress plan", True, None, 0, "capacity")
    w = _plan_out(write, "write", need, WRITE_PLAN_BYTES, "write plan", True, None, 0, "capacity")
    plans = _lib.PrefillPlans()
    plans.compress, plans.write, plans.capacity = c.ptr, w.ptr, capacity
    plans.pad_to_capacity = 1 if pad_to_capacity else 0
    _lib.check(_lib.plan_prefill(byref(r), req.ptr, n, 1 if verify else 0, byref(plans)), "c128_plan_prefill")
    del keep, tables
    return PrefillPlans(compress, write, plans.num_compress, plans.num_write)


def plan_workspace_size(num_requests: int) -> int:
    """Bytes of device-planner workspace for num_requests (0 for a count the planners refuse)."""
    return _lib.plan_workspace_size(_int(num_requests, "num_requests", _INT64))


def _engine_array(t: Any, name: str, n: Optional[int], stream: int) -> View:
    v = view(t, name, stream)
    if v.dtype not in ("i32", "u32"):
        raise TypeError(f"{name}: expected int32, got {v.dtype}")
    if len(v.shape) != 1 or (n is not None and v.shape[0] != n):
        want = f"({n},)" if n is not None else "(n,)"
        raise ValueError(f"{name}: expected a contiguous int32 tensor of shape {want}, got {_fmt(v.shape)}")
    _contiguous(v, name)
    _aligned(v, name, 4)
    return v


def _device_plan_common(ring: Ring, requests: Any, status: Any, workspace: Any, stream: Any, seq_lens: Any = None,
                        query_start: Any = None, pool_indices: Any = None, prefill: bool = False
                        ) -> Tuple[_lib.DevicePlanArgs, bool, int, tuple, Tuple[str, int]]:
    engine = seq_lens is not None or query_start is not None or pool_indices is not None
    if engine:  # an engine's own arrays in place of requests
        if requests is not None:
            raise ValueError("requests: pass requests or the engine's arrays (seq_lens, query_start, pool_indices), "
                             "not both")
        if seq_lens is None:
            raise TypeError("seq_lens: the engine's arrays need seq_lens (int32 [n])")
        first = seq_lens
        handle = _resolve_stream(stream, first)
        req = _engine_array(seq_lens, "seq_lens", None, handle)
        n = req.shape[0]
        engine_views = [("seq_lens", req)]
        if prefill:
            if query_start is None:
                raise TypeError("query_start: a prefill batch needs query_start (int32 [n + 1], cumulative rows)")
            engine_views.append(("query_start", _engine_array(query_start, "query_start", n + 1, handle)))
        if pool_indices is not None:
            engine_views.append(("pool_indices", _engine_array(pool_indices, "pool_indices", n, handle)))
        for name, v in engine_views[1:]:
            if v.device != req.device:
                raise ValueError(f"{name}: on {_dev(v.device)}, seq_lens on {_dev(req.device)}; one device per call")
        keep_req: Any = engine_views
    else:
        handle = _resolve_stream(stream, requests)
        req, keep_req, n = _requests_view(requests, None, handle)
    on_host = req.on_host
    if on_host:
        _host_stream(stream)
    r, tables = _ring(ring, on_host, handle)
    for name, table in tables:
        if name and table.device != req.device:
            raise ValueError(f"{name}: on {_dev(table.device)}, requests on {_dev(req.device)}")
    st = view(status, "status", handle)
    if st.dtype not in ("i32", "u32") or st.nbytes < 4:
        raise ValueError(f"status: expected an int32 tensor of at least 1 element, got {st.dtype} {_fmt(st.shape)}")
    ws = view(workspace, "workspace", handle)
    need = _lib.plan_workspace_size(n)
    if ws.nbytes < need:
        raise ValueError(f"workspace: {ws.nbytes} bytes, c128.plan_workspace_size({n}) = {need}")
    for v, name, align in ((st, "status", 4), (ws, "workspace", 8)):
        _contiguous(v, name)
        _aligned(v, name, align)
        _writable(v, name)
        if v.device != req.device:
            raise ValueError(f"{name}: on {_dev(v.device)}, requests on {_dev(req.device)}; one device per call")
    a = _lib.DevicePlanArgs()
    a.ring = r
    a.num_requests = n
    if engine:
        views = dict(keep_req)
        a.seq_lens = views["seq_lens"].ptr
        a.query_start = views["query_start"].ptr if "query_start" in views else None
        a.pool_indices = views["pool_indices"].ptr if "pool_indices" in views else None
    else:
        a.requests = req.ptr
    a.status, a.workspace = st.ptr, ws.ptr
    return a, on_host, handle, (keep_req, tables, req, st, ws), req.device


def _ring_kwargs(ring: Ring, stream: Any) -> dict:
    """The ring's fields as keyword arguments of torch.ops.c128.plan_*_device."""
    if stream is not None:
        raise ValueError("stream: a compiled call runs on PyTorch's current stream")
    kw = dict(state_pages=ring.state_pages, ring_tokens=ring.ring_tokens, speculative=bool(ring.speculative),
              page_table=ring.page_table, write_all=bool(ring.write_all), null_block=ring.null_block,
              rope_positions=ring.rope_positions)
    sl = ring.state_layout
    if sl is not None:
        kw.update(block_rows=sl.block_rows, block_table=sl.block_table, row_shift=sl.row_shift,
                  score_plane=sl.score_plane, score_block_table=sl.score_block_table,
                  score_biased=bool(sl.score_biased))
    return kw


def _output_rows(a: _lib.DevicePlanArgs, output_first: Any, output_index: Any, entries: int, n: int,
                 device: Tuple[str, int], handle: int) -> tuple:
    """output_first (int32 [n]) and output_index (int64 [entries]) into the planner's arguments: both or
    neither. Returns the views to keep alive."""
    if (output_first is None) != (output_index is None):
        raise ValueError("output_first, output_index: pass both (each window's output row) or neither")
    if output_first is None:
        return ()
    first = view(output_first, "output_first", handle)
    index = view(output_index, "output_index", handle)
    if first.dtype != "i32" or first.nbytes < 4 * n:
        raise ValueError(f"output_first: expected int32 [{n}], got {first.dtype} {_fmt(first.shape)}")
    if index.dtype != "i64" or index.nbytes < 8 * entries:
        raise ValueError(f"output_index: expected int64 [{entries}], got {index.dtype} {_fmt(index.shape)}")
    for v, name, align in ((first, "output_first", 4), (index, "output_index", 8)):
        _contiguous(v, name)
        _aligned(v, name, align)
        if v.device != device:
            raise ValueError(f"{name}: on {_dev(v.device)}, requests on {_dev(device)}; one device per call")
    _writable(index, "output_index")
    a.output_first, a.output_index = first.ptr, index.ptr
    return first, index


def plan_decode_device(ring: Ring, requests: Any, plans: Any, status: Any, workspace: Any, *, stream: Any = None,
                       pdl: bool = False, seq_lens: Any = None, pool_indices: Any = None, output_first: Any = None,
                       output_index: Any = None) -> None:
    """The decode planner on the device (c128_plan_decode_device), for CUDA graphs: reads the
    requests (int32 [n, 3]) from device memory, writes n plans into ``plans`` and the batch's
    c128_status into ``status`` (int32 [1]), using ``workspace`` (>= plan_workspace_size(n)
    bytes). Host arrays run the same code on the CPU (c128_plan_decode_device_host).

    An engine's own arrays may stand in for the requests (``requests=None``): ``seq_lens``
    int32 [n] and optionally ``pool_indices`` int32 [n] (default: request i is pool row i), on
    the same device. With ``output_first`` (int32 [n]) the planner also writes ``output_index``
    (int64 [n]) for the launch: output_first[b], -1 for padding rows and a refused batch.

    A bad batch is not an exception: its status goes to ``status`` and every plan becomes a
    padding row. Arguments the planner refuses raise :class:`Error` (and are written to status).
    """
    if _compiling():
        _ops().plan_decode_device(requests, plans, status, workspace, seq_lens=seq_lens, pool_indices=pool_indices,
                                  output_first=output_first, output_index=output_index, pdl=pdl,
                                  **_ring_kwargs(ring, stream))
        return
    a, on_host, handle, keep, device = _device_plan_common(ring, requests, status, workspace, stream, seq_lens, None,
                                                           pool_indices)
    first = requests if requests is not None else seq_lens
    p = _plan_out(plans, "plans", a.num_requests, DECODE_PLAN_BYTES, "decode plan", None, device, handle)
    a.decode = p.ptr
    outs = _output_rows(a, output_first, output_index, a.num_requests, a.num_requests, device, handle)
    a.pdl = 1 if pdl else 0
    if on_host:
        _lib.check(_lib.plan_decode_device_host(byref(a)), "c128_plan_decode_device_host")
    else:
        current_device_check(first, "requests" if requests is not None else "seq_lens")
        _lib.check(_lib.plan_decode_device(byref(a), handle), "c128_plan_decode_device")
    del keep, outs


def plan_prefill_device(ring: Ring, requests: Any, compress: Any, write: Any, counts: Any, status: Any,
                        workspace: Any, *, verify: bool = False, capacity: Optional[int] = None, stream: Any = None,
                        pdl: bool = False, seq_lens: Any = None, query_start: Any = None,
                        pool_indices: Any = None, output_first: Any = None, output_index: Any = None) -> None:
    """The prefill planner on the device (c128_plan_prefill_device): plans padded to
    ``capacity`` (default: the plan arrays' rows) with sentinels, num_compress and num_write in
    ``counts`` (int64 [2], or None), the batch's status in ``status``. Byte-identical to
    :func:`plan_prefill` with pad_to_capacity. Host arrays run it on the CPU.

    An engine's own arrays may stand in for the requests (``requests=None``): ``seq_lens``
    int32 [n] (lengths after the batch), ``query_start`` int32 [n + 1] (cumulative new rows:
    vLLM's query_start_loc, TensorRT-LLM's cu_seq_lens) and optionally ``pool_indices`` int32
    [n]; request i = (pool_indices[i] or i, seq_lens[i], query_start[i + 1] - query_start[i]), its new rows
    query_start[i] .. (query_start[0] may be past 0: every plan's row is then that much past the host planner's).

    ``output_first`` (int32 [n]) with ``output_index`` (int64 [capacity]): request i's j-th window goes to
    output row output_first[i] + j (TensorRT-LLM's cu_kv_comp), written to output_index[its input row] for
    the launch's ``output_index`` (only the windows' rows are written; every input row must be below
    capacity)."""
    if _compiling():
        _ops().plan_prefill_device(requests, compress, write, counts, status, workspace, verify=verify,
                                   capacity=-1 if capacity is None else capacity, seq_lens=seq_lens,
                                   query_start=query_start, pool_indices=pool_indices, output_first=output_first,
                                   output_index=output_index, pdl=pdl, **_ring_kwargs(ring, stream))
        return
    a, on_host, handle, keep, device = _device_plan_common(ring, requests, status, workspace, stream, seq_lens,
                                                           query_start, pool_indices, prefill=True)
    first = requests if requests is not None else seq_lens
    c_rows = _records(view(compress, "compress", handle), "compress", COMPRESS_PLAN_BYTES, "compress plan")
    w_rows = _records(view(write, "write", handle), "write", WRITE_PLAN_BYTES, "write plan")
    capacity = min(c_rows, w_rows) if capacity is None else _int(capacity, "capacity", _INT64)
    need = capacity if 0 <= capacity <= MAX_PREFILL_ROWS else 0
    c = _plan_out(compress, "compress", need, COMPRESS_PLAN_BYTES, "compress plan", None, device, handle, "capacity")
    w = _plan_out(write, "write", need, WRITE_PLAN_BYTES, "write plan", None, device, handle, "capacity")
    k = None
    if counts is not None:
        k = view(counts, "counts", handle)
        if k.dtype not in ("i64", "u64") or k.nbytes < 16:
            raise ValueError(f"counts: expected an int64 tensor of at least 2 elements, got {k.dtype} {_fmt(k.shape)}")
        _contiguous(k, "counts")
        _aligned(k, "counts", 8)
        _writable(k, "counts")
        if k.device != device:
            raise ValueError(f"counts: on {_dev(k.device)}, requests on {_dev(device)}; one device per call")
    a.compress, a.write, a.capacity = c.ptr, w.ptr, capacity
    a.counts = k.ptr if k is not None else None
    outs = _output_rows(a, output_first, output_index, max(capacity, 0), a.num_requests, device, handle)
    a.verify = 1 if verify else 0
    a.pdl = 1 if pdl else 0
    if on_host:
        _lib.check(_lib.plan_prefill_device_host(byref(a)), "c128_plan_prefill_device_host")
    else:
        current_device_check(first, "requests" if requests is not None else "seq_lens")
        _lib.check(_lib.plan_prefill_device(byref(a), handle), "c128_plan_prefill_device")
    del keep, outs


# ---- bf16 -------------------------------------------------------------------------------------------
def bf16_from_float(values: Any) -> Any:
    """float32 values -> bf16 bit patterns (NumPy uint16), rounded to nearest even as the
    library rounds (c128_bf16_from_float; NaN stays a quiet NaN)."""
    np = _numpy()
    u = _numbers(values, np.float32, "values").view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), rounded)


def bf16_to_float(bits: Any) -> Any:
    """bf16 bit patterns (uint16) -> float32 (exact)."""
    np = _numpy()
    return (_numbers(bits, np.uint16, "bits").astype(np.uint32) << np.uint32(16)).view(np.float32)


def _numbers(values: Any, dtype: Any, name: str) -> Any:
    """values as a contiguous NumPy array of dtype, or a TypeError / ValueError naming them."""
    np = _numpy()
    if values is None:
        raise TypeError(f"{name}: expected numbers, got None")
    try:
        return np.ascontiguousarray(values, dtype=dtype)
    except OverflowError as e:
        raise ValueError(f"{name}: values do not fit {np.dtype(dtype).name} ({e})") from None
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: expected numbers ({e})") from None


__version__: str = build_info().version

from . import sglang  # noqa: E402  (the drop-in needs the names above)
