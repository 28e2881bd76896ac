"""The C ABI of libc128.so through ctypes: the structures of c128.cuh field for field, the
prototypes of every C128_API function the package calls, the library's statuses.

Which library is loaded: $C128_LIBRARY when set (a libc128.so from a Meson build directory,
build/python/libc128.so), otherwise the libc128.so installed beside this file.
"""

from __future__ import annotations

import ctypes
import enum
import os
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_uint16, c_void_p
from typing import Dict, Optional

LIBRARY_ENV = "C128_LIBRARY"


def library_path() -> str:
    """The path of the libc128.so this package loads ($C128_LIBRARY, else the installed one)."""
    path = os.environ.get(LIBRARY_ENV)
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libc128.so")


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"c128: cannot load {path} ({e}). Install the package (pip install .) or set "
            f"{LIBRARY_ENV} to a libc128.so (a Meson build directory's python/libc128.so)"
        ) from e


lib = _load()


# ---- structures (c128.cuh >>api, >>checker-api, >>planner-api); enums are int32 ----------------
class SharedLayout(Structure):
    _fields_ = [("rank", c_int32), ("size", c_int32), ("pages_per_rank", c_int32)]


class StateLayout(Structure):
    _fields_ = [
        ("block_rows", c_int32),
        ("score_biased", c_int32),
        ("score_plane", c_void_p),
        ("block_table", c_void_p),
        ("score_block_table", c_void_p),
        ("table_rows", c_int64),
        ("table_stride", c_int64),
        ("row_shift", c_int32),
    ]


class EntryArgs(Structure):
    _fields_ = [
        ("kind", c_int32),
        ("norm_weight", c_void_p),
        ("norm_eps", c_float),
        ("rope_table", c_void_p),
        ("rope_positions", c_int64),
        ("cache", c_void_p),
        ("cache_pages", c_int64),
        ("entries_per_page", c_int32),
        ("page_bytes", c_int64),
        ("workspace", c_void_p),
        ("workspace_bytes", c_int64),
    ]


class DecodeArgs(Structure):
    _fields_ = [
        ("head_dim", c_int32),
        ("state_dtype", c_int32),
        ("input_dtype", c_int32),
        ("output_dtype", c_int32),
        ("state", c_void_p),
        ("state_pages", c_int64),
        ("input", c_void_p),
        ("ape", c_void_p),
        ("output", c_void_p),
        ("output_rows", c_int64),
        ("plans", c_void_p),
        ("batch", c_int64),
        ("layout", SharedLayout),
        ("pdl", c_int32),
        ("requests_per_block", c_int32),
        ("state_layout", StateLayout),
        ("output_index", c_void_p),
        ("entry", EntryArgs),
    ]


class PrefillArgs(Structure):  # like DecodeArgs, each field mirrors c128_prefill_args in order
    _fields_ = [
        ("head_dim", c_int32),
        ("state_dtype", c_int32),
        ("input_dtype", c_int32),
        ("output_dtype", c_int32),
        ("state", c_void_p),
        ("state_pages", c_int64),
        ("input", c_void_p),
        ("input_rows", c_int64),
        ("ape", c_void_p),
        ("output", c_void_p),
        ("output_rows", c_int64),
        ("compress_plans", c_void_p),
        ("num_compress", c_int64),
        ("write_plans", c_void_p),
        ("num_write", c_int64),
        ("layout", SharedLayout),
        ("pdl", c_int32),
        ("windows_per_block", c_int32),
        ("state_layout", StateLayout),
        ("output_index", c_void_p),
        ("entry", EntryArgs),
        ("write_slots", c_void_p),
        ("write_positions", c_void_p),
    ]


class HostOptions(Structure):
    _fields_ = [
        ("check_races", c_int32),
        ("reverse_blocks", c_int32),
        ("message", c_void_p),
        ("message_size", c_size_t),
        ("checker_limit_bytes", c_size_t),
    ]


class InstanceInfo(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("head_dim", c_int32),
        ("state_dtype", c_int32),
        ("input_dtype", c_int32),
        ("output_dtype", c_int32),
        ("num_split", c_int32),
        ("row_elems", c_int64),
        ("page_elems", c_int64),
        ("decode", c_void_p),
        ("prefill", c_void_p),
        ("decode_host", c_void_p),
        ("prefill_host", c_void_p),
    ]


class BuildInfo(Structure):
    _fields_ = [
        ("version", c_char_p),
        ("version_number", c_int32),
        ("math", c_int32),
        ("epilogue", c_int32),
        ("instance_count", c_int32),
    ]


class PlanReport(Structure):
    _fields_ = [("index", c_int64), ("kind", c_int32), ("message", c_void_p), ("message_size", c_size_t)]


class Ring(Structure):
    _fields_ = [
        ("ring_tokens", c_int32),
        ("speculative", c_int32),
        ("page_table", c_void_p),
        ("page_table_stride", c_int64),
        ("num_pool", c_int64),
        ("state_pages", c_int64),
        ("write_all", c_int32),
        ("state_layout", StateLayout),
        ("has_null_block", c_int32),
        ("null_block", c_int32),
        ("rope_positions", c_int64),
    ]


class PrefillPlans(Structure):
    _fields_ = [
        ("compress", c_void_p),
        ("write", c_void_p),
        ("capacity", c_int64),
        ("pad_to_capacity", c_int32),
        ("num_compress", c_int64),
        ("num_write", c_int64),
    ]


