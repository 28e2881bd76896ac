"""The SGLang drop-in on NumPy arrays: compress_forward with SGLang's plan tuples (uint8 plan
tensors) gives what c128.decode / c128.prefill give; what it refuses, it names."""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import pytest

import c128
from c128.sglang import DecodePlan, PrefillPlan, compress_forward
from cases import DECODE_FILLS, PREFILL_SHAPES, decode_case, prefill_case


class CompressorDecodePlan(NamedTuple):
    """The shape of SGLang's own plan class (duck typing: no import of SGLang)."""

    compress_ratio: int
    plan_d: np.ndarray

    @property
    def is_decode(self) -> bool:
        return True


class CompressorPrefillPlan(NamedTuple):
    compress_ratio: int
    plan_c: np.ndarray
    plan_w: np.ndarray
    pin_buffer: Optional[np.ndarray] = None

    @property
    def is_decode(self) -> bool:
        return False


def _u8(plans: np.ndarray, width: int) -> np.ndarray:
    return plans.view(np.uint8).reshape(-1, width)


@pytest.mark.parametrize("name", ["h512_f32_f32_f32", "h512_bf16_f32_f32", "h128_bf16_bf16_bf16"])
@pytest.mark.parametrize("plan_class", ["c128", "sglang"])
def test_decode_and_prefill(name: str, plan_class: str, checked) -> None:
    inst = next(i for i in c128.instances() if i.name == name)
    dp, pp = (DecodePlan, PrefillPlan) if plan_class == "c128" else (CompressorDecodePlan, CompressorPrefillPlan)
    case = decode_case(inst, np.random.default_rng(1), 60.0, DECODE_FILLS)
    out = compress_forward(case.state, case.input, case.ape, dp(128, _u8(case.plans[0], 16)), head_dim=inst.head_dim,
                           compress_ratio=128, out=case.output)
    assert out is case.output and case.check(case.state, case.output) == []
    case = prefill_case(inst, np.random.default_rng(2), 1.0, PREFILL_SHAPES)
    plan = pp(128, _u8(case.plans[0], 16), _u8(case.plans[1], 8))
    compress_forward(case.state, case.input, case.ape, plan, inst.head_dim, 128, case.output)
    assert case.check(case.state, case.output) == []
    if name == "h128_bf16_bf16_bf16" and plan_class == "sglang":
        checked("SGLang drop-in (NumPy): compress_forward decode and prefill with SGLang's plan tuples = the "
                "reference; ratio 4, online mode, bf16 ape refused by name")


def test_default_out() -> None:
    """out=None: a new array of the input's dtype, (plan rows, head_dim), as SGLang allocates it."""
    inst = c128.find_instance(256, "f32", "bf16", "bf16")
    case = prefill_case(inst, np.random.default_rng(3), 1.0, PREFILL_SHAPES)
    plan = PrefillPlan(128, _u8(case.plans[0], 16), _u8(case.plans[1], 8))
    out = compress_forward(case.state, case.input, case.ape, plan, head_dim=256, compress_ratio=128)
    assert out.shape == (len(case.plans[0]), 256) and out.dtype == case.input.dtype
    from cases import window_error

    for row, ref in case.windows.items():
        assert window_error(out[row], "bf16", ref) == ""


def test_refusals() -> None:
    inst = c128.find_instance(128, "f32", "f32", "f32")
    case = decode_case(inst, np.random.default_rng(4), 1.0, DECODE_FILLS)
    plan = DecodePlan(128, _u8(case.plans[0], 16))
    before = (case.state.copy(), case.output.copy())
    kw = dict(head_dim=128, compress_ratio=128, out=case.output)
    with pytest.raises(ValueError, match="^compress_ratio: c128 implements ratio 128 only, got 4"):
        compress_forward(case.state, case.input, case.ape, plan, **dict(kw, compress_ratio=4))
    with pytest.raises(ValueError, match="^is_online: "):
        compress_forward(case.state, case.input, case.ape, plan, **kw, is_online=True)
    with pytest.raises(ValueError, match="^plan: its compress_ratio is 4"):
        compress_forward(case.state, case.input, case.ape, DecodePlan(4, plan.plan_d), **kw)
    with pytest.raises(TypeError, match="^plan: expected SGLang's"):
        compress_forward(case.state, case.input, case.ape, plan.plan_d, **kw)
    with pytest.raises(TypeError, match="^ape: expected float32 .*got bf16|^ape: expected float32"):
        compress_forward(case.state, case.input, c128.bf16_from_float(case.ape), plan, **kw)
    with pytest.raises(ValueError, match="^head_dim: 256, but kv_score_buffer rows hold 256 = 2 \\* 128"):
        compress_forward(case.state, case.input, case.ape, plan, **dict(kw, head_dim=256))
    with pytest.raises(ValueError, match="^kv_score_input: expected a contiguous tensor of shape"):
        compress_forward(case.state, case.input[:, :200].copy(), case.ape, plan, **kw)
    with pytest.raises(ValueError, match="^out: "):
        compress_forward(case.state, case.input, case.ape, plan, **dict(kw, out=case.output[:1].copy()))
    with pytest.raises(ValueError, match="^plan.plan_d: "):
        compress_forward(case.state, case.input, case.ape, DecodePlan(128, plan.plan_d[:, :8].copy()), **kw)
    with pytest.raises(c128.Error, match="INVALID_LAYOUT"):
        compress_forward(case.state, case.input, case.ape, plan, **kw, shared_state_layout=(1, 1, 0))
    with pytest.raises(TypeError, match="^out: pass out="):
        compress_forward(case.state, case.input.tolist(), case.ape, plan, head_dim=128, compress_ratio=128)
    assert case.state.tobytes() == before[0].tobytes() and case.output.tobytes() == before[1].tobytes()


