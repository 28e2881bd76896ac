"""torch.ops.c128 (c128.torch): torch.library.opcheck on every operator (CPU tensors, the host
runner; CUDA variants marked gpu), decode and prefill steps under torch.compile(fullgraph=True)
equal to the eager calls bit for bit, the Python functions routing to the operators while
Dynamo traces, and on the GPU a compiled step (device planner + kernel) captured in a CUDA graph
and replayed with changing plans. Skipped as a whole without PyTorch."""

from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import c128  # noqa: E402
import c128.torch  # noqa: E402,F401  (registers torch.ops.c128)
from c128.sglang import DecodePlan, PrefillPlan, compress_forward  # noqa: E402
from cases import DECODE_FILLS, PREFILL_SHAPES, decode_case, prefill_case  # noqa: E402

OPS = torch.ops.c128
# opcheck's tests, without test_autograd_registration (no operator takes gradients: nothing to register)
OPCHECK = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def to_t(a: np.ndarray, device: str = "cpu") -> Any:
    """A NumPy case array as a tensor: record arrays as uint8 rows, uint16 bf16 bits as bfloat16."""
    if a.dtype.names:
        t = torch.from_numpy(a.view(np.uint8).reshape(len(a), a.dtype.itemsize).copy())
    elif a.dtype == np.uint16:
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a).copy())
    return t.to(device)


def to_np(t: Any) -> np.ndarray:
    t = t.detach().cpu()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def _bits(*tensors: Any) -> List[bytes]:
    return [to_np(t).tobytes() for t in tensors]


def _opcheck(op: Any, args: tuple, kwargs: dict) -> None:
    torch.library.opcheck(op, args, kwargs, test_utils=OPCHECK)


def _inst(name: str) -> c128.Instance:
    return next(i for i in c128.instances() if i.name == name)


def _decode_tensors(name: str, seed: int, device: str = "cpu"):
    case = decode_case(_inst(name), np.random.default_rng(seed), 60.0, DECODE_FILLS)
    return case, [to_t(a, device) for a in (case.state, case.input, case.ape, case.output, case.plans[0])]


def _prefill_tensors(name: str, seed: int, device: str = "cpu"):
    case = prefill_case(_inst(name), np.random.default_rng(seed), 1.0, PREFILL_SHAPES)
    return case, [to_t(a, device) for a in (case.state, case.input, case.ape, case.output, *case.plans)]


def test_registered() -> None:
    assert set(c128.torch.OPS) >= {"decode", "prefill", "plan_decode_device", "plan_prefill_device",
                                   "sglang_compress_forward", "sglang_compress_forward_norm_rope_store"}
    assert str(OPS.decode.default._schema).startswith(
        "c128::decode(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!) output, Tensor plans, *, int rank=0")
    schema = str(OPS.decode_extended.default._schema)
    assert schema.startswith("c128::decode_extended(Tensor(a!) state, Tensor input, Tensor ape, Tensor(b!)? output, ")
    assert "Tensor(c!)? score_plane" in schema and "Tensor(d!)? cache" in schema and schema.endswith("-> ()")
    assert "Tensor(e!)? workspace=None" in schema
    assert "Tensor(e!)? workspace=None" in str(OPS.prefill_extended.default._schema)


# ---- opcheck, CPU ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["h512_f32_f32_f32", "h512_bf16_f32_f32", "h128_bf16_bf16_bf16"])
def test_opcheck_decode_prefill(name: str, checked) -> None:
    _, t = _decode_tensors(name, 1)
    _opcheck(OPS.decode.default, tuple(t), {})
    _opcheck(OPS.decode.default, tuple(t), {"requests_per_block": 3})
    _, p = _prefill_tensors(name, 2)
    _opcheck(OPS.prefill.default, tuple(p), {"windows_per_block": 2})
    if name == "h128_bf16_bf16_bf16":
        checked("torch.ops.c128 (CPU): opcheck (schema, fake tensor, AOT dispatch with dynamic shapes) of decode and "
                "prefill, three instances; of the layout, output_index and cache-entry arguments; of the device "
                "planners and the adapters' operators")