class DevicePlanArgs(Structure):
    _fields_ = [
        ("ring", Ring),
        ("requests", c_void_p),
        ("num_requests", c_int64),
        ("verify", c_int32),
        ("compress", c_void_p),
        ("write", c_void_p),
        ("capacity", c_int64),
        ("decode", c_void_p),
        ("counts", c_void_p),
        ("status", c_void_p),
        ("workspace", c_void_p),
        ("pdl", c_int32),
        ("seq_lens", c_void_p),
        ("query_start", c_void_p),
        ("pool_indices", c_void_p),
        ("output_first", c_void_p),
        ("output_index", c_void_p),
    ]


# Field offsets the tests compare with a C compiler's offsetof (python/tests/test_library.py).
STRUCTURES = {
    "c128_shared_layout": SharedLayout,
    "c128_state_layout": StateLayout,
    "c128_entry_args": EntryArgs,
    "c128_decode_args": DecodeArgs,
    "c128_prefill_args": PrefillArgs,
    "c128_host_options": HostOptions,
    "c128_instance_info": InstanceInfo,
    "c128_build_info": BuildInfo,
    "c128_plan_report": PlanReport,
    "c128_ring": Ring,
    "c128_prefill_plans": PrefillPlans,
    "c128_device_plan_args": DevicePlanArgs,
}


# ---- prototypes ---------------------------------------------------------------------------------
def _proto(name: str, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


status_string = _proto("c128_status_string", c_char_p, c_int)
instance_count = _proto("c128_instance_count", c_int)
instance_info_get = _proto("c128_instance_info_get", c_int, c_int, POINTER(InstanceInfo))
find_instance = _proto("c128_find_instance", c_int, c_int, c_int, c_int, c_int)
build_info_get = _proto("c128_build_info_get", c_int, POINTER(BuildInfo))
decode_group_size = _proto("c128_decode_group_size", c_int32, c_int64, c_int32, c_int32)
prefill_group_size = _proto("c128_prefill_group_size", c_int32, c_int64, c_int32, c_int32)
entry_workspace_bytes = _proto("c128_entry_workspace_bytes", c_int64, c_int64, c_int32)
decode = _proto("c128_decode", c_int, POINTER(DecodeArgs), c_void_p)
prefill = _proto("c128_prefill", c_int, POINTER(PrefillArgs), c_void_p)
decode_host = _proto("c128_decode_host", c_int, POINTER(DecodeArgs), POINTER(HostOptions))
prefill_host = _proto("c128_prefill_host", c_int, POINTER(PrefillArgs), POINTER(HostOptions))
bf16_from_float = _proto("c128_bf16_from_float", c_uint16, c_float)
bf16_to_float = _proto("c128_bf16_to_float", c_float, c_uint16)
check_decode_plans = _proto("c128_check_decode_plans", c_int, POINTER(DecodeArgs), POINTER(PlanReport))
check_prefill_plans = _proto("c128_check_prefill_plans", c_int, POINTER(PrefillArgs), POINTER(PlanReport))
plan_prefill = _proto("c128_plan_prefill", c_int, POINTER(Ring), c_void_p, c_int64, c_int32, POINTER(PrefillPlans))
plan_decode = _proto("c128_plan_decode", c_int, POINTER(Ring), c_void_p, c_int64, c_void_p)
plan_workspace_size = _proto("c128_plan_workspace_size", c_size_t, c_int64)
requests_from_lens = _proto("c128_requests_from_lens", c_int, c_void_p, c_void_p, c_void_p, c_int64, c_void_p)
plan_prefill_device = _proto("c128_plan_prefill_device", c_int, POINTER(DevicePlanArgs), c_void_p)
plan_decode_device = _proto("c128_plan_decode_device", c_int, POINTER(DevicePlanArgs), c_void_p)
plan_prefill_device_host = _proto("c128_plan_prefill_device_host", c_int, POINTER(DevicePlanArgs))
plan_decode_device_host = _proto("c128_plan_decode_device_host", c_int, POINTER(DevicePlanArgs))


# ---- statuses -------------------------------------------------------------------------------------
def _status_table() -> Dict[int, str]:
    """value -> "C128_NAME: message", from c128_status_string (values are dense from 0)."""
    table: Dict[int, str] = {}
    value = 0
    while True:
        text = status_string(value).decode()
        if text.startswith("unknown"):
            return table
        table[value] = text
        value += 1


STATUS_TEXT = _status_table()
#: The library's c128_status values, by their C names without the C128_ prefix
#: (Status.SUCCESS, Status.ERROR_ALIASED, ...).
Status = enum.IntEnum(  # type: ignore[misc]
    "Status", [(text.split(":", 1)[0][len("C128_"):], value) for value, text in STATUS_TEXT.items()]
)
Status.__doc__ = "c128_status values (C names without the C128_ prefix)."
Status.__module__ = "c128"


class Error(RuntimeError):
    """A library call returned a c128_status other than C128_SUCCESS.

    Attributes: ``status`` (int, a :class:`Status` value where known), ``name`` (the C name,
    e.g. ``"C128_ERROR_ALIASED"``), ``message`` (``c128_status_string``'s text), ``function``
    (the C entry point) and ``detail`` (the plan checker's or race checker's message, if any).
    """

    def __init__(self, status: int, function: str, detail: Optional[str] = None) -> None:
        text = status_string(int(status)).decode()
        self.status = Status(status) if status in STATUS_TEXT else int(status)
        self.name, _, self.message = text.partition(": ")
        self.function = function
        self.detail = detail
        super().__init__(f"{function}: {text}" + (f" ({detail})" if detail else ""))


Error.__module__ = "c128"


def check(status: int, function: str, detail: Optional[str] = None) -> None:
    """Raise :class:`Error` unless status is C128_SUCCESS."""
    if status != 0:
        raise Error(status, function, detail)