# ---- the cache-entry drop-ins ------------------------------------------------------------------------------
def _sglang_entry_case(name: str, mode: str, seed: int):
    """A case of cases.py at head_dim 512 with SGLang's entry arguments: complex64 freqs_cis, an
    FP8 kvcache of FlashMLA's page size, out_loc per input row, page_size 4."""
    import entries as E

    inst = next(i for i in c128.instances() if i.name == name)
    rng = np.random.default_rng(seed)
    case = decode_case(inst, rng, 1.0, DECODE_FILLS) if mode == "decode" else prefill_case(inst, rng, 1.0,
                                                                                            PREFILL_SHAPES)
    plan = DecodePlan(128, _u8(case.plans[0], 16)) if mode == "decode" else \
        PrefillPlan(128, _u8(case.plans[0], 16), _u8(case.plans[1], 8))
    page_size = 4
    rows = len(case.input)
    pages = -(-2 * rows // page_size)
    kvcache = np.full((pages, E.page_bytes("dsv4_fp8", 512, page_size)), 0xA5, np.uint8)
    table = E.rope_table(rng, 1024)
    freqs = (table[..., 0] + 1j * table[..., 1]).astype(np.complex64)
    out_loc = rng.permutation(pages * page_size)[:rows].astype(np.int64)
    kw = dict(norm_weight=E.gamma(rng, 512), norm_eps=1e-6, freq_cis=freqs, out_loc=out_loc, kvcache=kvcache,
              page_size=page_size)
    return case, plan, kw, table


def _check_sglang_entries(case, mode, kw, table, pooled=None) -> list:
    """Every window's entry against entries.py (fp64 oracle, or the chain on `pooled` rows)."""
    import entries as E
    from cases import BF16_ABS, BF16_REL, to_f64

    problems = []
    c = case.plans[0]
    locs = []
    for key, y in case.windows.items():
        pos = int(c[key]["seq_len"]) - 128
        row = key if mode == "decode" else int(c[key]["ragged_id"])
        loc = int(kw["out_loc"][row])
        locs.append(loc)
        if pooled is not None:
            y = to_f64(pooled[key], "f32" if pooled.dtype == np.float32 else "bf16")
        err = 0.0 if pooled is not None else BF16_REL * np.abs(y) + BF16_ABS
        o = E.oracle(y, err, kw["norm_weight"], kw["norm_eps"], table[pos])
        why = E.check_entry(kw["kvcache"], "dsv4_fp8", 512, kw["page_size"], kw["kvcache"].shape[1], loc, o)
        if why:
            problems.append(f"window {key}: {why}")
    mask = E.written_mask(kw["kvcache"].size, "dsv4_fp8", 512, kw["page_size"], kw["kvcache"].shape[1], locs)
    if ((kw["kvcache"].reshape(-1) != 0xA5) & ~mask).any():
        problems.append("cache bytes written outside the windows' entries")
    return problems


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("name", ["h512_f32_f32_f32", "h512_bf16_f32_f32", "h512_bf16_bf16_bf16"])
def test_fused_drop_in(name: str, mode: str, checked) -> None:
    """compress_forward_norm_rope_store (one launch) = the reference entries of DESIGN 11 and the
    state compress_forward writes; compress_forward then compress_norm_rope_store (SGLang's pair,
    the second on c128's one-hot windows) writes the same bytes when the pooled rows are f32 (the
    fused launch rounds the same f32 vector to bf16), and entries within DESIGN 11.4 of the chain
    on the pooled rows otherwise."""
    from c128.sglang import compress_forward_norm_rope_store, compress_norm_rope_store

    case, plan, kw, table = _sglang_entry_case(name, mode, 7)
    state = case.state.copy()
    compress_forward_norm_rope_store(state, case.input, case.ape, plan, head_dim=512, compress_ratio=128, **kw)
    assert state.tobytes() == case.expected_state.tobytes()
    assert _check_sglang_entries(case, mode, kw, table) == []
    fused = kw["kvcache"].copy()
    # SGLang's two calls
    kw["kvcache"][...] = 0xA5
    state = case.state.copy()
    kv = compress_forward(state, case.input, case.ape, plan, head_dim=512, compress_ratio=128)
    compress_norm_rope_store(kv, plan, **kw)
    assert _check_sglang_entries(case, mode, kw, table, pooled=kv) == []
    if kv.dtype == np.float32:
        assert kw["kvcache"].tobytes() == fused.tobytes()
    if (name, mode) == ("h512_bf16_bf16_bf16", "prefill"):
        checked("SGLang cache-entry drop-ins (NumPy): compress_forward_norm_rope_store and compress_forward + "
                "compress_norm_rope_store within DESIGN 11.4 of the NumPy reference, byte-identical for f32 rows")


def test_one_hot_windows_pool_to_the_row() -> None:
    """compress_norm_rope_store's windows (127 rows of score -1e30 from a constant page, the row
    with score 0 last) pool to the row itself, bit for bit, f32 and bf16, extreme values included."""
    from c128 import sglang as s

    for dtype in (np.float32, np.uint16):
        rng = np.random.default_rng(1)
        rows = (rng.standard_normal((6, 512)) * np.float32(1e3)).astype(np.float32)
        rows[0, :4] = [3.4e38, -3.4e38, 1e-38, 0.0]
        kv = rows if dtype == np.float32 else c128.bf16_from_float(rows)
        plan = DecodePlan(128, c128.plan_decode(c128.Ring(8), [(i, 128 * (i + 1), 1) for i in range(6)]).view(
            np.uint8).reshape(-1, 16))
        state, ape, write_plans, x, plans, _ = s._stage_numpy(kv, plan.plan_d, np.arange(6, dtype=np.int64), True)
        out = np.zeros((6, 512), dtype)
        c128.prefill(state.copy(), x, ape, out, plans, write_plans)
        assert out.tobytes() == kv.tobytes()


def test_entry_drop_in_refusals() -> None:
    from c128.sglang import compress_forward_norm_rope_store, compress_norm_rope_store

    case, plan, kw, _ = _sglang_entry_case("h512_f32_f32_f32", "decode", 3)
    fused = lambda **changes: compress_forward_norm_rope_store(case.state, case.input, case.ape, plan,
                                                               **{**kw, "head_dim": 512, **changes})
    kv = np.zeros((len(case.input), 512), np.float32)
    store = lambda **changes: compress_norm_rope_store(kv, plan, **dict(kw, **changes))
    before = (case.state.copy(), kw["kvcache"].copy())
    for fn in (fused, store):
        with pytest.raises(ValueError, match="^use_fp4: "):
            fn(use_fp4=True)
        with pytest.raises(ValueError, match="^bf16_store: "):
            fn(bf16_store=True)
        with pytest.raises(TypeError, match="^norm_weight: expected float32"):
            fn(norm_weight=c128.bf16_from_float(kw["norm_weight"]))
        with pytest.raises(ValueError, match="^freq_cis: expected a contiguous tensor of shape"):
            fn(freq_cis=kw["freq_cis"][:, :16].copy())
        with pytest.raises(TypeError, match="^out_loc: expected"):
            fn(out_loc=kw["out_loc"].astype(np.int32))
        with pytest.raises(TypeError, match="^kvcache: expected a uint8"):
            fn(kvcache=kw["kvcache"].view(np.float32))
        with pytest.raises(c128.Error, match="INVALID_ENTRY"):
            fn(page_size=3)
        with pytest.raises(TypeError, match="^page_size: expected an integer"):
            fn(page_size=4.0)
    with pytest.raises(TypeError, match="^plan: expected SGLang's"):
        compress_forward_norm_rope_store(case.state, case.input, case.ape, plan.plan_d, head_dim=512, **kw)
    with pytest.raises(TypeError, match="^plan: expected SGLang's"):
        compress_norm_rope_store(kv, plan.plan_d, **kw)
    with pytest.raises(ValueError, match="^head_dim: 256, but kv_score_buffer"):
        fused(head_dim=256)
    with pytest.raises(ValueError, match="^compress_ratio: "):
        fused(compress_ratio=4)
    with pytest.raises(ValueError, match="^out_loc: expected a contiguous int64 tensor of shape \\(>= 9,\\)"):
        fused(out_loc=kw["out_loc"][:3].copy())
    with pytest.raises(ValueError, match="^head_dim: 128; c128 writes DeepSeek-V4's FlashMLA entry"):
        compress_norm_rope_store(np.zeros((len(case.input), 128), np.float32), plan, **kw)
    with pytest.raises(ValueError, match="^plan: 9 plans, kv 2 rows"):
        compress_norm_rope_store(kv[:2].copy(), plan, **kw)
    with pytest.raises(TypeError, match="^kv: expected a PyTorch tensor or a NumPy array"):
        compress_norm_rope_store(kv.tolist(), plan, **kw)
    assert case.state.tobytes() == before[0].tobytes() and kw["kvcache"].tobytes() == before[1].tobytes()