def test_opcheck_layout_index_entry() -> None:
    from test_entries import EntryCase
    from test_layouts import LAYOUTS, Layout

    inst = _inst("h512_f32_f32_f32")
    rng = np.random.default_rng(5)
    case = decode_case(inst, rng, 60.0, DECODE_FILLS)
    lay = Layout(rng, case.state.shape[0], 512, **LAYOUTS["table32_planes"])
    kv, sc = lay.store(case.state, case.ape)
    sl = lay.state_layout(None)
    kw = dict(block_rows=sl.block_rows, block_table=to_t(sl.block_table), row_shift=sl.row_shift,
              score_plane=to_t(sc), output_index=torch.arange(len(case.input), dtype=torch.int64).flip(0))
    _opcheck(OPS.decode_extended.default, (to_t(kv), to_t(case.input), to_t(case.ape), to_t(case.output),
                                           to_t(case.plans[0])), kw)
    for mode in ("decode", "prefill"):
        e = EntryCase("h512_f32_f32_f32", "dsv4_fp8", mode, 8, seed=3)
        c = e.case
        kw = dict(output_index=to_t(e.index), entry_kind="dsv4_fp8", norm_weight=to_t(e.gamma), rope_table=to_t(e.rope),
                  cache=to_t(e.cache), entries_per_page=8)
        args = (to_t(c.state), to_t(c.input), to_t(c.ape), None, *[to_t(p) for p in c.plans])
        op = OPS.decode_extended.default if mode == "decode" else OPS.prefill_extended.default
        _opcheck(op, args, kw)
        # a given workspace (zero, and all zero again after each launch)
        need = c128.entry_workspace_bytes(len(c.plans[0]), 512)
        ws = torch.zeros(need, dtype=torch.uint8)
        _opcheck(op, args, dict(kw, workspace=ws))
        assert not ws.any()
        cache = to_t(e.cache)
        op(*args, **dict(kw, cache=cache, workspace=ws))
        e.run()
        assert cache.numpy().tobytes() == e.cache.tobytes()  # the binding's own workspace: the same entries
        with pytest.raises(c128.Error, match="WORKSPACE_TOO_SMALL"):
            op(*args, **dict(kw, cache=cache, workspace=ws[:need - 16]))


def test_opcheck_write_slots() -> None:
    """prefill_extended with write_slots / write_positions in place of write plans (None): opcheck, and the
    eager op's state bytes equal c128.prefill's."""
    rng = np.random.default_rng(9)
    d, b, blocks, t = 128, 8, 20, 37
    state = rng.standard_normal((blocks, b, 2 * d)).astype(np.float32)
    rows = rng.standard_normal((t, 2 * d)).astype(np.float32)
    ape = rng.standard_normal((128, d)).astype(np.float32)
    slots = rng.permutation(blocks * b)[:t].astype(np.int64)
    slots[5] = -1
    pos = rng.integers(0, 4096, t).astype(np.int64)
    kw = dict(block_rows=b, score_biased=True, write_slots=torch.from_numpy(slots),
              write_positions=torch.from_numpy(pos))
    args = (to_t(state), to_t(rows), to_t(ape), torch.zeros((0, d)), torch.zeros((0, 16), dtype=torch.uint8), None)
    _opcheck(OPS.prefill_extended.default, args, kw)
    OPS.prefill_extended(*args, **kw)
    want = state.copy()
    c128.prefill(want, rows, ape, np.zeros((0, d), np.float32), np.zeros((0, 16), np.uint8), None,
                 state_layout=c128.StateLayout(block_rows=b, score_biased=True), write_slots=slots, write_positions=pos)
    assert args[0].numpy().tobytes() == want.tobytes() and want.tobytes() != state.tobytes()


