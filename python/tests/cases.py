"""Test data, the float64 NumPy reference and the tolerances of SPEC 8, shared by the CPU and GPU
tests.

The reference knows nothing of plans, rings or pages: a request is its committed token rows, a
window is 128 consecutive positions, and for every channel c

    out[c] = sum_j softmax_j(score_j[c] + ape[j][c]) * kv_j[c]      (float64)

Storage rounding is modelled exactly: a window row the kernel reads from the state is the input
row converted to the state dtype; a row read from the input is used as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

import c128

W = 128
# SPEC 8's tolerances, as ref/reference.h's REF_TOL_* and REF_BF16_* (test_library checks they agree).
TOL_REL_L2, TOL_MAX_ABS = 1e-5, 1e-4
BF16_REL, BF16_ABS = 1e-5, 3e-5
F32_POISON = np.float32(np.nan)
BF16_POISON = np.uint16(0x7FC1)  # a NaN bit pattern the library never produces


def np_dtype(name: str):
    """Storage dtype of an element dtype name: bf16 is uint16 bit patterns."""
    return np.float32 if name == "f32" else np.uint16


def to_f64(values: np.ndarray, name: str) -> np.ndarray:
    """Stored values (f32, or bf16 bits) as float64."""
    if name == "f32":
        return values.astype(np.float64)
    return c128.bf16_to_float(values).astype(np.float64)


def convert(values: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Stored values of dtype src as dtype dst, as the kernels convert them (round to nearest even)."""
    if src == dst:
        return values.copy()
    if dst == "bf16":
        return c128.bf16_from_float(values)
    return c128.bf16_to_float(values)


def random_rows(rng: np.random.Generator, n: int, head_dim: int, dtype: str, scale: float) -> np.ndarray:
    """n input rows kv | score: kv ~ randn, score ~ scale * randn (scale 60 stresses the max
    subtraction); never zero."""
    kv = rng.standard_normal((n, head_dim)).astype(np.float32)
    score = (scale * rng.standard_normal((n, head_dim))).astype(np.float32)
    rows = np.concatenate([kv, score], axis=1)
    rows[rows == 0] = np.float32(0.5)
    return rows if dtype == "f32" else c128.bf16_from_float(rows)


def random_ape(rng: np.random.Generator, head_dim: int) -> np.ndarray:
    return (0.5 * rng.standard_normal((W, head_dim))).astype(np.float32)


def reference_window(rows: np.ndarray, ape: np.ndarray) -> np.ndarray:
    """rows: [128, 2D] float64 kv | score; ape [128, D] -> [D] float64."""
    d = ape.shape[1]
    s = rows[:, d:] + ape.astype(np.float64)
    w = np.exp(s - s.max(axis=0))
    return (w * rows[:, :d]).sum(axis=0) / w.sum(axis=0)


def poison(shape: Tuple[int, ...], dtype: str) -> np.ndarray:
    return np.full(shape, F32_POISON if dtype == "f32" else BF16_POISON, dtype=np_dtype(dtype))


def window_error(out: np.ndarray, out_dtype: str, ref: np.ndarray) -> str:
    """'' when out (stored values) is within SPEC 8's tolerance of ref, else what is wrong.
    f32: relative L2 <= TOL_REL_L2 and max abs <= TOL_MAX_ABS; bf16: |out - ref| <= ulp(ref) / 2 +
    BF16_REL |ref| + BF16_ABS."""
    got = to_f64(out, out_dtype)
    if not np.all(np.isfinite(got)):
        return "non-finite output"
    err = np.abs(got - ref)
    if out_dtype == "f32":
        rel = np.sqrt((err ** 2).sum() / (ref ** 2).sum())
        if rel > TOL_REL_L2 or err.max() > TOL_MAX_ABS:
            return f"relative L2 {rel:.3g}, max abs {err.max():.3g}"
        return ""
    mag = np.abs(ref)
    ulp = np.where(mag > 0, np.exp2(np.floor(np.log2(np.where(mag > 0, mag, 1.0))) - 7), 0.0)
    bound = 0.5 * ulp + BF16_REL * mag + BF16_ABS
    if np.any(err > bound):
        k = int(np.argmax(err - bound))
        return f"channel {k}: |{got[k]} - {ref[k]}| = {err[k]:.3g} > {bound[k]:.3g}"
    return ""


