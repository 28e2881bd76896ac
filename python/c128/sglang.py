"""SGLang drop-in: :func:`compress_forward` with the argument list and semantics of SGLang's
``compress_forward`` (python/sglang/jit_kernel/deepseek_v4) for compress ratio 128, not online.

An engine switches with one import::

    from c128.sglang import compress_forward

The plan bytes are the same: ``plan`` is what SGLang's planners return (``CompressorDecodePlan``
``(compress_ratio, plan_d)`` or ``CompressorPrefillPlan`` ``(compress_ratio, plan_c, plan_w,
pin_buffer)``, with ``is_decode``), or the :class:`DecodePlan` / :class:`PrefillPlan` tuples
here, which have the same fields.

What it accepts:

- ``kv_score_buffer``: [pages, 128, 2 * head_dim], float32 or bfloat16 (the state; written);
- ``kv_score_input``: [N, 2 * head_dim], float32 or bfloat16 (decode: N = batch = plan_d rows;
  prefill: the ragged tokens, N <= 65536);
- ``ape``: [128, head_dim] **float32 only**. SGLang's kernel takes ape in the input dtype; c128
  always reads it in f32 (DeepSeek keeps it in f32: rounding it to bf16 only loses bits). A
  bf16 ape is refused (TypeError naming ``ape``); convert it once at load time,
  ``ape.float()``, not per call;
- ``plan``: decode ``plan_d`` uint8 [batch, 16]; prefill ``plan_c`` uint8 [C, 16] and ``plan_w``
  uint8 [W, 8] (trimmed to their counts, or padded with sentinels for CUDA graphs); int32
  views of the same bytes ([n, 4], [n, 2]) are accepted too; on the device of the tensors;
- ``out``: [rows, head_dim], float32 or bfloat16, rows >= plan[1] rows; default (None): a new
  tensor of kv_score_input's dtype and shape (plan[1] rows, head_dim), as SGLang allocates it
  (PyTorch and NumPy only; pass ``out`` to keep the hot path free of allocations);
- ``shared_state_layout``: (rank, size, pages_per_rank), SGLang's SharedStateLayout;
- dtype combinations: every compiled instance (c128.instances(): head_dim 128, 256, 512 x f32 /
  bf16 for state, input and output);
- ``stream`` (c128's addition): default PyTorch's current stream, as SGLang launches.

What it refuses (ValueError naming the argument): ``compress_ratio`` 4 (the c4 compressor stays
with SGLang's kernel), ``is_online=True`` (SGLang's online c128 variant keeps a different state
and plan layout), a plan whose ``compress_ratio`` is not 128, and anything :func:`c128.decode` /
:func:`c128.prefill` refuse. Output rows the kernel does not write (decode rows of requests that
did not complete a window, prefill rows of sentinel plans) keep their contents, as in SGLang.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional, Tuple

from . import _INT32, _int, decode, prefill
from ._tensor import describe

__all__ = ["compress_forward", "DecodePlan", "PrefillPlan"]


class DecodePlan(NamedTuple):
    """SGLang's CompressorDecodePlan: plan_d uint8 [batch, 16]."""

    compress_ratio: int
    plan_d: Any

    @property
    def is_decode(self) -> bool:
        return True


class PrefillPlan(NamedTuple):
    """SGLang's CompressorPrefillPlan: plan_c uint8 [C, 16], plan_w uint8 [W, 8]."""

    compress_ratio: int
    plan_c: Any
    plan_w: Any
    pin_buffer: Any = None

    @property
    def is_decode(self) -> bool:
        return False


def _rows(t: Any) -> int:
    shape = getattr(t, "shape", None)
    if not shape:
        raise TypeError(f"plan: plan[1] is {describe(t)}, not a plan tensor")
    return int(shape[0])


def _new_out(like: Any, rows: int, head_dim: int) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return like.new_empty((rows, head_dim))
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(like, numpy.ndarray):
        return numpy.empty((rows, head_dim), dtype=like.dtype)
    raise TypeError(f"out: pass out= for {describe(like)} inputs (a new output is made for PyTorch and NumPy only)")


def compress_forward(kv_score_buffer: Any, kv_score_input: Any, ape: Any, plan: Any, head_dim: int,
                     compress_ratio: int, out: Optional[Any] = None,
                     shared_state_layout: Tuple[int, int, int] = (0, 1, 0), *, is_online: bool = False,
                     stream: Any = None) -> Any:
    """SGLang's compress_forward for compress_ratio 128 (not online), on c128's kernels.

    Decode plans (``plan.is_decode``) run :func:`c128.decode`; prefill plans run
    :func:`c128.prefill` (compress, then write). Returns ``out``. See the module docstring for
    the tensors and dtypes it accepts and what it refuses.
    """
    head_dim = _int(head_dim, "head_dim", _INT32)
    if head_dim <= 0:
        raise ValueError(f"head_dim: expected a positive head_dim, got {head_dim}")
    if isinstance(compress_ratio, bool) or not isinstance(compress_ratio, int) or compress_ratio != 128:
        raise ValueError(f"compress_ratio: c128 implements ratio 128 only, got {compress_ratio!r} (ratio 4 stays "
                         f"with SGLang's kernel)")
    if is_online:
        raise ValueError("is_online: c128 implements SGLang's non-online c128 (state [pages, 128, 2 * head_dim]); "
                         "the online variant stays with SGLang's kernel")
    is_decode = getattr(plan, "is_decode", None)
    if not isinstance(is_decode, bool) or not hasattr(plan, "__getitem__"):
        raise TypeError(f"plan: expected SGLang's CompressorDecodePlan / CompressorPrefillPlan (or "
                        f"c128.sglang.DecodePlan / PrefillPlan), got {describe(plan)}")
    ratio = getattr(plan, "compress_ratio", 128)
    if not isinstance(ratio, int) or ratio != 128:
        raise ValueError(f"plan: its compress_ratio is {ratio!r}, this call's 128")
    shape = getattr(kv_score_buffer, "shape", None)
    if shape is not None and len(shape) == 3 and shape[2] != 2 * head_dim:
        raise ValueError(f"head_dim: {head_dim!r}, but kv_score_buffer rows hold {shape[2]} = 2 * {shape[2] / 2:g}")
    if out is None:
        out = _new_out(kv_score_input, _rows(plan[1]), head_dim)
    try:
        if is_decode:
            decode(kv_score_buffer, kv_score_input, ape, out, plan[1], stream=stream, layout=shared_state_layout)
        else:
            prefill(kv_score_buffer, kv_score_input, ape, out, plan[1], plan[2], stream=stream,
                    layout=shared_state_layout)
    except (TypeError, ValueError) as e:
        raise type(e)(_sglang_names(str(e))) from None
    return out


_NAMES = [("state", "kv_score_buffer"), ("input", "kv_score_input"), ("output", "out"),
          ("compress_plans", "plan.plan_c"), ("write_plans", "plan.plan_w"), ("plans", "plan.plan_d"),
          ("layout", "shared_state_layout")]


def _sglang_names(message: str) -> str:
    """c128's argument names in a refusal -> SGLang's (the leading 'name:' and 'a, b, c:' lists)."""
    head, sep, rest = message.partition(": ")
    if not sep:
        return message
    names = []
    for part in head.split(", "):
        base, dot, field = part.partition(".")
        for c, s in _NAMES:
            if base == c:
                base = s
                break
        names.append(base + dot + field)
    return ", ".join(names) + ": " + rest.replace("but state is", "but kv_score_buffer is")