def test_opcheck_device_planners() -> None:
    ring_kw = dict(state_pages=16, ring_tokens=256, speculative=True)
    reqs = c128.requests([3, 0, 7, 5], [256, 0, 300, 129])
    n = len(reqs)
    ws = torch.zeros(c128.plan_workspace_size(n), dtype=torch.uint8)
    status = torch.full((1,), -1, dtype=torch.int32)
    _opcheck(OPS.plan_decode_device.default, (torch.from_numpy(reqs), torch.zeros((n, 16), dtype=torch.uint8), status,
                                              ws), ring_kw)
    seq = torch.tensor([256, 0, 300, 129], dtype=torch.int32)
    pool = torch.tensor([3, 0, 7, 5], dtype=torch.int32)
    _opcheck(OPS.plan_decode_device.default, (None, torch.zeros((n, 16), dtype=torch.uint8), status, ws),
             dict(ring_kw, seq_lens=seq, pool_indices=pool))
    prefill_reqs = c128.requests([3, 1, 7, 5], [256, 0, 300, 129], [200, 0, 44, 129])
    cap = int(prefill_reqs[:, 2].sum())
    out = (torch.zeros((cap, 16), dtype=torch.uint8), torch.zeros((cap, 8), dtype=torch.uint8),
           torch.zeros(2, dtype=torch.int64), status, ws)
    _opcheck(OPS.plan_prefill_device.default, (torch.from_numpy(prefill_reqs), *out), dict(ring_kw, verify=False))
    qs = torch.tensor([0, 200, 200, 244, 373], dtype=torch.int32)
    _opcheck(OPS.plan_prefill_device.default, (None, *out),
             dict(ring_kw, seq_lens=torch.tensor([256, 0, 300, 129], dtype=torch.int32), query_start=qs,
                  pool_indices=pool))
    # the operator's plans are the host planner's
    plans = torch.zeros((n, 16), dtype=torch.uint8)
    OPS.plan_decode_device(torch.from_numpy(reqs), plans, status, ws, **ring_kw)
    assert int(status) == 0
    host = c128.plan_decode(c128.Ring(16, ring_tokens=256, speculative=True), reqs)
    assert plans.numpy().tobytes() == host.tobytes()


def test_opcheck_sglang() -> None:
    _, t = _decode_tensors("h512_f32_f32_f32", 7)
    _opcheck(OPS.sglang_compress_forward.default, (t[0], t[1], t[2], t[4], None, t[3]),
             dict(is_decode=True, head_dim=512))
    _, p = _prefill_tensors("h512_bf16_f32_f32", 8)
    _opcheck(OPS.sglang_compress_forward.default, (p[0], p[1], p[2], p[4], p[5], p[3]),
             dict(is_decode=False, head_dim=512))


def test_opcheck_vllm() -> None:
    from test_vllm import D, VllmModel

    m = VllmModel(np.random.default_rng(3), 2, 300)
    rows, pos, req, slot, qs = m.batch(np.array([130, 127]))
    r = torch.from_numpy(rows)
    _opcheck(OPS.vllm_save_partial_states.default, (r[:, :D], r[:, D:], torch.from_numpy(m.ape), torch.from_numpy(pos),
                                                    torch.from_numpy(m.state), torch.from_numpy(slot), 8, D, 128), {})
    out = torch.zeros((len(pos), D))
    _opcheck(OPS.vllm_compress_c128.default, (torch.from_numpy(m.state), torch.from_numpy(req), torch.from_numpy(pos),
                                              torch.from_numpy(slot), torch.from_numpy(m.table), out), {})


def test_opcheck_trtllm() -> None:
    from test_trtllm import D, TrtModel

    m = TrtModel(np.random.default_rng(4), 2, 400, 128)
    x, (kv_lens, start, cu, comp), _ = m.step(np.array([130, 256]))
    t = [torch.from_numpy(a) for a in (x, m.ape, m.kv, m.sc, m.t_kv, m.t_sc)]
    out = torch.zeros((int(comp[-1]), D))
    meta = [torch.from_numpy(a) for a in (kv_lens, start, cu, comp)]
    _opcheck(OPS.compressor_prefill_reduction.default, (*t, out, *meta, 2, 128, D, 128, int(comp[-1])), {})
    x, (kv_lens, _, cu, comp), _ = m.step(np.array([2, 2]))  # a generation batch: next_n 2 new tokens each
    t[0] = torch.from_numpy(x)
    meta = [torch.from_numpy(a) for a in (kv_lens, cu, comp)]
    out = torch.zeros((max(int(comp[-1]), 1), D))
    _opcheck(OPS.compressor_paged_kv_compress.default, (*t, out, *meta, 2, 128, D, 128, 2), {})


# ---- torch.compile -------------------------------------------------------------------------------------------
def _compile(fn: Any) -> Any:
    """fn compiled with the default backend (Inductor), fullgraph: a graph break is an error. No
    compiled-graph cache across runs (one compiled before an operator's schema changed would call it
    with the old arguments)."""
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True)


