"""The error mapping: every entry point, called with None, garbage, and sizes at 0, -1 and just past
their limits, raises ValueError / TypeError naming the argument, or c128.Error carrying the
library's status, and never crashes; refused calls write nothing."""

from __future__ import annotations

import numpy as np
import pytest

import c128
from c128 import sglang

D = 128
GARBAGE = [None, "garbage", 3.5, object(), [1, 2, 3], np.zeros(3, np.float64), -1, 2**70]
ACCEPTED = (TypeError, ValueError, c128.Error)


def _decode_kwargs():
    state = np.random.default_rng(0).standard_normal((4, 128, 2 * D)).astype(np.float32)
    x = np.ones((2, 2 * D), np.float32)
    ape = np.ones((128, D), np.float32)
    out = np.full((2, D), np.nan, np.float32)
    plans = c128.plan_decode(c128.Ring(4), [(0, 128, 1), (1, 5, 1)])
    return dict(state=state, input=x, ape=ape, output=out, plans=plans)


def _prefill_kwargs():
    state = np.zeros((4, 128, 2 * D), np.float32)
    x = np.ones((300, 2 * D), np.float32)
    ape = np.ones((128, D), np.float32)
    p = c128.plan_prefill(c128.Ring(4), [(1, 300, 300)])
    out = np.full((p.num_compress, D), np.nan, np.float32)
    return dict(state=state, input=x, ape=ape, output=out, compress_plans=p.compress[: p.num_compress],
                write_plans=p.write[: p.num_write])


def _device_decode_kwargs():
    return dict(ring=c128.Ring(8), requests=c128.requests([0, 1], [128, 5]), plans=np.zeros((2, 16), np.uint8),
                status=np.zeros(1, np.int32), workspace=np.zeros(c128.plan_workspace_size(2), np.uint8))


def _device_prefill_kwargs():
    return dict(ring=c128.Ring(8), requests=c128.requests([0, 1], [300, 20], [300, 20]),
                compress=np.zeros((320, 16), np.uint8), write=np.zeros((320, 8), np.uint8),
                counts=np.zeros(2, np.int64), status=np.zeros(1, np.int32),
                workspace=np.zeros(c128.plan_workspace_size(2), np.uint8))


def _sglang_kwargs():
    k = _decode_kwargs()
    return dict(kv_score_buffer=k["state"], kv_score_input=k["input"], ape=k["ape"],
                plan=sglang.DecodePlan(128, k["plans"].view(np.uint8).reshape(-1, 16)), head_dim=D, compress_ratio=128,
                out=k["output"])


ENTRY_POINTS = {
    "decode": (c128.decode, _decode_kwargs),
    "Decode": (lambda **k: c128.Decode(**k)(), _decode_kwargs),
    "check_decode_plans": (c128.check_decode_plans, _decode_kwargs),
    "prefill": (c128.prefill, _prefill_kwargs),
    "Prefill": (lambda **k: c128.Prefill(**k)(), _prefill_kwargs),
    "check_prefill_plans": (c128.check_prefill_plans, _prefill_kwargs),
    "plan_decode": (c128.plan_decode, lambda: dict(ring=c128.Ring(8), requests=[(0, 128, 1)], out=None)),
    "plan_prefill": (c128.plan_prefill, lambda: dict(ring=c128.Ring(8), requests=[(0, 300, 300)], capacity=300)),
    "plan_decode_device": (c128.plan_decode_device, _device_decode_kwargs),
    "plan_prefill_device": (c128.plan_prefill_device, _device_prefill_kwargs),
    "compress_forward": (sglang.compress_forward, _sglang_kwargs),
}
OPTIONAL = {"out", "capacity", "counts"}  # None is a valid value of these


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_baseline_succeeds(entry: str) -> None:
    fn, make = ENTRY_POINTS[entry]
    fn(**make())


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_garbage_arguments(entry: str) -> None:
    """Each argument in turn replaced by None and garbage: a named refusal, never another exception."""
    fn, make = ENTRY_POINTS[entry]
    for name in make():
        for bad in GARBAGE:
            if bad is None and name in OPTIONAL:
                continue
            kwargs = make()
            kwargs[name] = bad
            try:
                fn(**kwargs)
            except ACCEPTED as e:
                if isinstance(e, (TypeError, ValueError)) and not isinstance(e, c128.Error):
                    lead = str(e).split(":")[0]
                    assert name in lead, f"{name}={bad!r}: '{e}' does not name {name}"
            # Some garbage is valid for an integer argument (capacity=-1 is the library's to refuse).


