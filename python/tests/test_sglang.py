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