@pytest.mark.parametrize("how", ["functions", "ops", "bound", "sglang"])
def test_compiled_equals_eager(how: str, checked) -> None:
    """A decode step and a prefill step under torch.compile(fullgraph=True) (a graph break fails
    the compile) write the eager call's bytes, and those are the reference's."""
    dcase, d = _decode_tensors("h512_bf16_f32_f32", 11)
    pcase, p = _prefill_tensors("h512_bf16_f32_f32", 12)
    if how == "functions":
        def step(d, p):
            c128.decode(*d)
            c128.prefill(*p)
    elif how == "ops":
        def step(d, p):
            OPS.decode(*d)
            OPS.prefill(*p)
    elif how == "bound":
        dec, pre = c128.Decode(*d), c128.Prefill(*p)  # bound to d and p: the step's tensors

        def step(d, p):
            dec()
            pre()
    else:
        def step(d, p):
            compress_forward(d[0], d[1], d[2], DecodePlan(128, d[4]), head_dim=512, compress_ratio=128, out=d[3])
            compress_forward(p[0], p[1], p[2], PrefillPlan(128, p[4], p[5]), head_dim=512, compress_ratio=128,
                             out=p[3])
    eager_d, eager_p = [t.clone() for t in d], [t.clone() for t in p]
    c128.decode(*eager_d)
    c128.prefill(*eager_p)
    compiled = _compile(step)
    compiled(d, p)
    assert _bits(d[0], d[3], p[0], p[3]) == _bits(eager_d[0], eager_d[3], eager_p[0], eager_p[3])
    assert dcase.check(to_np(d[0]), to_np(d[3])) == [] and pcase.check(to_np(p[0]), to_np(p[3])) == []
    if how == "sglang":
        checked("torch.compile(fullgraph=True) (CPU): decode + prefill through c128.decode / prefill, torch.ops.c128, "
                "bound Decode / Prefill and the SGLang drop-in: no graph break, bit for bit the eager calls")


@pytest.mark.parametrize("workspace", ["automatic", "given"])
def test_compiled_entries(workspace: str) -> None:
    """Cache-entry decode and prefill launches under torch.compile(fullgraph=True), with the binding's
    workspace or a given one that both share (their job counts differ): the eager calls' cache bytes,
    and those are right (the NumPy reference); the given workspace is all zero after each run."""
    from test_entries import POISON, EntryCase

    cases = [EntryCase("h512_f32_f32_f32", "dsv4_fp8", mode, 8, seed=31 + k) for k, mode in
             enumerate(["decode", "prefill"])]
    ws = None
    if workspace == "given":
        assert cases[0].jobs != cases[1].jobs
        ws = torch.zeros(max(c128.entry_workspace_bytes(e.jobs, 512) for e in cases), dtype=torch.uint8)
    t = []
    for e in cases:
        c = e.case
        t.append(dict(state=to_t(c.state), x=to_t(c.input), ape=to_t(c.ape), plans=[to_t(p) for p in c.plans],
                      entry=c128.Entry(kind="dsv4_fp8", norm_weight=to_t(e.gamma), rope_table=to_t(e.rope),
                                       cache=to_t(e.cache), entries_per_page=8, workspace=ws),
                      index=to_t(e.index)))

    def step(d, p):
        c128.decode(d["state"], d["x"], d["ape"], None, d["plans"][0], output_index=d["index"], entry=d["entry"])
        c128.prefill(p["state"], p["x"], p["ape"], None, *p["plans"], output_index=p["index"], entry=p["entry"])

    compiled = _compile(step)
    compiled(*t)
    for e, d in zip(cases, t):
        e.run()
        assert d["entry"].cache.numpy().tobytes() == e.cache.tobytes()
        assert e.check() == []
        assert d["state"].numpy().tobytes() == e.case.expected_state.tobytes()
        if workspace == "given":
            assert not d["entry"].workspace.any()
        d["entry"].cache.fill_(POISON)
        d["state"].copy_(to_t(e.case.state))
    compiled(*t)  # again: the compiled graph's second run
    for e, d in zip(cases, t):
        assert d["entry"].cache.numpy().tobytes() == e.cache.tobytes()
    assert ws is None or not ws.any()