def _expect(exc, match, fn, **kwargs):
    with pytest.raises(exc, match=match) as info:
        fn(**kwargs)
    return info.value


def test_tensor_refusals_name_the_argument() -> None:
    k = _decode_kwargs()
    bad_shape = dict(k, input=np.ones((2, 2 * D - 8), np.float32))
    e = _expect(ValueError, r"^input: expected a contiguous tensor of shape \(batch=2, 2 \* head_dim = 256\), got "
                r"\(2, 248\)", c128.decode, **bad_shape)
    _expect(ValueError, "^output: ", c128.decode, **dict(k, output=np.zeros((1, D), np.float32)))
    _expect(ValueError, "^ape: ", c128.decode, **dict(k, ape=np.zeros((127, D), np.float32)))
    _expect(ValueError, "^state: ", c128.decode, **dict(k, state=np.zeros((4, 127, 2 * D), np.float32)))
    _expect(TypeError, "^ape: expected float32", c128.decode, **dict(k, ape=np.zeros((128, D), np.uint16)))
    _expect(TypeError, "^state: expected float32 or bfloat16", c128.decode,
            **dict(k, state=np.zeros((4, 128, 2 * D), np.float64)))
    _expect(ValueError, "^state, input, output: no compiled instance for head_dim 192", c128.decode,
            **dict(k, state=np.zeros((4, 128, 384), np.float32), input=np.zeros((2, 384), np.float32),
                   ape=np.zeros((128, 192), np.float32), output=np.zeros((2, 192), np.float32)))
    # non-contiguous, misaligned, read-only
    _expect(ValueError, "^input: expected a contiguous", c128.decode,
            **dict(k, input=np.ones((2 * D, 2), np.float32).T))
    raw = np.zeros(4 * 128 * 2 * D + 1, np.float32)
    _expect(ValueError, "^state: the data pointer .* not aligned to 8", c128.decode,
            **dict(k, state=raw[1:].reshape(4, 128, 2 * D)))
    raw = np.zeros(2 * 16 + 1, np.uint8)
    _expect(ValueError, "^plans: the data pointer .* not aligned to 16", c128.decode,
            **dict(k, plans=raw[1:].reshape(2, 16)))
    frozen = k["output"].copy()
    frozen.setflags(write=False)
    _expect(ValueError, "^output: the tensor is read-only", c128.decode, **dict(k, output=frozen))
    _expect(ValueError, "^plans: expected decode plan records of 16 bytes", c128.decode,
            **dict(k, plans=np.zeros((2, 15), np.uint8)))
    _expect(TypeError, "^plans: expected an integer tensor", c128.decode, **dict(k, plans=np.zeros((2, 4), np.float32)))
    _expect(ValueError, "^stream: host tensors", c128.decode, **dict(k, stream=7))
    _expect(TypeError, "^stream: ", c128.decode, **dict(k, stream="s"))
    _expect(TypeError, "^host_options: ", c128.decode, **dict(k, host_options={"check_races": True}))
    assert e is not None


