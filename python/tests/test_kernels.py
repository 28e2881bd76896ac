"""Every default instance, decode and prefill on NumPy arrays (the host runner) against the
float64 reference: random data (randn, and scores of magnitude ~60), poisoned outputs, exactly
the intended state rows and output rows changed."""

from __future__ import annotations

import numpy as np
import pytest

import c128
from cases import DECODE_FILLS, PREFILL_SHAPES, decode_case, prefill_case

INSTANCES = c128.instances()


def _options(k: int) -> c128.HostOptions:
    """Alternate the race checker and the block order over the instances."""
    return c128.HostOptions(check_races=k % 2 == 0, reverse_blocks=k % 3 == 0)


@pytest.mark.parametrize("scale", [1.0, 60.0], ids=["randn", "scores60"])
@pytest.mark.parametrize("k", range(len(INSTANCES)), ids=[i.name for i in INSTANCES])
def test_decode(k: int, scale: float, checked) -> None:
    inst = INSTANCES[k]
    rng = np.random.default_rng([k, int(scale), 1])
    case = decode_case(inst, rng, scale, DECODE_FILLS)
    c128.decode(case.state, case.input, case.ape, case.output, case.plans[0], host_options=_options(k))
    assert case.check(case.state, case.output) == []
    if k == len(INSTANCES) - 1 and scale == 60.0:
        checked(f"host runner, decode: {len(INSTANCES)} instances x (randn, scores ~60) within SPEC 8 of the "
                f"float64 reference; state and output rows exact")


@pytest.mark.parametrize("scale", [1.0, 60.0], ids=["randn", "scores60"])
@pytest.mark.parametrize("k", range(len(INSTANCES)), ids=[i.name for i in INSTANCES])
def test_prefill(k: int, scale: float, checked) -> None:
    inst = INSTANCES[k]
    rng = np.random.default_rng([k, int(scale), 2])
    case = prefill_case(inst, rng, scale, PREFILL_SHAPES)
    c128.prefill(case.state, case.input, case.ape, case.output, *case.plans, host_options=_options(k + 1))
    assert case.check(case.state, case.output) == []
    if k == len(INSTANCES) - 1 and scale == 60.0:
        checked(f"host runner, prefill: {len(INSTANCES)} instances x (randn, scores ~60), buffer_len 0..127, "
                f"padded plans, within SPEC 8 of the float64 reference")


def test_bound_objects_equal_functions() -> None:
    """Decode / Prefill (bound once) give the bytes decode() / prefill() give."""
    inst = c128.find_instance(256, "bf16", "f32", "bf16")
    for make, fn, cls in ((lambda r: decode_case(inst, r, 1.0, DECODE_FILLS), c128.decode, c128.Decode),
                          (lambda r: prefill_case(inst, r, 1.0, PREFILL_SHAPES), c128.prefill, c128.Prefill)):
        a, b = make(np.random.default_rng(5)), make(np.random.default_rng(5))
        fn(a.state, a.input, a.ape, a.output, *a.plans)
        bound = cls(b.state, b.input, b.ape, b.output, *b.plans)
        bound()
        assert a.state.tobytes() == b.state.tobytes() and a.output.tobytes() == b.output.tobytes()
        assert b.check(b.state, b.output) == []


def test_rebind() -> None:
    """rebind: the next call writes the new tensors; an unknown name is a TypeError naming the
    class and its tensors; a tensor that fails the checks is refused and the old binding stays."""
    inst = c128.find_instance(256, "bf16", "f32", "bf16")
    for make, cls, names in ((lambda r: decode_case(inst, r, 1.0, DECODE_FILLS), c128.Decode,
                              "state, input, ape, output, plans, state_layout, output_index, entry"),
                             (lambda r: prefill_case(inst, r, 1.0, PREFILL_SHAPES), c128.Prefill,
                              "state, input, ape, output, compress_plans, write_plans, state_layout, output_index, "
                              "entry, write_slots, write_positions")):
        a, b = make(np.random.default_rng(7)), make(np.random.default_rng(7))
        bound = cls(a.state, a.input, a.ape, a.output, *a.plans)
        bound.rebind(state=b.state, output=b.output)
        bound()
        assert b.check(b.state, b.output) == []
        assert a.state.tobytes() == make(np.random.default_rng(7)).state.tobytes()
        with pytest.raises(TypeError, match=f"^nope: not a tensor of {cls.__name__} \\({names}\\)$"):
            bound.rebind(nope=b.output)
        frozen = b.output.copy()
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            bound.rebind(output=frozen)
        c = make(np.random.default_rng(7))
        b.output[...] = c.output  # poison again: the next call must write b.output, not frozen
        bound.rebind(state=c.state)
        bound()
        assert c.check(c.state, b.output) == []


def test_group_sizes_agree() -> None:
    """Results never depend on requests_per_block / windows_per_block."""
    inst = c128.find_instance(128, "f32", "f32", "f32")
    results = []
    for group in (0, 1, 3, 32):
        case = decode_case(inst, np.random.default_rng(9), 60.0, DECODE_FILLS * 3)
        c128.decode(case.state, case.input, case.ape, case.output, case.plans[0], requests_per_block=group)
        pcase = prefill_case(inst, np.random.default_rng(9), 60.0, PREFILL_SHAPES)
        c128.prefill(pcase.state, pcase.input, pcase.ape, pcase.output, *pcase.plans, windows_per_block=group)
        results.append((case.output.tobytes(), case.state.tobytes(), pcase.output.tobytes(), pcase.state.tobytes()))
    assert all(r == results[0] for r in results)


def test_plan_representations() -> None:
    """Plans as record arrays, SGLang's uint8 [n, 16] / [n, 8] and int32 [n, 4] / [n, 2] views of the
    same bytes give the same results."""
    inst = c128.find_instance(128, "f32", "bf16", "f32")
    outs = []
    for form in ("records", "uint8", "int32"):
        case = prefill_case(inst, np.random.default_rng(3), 1.0, PREFILL_SHAPES)
        c, w = case.plans
        if form == "uint8":
            c, w = c.view(np.uint8).reshape(-1, 16), w.view(np.uint8).reshape(-1, 8)
        elif form == "int32":
            c, w = c.view(np.int32).reshape(-1, 4), w.view(np.int32).reshape(-1, 2)
        c128.prefill(case.state, case.input, case.ape, case.output, c, w)
        assert case.check(case.state, case.output) == []
        outs.append(case.output.tobytes())
    assert outs[0] == outs[1] == outs[2]


def test_torch_cpu_tensors() -> None:
    """PyTorch CPU tensors run the host runner (bf16 as torch.bfloat16)."""
    torch = pytest.importorskip("torch")
    inst = c128.find_instance(128, "bf16", "bf16", "f32")
    case = decode_case(inst, np.random.default_rng(4), 1.0, DECODE_FILLS)
    as_torch = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == np.uint16 else \
        torch.from_numpy(a)
    state, x, out = as_torch(case.state), as_torch(case.input), as_torch(case.output)
    c128.decode(state, x, torch.from_numpy(case.ape), out, torch.from_numpy(case.plans[0].view(np.uint8).reshape(-1, 16)))
    assert case.check(case.state, case.output) == []