def test_compiled_planner_and_decode() -> None:
    """The device planner (host runner of its kernels on CPU tensors) and decode in one compiled
    function, over steps with changing requests: the eager planner's and the host runner's bytes."""
    inst = _inst("h512_f32_f32_f32")
    d, batch, pages = 512, 4, 6
    ring = c128.Ring(pages)
    rng = np.random.default_rng(21)
    state = torch.from_numpy(rng.standard_normal((pages, 128, 2 * d)).astype(np.float32))
    ape = torch.from_numpy((0.5 * rng.standard_normal((128, d))).astype(np.float32))
    out = torch.zeros((batch, d))
    ws = torch.zeros(c128.plan_workspace_size(batch), dtype=torch.uint8)
    status = torch.zeros(1, dtype=torch.int32)
    plans = torch.zeros((batch, 16), dtype=torch.uint8)

    def step(seq_lens, pool, x):
        c128.plan_decode_device(ring, None, plans, status, ws, seq_lens=seq_lens, pool_indices=pool)
        c128.decode(state, x, ape, out, plans)

    compiled = _compile(step)
    host_state, host_out = state.clone(), out.clone()
    pool = torch.tensor([4, 0, 2, 5], dtype=torch.int32)
    seqs = np.array([126, 200, 0, 1])
    for t in range(4):
        seqs[seqs > 0] += 1
        x = torch.from_numpy(np.random.default_rng([22, t]).standard_normal((batch, 2 * d)).astype(np.float32))
        compiled(torch.tensor(seqs, dtype=torch.int32), pool, x)
        host_plans = c128.plan_decode(ring, c128.requests(pool.numpy(), seqs))
        c128.decode(host_state, x, ape, host_out, host_plans)
        assert int(status) == 0 and plans.numpy().tobytes() == host_plans.tobytes()
        assert _bits(state, out) == _bits(host_state, host_out), f"step {t}"
    del inst


def test_compile_needs_the_module(monkeypatch) -> None:
    """Without c128.torch imported, a traced call says what to import (rather than a graph break)."""
    import sys

    monkeypatch.delitem(sys.modules, "c128.torch")
    monkeypatch.setattr(c128, "_compiling", lambda: True)
    with pytest.raises(RuntimeError, match="import c128.torch"):
        c128.decode(None, None, None, None, None)


# ---- GPU --------------------------------------------------------------------------------------------------------
def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")