def test_size_limits() -> None:
    """Sizes at 0, -1 and just past their limits: the library's statuses."""
    k = _decode_kwargs()
    for group, status in ((33, c128.Status.ERROR_INVALID_GROUP), (-1, c128.Status.ERROR_INVALID_GROUP)):
        e = _expect(c128.Error, "INVALID_GROUP", c128.decode, **dict(k, requests_per_block=group))
        assert e.status == status and e.name == "C128_ERROR_INVALID_GROUP" and e.function == "c128_decode_host"
    c128.decode(**dict(k, requests_per_block=32))
    _expect(ValueError, "^requests_per_block: 2147483648 does not fit", c128.decode,
            **dict(_decode_kwargs(), requests_per_block=2**31))
    for layout in ((1, 1, 0), (0, -1, 0), (0, 2, -1)):
        e = _expect(c128.Error, "INVALID_LAYOUT", c128.decode, **dict(_decode_kwargs(), layout=layout))
        assert e.status == c128.Status.ERROR_INVALID_LAYOUT
    _expect(ValueError, "^layout: expected", c128.decode, **dict(_decode_kwargs(), layout=(0, 1)))
    # batch 0: nothing to do, nothing written
    empty = dict(_decode_kwargs(), input=np.zeros((0, 2 * D), np.float32), plans=np.zeros((0, 16), np.uint8))
    before = empty["state"].copy()
    c128.decode(**empty)
    assert empty["state"].tobytes() == before.tobytes()
    # state of 0 pages: every plan names a page outside it and is skipped
    zero = dict(_decode_kwargs(), state=np.zeros((0, 128, 2 * D), np.float32))
    out = zero["output"].copy()
    c128.decode(**zero)
    assert np.isnan(zero["output"]).all() and np.isnan(out).all()
    # prefill: more input rows than a plan can address, more plans than a launch allows
    p = _prefill_kwargs()
    big = dict(p, input=np.zeros((65537, 2 * D), np.float32))
    _expect(c128.Error, "TOO_MANY_ROWS", c128.prefill, **big)
    plans = np.zeros((65537, 16), np.uint8)
    plans[:, :4] = 0xFF  # sentinels
    many = dict(p, compress_plans=plans, output=np.zeros((65537, D), np.float32))
    e = _expect(c128.Error, "TOO_MANY_PLANS", c128.prefill, **many)
    assert e.status == c128.Status.ERROR_TOO_MANY_PLANS
    _expect(c128.Error, "INVALID_GROUP", c128.prefill, **dict(p, windows_per_block=33))
    # planners
    ring = c128.Ring(8)
    for capacity, name in ((-1, "NEGATIVE_SIZE"), (65537, "TOO_MANY_PLANS")):
        _expect(c128.Error, name, c128.plan_prefill, ring=ring, requests=[(0, 5, 5)], capacity=capacity)
    _expect(c128.Error, "CAPACITY_TOO_SMALL", c128.plan_prefill, ring=ring, requests=[(0, 5, 5)], capacity=0)
    _expect(c128.Error, "TOO_MANY_ROWS", c128.plan_prefill, ring=c128.Ring(1024),
            requests=[(i, 33000, 33000) for i in range(2)])
    _expect(c128.Error, "NEGATIVE_SIZE", c128.plan_decode, ring=c128.Ring(-1), requests=[(0, 5, 1)])
    _expect(c128.Error, "INVALID_RING", c128.plan_decode, ring=c128.Ring(8, ring_tokens=100), requests=[(0, 5, 1)])
    _expect(c128.Error, "STATE_TOO_LARGE", c128.plan_decode, ring=c128.Ring(2**31), requests=[(0, 5, 1)])
    _expect(ValueError, "^ring.state_pages: ", c128.plan_decode, ring=c128.Ring(2**63), requests=[(0, 5, 1)])
    _expect(ValueError, "^ring.ring_tokens: ", c128.plan_decode, ring=c128.Ring(8, ring_tokens=2**31),
            requests=[(0, 5, 1)])
    _expect(TypeError, "^ring: ", c128.plan_decode, ring=(8, 128), requests=[(0, 5, 1)])
    _expect(ValueError, "^ring.page_table: ", c128.plan_decode, ring=c128.Ring(8, page_table=np.zeros(4, np.int32)),
            requests=[(0, 5, 1)])
    _expect(ValueError, "^requests: ", c128.requests, pool_indices=[1, 2], seq_lens=[3])
    _expect(ValueError, "^seq_lens: ", c128.requests, pool_indices=[1], seq_lens=[2**40])