@dataclass
class Case:
    """One call's tensors (NumPy, host) and what it must produce."""

    inst: c128.Instance
    state: np.ndarray
    input: np.ndarray
    ape: np.ndarray
    output: np.ndarray
    plans: Tuple[np.ndarray, ...]  # (decode plans,) or (compress plans, write plans)
    expected_state: np.ndarray
    windows: Dict[int, np.ndarray] = field(default_factory=dict)  # output row -> float64 reference

    def check(self, state: np.ndarray, output: np.ndarray) -> List[str]:
        """What differs from the expectation: state exactly (every other row unchanged), the
        windows within tolerance, every other output row still poison (bit for bit)."""
        problems = []
        if state.tobytes() != self.expected_state.tobytes():
            diff = np.nonzero((state.view(np.uint8) != self.expected_state.view(np.uint8)).reshape(-1))[0]
            row_bytes = self.state.shape[2] * self.state.itemsize
            rows = sorted({int(b) // row_bytes for b in diff})
            problems.append(f"state rows differ from the expectation: {rows[:8]}")
        bits = output.view(np.uint32 if output.dtype == np.float32 else np.uint16)
        poison_bits = poison((1,), self.inst.output_dtype).view(bits.dtype)[0]
        for row in range(output.shape[0]):
            if row in self.windows:
                err = window_error(output[row], self.inst.output_dtype, self.windows[row])
                if err:
                    problems.append(f"output row {row}: {err}")
            elif np.any(bits[row] != poison_bits):
                problems.append(f"output row {row} was written, and no plan writes it")
        return problems


def _store_history(state: np.ndarray, page: int, rows_in: np.ndarray, inst: c128.Instance) -> np.ndarray:
    """Writes input-dtype rows into slots 0.. of page (converted to the state dtype); returns the
    rows as the kernel will read them back (float64)."""
    stored = convert(rows_in, inst.input_dtype, inst.state_dtype)
    state[page, : len(stored)] = stored
    return to_f64(stored, inst.state_dtype)


def decode_case(inst: c128.Instance, rng: np.random.Generator, scale: float, fills: List[int],
                padding: int = 1) -> Case:
    """A decode batch of len(fills) requests + padding rows: request b's new token is position
    128 k + fills[b] (fills[b] = 127: a boundary, the window compresses); pool rows shuffled, so
    that page != batch position; the legacy layout (page = pool index)."""
    d = inst.head_dim
    batch = len(fills) + padding
    pages = batch + 2
    state = random_rows(rng, pages * W, d, inst.input_dtype, scale)
    state = convert(state, inst.input_dtype, inst.state_dtype).reshape(pages, W, 2 * d)  # stale rows
    ape = random_ape(rng, d)
    x = random_rows(rng, batch, d, inst.input_dtype, scale)
    pool = rng.permutation(pages)[:batch]
    order = rng.permutation(batch)  # padding rows anywhere in the batch
    reqs, windows = [], {}
    slot_of = {}
    for b in range(batch):
        k = int(order[b])
        if k >= len(fills):
            reqs.append((int(pool[b]), 0, 0))
            continue
        fill = fills[k]
        seq = W * int(rng.integers(0, 3)) + fill + 1
        reqs.append((int(pool[b]), seq, 1))
        history_in = random_rows(rng, fill, d, inst.input_dtype, scale)
        history = _store_history(state, int(pool[b]), history_in, inst)
        slot_of[b] = (int(pool[b]), fill)
        if fill == W - 1:
            windows[b] = reference_window(np.concatenate([history, to_f64(x[b : b + 1], inst.input_dtype)]), ape)
    plans = c128.plan_decode(c128.Ring(pages), c128.requests(*zip(*reqs)) if reqs else [])
    expected = state.copy()
    for b, (page, slot) in slot_of.items():
        expected[page, slot] = convert(x[b], inst.input_dtype, inst.state_dtype)
    output = poison((batch + 1, d), inst.output_dtype)
    return Case(inst, state, x, ape, output, (plans,), expected, windows)


def prefill_case(inst: c128.Instance, rng: np.random.Generator, scale: float, shapes: List[Tuple[int, int]],
                 pad: int = 3) -> Case:
    """A prefill/extend batch: request i has prefix shapes[i][0] committed tokens (its open
    window's rows in the state) and extends by shapes[i][1]; legacy layout, shuffled pool rows;
    plans padded with `pad` sentinels past the batch's count."""
    d = inst.head_dim
    n = len(shapes)
    pages = n + 2
    state = random_rows(rng, pages * W, d, inst.input_dtype, scale)
    state = convert(state, inst.input_dtype, inst.state_dtype).reshape(pages, W, 2 * d)
    ape = random_ape(rng, d)
    pool = rng.permutation(pages)[:n]
    total = sum(e for _, e in shapes)
    x = random_rows(rng, total, d, inst.input_dtype, scale)
    reqs, windows, writes = [], [], []
    base = 0
    for i, (prefix, extend) in enumerate(shapes):
        page = int(pool[i])
        seq = prefix + extend
        reqs.append((page, seq, extend))
        start = prefix // W * W
        history = _store_history(state, page, random_rows(rng, prefix - start, d, inst.input_dtype, scale), inst)
        rows = np.concatenate([history, to_f64(x[base : base + extend], inst.input_dtype)])  # positions start..seq-1
        for end in range(start + W - 1, seq, W):  # every window that ends in the batch
            windows.append(reference_window(rows[end - W + 1 - start : end + 1 - start], ape))
        for pos in range(max(prefix, seq // W * W), seq):  # the trailing partial window is persisted
            writes.append((page, pos % W, base + pos - prefix))
        base += extend
    capacity = max(total, 1) + pad
    plans = c128.plan_prefill(c128.Ring(pages), c128.requests(*zip(*reqs)), capacity=capacity, pad_to_capacity=True)
    assert plans.num_compress == len(windows) and plans.num_write == len(writes)
    num_compress = plans.num_compress + pad
    num_write = plans.num_write + pad
    expected = state.copy()
    for page, slot, row in writes:
        expected[page, slot] = convert(x[row], inst.input_dtype, inst.state_dtype)
    output = poison((num_compress + 1, d), inst.output_dtype)
    return Case(inst, state, x, ape, output, (plans.compress[:num_compress], plans.write[:num_write]), expected,
                dict(enumerate(windows)))


DECODE_FILLS = [127, 0, 1, 64, 120, 126, 127, 127]  # buffer rows before the new token; 127 = boundary
PREFILL_SHAPES = [(0, 300), (120, 20), (127, 1), (1, 200), (64, 64), (256, 128), (5, 3), (130, 254)]


def frameworks() -> list:
    """The array libraries the adapters' tests run on: NumPy, and PyTorch (CPU tensors) when present."""
    out = ["numpy"]
    try:
        import torch  # noqa: F401

        out.append("torch")
    except ImportError:
        pass
    return out
