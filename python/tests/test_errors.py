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


# ---- the new arguments: state layouts, output_index, cache entries, engine arrays --------------------------
def _entry_arrays(rows: int = 8, per_page: int = 4, d: int = D):
    cache = np.zeros((rows // per_page + 1, (d + 64 + d // 64) * per_page), np.uint8)
    return c128.Entry(kind="dsv4_fp8", norm_weight=np.ones(d, np.float32), rope_table=np.zeros((1024, 64), np.float32),
                      cache=cache, entries_per_page=per_page, eps=1e-6)


def _decode_entry_kwargs():
    k = _decode_kwargs()
    return dict(k, output=None, output_index=np.arange(2, dtype=np.int64), entry=_entry_arrays())


def _prefill_entry_kwargs():
    k = _prefill_kwargs()
    return dict(k, output=None, output_index=np.arange(300, dtype=np.int64), entry=_entry_arrays(300))


def _decode_layout_kwargs():
    k = _decode_kwargs()
    state = k["state"].reshape(64, 8, 2 * D)  # blocks of 8 rows; table row p = page p
    table = np.arange(64, dtype=np.int32).reshape(4, 16)
    return dict(k, state=state, state_layout=c128.StateLayout(block_rows=8, block_table=table, row_shift=7))


def _prefill_layout_kwargs():
    k = _prefill_kwargs()
    kv = np.zeros((64, 8, D), np.float32)
    table = np.arange(64, dtype=np.int32).reshape(4, 16)
    return dict(k, state=kv, state_layout=c128.StateLayout(block_rows=8, block_table=table, row_shift=7,
                                                           score_plane=np.zeros_like(kv), score_biased=True))


def _engine_prefill_kwargs():
    k = _device_prefill_kwargs()
    return dict(k, requests=None, seq_lens=np.array([300, 20], np.int32), query_start=np.array([0, 300, 320], np.int32),
                pool_indices=np.array([0, 1], np.int32))


def _engine_decode_kwargs():
    k = _device_decode_kwargs()
    return dict(k, requests=None, seq_lens=np.array([128, 5], np.int32), pool_indices=np.array([0, 1], np.int32))


def _fused_kwargs():
    k = _decode_kwargs()
    d = 512
    state = np.zeros((4, 128, 2 * d), np.float32)
    plans = c128.plan_decode(c128.Ring(4), [(0, 128, 1), (1, 5, 1)]).view(np.uint8).reshape(-1, 16)
    cache = np.zeros((2, 576 * 5), np.uint8)
    del k
    return dict(kv_score_buffer=state, kv_score_input=np.ones((2, 2 * d), np.float32),
                ape=np.zeros((128, d), np.float32), plan=sglang.DecodePlan(128, plans), head_dim=d,
                norm_weight=np.ones(d, np.float32), norm_eps=1e-6, freq_cis=np.zeros((256, 32), np.complex64),
                out_loc=np.array([0, 1], np.int64), kvcache=cache, page_size=4)


def _store_kwargs():
    k = _fused_kwargs()
    kv = np.ones((2, 512), np.float32)
    return dict(kv=kv, plan=k["plan"], norm_weight=k["norm_weight"], norm_eps=1e-6, freq_cis=k["freq_cis"],
                out_loc=k["out_loc"], kvcache=k["kvcache"], page_size=4)


NEW_ENTRY_POINTS = {
    "decode_entry": (c128.decode, _decode_entry_kwargs),
    "Decode_entry": (lambda **k: c128.Decode(**k)(), _decode_entry_kwargs),
    "check_decode_plans_entry": (c128.check_decode_plans, _decode_entry_kwargs),
    "prefill_entry": (c128.prefill, _prefill_entry_kwargs),
    "Prefill_entry": (lambda **k: c128.Prefill(**k)(), _prefill_entry_kwargs),
    "check_prefill_plans_entry": (c128.check_prefill_plans, _prefill_entry_kwargs),
    "decode_layout": (c128.decode, _decode_layout_kwargs),
    "prefill_layout": (c128.prefill, _prefill_layout_kwargs),
    "check_prefill_plans_layout": (c128.check_prefill_plans, _prefill_layout_kwargs),
    "requests_from_lens": (c128.requests_from_lens, lambda: dict(seq_lens=[300, 20], query_start=[0, 300, 320],
                                                                  pool_indices=[0, 1])),
    "plan_prefill_device_engine": (c128.plan_prefill_device, _engine_prefill_kwargs),
    "plan_decode_device_engine": (c128.plan_decode_device, _engine_decode_kwargs),
    "plan_prefill_ring": (c128.plan_prefill, lambda: dict(ring=c128.Ring(64, state_layout=_decode_layout_kwargs()[
        "state_layout"], write_all=True, null_block=63, rope_positions=1024), requests=[(0, 300, 300)], capacity=300)),
    "compress_forward_norm_rope_store": (sglang.compress_forward_norm_rope_store, _fused_kwargs),
    "compress_norm_rope_store": (sglang.compress_norm_rope_store, _store_kwargs),
}
# None is a valid value of these (the optional arguments, and output with an entry)
NEW_OPTIONAL = OPTIONAL | {"output", "output_index", "state_layout", "entry", "query_start", "pool_indices",
                           "requests"}


@pytest.mark.parametrize("entry", sorted(NEW_ENTRY_POINTS))
def test_new_baselines_succeed(entry: str) -> None:
    fn, make = NEW_ENTRY_POINTS[entry]
    fn(**make())


def _refused_by_name(fn, kwargs, name, bad) -> None:
    """A refusal names the argument first, or (a value that disagrees with another argument, as
    seq_lens with query_start's length) in its message."""
    try:
        fn(**kwargs)
    except ACCEPTED as e:
        if isinstance(e, (TypeError, ValueError)) and not isinstance(e, c128.Error):
            lead = str(e).split(":")[0]
            short = name.split(".")[-1]
            assert short in lead or name in lead or short in str(e), f"{name}={bad!r}: '{e}' does not name {name}"


@pytest.mark.parametrize("entry", sorted(NEW_ENTRY_POINTS))
def test_new_garbage_arguments(entry: str) -> None:
    """Each argument, and each field of a StateLayout / Entry / Ring, replaced by None and garbage:
    a named refusal or the library's status, never another exception or a crash."""
    fn, make = NEW_ENTRY_POINTS[entry]
    for name, value in make().items():
        for bad in GARBAGE:
            if bad is None and name in NEW_OPTIONAL:
                continue
            _refused_by_name(fn, dict(make(), **{name: bad}), name, bad)
        if isinstance(value, (c128.Entry, c128.StateLayout)):
            for field in value._fields:
                for bad in GARBAGE:
                    kwargs = make()
                    kwargs[name] = value._replace(**{field: bad})
                    _refused_by_name(fn, kwargs, f"{name}.{field}", bad)
        if isinstance(value, c128.Ring) and value.state_layout is not None:
            for field in value.state_layout._fields:
                for bad in GARBAGE:
                    kwargs = make()
                    kwargs[name] = c128.Ring(64, state_layout=value.state_layout._replace(**{field: bad}))
                    _refused_by_name(fn, kwargs, f"state_layout.{field}", bad)


def _status(fn, kwargs) -> str:
    with pytest.raises(c128.Error) as e:
        fn(**kwargs)
    return e.value.name


def test_entry_limits() -> None:
    """Entry sizes at 0, -1 and just past their limits."""
    k = _decode_entry_kwargs()
    e = k["entry"]
    for per_page, status in ((0, "INVALID_ENTRY"), (-1, "NEGATIVE_SIZE"), (3, "INVALID_ENTRY"),
                             (8, "INVALID_ENTRY")):  # 8 entries do not fit the cache's page
        assert _status(c128.decode, dict(k, entry=e._replace(entries_per_page=per_page))) == "C128_ERROR_" + status
    _expect(ValueError, "^entry.entries_per_page: 2147483648 does not fit", c128.decode,
            **dict(k, entry=e._replace(entries_per_page=2**31)))
    for eps in (-1.0, float("nan"), float("inf"), 1e39):
        assert _status(c128.decode, dict(k, entry=e._replace(eps=eps))) == "C128_ERROR_INVALID_ENTRY"
    _expect(TypeError, "^entry.eps: expected a number", c128.decode, **dict(k, entry=e._replace(eps="1e-6")))
    _expect(TypeError, "^entry.eps: expected a number", c128.decode, **dict(k, entry=e._replace(eps=True)))
    flat = e.cache.reshape(-1)
    need = (D + 64 + D // 64) * 4
    for page_bytes, status in ((need - 4, "INVALID_ENTRY"), (need + 2, "INVALID_ENTRY"), (-1, "NEGATIVE_SIZE")):
        assert _status(c128.decode, dict(k, entry=e._replace(cache=flat, page_bytes=page_bytes))) == \
            "C128_ERROR_" + status
    c128.decode(**dict(k, entry=e._replace(cache=flat, page_bytes=need)))
    _expect(ValueError, "^entry.page_bytes: 100, but entry.cache holds", c128.decode,
            **dict(k, entry=e._replace(page_bytes=100)))
    _expect(ValueError, "^entry.cache: expected a contiguous tensor of shape", c128.decode,
            **dict(k, entry=e._replace(cache=flat)))  # 1-D without page_bytes
    _expect(TypeError, "^entry.cache: expected a uint8", c128.decode,
            **dict(k, entry=e._replace(cache=np.zeros((2, 100), np.float32))))
    _expect(ValueError, "^entry.cache: the tensor is read-only", c128.decode,
            **dict(k, entry=e._replace(cache=np.frombuffer(bytes(e.cache.size), np.uint8).reshape(e.cache.shape))))
    _expect(ValueError, "^entry.cache: the data pointer .* not aligned to 4", c128.decode,
            **dict(k, entry=e._replace(cache=np.zeros(need + 1, np.uint8)[1:], page_bytes=need)))
    _expect(TypeError, "^entry.kind: expected 'dsv4_fp8' or 'dsv4_bf16', got int", c128.decode,
            **dict(k, entry=e._replace(kind=1)))
    _expect(ValueError, "^entry.kind: expected 'dsv4_fp8' or 'dsv4_bf16', got 'pooled'", c128.decode,
            **dict(k, entry=e._replace(kind="pooled")))
    _expect(TypeError, "^entry.norm_weight: expected float32", c128.decode,
            **dict(k, entry=e._replace(norm_weight=c128.bf16_from_float(np.ones(D, np.float32)))))
    _expect(ValueError, "^entry.norm_weight: expected a contiguous tensor of shape \\(head_dim = 128,\\)", c128.decode,
            **dict(k, entry=e._replace(norm_weight=np.ones(D + 1, np.float32))))
    _expect(ValueError, "^entry.rope_table: expected a contiguous tensor of shape", c128.decode,
            **dict(k, entry=e._replace(rope_table=np.zeros((8, 63), np.float32))))
    _expect(TypeError, "^entry.rope_table: expected float32", c128.decode,
            **dict(k, entry=e._replace(rope_table=np.zeros((8, 64), np.float64))))
    _expect(ValueError, "^entry.rope_table: the data pointer .* not aligned to 8", c128.decode,
            **dict(k, entry=e._replace(rope_table=np.zeros(8 * 64 + 1, np.float32)[1:].reshape(8, 64))))
    # zero sizes: nothing to write, no error
    c128.decode(**dict(k, entry=e._replace(cache=np.zeros((0, e.cache.shape[1]), np.uint8))))
    c128.decode(**dict(k, entry=e._replace(rope_table=np.zeros((0, 64), np.float32))))
    _expect(ValueError, "^output: a launch with cache entries", c128.decode,
            **dict(k, output=np.zeros((2, D), np.float32)))
    _expect(TypeError, "^output: expected a tensor", c128.decode, **dict(k, entry=None))


def test_index_and_layout_limits() -> None:
    k = _decode_entry_kwargs()
    _expect(ValueError, "^output_index: expected a contiguous int64 tensor of shape \\(>= 2,\\)", c128.decode,
            **dict(k, output_index=np.zeros(1, np.int64)))
    _expect(TypeError, "^output_index: expected int64", c128.decode, **dict(k, output_index=np.zeros(2, np.int32)))
    _expect(ValueError, "^output_index: the data pointer .* not aligned to 8", c128.decode,
            **dict(k, output_index=np.zeros(3 * 8 + 1, np.uint8)[1:].view(np.int64)))
    _expect(ValueError, "^output_index: on cuda:0|^output_index: the plan checker", c128.check_decode_plans,
            **dict(k, output_index=_FakeCuda(k["output_index"])))
    p = _prefill_entry_kwargs()
    _expect(ValueError, "^output_index: expected a contiguous int64 tensor of shape \\(>= 300,\\)", c128.prefill,
            **dict(p, output_index=np.zeros(299, np.int64)))
    lk = _decode_layout_kwargs()
    sl = lk["state_layout"]
    for changes, status in (({"block_rows": 4}, None), ({"row_shift": 6}, "INVALID_STATE_LAYOUT"),
                            ({"row_shift": 31}, "INVALID_STATE_LAYOUT"), ({"row_shift": 30}, "INVALID_STATE_LAYOUT"),
                            ({"block_rows": -1}, "INVALID_STATE_LAYOUT")):
        kwargs = dict(lk, state_layout=sl._replace(**changes))
        if status is None:
            _expect(ValueError, "^state: expected a contiguous tensor of shape \\(blocks, block_rows = 4", c128.decode,
                    **kwargs)
        else:
            assert _status(c128.decode, kwargs) == "C128_ERROR_" + status, changes
    c128.decode(**dict(lk, state_layout=sl._replace(row_shift=29)))  # 4 table rows << 29 = 2^31: the limit
    for rows in (4, 512):
        kwargs = dict(lk, state=lk["state"].reshape(-1, rows, 2 * D), state_layout=sl._replace(block_rows=rows))
        assert _status(c128.decode, kwargs) == "C128_ERROR_INVALID_STATE_LAYOUT"
    assert _status(c128.decode, dict(lk, layout=(0, 2, 2))) == "C128_ERROR_INVALID_STATE_LAYOUT"
    _expect(TypeError, "^state_layout.block_table: expected an int32", c128.decode,
            **dict(lk, state_layout=sl._replace(block_table=sl.block_table.astype(np.int64))))
    pk = _prefill_layout_kwargs()
    psl = pk["state_layout"]
    _expect(ValueError, "^state_layout.score_block_table: shape \\(4, 8\\), block_table \\(4, 16\\)", c128.prefill,
            **dict(pk, state_layout=psl._replace(score_block_table=np.zeros((4, 8), np.int32))))
    _expect(ValueError, "^state_layout.score_plane: shape", c128.prefill,
            **dict(pk, state_layout=psl._replace(score_plane=np.zeros((63, 8, D), np.float32))))
    _expect(TypeError, "^state_layout.score_plane: u16, state f32: the planes share a dtype", c128.prefill,
            **dict(pk, state_layout=psl._replace(score_plane=np.zeros((64, 8, D), np.uint16))))
    _expect(ValueError, "^state_layout.block_table: on cuda:0, but state is on host", c128.prefill,
            **dict(pk, state_layout=psl._replace(block_table=_FakeCuda(psl.block_table))))
    # the ring's layout: tables where the planner reads them
    ring = c128.Ring(64, state_layout=psl._replace(block_table=_FakeCuda(psl.block_table)))
    _expect(ValueError, "^ring.state_layout.block_table: on cuda:0; this planner reads host memory", c128.plan_prefill,
            ring=ring, requests=[(0, 300, 300)], capacity=300)
    _expect(ValueError, "^ring.null_block: 2147483648 does not fit", c128.plan_prefill,
            ring=c128.Ring(64, null_block=2**31), requests=[(0, 300, 300)], capacity=300)
    assert _status(c128.plan_prefill, dict(ring=c128.Ring(64, state_layout=psl, ring_tokens=256),
                                           requests=[(0, 300, 300)], capacity=300)) == "C128_ERROR_INVALID_STATE_LAYOUT"
    assert _status(c128.plan_prefill, dict(ring=c128.Ring(64, state_layout=psl, page_table=np.zeros((4, 1), np.int32)),
                                           requests=[(0, 300, 300)], capacity=300)) == "C128_ERROR_INVALID_STATE_LAYOUT"
    # engine arrays
    e = _engine_prefill_kwargs()
    _expect(ValueError, "^requests: pass requests or the engine's arrays", c128.plan_prefill_device,
            **dict(e, requests=c128.requests([0, 1], [300, 20], [300, 20])))
    _expect(TypeError, "^query_start: a prefill batch needs query_start", c128.plan_prefill_device,
            **dict(e, query_start=None))
    _expect(ValueError, "^query_start: expected a contiguous int32 tensor of shape \\(3,\\)", c128.plan_prefill_device,
            **dict(e, query_start=np.array([0, 300], np.int32)))
    _expect(TypeError, "^seq_lens: the engine's arrays need seq_lens", c128.plan_prefill_device,
            **dict(e, seq_lens=None))
    _expect(TypeError, "^pool_indices: expected int32", c128.plan_prefill_device,
            **dict(e, pool_indices=np.array([0, 1], np.int64)))
    status = np.zeros(1, np.int32)
    c128.plan_prefill_device(**dict(e, query_start=np.array([0, 300, 299], np.int32), status=status))
    assert status[0] == c128.Status.ERROR_NEGATIVE_SIZE  # a decreasing query_start: a negative extend_len


def test_plain_calls_after_extended_ones() -> None:
    """A call without the new arguments after one with them (same thread) launches today's kernel:
    the thread's argument structs of the two kinds of call are separate."""
    c128.decode(**_decode_entry_kwargs())
    k = _decode_kwargs()
    c128.decode(**k)
    assert not np.isnan(k["output"][0]).any() and np.isnan(k["output"][1]).all()  # row 0 completes a window


class _FakeCuda:
    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                                         "version": 3, "strides": None}
