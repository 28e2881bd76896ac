"""GPU tests (marker gpu; each skips with a message without a CUDA device or the framework):
PyTorch and CuPy tensors against the host runner (bit for bit in an exact-math build, within
C128_FAST_BOUND in the default fast-math one), stream ordering and no hidden synchronisation,
a whole decode step and a whole prefill step (device planner + kernels) captured in
torch.cuda.graph and replayed with changing requests, no allocation during replay or eager calls,
the SGLang drop-in on PyTorch tensors."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Tuple

import numpy as np
import pytest

import c128
from c128.sglang import DecodePlan, PrefillPlan, compress_forward
from cases import DECODE_FILLS, PREFILL_SHAPES, Case, convert, decode_case, poison, prefill_case, to_f64, window_error

pytestmark = pytest.mark.gpu
INSTANCES = c128.instances()
EXACT = c128.build_info().math == "exact"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        pytest.skip("CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device (CuPy cannot reach the driver)")
    return cupy


# ---- NumPy <-> PyTorch (bf16 as torch.bfloat16, records as uint8 rows) ---------------------------------
def to_torch(torch: Any, a: np.ndarray, device: str = "cuda") -> Any:
    if a.dtype.names:
        t = torch.from_numpy(a.view(np.uint8).reshape(len(a), a.dtype.itemsize).copy())
    elif a.dtype == np.uint16:
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a).copy())
    return t.to(device)


def to_numpy(torch: Any, t: Any) -> np.ndarray:
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _kv_max(case: Case) -> np.ndarray:
    """max |kv| per channel over every row of the case (bounds each window's)."""
    d = case.inst.head_dim
    state = to_f64(case.state, case.inst.state_dtype).reshape(-1, 2 * d)[:, :d]
    x = to_f64(case.input, case.inst.input_dtype)[:, :d]
    return np.maximum(np.abs(state).max(axis=0), np.abs(x).max(axis=0) if len(x) else 0)


def agree(gpu_out: np.ndarray, host_out: np.ndarray, out_dtype: str, kv_max: Any) -> str:
    """'' when the GPU's output equals the host runner's as the build promises: bit for bit in an
    exact build; in a fast one within FAST_BOUND * (1 + max |kv| of the window and channel; kv_max
    bounds it) plus one rounding step of a bf16 output. Poisoned rows (NaN) must be NaN on both
    sides, so a row written on one side only fails too."""
    if gpu_out.tobytes() == host_out.tobytes():
        return ""
    if EXACT:
        return "differs from the host runner (exact build)"
    g, h = to_f64(gpu_out, out_dtype), to_f64(host_out, out_dtype)
    if np.any(np.isnan(g) != np.isnan(h)):
        return "NaN (poison) on one side only: a row written on one side only"
    bound = c128.FAST_BOUND * (1.0 + np.asarray(kv_max, np.float64)) + np.zeros_like(h)
    if out_dtype == "bf16":
        mag = np.abs(np.nan_to_num(h))
        bound = bound + np.where(mag > 0, np.exp2(np.floor(np.log2(np.where(mag > 0, mag, 1.0))) - 7), 0.0)
    err = np.where(np.isnan(h), 0.0, np.abs(g - h))
    if np.any(err > bound):
        k = np.unravel_index(int(np.argmax(err - bound)), err.shape)
        return f"element {k}: |gpu - host| = {err[k]:.3g} > {bound[k]:.3g}"
    return ""


def _run_both(torch: Any, case: Case, kind: str) -> Tuple[np.ndarray, np.ndarray]:
    """The case on the GPU (PyTorch tensors) and on the host runner; returns the GPU's (state, output)
    after checking that the host's match the reference."""
    tensors = [to_torch(torch, a) for a in (case.state, case.input, case.ape, case.output, *case.plans)]
    fn = c128.decode if kind == "decode" else c128.prefill
    fn(*tensors)
    host_state, host_out = case.state.copy(), case.output.copy()
    fn(host_state, case.input, case.ape, host_out, *case.plans)
    assert case.check(host_state, host_out) == []
    gpu_state, gpu_out = to_numpy(torch, tensors[0]), to_numpy(torch, tensors[3])
    assert gpu_state.tobytes() == host_state.tobytes(), "state differs from the host runner's"
    assert agree(gpu_out, host_out, case.inst.output_dtype, _kv_max(case)) == ""
    assert case.check(gpu_state, gpu_out) == []
    return gpu_state, gpu_out


@pytest.mark.parametrize("scale", [1.0, 60.0], ids=["randn", "scores60"])
@pytest.mark.parametrize("k", range(len(INSTANCES)), ids=[i.name for i in INSTANCES])
def test_torch_instances(k: int, scale: float, checked) -> None:
    torch = _torch()
    inst = INSTANCES[k]
    _run_both(torch, decode_case(inst, np.random.default_rng([k, 11]), scale, DECODE_FILLS * 4), "decode")
    _run_both(torch, prefill_case(inst, np.random.default_rng([k, 12]), scale, PREFILL_SHAPES), "prefill")
    if k == len(INSTANCES) - 1 and scale == 60.0:
        how = "bit for bit (exact build)" if EXACT else f"within FAST_BOUND = {c128.FAST_BOUND:g} (fast-math build)"
        checked(f"GPU (PyTorch, {torch.cuda.get_device_name()}): {len(INSTANCES)} instances, decode and prefill = "
                f"host runner {how}; state bit for bit; within SPEC 8 of the float64 reference")


def test_torch_pdl_and_groups() -> None:
    """PDL launches and every group size give the bytes of a plain launch."""
    torch = _torch()
    inst = c128.find_instance(512, "bf16", "f32", "f32")
    results = set()
    for pdl, group in ((False, 0), (True, 0), (False, 1), (True, 7), (False, 32)):
        case = decode_case(inst, np.random.default_rng(3), 60.0, DECODE_FILLS * 8)
        t = [to_torch(torch, a) for a in (case.state, case.input, case.ape, case.output, case.plans[0])]
        c128.decode(*t, pdl=pdl, requests_per_block=group)
        pc = prefill_case(inst, np.random.default_rng(4), 60.0, PREFILL_SHAPES)
        p = [to_torch(torch, a) for a in (pc.state, pc.input, pc.ape, pc.output, *pc.plans)]
        c128.prefill(*p, pdl=pdl, windows_per_block=group)
        results.add(b"".join(to_numpy(torch, x).tobytes() for x in (t[0], t[3], p[0], p[3])))
    assert len(results) == 1


def test_stream_ordering(checked) -> None:
    """Calls are ordered on the given stream, and by default on PyTorch's current stream; a call
    returns at once while its stream is still busy (no hidden synchronisation)."""
    torch = _torch()
    inst = c128.find_instance(512, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(21), 1.0, DECODE_FILLS * 4)
    fresh = decode_case(inst, np.random.default_rng(21), 1.0, DECODE_FILLS * 4)
    new_input = np.random.default_rng(22).standard_normal(case.input.shape).astype(np.float32)
    host_state, host_out = fresh.state.copy(), fresh.output.copy()
    c128.decode(host_state, new_input, fresh.ape, host_out, fresh.plans[0])
    cycles = int(2e8)  # ~0.1 s on the GPU
    for mode in ("current", "object", "int"):
        t = [to_torch(torch, a) for a in (case.state, case.input, case.ape, case.output, case.plans[0])]
        new_dev = torch.from_numpy(new_input).cuda()
        c128.decode(*[x.clone() for x in t[:4]], t[4])  # warm-up: loads the kernels
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
            t[1].copy_(new_dev)  # the new input arrives only after the sleep
        start = time.perf_counter()
        if mode == "current":
            with torch.cuda.stream(side):
                c128.decode(*t)
        else:
            c128.decode(*t, stream=side if mode == "object" else side.cuda_stream)
        took = time.perf_counter() - start
        pending = not side.query()
        side.synchronize()
        assert pending, "the stream was idle when the call returned: it waited for the GPU"
        assert took < 0.02, f"the call took {took * 1e3:.1f} ms with its stream busy"
        assert to_numpy(torch, t[0]).tobytes() == host_state.tobytes(), f"{mode}: state read the old input"
        kv_max = max(np.abs(fresh.state[..., :512]).max(), np.abs(new_input[:, :512]).max())
        assert agree(to_numpy(torch, t[3]), host_out, "f32", kv_max) == "", mode
    checked("streams: decode ordered on PyTorch's current stream, on a Stream object and on an int handle; "
            "the calls returned while their stream slept (no synchronisation)")


def _memory(torch: Any) -> Tuple[int, int]:
    stats = torch.cuda.memory_stats()
    return stats.get("allocation.all.allocated", 0), torch.cuda.memory_allocated()


def _capture(torch: Any, body: Callable[[], None]) -> Any:
    """body once outside any capture (the caller's warm-up), then body captured into a CUDA graph."""
    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph


@pytest.mark.parametrize("name", ["h512_f32_f32_f32", "h512_bf16_f32_f32"])
def test_decode_step_in_a_cuda_graph(name: str, checked) -> None:
    """Device planner + decode captured once in torch.cuda.graph, replayed over 300 steps with the
    requests changing under it (seq_len grows; windows complete): every replay = the host planner +
    host runner; the device plans = the host plans byte for byte; nothing allocated."""
    torch = _torch()
    inst = next(i for i in INSTANCES if i.name == name)
    d, batch, pages = inst.head_dim, 12, 16
    rng = np.random.default_rng(31)
    ring = c128.Ring(pages)
    pool = rng.permutation(pages)[:batch].astype(np.int32)
    seqs = rng.integers(100, 400, batch)
    seqs[3] = 0  # a padding row throughout
    state = convert(np.random.default_rng(32).standard_normal((pages * 128, 2 * d)).astype(np.float32), "f32",
                    inst.state_dtype).reshape(pages, 128, 2 * d)
    ape = (0.5 * rng.standard_normal((128, d))).astype(np.float32)
    out = poison((batch, d), inst.output_dtype)
    host = dict(state=state.copy(), out=out.copy())
    dev = dict(state=to_torch(torch, state), input=torch.zeros((batch, 2 * d), device="cuda"), ape=to_torch(torch, ape),
               out=to_torch(torch, out), requests=torch.zeros((batch, 3), dtype=torch.int32, device="cuda"),
               plans=torch.zeros((batch, 16), dtype=torch.uint8, device="cuda"),
               status=torch.full((1,), -1, dtype=torch.int32, device="cuda"),
               workspace=torch.zeros(c128.plan_workspace_size(batch), dtype=torch.uint8, device="cuda"))
    step = c128.Decode(dev["state"], dev["input"], dev["ape"], dev["out"], dev["plans"])

    def body() -> None:
        c128.plan_decode_device(ring, dev["requests"], dev["plans"], dev["status"], dev["workspace"])
        step()

    dev["requests"].copy_(torch.from_numpy(c128.requests(pool, np.zeros(batch))))
    graph = _capture(torch, body)  # the warm-up is an all-padding step: it writes nothing
    allocations = _memory(torch)
    boundaries = 0
    for t in range(300):
        seqs[seqs > 0] += 1
        reqs = c128.requests(pool, seqs)
        x = np.random.default_rng([33, t]).standard_normal((batch, 2 * d)).astype(np.float32)
        dev["requests"].copy_(torch.from_numpy(reqs))
        dev["input"].copy_(torch.from_numpy(x))
        graph.replay()
        plans = c128.plan_decode(ring, reqs)
        c128.decode(host["state"], x, ape, host["out"], plans)
        boundaries += int(np.sum(seqs % 128 == 0))
        if t % 25 == 0 or t == 299:
            assert int(dev["status"].item()) == 0
            assert to_numpy(torch, dev["plans"]).tobytes() == plans.tobytes()
            assert to_numpy(torch, dev["state"]).tobytes() == host["state"].tobytes(), f"replay {t}: state"
            assert agree(to_numpy(torch, dev["out"]), host["out"], inst.output_dtype, 8.0) == "", f"replay {t}"
    for _ in range(100):
        graph.replay()
    torch.cuda.synchronize()
    assert _memory(torch) == allocations, "replays or the binding allocated device memory"
    assert boundaries > 10
    checked(f"CUDA graph ({name}): device planner + decode captured once, 400 replays with changing requests "
            f"({boundaries} windows) = host planner + host runner; no device allocation during replay")


def test_prefill_step_in_a_cuda_graph(checked) -> None:
    """Device prefill planner (padded to a fixed capacity) + prefill captured once, replayed with
    chunked-prefill batches of changing sizes."""
    torch = _torch()
    d, n, pages, capacity = 512, 6, 8, 512
    ring = c128.Ring(pages)
    rng = np.random.default_rng(41)
    pool = rng.permutation(pages)[:n].astype(np.int32)
    lens = np.zeros(n, np.int64)
    ape = (0.5 * rng.standard_normal((128, d))).astype(np.float32)
    state = np.random.default_rng(42).standard_normal((pages, 128, 2 * d)).astype(np.float32)
    host_state, host_out = state.copy(), poison((capacity, d), "f32")
    dev = dict(state=to_torch(torch, state), input=torch.zeros((capacity, 2 * d), device="cuda"),
               ape=to_torch(torch, ape), out=to_torch(torch, host_out),
               requests=torch.zeros((n, 3), dtype=torch.int32, device="cuda"),
               compress=torch.zeros((capacity, 16), dtype=torch.uint8, device="cuda"),
               write=torch.zeros((capacity, 8), dtype=torch.uint8, device="cuda"),
               counts=torch.zeros(2, dtype=torch.int64, device="cuda"),
               status=torch.full((1,), -1, dtype=torch.int32, device="cuda"),
               workspace=torch.zeros(c128.plan_workspace_size(n), dtype=torch.uint8, device="cuda"))
    step = c128.Prefill(dev["state"], dev["input"], dev["ape"], dev["out"], dev["compress"], dev["write"])

    def body() -> None:
        c128.plan_prefill_device(ring, dev["requests"], dev["compress"], dev["write"], dev["counts"], dev["status"],
                                 dev["workspace"])
        step()

    graph = _capture(torch, body)  # warm-up: every request absent
    allocations = _memory(torch)
    windows = 0
    for t in range(60):
        ext = np.random.default_rng([43, t]).integers(0, capacity // n, n)
        lens += ext
        reqs = c128.requests(pool, np.where(ext > 0, lens, 0), ext)
        x = np.random.default_rng([44, t]).standard_normal((capacity, 2 * d)).astype(np.float32)
        dev["requests"].copy_(torch.from_numpy(reqs))
        dev["input"].copy_(torch.from_numpy(x))
        graph.replay()
        plans = c128.plan_prefill(ring, reqs, capacity=capacity, pad_to_capacity=True)
        c128.prefill(host_state, x, ape, host_out, plans.compress, plans.write)
        windows += plans.num_compress
        assert int(dev["status"].item()) == 0
        assert dev["counts"].tolist() == [plans.num_compress, plans.num_write]
        assert to_numpy(torch, dev["compress"]).tobytes() == plans.compress.tobytes()
        assert to_numpy(torch, dev["state"]).tobytes() == host_state.tobytes(), f"replay {t}: state"
        assert agree(to_numpy(torch, dev["out"]), host_out, "f32", 8.0) == "", f"replay {t}"
    torch.cuda.synchronize()
    assert _memory(torch) == allocations
    checked(f"CUDA graph (h512_f32_f32_f32): device prefill planner + prefill captured once, 60 chunked-prefill "
            f"replays ({windows} windows) = host planner + host runner; no device allocation")


def test_no_allocation_in_eager_calls() -> None:
    torch = _torch()
    inst = c128.find_instance(512, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(51), 1.0, DECODE_FILLS * 4)
    t = [to_torch(torch, a) for a in (case.state, case.input, case.ape, case.output, case.plans[0])]
    bound = c128.Decode(*t)
    plan = DecodePlan(128, t[4])
    c128.decode(*t)
    compress_forward(t[0], t[1], t[2], plan, head_dim=512, compress_ratio=128, out=t[3])
    torch.cuda.synchronize()
    before = _memory(torch)
    for _ in range(200):
        c128.decode(*t)
        bound()
        compress_forward(t[0], t[1], t[2], plan, head_dim=512, compress_ratio=128, out=t[3])
    torch.cuda.synchronize()
    assert _memory(torch) == before


def test_repeated_calls() -> None:
    """Repeated calls on the same tensors (the binding remembers their checked launch) read the tensors'
    current contents, and a tensor of another shape at the same address is checked again."""
    torch = _torch()
    inst = c128.find_instance(256, "bf16", "f32", "bf16")
    case = decode_case(inst, np.random.default_rng(55), 1.0, DECODE_FILLS * 2)
    t = [to_torch(torch, a) for a in (case.state, case.input, case.ape, case.output, case.plans[0])]
    host_state, host_out = case.state.copy(), case.output.copy()
    for step in range(3):
        x = np.random.default_rng([56, step]).standard_normal(case.input.shape).astype(np.float32)
        t[1].copy_(torch.from_numpy(x))
        c128.decode(*t)
        c128.decode(host_state, x, case.ape, host_out, case.plans[0])
        assert to_numpy(torch, t[0]).tobytes() == host_state.tobytes()
        assert agree(to_numpy(torch, t[3]), host_out, "bf16", 8.0) == ""
    with pytest.raises(ValueError, match="^input: expected a contiguous tensor of shape"):
        c128.decode(t[0], t[1][:-1], t[2], t[3], t[4])
    with pytest.raises(ValueError, match="^output: "):
        c128.decode(t[0], t[1], t[2], t[3][:1], t[4])
    for _ in range(2):  # the second call takes the remembered launch: the same status
        with pytest.raises(c128.Error, match="INVALID_GROUP"):
            c128.decode(*t, requests_per_block=40)


@pytest.mark.parametrize("name", ["h512_f32_f32_f32", "h512_bf16_f32_f32", "h256_bf16_bf16_bf16"])
def test_sglang_drop_in_on_torch(name: str, checked) -> None:
    """compress_forward on PyTorch CUDA tensors with SGLang-shaped plan tuples (uint8 plan tensors on
    the device): the bytes c128.decode / c128.prefill give, and the reference."""
    torch = _torch()
    inst = next(i for i in INSTANCES if i.name == name)
    case = decode_case(inst, np.random.default_rng(61), 60.0, DECODE_FILLS * 4)
    a = [to_torch(torch, x) for x in (case.state, case.input, case.ape, case.output, case.plans[0])]
    b = [x.clone() for x in a]
    out = compress_forward(a[0], a[1], a[2], DecodePlan(128, a[4]), head_dim=inst.head_dim, compress_ratio=128,
                           out=a[3])
    c128.decode(*b)
    assert out is a[3] and torch.equal(a[0], b[0]) and torch.equal(a[3].view(torch.uint8), b[3].view(torch.uint8))
    assert case.check(to_numpy(torch, a[0]), to_numpy(torch, a[3])) == []
    pc = prefill_case(inst, np.random.default_rng(62), 1.0, PREFILL_SHAPES)
    p = [to_torch(torch, x) for x in (pc.state, pc.input, pc.ape, pc.output, *pc.plans)]
    out = compress_forward(p[0], p[1], p[2], PrefillPlan(128, p[4], p[5]), head_dim=inst.head_dim, compress_ratio=128)
    assert out.dtype == p[1].dtype and out.shape == (p[4].shape[0], inst.head_dim) and out.device == p[1].device
    got = to_numpy(torch, out)  # these instances have output dtype = input dtype, as the default out
    for row, ref in pc.windows.items():
        assert window_error(got[row], inst.input_dtype, ref) == ""
    with pytest.raises(TypeError, match="^ape: "):
        compress_forward(p[0], p[1], p[2].to(torch.bfloat16), PrefillPlan(128, p[4], p[5]), head_dim=inst.head_dim,
                         compress_ratio=128)
    if name == "h256_bf16_bf16_bf16":
        checked("SGLang drop-in (PyTorch CUDA): compress_forward decode and prefill = c128.decode / prefill bit for "
                "bit; default out allocated like SGLang's")


def test_cupy_arrays(checked) -> None:
    """CuPy arrays (through DLPack; bf16 as uint16 bits) on CuPy's current stream."""
    cupy = _cupy()
    for name in ("h512_f32_f32_f32", "h128_bf16_bf16_bf16"):
        inst = next(i for i in INSTANCES if i.name == name)
        for make, fn in ((lambda r: decode_case(inst, r, 60.0, DECODE_FILLS * 4), c128.decode),
                         (lambda r: prefill_case(inst, r, 60.0, PREFILL_SHAPES), c128.prefill)):
            case = make(np.random.default_rng(71))
            plans = [p.view(np.uint8).reshape(len(p), p.dtype.itemsize) for p in case.plans]
            with cupy.cuda.Stream(non_blocking=True) as s:
                dev = [cupy.asarray(x) for x in (case.state, case.input, case.ape, case.output, *plans)]
                fn(*dev)  # stream: CuPy's current, s
                gpu_state, gpu_out = cupy.asnumpy(dev[0], stream=s), cupy.asnumpy(dev[3], stream=s)
                s.synchronize()
            host_state, host_out = case.state.copy(), case.output.copy()
            fn(host_state, case.input, case.ape, host_out, *case.plans)
            assert gpu_state.tobytes() == host_state.tobytes()
            assert agree(gpu_out, host_out, inst.output_dtype, _kv_max(case)) == ""
            assert case.check(gpu_state, gpu_out) == []
    checked("CuPy arrays (DLPack, CuPy's current stream): decode and prefill = host runner")


def test_jax_inputs() -> None:
    """JAX arrays as the read-only inputs (input, ape, plans) beside PyTorch state and output."""
    torch = _torch()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp

        gpus = jax.devices("gpu")
    except Exception as e:  # noqa: BLE001 - any missing piece of JAX's GPU support
        pytest.skip(f"JAX with a GPU backend is not available ({type(e).__name__})")
    inst = c128.find_instance(512, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(81), 1.0, DECODE_FILLS * 4)
    state, out = to_torch(torch, case.state), to_torch(torch, case.output)
    x, ape = jax.device_put(jnp.asarray(case.input), gpus[0]), jax.device_put(jnp.asarray(case.ape), gpus[0])
    plans = jax.device_put(jnp.asarray(case.plans[0].view(np.uint8).reshape(-1, 16)), gpus[0])
    c128.decode(state, x, ape, out, plans, stream=torch.cuda.current_stream())
    host_state, host_out = case.state.copy(), case.output.copy()
    c128.decode(host_state, case.input, case.ape, host_out, case.plans[0])
    assert to_numpy(torch, state).tobytes() == host_state.tobytes()
    assert agree(to_numpy(torch, out), host_out, "f32", _kv_max(case)) == ""


def test_torch_other_device() -> None:
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    inst = c128.find_instance(128, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(91), 1.0, DECODE_FILLS)
    t = [to_torch(torch, a, "cuda:1") for a in (case.state, case.input, case.ape, case.output, case.plans[0])]
    with pytest.raises(ValueError, match="^state: the tensors are on cuda:1 but the current device is cuda:0"):
        c128.decode(*t)
    with torch.cuda.device(1):
        c128.decode(*t)
    host_state, host_out = case.state.copy(), case.output.copy()
    c128.decode(host_state, case.input, case.ape, host_out, case.plans[0])
    assert to_numpy(torch, t[0]).tobytes() == host_state.tobytes()
    mixed = [t[0], to_torch(torch, case.input, "cuda:0")] + t[2:]
    with torch.cuda.device(1), pytest.raises(ValueError, match="^input: on cuda:0, but state is on cuda:1"):
        c128.decode(*mixed)


# ---- state layouts, output_index, cache entries on the GPU --------------------------------------------------
@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("kind", ["dsv4_fp8", "dsv4_bf16"])
def test_torch_entries(kind: str, mode: str, checked) -> None:
    """Cache entries written by the GPU kernels (PyTorch tensors, a second call through the launch
    cache): within DESIGN 11.4 of the NumPy reference, nothing else of the cache written, the state
    bit for bit the host runner's; in an exact build the cache too equals the host runner's."""
    torch = _torch()
    from test_entries import POISON, EntryCase

    host = EntryCase("h512_f32_f32_f32", kind, mode, 8, seed=31)
    gpu = EntryCase("h512_f32_f32_f32", kind, mode, 8, seed=31)
    host_state = host.run()
    c = gpu.case
    t = {n: to_torch(torch, a) for n, a in (("state", c.state), ("input", c.input), ("ape", c.ape),
                                          ("index", gpu.index), ("gamma", gpu.gamma), ("rope", gpu.rope),
                                          ("cache", gpu.cache))}
    plans = [to_torch(torch, p) for p in c.plans]
    entry = c128.Entry(kind=kind, norm_weight=t["gamma"], rope_table=t["rope"], cache=t["cache"], entries_per_page=8,
                       eps=1e-6)
    for _ in range(2):  # the second call launches the cached struct
        t["cache"].fill_(POISON)
        state = t["state"].clone()
        if mode == "decode":
            c128.decode(state, t["input"], t["ape"], None, plans[0], output_index=t["index"],
                        entry=entry._replace(cache=t["cache"]))
        else:
            c128.prefill(state, t["input"], t["ape"], None, *plans, output_index=t["index"],
                         entry=entry._replace(cache=t["cache"]))
        torch.cuda.synchronize()
        gpu.cache[...] = to_numpy(torch, t["cache"])
        assert to_numpy(torch, state).tobytes() == host_state.tobytes()
        assert gpu.check() == []
        if EXACT:
            assert gpu.cache.tobytes() == host.cache.tobytes()
    if (kind, mode) == ("dsv4_bf16", "prefill"):
        checked(f"GPU cache entries (PyTorch): FP8 and BF16, decode and prefill within DESIGN 11.4 of the NumPy "
                f"reference{', bit for bit the host runner' if EXACT else ''}")


def _gpu_tensors(torch: Any, ec: Any) -> dict:
    """An EntryCase's tensors on the GPU, made once (so that repeated launches are the same tensors)."""
    if not hasattr(ec, "gpu"):
        c = ec.case
        ec.gpu = {n: to_torch(torch, a) for n, a in (("input", c.input), ("ape", c.ape), ("index", ec.index),
                                                   ("gamma", ec.gamma), ("rope", ec.rope), ("cache", ec.cache),
                                                   ("state", c.state), ("pristine", c.state))}
        ec.gpu["plans"] = [to_torch(torch, p) for p in c.plans]
    return ec.gpu


def _gpu_entry(torch: Any, ec: Any, workspace: Any = None) -> Any:
    g = _gpu_tensors(torch, ec)
    return c128.Entry(kind=ec.kind, norm_weight=g["gamma"], rope_table=g["rope"], cache=g["cache"],
                      entries_per_page=ec.per_page, eps=1e-6, workspace=workspace)


def _gpu_launch(torch: Any, ec: Any, workspace: Any = None, stream: Any = None) -> None:
    """ec's launch on the GPU (on `stream`, or the current one), its cache poisoned and its state restored
    first on the current stream."""
    g = _gpu_tensors(torch, ec)
    g["cache"].fill_(0xA5)
    g["state"].copy_(g["pristine"])
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream())
    fn = c128.decode if ec.mode == "decode" else c128.prefill
    fn(g["state"], g["input"], g["ape"], None, *g["plans"][:1 if ec.mode == "decode" else 2], output_index=g["index"],
       entry=_gpu_entry(torch, ec, workspace), stream=stream)
    if stream is not None:
        torch.cuda.current_stream().wait_stream(stream)


def _gpu_check(torch: Any, ec: Any) -> list:
    """ec's entries on the GPU against the NumPy reference, nothing else of its cache written, its state as the
    host runner writes it."""
    torch.cuda.synchronize()
    g = _gpu_tensors(torch, ec)
    ec.cache[...] = to_numpy(torch, g["cache"])
    problems = ec.check()
    if to_numpy(torch, g["state"]).tobytes() != ec.case.expected_state.tobytes():
        problems.append("the state differs from the host runner's")
    return problems


def _entry_cases(modes_and_layouts: list, seed: int) -> list:
    from test_entries import EntryCase

    out = []
    for k, (mode, layout) in enumerate(modes_and_layouts):
        out.append(EntryCase("h512_f32_f32_f32", "dsv4_fp8", mode, 8, seed=seed + k,
                             fills=layout if mode == "decode" else None, shapes=layout if mode == "prefill" else None))
    return out


_JOB_COUNTS = [("decode", [127, 0, 127]), ("decode", [127, 126, 127, 64, 127, 1, 127, 127] * 3),
               ("prefill", [(0, 300), (127, 1)]), ("decode", [127, 127]), ("prefill", PREFILL_SHAPES)]


def test_torch_entry_workspace_given(checked) -> None:
    """A given workspace on the GPU: too small or misaligned, c128.Error with C128_ERROR_WORKSPACE_TOO_SMALL /
    C128_ERROR_MISALIGNED, the cache and the workspace untouched; in host memory, a ValueError naming it;
    zeroed and big enough, one workspace shared by launches of other job counts in turn (each twice, the
    second through the remembered launch): the entries right and the workspace all zero after each."""
    torch = _torch()
    cases = _entry_cases(_JOB_COUNTS, 81)
    assert len({ec.jobs for ec in cases}) == len(cases)
    for ec in cases[:2]:
        need = c128.entry_workspace_bytes(ec.jobs, 512)
        for bad, status in ((torch.zeros(need - 4, dtype=torch.uint8, device="cuda"), "WORKSPACE_TOO_SMALL"),
                            (torch.zeros(need + 16, dtype=torch.uint8, device="cuda")[8:], "MISALIGNED")):
            with pytest.raises(c128.Error) as e:
                _gpu_launch(torch, ec, bad)
            assert e.value.status == c128.Status["ERROR_" + status] and "entry.workspace" in e.value.detail, e.value
            torch.cuda.synchronize()
            assert (to_numpy(torch, _gpu_tensors(torch, ec)["cache"]) == 0xA5).all()
            assert not bad.any().item(), "a refused launch wrote its workspace"
        with pytest.raises(ValueError, match="^entry.workspace: on host, but state is on cuda:"):
            _gpu_launch(torch, ec, np.zeros(need, np.uint8))
    ws = torch.zeros(max(c128.entry_workspace_bytes(ec.jobs, 512) for ec in cases), dtype=torch.uint8, device="cuda")
    for _ in range(2):
        for ec in cases:
            for _ in range(2):
                _gpu_launch(torch, ec, ws)
                assert _gpu_check(torch, ec) == [], (ec.mode, ec.jobs)
                assert not ws.any().item(), f"a launch of {ec.jobs} jobs left the workspace non-zero"
    checked(f"GPU cache-entry workspace (PyTorch): a given one too small / misaligned refused with its status; one "
            f"serves {len(cases)} job counts in turn, all zero after each launch")


def test_torch_entry_workspace_automatic(checked) -> None:
    """The binding's workspace on the GPU: launches of five job counts in turn, each twice (the second through
    the remembered launch), a bound Decode between them, then the same on a side stream (current, and as
    stream=): every entry right; one workspace a stream; nothing allocated once each stream has its own."""
    torch = _torch()
    cases = _entry_cases(_JOB_COUNTS, 90)
    assert len({ec.jobs for ec in cases}) == len(cases)
    first = cases[1]
    g = _gpu_tensors(torch, first)
    bound = c128.Decode(g["state"], g["input"], g["ape"], None, g["plans"][0], output_index=g["index"],
                        entry=_gpu_entry(torch, first))
    side = torch.cuda.Stream()
    for where in ("current", "side current", "side argument", "current again"):
        for ec in cases:
            for _ in range(2):
                if where == "side current":
                    with torch.cuda.stream(side):
                        _gpu_launch(torch, ec)
                else:
                    _gpu_launch(torch, ec, stream=side if where == "side argument" else None)
                assert _gpu_check(torch, ec) == [], (where, ec.mode, ec.jobs)
            g["cache"].fill_(0xA5)
            g["state"].copy_(g["pristine"])
            bound()
            assert _gpu_check(torch, first) == [], (where, "bound")
        if where == "side argument":
            before = _memory(torch)
    assert _memory(torch) == before, "launches allocated device memory once their streams had workspaces"
    streams = {key[2] for key in c128._workspaces if key[0] == "torch"}
    assert {torch.cuda.current_stream().cuda_stream, side.cuda_stream} <= streams
    checked(f"GPU cache-entry workspace (PyTorch): the binding's serves {len(cases)} job counts in turn, remembered "
            f"and bound launches, two streams; no allocation after the first launches")


def test_torch_entries_in_cuda_graphs(checked) -> None:
    """Cache-entry launches captured on a stream that ran none before (each then gets a workspace of its
    own, made and zeroed in the graph, and is not remembered) and on a warmed-up stream (its workspace,
    nothing made): replays of the graphs, in any order, with eager launches of other job counts between
    them, write the right entries, leave every workspace all zero and allocate nothing."""
    torch = _torch()
    cases = _entry_cases(_JOB_COUNTS[:4], 100)
    a, b, other, warm = cases
    fresh = []
    for _ in range(64):  # streams with no workspace yet (PyTorch hands out pooled streams)
        s = torch.cuda.Stream()
        if ("torch", torch.cuda.current_device(), s.cuda_stream) not in c128._workspaces:
            fresh.append(s)
            if len(fresh) == 2:
                break
    assert len(fresh) == 2
    capture, warmed = fresh
    _gpu_launch(torch, warm, stream=warmed)  # the warm-up: the stream's workspace, large enough for the captures
    _gpu_launch(torch, a, stream=warmed)
    assert _gpu_check(torch, a) == []
    graphs = []
    made = set(c128._graph_workspaces)
    kept = len(c128._kept)
    for ec, stream in ((a, capture), (b, capture), (a, warmed)):
        _gpu_tensors(torch, ec)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            g = ec.gpu
            fn = c128.decode if ec.mode == "decode" else c128.prefill
            fn(g["state"], g["input"], g["ape"], None, *g["plans"][:1 if ec.mode == "decode" else 2],
               output_index=g["index"], entry=_gpu_entry(torch, ec))
        graphs.append((ec, graph))
    made = c128._graph_workspaces - made
    assert len(made) == 2, "the captures on the fresh stream did not make a workspace each"
    assert len(c128._kept) == kept + 2, "the capture on the warmed-up stream made a workspace"
    assert not made & {ref._obj.entry.workspace for ref in c128._launch_cache.values()}, "a graph's one remembered"
    buffers = [buf for buf in c128._kept if isinstance(buf, torch.Tensor) and buf.data_ptr() in made]
    assert len(buffers) == 2
    buffers.append(c128._workspaces[("torch", torch.cuda.current_device(), warmed.cuda_stream)][0])
    _gpu_launch(torch, other)  # the current stream's workspace
    assert _gpu_check(torch, other) == []
    before = _memory(torch)
    for order in ((0, 1, 2), (2, 1, 0), (0, 0, 1, 1, 2, 2)):
        for k in order:
            ec, graph = graphs[k]
            ec.gpu["cache"].fill_(0xA5)
            ec.gpu["state"].copy_(ec.gpu["pristine"])
            graph.replay()
            assert _gpu_check(torch, ec) == [], (order, k)
            _gpu_launch(torch, other)
            assert _gpu_check(torch, other) == []
    assert _memory(torch) == before, "replays or eager launches allocated device memory"
    for ec, graph in graphs:  # (.any() allocates its result: checked after the count)
        ec.gpu["cache"].fill_(0xA5)
        ec.gpu["state"].copy_(ec.gpu["pristine"])
        graph.replay()
        assert _gpu_check(torch, ec) == []
        assert not any(buf.any().item() for buf in buffers), "a replay left a workspace non-zero"
    checked("GPU cache entries in CUDA graphs: captured on a fresh stream (a workspace of each launch's own, made in "
            "the graph) and on a warmed-up one (its workspace), replayed in any order between eager launches of other "
            "job counts: right entries, workspaces all zero, no allocation")


@pytest.mark.parametrize("layout_name", ["table8", "table32_planes", "table8_biased"])
def test_torch_layouts(layout_name: str) -> None:
    """A state layout on the GPU: the host runner's pooled rows (as the build promises) and state
    bit for bit, decode and prefill."""
    torch = _torch()
    from test_layouts import LAYOUTS, Layout

    inst = c128.find_instance(512, "f32", "f32", "f32")
    for mode in ("decode", "prefill"):
        rng = np.random.default_rng(5)
        case = decode_case(inst, rng, 60.0, DECODE_FILLS) if mode == "decode" else \
            prefill_case(inst, rng, 1.0, PREFILL_SHAPES)
        lay = Layout(rng, case.state.shape[0], 512, **LAYOUTS[layout_name])
        kv, sc = lay.store(case.state, case.ape)
        host_kv, host_sc, host_out = kv.copy(), None if sc is None else sc.copy(), case.output.copy()
        fn = c128.decode if mode == "decode" else c128.prefill
        fn(host_kv, case.input, case.ape, host_out, *case.plans, state_layout=lay.state_layout(host_sc))
        g = [to_torch(torch, a) for a in (kv, case.input, case.ape, case.output, *case.plans)]
        gsc = None if sc is None else to_torch(torch, sc)
        sl = lay.state_layout(gsc)
        sl = sl._replace(block_table=None if sl.block_table is None else to_torch(torch, sl.block_table),
                         score_block_table=None if sl.score_block_table is None else
                         to_torch(torch, sl.score_block_table))
        fn(*g, state_layout=sl)
        torch.cuda.synchronize()
        assert to_numpy(torch, g[0]).tobytes() == host_kv.tobytes()
        if sc is not None:
            assert to_numpy(torch, gsc).tobytes() == host_sc.tobytes()
        assert agree(to_numpy(torch, g[3]), host_out, "f32", _kv_max(case)) == ""


def test_torch_fused_drop_in() -> None:
    """compress_forward_norm_rope_store and compress_norm_rope_store on PyTorch CUDA tensors
    (complex64 freqs_cis) write the entries the host runner writes through the same functions
    (as the build promises: bit for bit in an exact build, within DESIGN 11.4 otherwise)."""
    torch = _torch()
    from c128.sglang import compress_forward_norm_rope_store, compress_norm_rope_store
    from test_sglang import _check_sglang_entries, _sglang_entry_case

    for mode in ("decode", "prefill"):
        case, plan, kw, table = _sglang_entry_case("h512_f32_f32_f32", mode, 9)
        host_cache = kw["kvcache"].copy()
        compress_forward_norm_rope_store(case.state.copy(), case.input, case.ape, plan, head_dim=512,
                                         **dict(kw, kvcache=host_cache))
        g = {n: to_torch(torch, v) for n, v in kw.items() if isinstance(v, np.ndarray) and n != "freq_cis"}
        g["freq_cis"] = torch.from_numpy(kw["freq_cis"]).cuda()
        gplan = type(plan)(128, *[to_torch(torch, np.ascontiguousarray(p)) for p in plan[1:3] if p is not None])
        args = dict(kw, **g)
        compress_forward_norm_rope_store(to_torch(torch, case.state), to_torch(torch, case.input),
                                         to_torch(torch, case.ape), gplan, head_dim=512, **args)
        torch.cuda.synchronize()
        kw["kvcache"][...] = to_numpy(torch, g["kvcache"])
        assert _check_sglang_entries(case, mode, kw, table) == []
        if EXACT:
            assert kw["kvcache"].tobytes() == host_cache.tobytes()
        # the pair: pooled rows on the GPU, then the one-hot store
        g["kvcache"].fill_(0xA5)
        kv = torch.zeros((len(case.plans[0]), 512), dtype=torch.float32, device="cuda")
        from c128.sglang import compress_forward as cf
        cf(to_torch(torch, case.state), to_torch(torch, case.input), to_torch(torch, case.ape), gplan, head_dim=512,
           compress_ratio=128, out=kv)
        compress_norm_rope_store(kv, gplan, **dict(kw, **g))
        torch.cuda.synchronize()
        kw["kvcache"][...] = to_numpy(torch, g["kvcache"])
        assert _check_sglang_entries(case, mode, kw, table, pooled=to_numpy(torch, kv)) == []