def test_aliasing_is_the_librarys_status() -> None:
    """Overlapping written tensors: the library refuses (C128_ERROR_ALIASED) and writes nothing."""
    k = _decode_kwargs()
    flat = k["state"].reshape(-1)
    k["output"] = flat[: 2 * D].reshape(2, D)  # the output inside the state
    before = k["state"].copy()
    e = _expect(c128.Error, "ALIASED", c128.decode, **k)
    assert e.status == c128.Status.ERROR_ALIASED == 23
    assert "two arguments overlap" in e.message and k["state"].tobytes() == before.tobytes()


def test_devices_must_agree() -> None:
    """A (fake) CUDA array among host arrays is refused before anything runs."""

    class FakeCuda:
        def __init__(self, a):
            self._a = a
            self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                             "version": 3, "strides": None}

    k = _decode_kwargs()
    _expect(ValueError, "^input: on cuda:0, but state is on host", c128.decode, **dict(k, input=FakeCuda(k["input"])))
    p = _prefill_kwargs()
    _expect(ValueError, "^write_plans: on cuda:0", c128.prefill, **dict(p, write_plans=FakeCuda(p["write_plans"])))
    _expect(ValueError, "^compress_plans: the checker reads plans in host memory", c128.check_prefill_plans,
            **dict(p, compress_plans=FakeCuda(p["compress_plans"])))
    d = _device_decode_kwargs()
    _expect(ValueError, "^status: on cuda:0", c128.plan_decode_device, **dict(d, status=FakeCuda(d["status"])))
    _expect(ValueError, "^requests: the host planner reads host memory", c128.plan_decode, ring=c128.Ring(8),
            requests=FakeCuda(c128.requests([0], [5])))


def test_error_carries_status() -> None:
    for status in c128.Status:
        e = c128.Error(status, "fn")
        assert e.status == status and e.name == "C128_" + status.name
        assert str(e) == f"fn: C128_{status.name}: {e.message}"
    e = c128.Error(999, "fn")
    assert e.status == 999 and "unknown" in str(e)
    assert isinstance(e, RuntimeError)


def test_helpers_refuse_garbage() -> None:
    """The small helpers: bools are not sizes, out-of-range request lists are ValueErrors (not
    NumPy's OverflowError), the bf16 converters name their argument."""
    _expect(TypeError, "^requests_per_block: expected an integer, got a bool", c128.decode,
            **dict(_decode_kwargs(), requests_per_block=True))
    _expect(TypeError, "^capacity: expected an integer, got a bool", c128.plan_prefill, ring=c128.Ring(8),
            requests=[(0, 5, 5)], capacity=True)
    for big in (2**40, 2**70, -2**40):
        _expect(ValueError, "^(requests|seq_lens): ", c128.plan_decode, ring=c128.Ring(8), requests=[(0, big, 1)])
        _expect(ValueError, "^(requests|pool_indices): ", c128.plan_prefill, ring=c128.Ring(8),
                requests=[(big, 5, 5)], capacity=8)
    _expect(ValueError, "^seq_lens: ", c128.requests, pool_indices=[1], seq_lens=[2**70])
    _expect(TypeError, "^values: expected numbers, got None", c128.bf16_from_float, values=None)
    _expect(TypeError, "^values: expected numbers", c128.bf16_from_float, values="garbage")
    _expect(TypeError, "^bits: expected numbers, got None", c128.bf16_to_float, bits=None)
    for bad in (-1, 2**16, 2**70):
        _expect(ValueError, "^bits: values do not fit uint16", c128.bf16_to_float, bits=bad)
    assert c128.bf16_to_float(c128.bf16_from_float(np.float32(1.5))) == np.float32(1.5)


def test_compress_forward_head_dim() -> None:
    """head_dim is checked as every other integer: NumPy integers accepted, bools, 0 and -1 refused."""
    k = _sglang_kwargs()
    sglang.compress_forward(**dict(k, head_dim=np.int64(D)))
    _expect(TypeError, "^head_dim: expected an integer, got a bool", sglang.compress_forward, **dict(k, head_dim=True))
    for bad in (0, -1):
        _expect(ValueError, "^head_dim: expected a positive head_dim", sglang.compress_forward,
                **dict(k, head_dim=bad, out=None))
    _expect(ValueError, "^head_dim: 2147483648 does not fit", sglang.compress_forward, **dict(k, head_dim=2**31))
