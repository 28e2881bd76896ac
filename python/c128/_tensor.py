"""Tensors from any framework, as (pointer, shape, dtype, device): PyTorch tensors through their
own attributes (the facts DLPack would carry, without a capsule per call), anything else through
DLPack (``__dlpack__`` / ``__dlpack_device__``), then ``__cuda_array_interface__``, then
``__array_interface__``. Streams, as integer handles.

Nothing here copies, converts or synchronises. DLPack capsules are read in place and never
renamed, so the producer's capsule destructor calls the deleter when the capsule is dropped (no
leak, no double free); the caller keeps the tensor itself alive while the kernel runs, as with
any asynchronous CUDA call.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from ctypes import c_char_p, c_void_p
from typing import Any, Optional, Tuple

CPU = "cpu"
CUDA = "cuda"

# DLPack device types (dlpack.h DLDeviceType): host-accessible ones run the host runner.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_DEVICE_KIND = {_DL_CPU: CPU, _DL_CUDA_HOST: CPU, _DL_CUDA: CUDA, _DL_CUDA_MANAGED: CUDA}
_DL_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
# (type code, bits) -> name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool.
_DL_DTYPES = {
    (2, 32): "f32", (2, 16): "f16", (2, 64): "f64", (4, 16): "bf16", (5, 64): "c64",
    (0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64",
    (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64", (6, 8): "bool",
}
# __array_interface__ / __cuda_array_interface__ typestr kind+size -> name.
_TYPESTR = {
    "f4": "f32", "f2": "f16", "f8": "f64", "c8": "c64", "i1": "i8", "i2": "i16", "i4": "i32", "i8": "i64",
    "u1": "u8", "u2": "u16", "u4": "u32", "u8": "u64", "b1": "bool",
}
ITEMSIZE = {"f32": 4, "f16": 2, "f64": 8, "bf16": 2, "c64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
            "u8": 1, "u16": 2, "u32": 4, "u64": 8, "bool": 1}


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, c_char_p]


class View:
    """What a call needs of a tensor. ``dtype`` is a short name ('f32', 'bf16', 'u8', ...,
    'void16' for a 16-byte record); ``device`` is ('cpu', 0) for host-accessible memory
    (including pinned host memory) or ('cuda', index)."""

    __slots__ = ("ptr", "shape", "dtype", "itemsize", "device", "contiguous", "readonly", "source", "keep")

    def __init__(self, ptr: int, shape: Tuple[int, ...], dtype: str, itemsize: int, device: Tuple[str, int],
                 contiguous: bool, readonly: bool, source: str, keep: Any) -> None:
        self.ptr = ptr
        self.shape = shape
        self.dtype = dtype
        self.itemsize = itemsize
        self.device = device
        self.contiguous = contiguous
        self.readonly = readonly
        self.source = source  # 'torch', 'dlpack', 'cuda_array_interface', 'array_interface'
        self.keep = keep  # what must stay alive while the view is used (a capsule)

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for s in self.shape:
            n *= s
        return n

    @property
    def on_host(self) -> bool:
        return self.device[0] == CPU


def describe(obj: Any) -> str:
    """A short name of obj's type for messages."""
    if obj is None:
        return "None"
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# ---- PyTorch: the tensor's own attributes ---------------------------------------------------------
_torch_dtypes: dict = {}


def _torch_dtype_table(torch: Any) -> dict:
    if not _torch_dtypes:
        for attr, name in [("float32", "f32"), ("float16", "f16"), ("float64", "f64"), ("bfloat16", "bf16"),
                           ("complex64", "c64"),
                           ("int8", "i8"), ("int16", "i16"), ("int32", "i32"), ("int64", "i64"), ("uint8", "u8"),
                           ("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"), ("bool", "bool")]:
            dt = getattr(torch, attr, None)
            if dt is not None:
                _torch_dtypes[dt] = name
    return _torch_dtypes


def _from_torch(t: Any, name: str, torch: Any) -> View:
    dtype = (_torch_dtypes or _torch_dtype_table(torch)).get(t.dtype)
    if dtype is None:
        raise TypeError(f"{name}: unsupported dtype {t.dtype}")
    if t.is_cuda:
        device = (CUDA, t.get_device())
    elif t.device.type == "cpu":
        device = (CPU, 0)
    else:
        raise ValueError(f"{name}: tensors on {t.device.type} are not supported (cpu or cuda)")
    return View(t.data_ptr(), tuple(t.shape), dtype, ITEMSIZE[dtype], device, t.is_contiguous(), False, "torch", None)


