"""Tensors from any framework: DLPack (versioned and legacy capsules), __cuda_array_interface__,
__array_interface__; capsules are released (no leak, no double free); stream arguments."""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest

import c128
from c128 import _tensor
from cases import DECODE_FILLS, decode_case


class DLPackOnly:
    """Exposes nothing but the DLPack protocol of a NumPy array; legacy=True refuses max_version
    (a producer older than DLPack 1.0), so the consumer falls back to an unversioned capsule."""

    def __init__(self, a: np.ndarray, legacy: bool = False) -> None:
        self._a, self._legacy = a, legacy
        self.calls = []

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        if self._legacy and "max_version" in kwargs:
            raise TypeError("max_version")
        return self._a.__dlpack__(**kwargs)


class InterfaceOnly:
    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.__array_interface__ = a.__array_interface__


@pytest.mark.parametrize("wrap", ["dlpack", "dlpack_legacy", "array_interface"])
def test_protocols_give_the_same_bytes(wrap: str, checked) -> None:
    inst = c128.find_instance(128, "bf16", "f32", "bf16")
    ref = decode_case(inst, np.random.default_rng(11), 1.0, DECODE_FILLS)
    c128.decode(ref.state, ref.input, ref.ape, ref.output, ref.plans[0])
    case = decode_case(inst, np.random.default_rng(11), 1.0, DECODE_FILLS)
    make = {"dlpack": DLPackOnly, "dlpack_legacy": lambda a: DLPackOnly(a, legacy=True),
            "array_interface": InterfaceOnly}[wrap]
    plans = case.plans[0].view(np.uint8).reshape(-1, 16)  # records have no DLPack dtype
    args = [make(a) for a in (case.state, case.input, case.ape, case.output, plans)]
    c128.decode(*args)
    assert case.state.tobytes() == ref.state.tobytes() and case.output.tobytes() == ref.output.tobytes()
    if wrap != "array_interface":
        assert all("stream" not in kw for a in args for kw in a.calls)  # host data: no stream
    if wrap == "array_interface":
        checked("interop: DLPack (versioned, legacy) and __array_interface__ inputs give the same bytes")


def test_record_arrays_fall_back_to_the_array_interface() -> None:
    plans = c128.plan_decode(c128.Ring(4), [(0, 128, 1)])
    v = _tensor.view(plans, "plans")
    assert (v.source, v.dtype, v.shape) == ("array_interface", "void16", (1,))
    v = _tensor.view(np.zeros((3, 4), np.int32), "x")
    assert (v.source, v.dtype, v.shape, v.device) == ("dlpack", "i32", (3, 4), ("cpu", 0))


def test_capsules_are_released() -> None:
    """Capsules are read in place and dropped: the producer's deleter runs, nothing leaks."""
    a = np.zeros((64, 16), np.uint8)
    before = sys.getrefcount(a)
    for _ in range(200):
        _tensor.view(a, "a")
    gc.collect()
    assert sys.getrefcount(a) == before
    inst = c128.find_instance(128, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(1), 1.0, DECODE_FILLS)
    counts = [sys.getrefcount(t) for t in (case.state, case.input, case.ape, case.output)]
    for _ in range(50):
        c128.decode(case.state, case.input, case.ape, case.output, case.plans[0])
    gc.collect()
    assert [sys.getrefcount(t) for t in (case.state, case.input, case.ape, case.output)] == counts
    probe = np.zeros(16, np.float32)
    ref = weakref.ref(probe)
    _tensor.view(probe, "probe")
    del probe
    gc.collect()
    assert ref() is None


def test_readonly_flag_of_versioned_capsules() -> None:
    a = np.zeros((4, 256), np.float32)
    a.setflags(write=False)
    assert _tensor.view(a, "a").readonly


def test_dlpack_stream_argument() -> None:
    """For CUDA data the consumer passes its stream (the legacy default stream as 1, as DLPack spells
    it); the producer's capsule, not __dlpack_device__, decides the device."""

    class FakeCudaProducer(DLPackOnly):
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None, **kwargs):
            self.calls.append(stream)
            return self._a.__dlpack__(**kwargs)

    for stream, passed in ((0, 1), (2, 2), (0x7F00, 0x7F00)):
        p = FakeCudaProducer(np.zeros(4, np.float32))
        v = _tensor.view(p, "x", stream)
        assert p.calls == [passed] and v.device == ("cpu", 0)


def test_cuda_array_interface() -> None:
    class Cai:
        def __init__(self, shape, typestr, strides=None, stream=None):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0x10000, False),
                                             "strides": strides, "version": 3, "stream": stream}

    v = _tensor.view(Cai((4, 8), "<f4"), "x")
    assert (v.ptr, v.shape, v.dtype, v.device, v.contiguous) == (0x10000, (4, 8), "f32", ("cuda", 0), True)
    assert not _tensor.view(Cai((4, 8), "<u2", strides=(32, 4)), "x").contiguous
    assert _tensor.view(Cai((4, 8), "<u2", strides=(16, 2)), "x").contiguous
    assert _tensor.view(Cai((4, 8), "<f4", stream=1), "x", 0).ptr == 0x10000  # legacy default = stream 0
    with pytest.raises(ValueError, match="^x: its __cuda_array_interface__ is ordered on stream 0x5"):
        _tensor.view(Cai((4, 8), "<f4", stream=5), "x", 7)
    with pytest.raises(TypeError, match="^x: big-endian"):
        _tensor.view(Cai((4,), ">f4"), "x")
    with pytest.raises(TypeError, match="^x: unsupported dtype"):
        _tensor.view(Cai((4,), "<c16"), "x")  # complex128 (complex64 is a RoPE table's dtype)


def test_stream_handles() -> None:
    class TorchLike:
        cuda_stream = 0x1234

    class CupyLike:
        ptr = 0x5678

    class Protocol:
        def __cuda_stream__(self):
            return (0, 0x9ABC)

    assert _tensor.stream_handle(0) == 0 and _tensor.stream_handle(2) == 2
    assert _tensor.stream_handle(TorchLike()) == 0x1234
    assert _tensor.stream_handle(CupyLike()) == 0x5678
    assert _tensor.stream_handle(Protocol()) == 0x9ABC
    for bad, exc in ((True, TypeError), (-1, ValueError), (2**64, ValueError), ("s", TypeError), (1.5, TypeError)):
        with pytest.raises(exc, match="^stream: "):
            _tensor.stream_handle(bad)