@pytest.mark.gpu
def test_gpu_opcheck() -> None:
    _cuda()
    for name in ("h512_f32_f32_f32", "h512_bf16_f32_f32"):
        _, t = _decode_tensors(name, 31, "cuda")
        _opcheck(OPS.decode.default, tuple(t), {})
        _, p = _prefill_tensors(name, 32, "cuda")
        _opcheck(OPS.prefill.default, tuple(p), {})
    reqs = torch.from_numpy(c128.requests([3, 0, 7, 5], [256, 0, 300, 129])).cuda()
    ws = torch.zeros(c128.plan_workspace_size(4), dtype=torch.uint8, device="cuda")
    status = torch.zeros(1, dtype=torch.int32, device="cuda")
    _opcheck(OPS.plan_decode_device.default, (reqs, torch.zeros((4, 16), dtype=torch.uint8, device="cuda"), status,
                                              ws), dict(state_pages=16, ring_tokens=256, speculative=True))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_gpu_compiled_step_in_a_cuda_graph(mode: str, checked) -> None:
    """A compiled step (device planner + kernel, fullgraph) equals the eager step bit for bit, and
    captured in a CUDA graph, replayed with changing requests, equals the eager step each time."""
    _cuda()
    d, n, pages, capacity = 512, 6, 12, 384
    ring = c128.Ring(pages)
    rng = np.random.default_rng(41)
    pool = torch.from_numpy(rng.permutation(pages)[:n].astype(np.int32)).cuda()
    state0 = rng.standard_normal((pages, 128, 2 * d)).astype(np.float32)
    ape = torch.from_numpy((0.5 * rng.standard_normal((128, d))).astype(np.float32)).cuda()
    rows = n if mode == "decode" else capacity

    def buffers():
        return dict(state=torch.from_numpy(state0.copy()).cuda(), x=torch.zeros((rows, 2 * d), device="cuda"),
                    out=torch.full((rows, d), float("nan"), device="cuda"),
                    seq=torch.zeros(n, dtype=torch.int32, device="cuda"),
                    qs=torch.zeros(n + 1, dtype=torch.int32, device="cuda"),
                    plans=torch.zeros((n, 16), dtype=torch.uint8, device="cuda"),
                    compress=torch.zeros((capacity, 16), dtype=torch.uint8, device="cuda"),
                    write=torch.zeros((capacity, 8), dtype=torch.uint8, device="cuda"),
                    counts=torch.zeros(2, dtype=torch.int64, device="cuda"),
                    status=torch.zeros(1, dtype=torch.int32, device="cuda"),
                    ws=torch.zeros(c128.plan_workspace_size(n), dtype=torch.uint8, device="cuda"))

    def step(b):
        if mode == "decode":
            c128.plan_decode_device(ring, None, b["plans"], b["status"], b["ws"], seq_lens=b["seq"], pool_indices=pool)
            c128.decode(b["state"], b["x"], ape, b["out"], b["plans"])
        else:
            c128.plan_prefill_device(ring, None, b["compress"], b["write"], b["counts"], b["status"], b["ws"],
                                     seq_lens=b["seq"], query_start=b["qs"], pool_indices=pool)
            c128.prefill(b["state"], b["x"], ape, b["out"], b["compress"], b["write"])

    graph_b, eager_b = buffers(), buffers()
    compiled = _compile(step)
    compiled(graph_b)  # all requests absent: compiles and warms up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        compiled(graph_b)
    # decode: requests already 100..126 tokens long (their rows in the random state), so that the
    # 40 steps cross window boundaries; prefill: from empty
    lens = np.random.default_rng(44).integers(100, 127, n) if mode == "decode" else np.zeros(n, np.int64)
    windows = 0
    for t in range(40):
        ext = np.ones(n, np.int64) if mode == "decode" else np.random.default_rng([42, t]).integers(0, capacity // n, n)
        lens += ext
        seq = np.where(ext > 0, lens, 0).astype(np.int32)
        qs = np.concatenate([[0], np.cumsum(ext)]).astype(np.int32)
        x = torch.from_numpy(np.random.default_rng([43, t]).standard_normal((rows, 2 * d)).astype(np.float32))
        for b in (graph_b, eager_b):
            b["seq"].copy_(torch.from_numpy(seq))
            b["qs"].copy_(torch.from_numpy(qs))
            b["x"].copy_(x)
        graph.replay()
        step(eager_b)
        windows += int(np.sum((lens // 128) - ((lens - ext) // 128)))
        torch.cuda.synchronize()
        assert int(graph_b["status"]) == 0
        assert _bits(graph_b["state"], graph_b["out"]) == _bits(eager_b["state"], eager_b["out"]), f"replay {t}"
    assert windows > 0
    checked(f"torch.compile + CUDA graph ({mode}): device planner + {mode} compiled with fullgraph, captured once, "
            f"40 replays with changing requests ({windows} windows) = the eager step bit for bit")


def test_repeated_calls_on_the_same_tensors() -> None:
    """Repeated calls on the same tensor objects (remembered: found by identity) read the tensors'
    current contents and are checked again when a tensor got new storage or another shape in place."""
    case, t = _decode_tensors("h256_bf16_f32_bf16", 51)
    host_state, host_out = case.state.copy(), case.output.copy()
    for step in range(3):
        x = np.random.default_rng([52, step]).standard_normal(case.input.shape).astype(np.float32)
        if step == 2:  # new storage for the same object
            t[1].set_(torch.from_numpy(x.copy()))
        else:
            t[1].copy_(torch.from_numpy(x))
        (OPS.decode if step % 2 else c128.decode)(*t)
        c128.decode(host_state, x, case.ape, host_out, case.plans[0])
        assert _bits(t[0], t[3]) == [host_state.tobytes(), host_out.tobytes()], f"step {step}"
    t[3].resize_(1, t[3].shape[1])
    with pytest.raises(ValueError, match="^output: "):
        c128.decode(*t)
    with pytest.raises(ValueError, match="^output: "):
        OPS.decode(*t)