# ---- DLPack ----------------------------------------------------------------------------------------
def _compact(shape: Tuple[int, ...], strides: Optional[Tuple[int, ...]]) -> bool:
    """Row-major and dense; strides in elements. Extents of 1 may have any stride."""
    if strides is None or 0 in shape:
        return True
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _dlpack_stream(device_type: int, stream: int) -> Optional[int]:
    """The stream argument of __dlpack__: None on the host; on CUDA the consumer's stream, where
    DLPack spells the legacy default stream 1 (0 is reserved)."""
    if device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        return None
    return 1 if stream == 0 else stream


# DLTensor: data, device (type, id), ndim, dtype (code, bits, lanes), shape, strides, byte_offset;
# DLManagedTensorVersioned puts version (major, minor), manager_ctx, deleter, flags before it.
_DLTENSOR = struct.Struct("<QiiiBBHQQQ")
_VERSIONED_HEAD = struct.Struct("<IIQQQ")


def _from_dlpack(obj: Any, name: str, stream: int) -> View:
    device_type, _ = obj.__dlpack_device__()
    s = _dlpack_stream(int(device_type), stream)
    try:
        capsule = obj.__dlpack__(stream=s, max_version=(1, 1)) if s is not None else obj.__dlpack__(max_version=(1, 1))
    except TypeError:  # a producer older than DLPack 1.0 (no max_version)
        capsule = obj.__dlpack__(stream=s) if s is not None else obj.__dlpack__()
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"{name}: __dlpack__ returned {describe(capsule)}, not a capsule")
    flags = 0
    try:  # the name tells the layout; a producer that took max_version returns a versioned capsule
        address = _capsule_pointer(capsule, b"dltensor_versioned")
        raw = ctypes.string_at(address, _VERSIONED_HEAD.size + _DLTENSOR.size)
        major, minor, _, _, flags = _VERSIONED_HEAD.unpack_from(raw)
        if major != 1:
            raise TypeError(f"{name}: DLPack {major}.{minor} is not supported (1.x)")
        fields = _DLTENSOR.unpack_from(raw, _VERSIONED_HEAD.size)
    except ValueError:
        try:
            address = _capsule_pointer(capsule, b"dltensor")
        except ValueError:
            raise TypeError(f"{name}: __dlpack__ returned a capsule named {_capsule_name(capsule)!r} "
                            f"(consumed already?)") from None
        fields = _DLTENSOR.unpack(ctypes.string_at(address, _DLTENSOR.size))
    data, dev_type, dev_id, ndim, code, bits, lanes, shape_ptr, strides_ptr, offset = fields
    if not ndim:
        shape, strides = (), None
    elif strides_ptr == shape_ptr + 8 * ndim:  # one read when the two arrays are adjacent
        both = struct.unpack(f"<{2 * ndim}q", ctypes.string_at(shape_ptr, 16 * ndim))
        shape, strides = both[:ndim], both[ndim:]
    else:
        shape = struct.unpack(f"<{ndim}q", ctypes.string_at(shape_ptr, 8 * ndim))
        strides = struct.unpack(f"<{ndim}q", ctypes.string_at(strides_ptr, 8 * ndim)) if strides_ptr else None
    dtype = _DL_DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        raise TypeError(f"{name}: unsupported DLPack dtype (code {code}, {bits} bits, {lanes} lanes)")
    kind = _DL_DEVICE_KIND.get(dev_type)  # the capsule's own device is authoritative
    if kind is None:
        raise ValueError(f"{name}: DLPack device type {dev_type} is not supported (CPU, CUDA, CUDA host/managed)")
    return View(data + offset, shape, dtype, ITEMSIZE[dtype], (kind, dev_id if kind == CUDA else 0),
                _compact(shape, strides), bool(flags & _DL_READ_ONLY), "dlpack", capsule)


# ---- array interfaces ------------------------------------------------------------------------------
def _interface_dtype(obj: Any, name: str, typestr: str) -> Tuple[str, int]:
    if typestr[0] == ">":
        raise TypeError(f"{name}: big-endian data ({typestr}) is not supported")
    code = typestr[1:]
    if code[0] == "V":
        size = int(code[1:])
        if size == 2 and getattr(getattr(obj, "dtype", None), "name", "") == "bfloat16":  # ml_dtypes
            return "bf16", 2
        return f"void{size}", size
    dtype = _TYPESTR.get(code)
    if dtype is None:
        raise TypeError(f"{name}: unsupported dtype {typestr}")
    return dtype, ITEMSIZE[dtype]


