"""The TensorRT-LLM drop-ins on the CPU against a NumPy model of TensorRT-LLM's ratio-128 compressor
written here: kv and score planes [pages, tokens_per_block, D] fp32 through two block tables, scores stored
with ape, every new token persisted, the windows compact at cu_kv_comp[b] + j; a context batch
(compressor_prefill_reduction) then generation batches of next_n tokens (compressor_paged_kv_compress);
NumPy arrays and, where installed, PyTorch CPU tensors and the torch.ops.c128 operators of the same
schemas."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import c128.trtllm as T
from cases import reference_window, window_error

W, D = 128, 512


def _frameworks() -> list:
    out = ["numpy"]
    try:
        import torch  # noqa: F401

        out += ["torch", "ops"]
    except ImportError:
        pass
    return out


class TrtModel:
    def __init__(self, rng, reqs: int, max_len: int, tpb: int) -> None:
        self.tpb = tpb
        cols = -(-max_len // tpb)
        pages = 2 * reqs * cols + 3
        self.t_kv = rng.permutation(pages)[:reqs * cols].astype(np.int32).reshape(reqs, cols)
        self.t_sc = rng.permutation(pages)[:reqs * cols].astype(np.int32).reshape(reqs, cols)
        self.kv = rng.standard_normal((pages, tpb, D)).astype(np.float32)
        self.sc = rng.standard_normal((pages, tpb, D)).astype(np.float32)
        self.ape = (0.5 * rng.standard_normal((W, D))).astype(np.float32)
        self.tokens = [rng.standard_normal((max_len, 2 * D)).astype(np.float32) for _ in range(reqs)]
        self.lens = np.zeros(reqs, np.int64)

    def step(self, ext):
        """kv_score, kv_lens, start_pos, cu_seq_lens, cu_kv_comp of a batch; applies the writes to the model;
        returns those and the expected windows (output row -> float64 reference)."""
        rows, windows = [], {}
        comp = [0]
        for b, e in enumerate(ext):
            start, end = int(self.lens[b]), int(self.lens[b] + e)
            for p in range(start, end):
                row = self.tokens[b][p]
                rows.append(row)
                self.kv[self.t_kv[b, p // self.tpb], p % self.tpb] = row[:D]
                self.sc[self.t_sc[b, p // self.tpb], p % self.tpb] = row[D:] + self.ape[p % W]
                if (p + 1) % W == 0:
                    ref = reference_window(self.tokens[b][p + 1 - W:p + 1].astype(np.float64), self.ape)
                    windows[comp[-1] + (p + 1) // W - start // W - 1] = ref
            comp.append(comp[-1] + end // W - start // W)
        start = self.lens.copy()
        self.lens = self.lens + ext
        meta = (self.lens.astype(np.int32), start.astype(np.int32),
                np.concatenate([[0], np.cumsum(ext)]).astype(np.int32), np.array(comp, np.int32))
        return np.stack(rows), meta, windows


def _as(fw: str, a: np.ndarray) -> Any:
    if fw == "numpy":
        return a
    import torch

    return torch.from_numpy(a)


@pytest.mark.parametrize("fw", _frameworks())
@pytest.mark.parametrize("tpb", [128, 256])
def test_prefill_then_generation(tpb: int, fw: str, checked) -> None:
    rng = np.random.default_rng(tpb)
    m = TrtModel(rng, 3, 900, tpb)
    kv, sc = m.kv.copy(), m.sc.copy()
    tables = (_as(fw, m.t_kv), _as(fw, m.t_sc))
    if fw == "ops":
        import torch

        import c128.torch  # noqa: F401

        fns = (torch.ops.c128.compressor_prefill_reduction, torch.ops.c128.compressor_paged_kv_compress)
    else:
        fns = (T.compressor_prefill_reduction, T.compressor_paged_kv_compress)
    windows = 0
    steps = [("context", [300, 129, 40]), ("context", [100, 127, 216])] + [("generation", [2, 2, 2])] * 24
    for kind, ext in steps:
        x, (kv_lens, start, cu, comp), expect = m.step(np.array(ext))
        out = np.full((max(int(comp[-1]), 1), D), np.nan, np.float32)
        args = (_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), *tables, _as(fw, out), _as(fw, kv_lens))
        if kind == "context":
            fns[0](*args, _as(fw, start), _as(fw, cu), _as(fw, comp), 3, tpb, D, 128, int(comp[-1]))
        else:
            fns[1](*args, _as(fw, cu), _as(fw, comp), 3, tpb, D, 128, 2)
        assert kv.tobytes() == m.kv.tobytes() and sc.tobytes() == m.sc.tobytes(), f"{kind} {ext}: planes"
        for row in range(int(comp[-1])):
            assert window_error(out[row], "f32", expect[row]) == "", f"{kind} {ext}: output row {row}"
            windows += 1
    assert windows >= 7
    if (fw, tpb) == (_frameworks()[-1], 256):
        checked(f"TensorRT-LLM operators ({', '.join(_frameworks())}): compressor_prefill_reduction and "
                f"compressor_paged_kv_compress (next_n 2), page sizes 128 and 256: planes bit for bit the model's "
                f"(every new token, score + ape), {windows} compact windows within SPEC 8")


def test_refusals() -> None:
    rng = np.random.default_rng(1)
    m = TrtModel(rng, 1, 300, 128)
    x, (kv_lens, start, cu, comp), _ = m.step(np.array([5]))
    out = np.zeros((1, D), np.float32)
    args = (x, m.ape, m.kv, m.sc, m.t_kv, m.t_sc, out, kv_lens, cu, comp, 1, 128, D)
    with pytest.raises(ValueError, match="^compress_ratio: c128 implements ratio 128 only, got 4"):
        T.compressor_paged_kv_compress(*args, 4, 1)
    with pytest.raises(ValueError, match="^paged_kv: expected \\[pages, page_size = 256"):
        T.compressor_paged_kv_compress(*args[:11], 256, D, 128, 1)
    with pytest.raises(NotImplementedError, match="^compressor_postprocess_scatter: "):
        T.compressor_postprocess_scatter()