def _from_interface(obj: Any, name: str, iface: dict, device: Tuple[str, int], source: str, stream: int) -> View:
    dtype, itemsize = _interface_dtype(obj, name, iface["typestr"])
    shape = tuple(int(s) for s in iface["shape"])
    data = iface.get("data")
    if data is None:
        raise TypeError(f"{name}: {source} without a data pointer (buffer-protocol arrays are not supported)")
    ptr, readonly = int(data[0]), bool(data[1])
    strides = iface.get("strides")
    contiguous = strides is None or _compact(shape, tuple(s // itemsize if s % itemsize == 0 else -1 for s in strides))
    if source == "cuda_array_interface":
        producer = iface.get("stream")
        same = producer is None or producer == stream or {producer, stream} <= {0, 1}
        if not same:
            raise ValueError(f"{name}: its __cuda_array_interface__ is ordered on stream {producer:#x}, the launch on "
                             f"{stream:#x}: pass stream={producer:#x} or synchronise the two first")
    return View(ptr, shape, dtype, itemsize, device, contiguous, readonly, source, None)


def view(obj: Any, name: str, stream: int = 0) -> View:
    """The View of obj, for argument ``name``. ``stream`` is the launch stream (passed to
    ``__dlpack__`` for CUDA data so that the producer orders its work before ours)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name, torch)
    if obj is None or isinstance(obj, (int, float, str, bytes, bool)):
        raise TypeError(f"{name}: expected a tensor (an object with __dlpack__, __cuda_array_interface__ or "
                        f"__array_interface__), got {describe(obj)}")
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            return _from_dlpack(obj, name, stream)
        except BufferError:  # e.g. NumPy record arrays: DLPack has no such dtype
            pass
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_interface(obj, name, iface, (CUDA, _cai_device(obj)), "cuda_array_interface", stream)
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return _from_interface(obj, name, iface, (CPU, 0), "array_interface", stream)
    raise TypeError(f"{name}: expected a tensor (an object with __dlpack__, __cuda_array_interface__ or "
                    f"__array_interface__), got {describe(obj)}")


def _cai_device(obj: Any) -> int:
    dev = getattr(obj, "device", None)
    ident = getattr(dev, "id", None)
    return int(ident) if isinstance(ident, int) else 0


# ---- streams -----------------------------------------------------------------------------------------
_torch_raw: list = []  # [torch._C._cuda_getCurrentRawStream or None, torch._C._cuda_getDevice or None]


def _torch_raw_functions(torch: Any) -> list:
    if not _torch_raw:
        _torch_raw.extend([getattr(torch._C, "_cuda_getCurrentRawStream", None),
                           getattr(torch._C, "_cuda_getDevice", None)])
    return _torch_raw


def current_stream(obj: Any) -> int:
    """The stream a call on obj uses when none is given: PyTorch's current stream for a CUDA
    tensor, CuPy's for a CuPy array, otherwise 0 (the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if not obj.is_cuda:
            return 0
        raw = (_torch_raw or _torch_raw_functions(torch))[0]
        index = obj.get_device()
        return int(raw(index)) if raw is not None else int(torch.cuda.current_stream(index).cuda_stream)
    if type(obj).__module__.startswith("cupy"):
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def current_stream_function(obj: Any) -> Any:
    """A function of no arguments giving current_stream(obj), quick for a PyTorch CUDA tensor
    (the bound launches call it at each call, so that a graph capture sees its own stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
        raw = (_torch_raw or _torch_raw_functions(torch))[0]
        if raw is not None:
            index = obj.get_device()
            return lambda: raw(index)
    return lambda: current_stream(obj)


def stream_handle(stream: Any, name: str = "stream") -> int:
    """An integer cudaStream_t from an int, an object with ``__cuda_stream__`` (the CUDA Python
    protocol), ``cuda_stream`` (PyTorch) or ``ptr`` (CuPy)."""
    if isinstance(stream, bool):
        raise TypeError(f"{name}: expected an integer handle or a stream object, got bool")
    if isinstance(stream, int):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    elif hasattr(stream, "ptr"):
        handle = stream.ptr
    else:
        raise TypeError(f"{name}: expected an integer handle or an object with cuda_stream / ptr, got "
                        f"{describe(stream)}")
    if not isinstance(handle, int) or isinstance(handle, bool):
        raise TypeError(f"{name}: the stream handle is {describe(handle)}, not an integer")
    if not 0 <= handle < 1 << 64:
        raise ValueError(f"{name}: handle {handle} is not a pointer value")
    return handle


def current_device_check(obj: Any, name: str) -> None:
    """A PyTorch CUDA tensor must be on the current device (the launches use it)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor) or not obj.is_cuda:
        return
    index = obj.get_device()
    get = (_torch_raw or _torch_raw_functions(torch))[1]
    current = get() if get is not None else torch.cuda.current_device()
    if current != index:
        raise ValueError(f"{name}: the tensors are on cuda:{index} but the current device is cuda:{current}; "
                         f"call under torch.cuda.device({index})")
