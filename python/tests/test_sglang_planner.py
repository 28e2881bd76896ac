"""SGLang's planners on c128's side (c128.sglang.CompressorDecodePlan / CompressorPrefillPlan with SGLang's
generate and generate_legacy argument lists) against a NumPy reference of SGLang's planning rules written
here, loop by loop: its three ways to find a token's state row (req_to_token and full_to_state in a SWA
page's ring, the request ring, the legacy page = rid), its write rule (the open window and the last 4
tokens), its sentinels and padding; NumPy arrays and, where installed, PyTorch CPU tensors; the plans then
drive compress_forward to the float64 reference of the windows."""

from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import pytest

import c128
from c128.sglang import CompressorDecodePlan, CompressorPrefillPlan, compress_forward
from cases import frameworks, reference_window, window_error

W = 128


class Meta:
    """SGLang's metadata for `n_req` requests of up to `max_len` tokens: req_to_token [pool, max_len] (full-KV
    slots, shuffled), full_to_state (full slot -> SWA slot: each request's positions in SWA pages of
    swa_page_size tokens, pages shuffled), pool indices."""

    def __init__(self, rng, n_req: int, max_len: int, swa_page_size: int, ring_size: int) -> None:
        self.sps, self.ring = swa_page_size, ring_size
        pool = n_req + 2
        self.rid = rng.permutation(pool)[:n_req].astype(np.int64)
        full = pool * max_len
        self.r2t = rng.permutation(full).astype(np.int32).reshape(pool, max_len)
        pages_per_req = -(-max_len // swa_page_size)
        swa_pages = rng.permutation(pool * pages_per_req + 3)
        self.f2s = np.full(full, -1, np.int64)
        for r in range(pool):
            for p in range(max_len):
                page = swa_pages[r * pages_per_req + p // swa_page_size]
                self.f2s[self.r2t[r, p]] = page * swa_page_size + p % swa_page_size


def ref_loc(mode: str, m: Meta, rid: int, pos: int) -> int:
    if mode == "legacy":
        return rid * W + pos % W
    if mode == "ring":
        return rid * m.ring + pos % m.ring
    swa = int(m.f2s[m.r2t[rid, pos]])
    return (swa // m.sps) * m.ring + swa % m.ring


def ref_decode(mode: str, m: Meta, seqs) -> np.ndarray:
    rows = []
    for rid, seq in zip(m.rid, seqs):
        if seq <= 0:
            rows.append((0, -1, -1, -1))
            continue
        p1 = seq - 1
        at = ref_loc(mode, m, int(rid), p1)
        rows.append((seq, at, ref_loc(mode, m, int(rid), max(p1 - W, 0)) // W, at // W))
    return np.array(rows, np.int32).view(np.uint8).reshape(-1, 16)


def ref_prefill(mode: str, m: Meta, seqs, exts, n: int, pad: bool, mtp: int) -> Tuple[np.ndarray, np.ndarray]:
    c: List[tuple] = []
    w: List[tuple] = []
    base = 0
    for rid, seq, ext in zip(m.rid, seqs, exts):
        prefix, first_write = seq - ext, min((seq // W) * W, seq - mtp)
        for j in range(ext):
            pos, k = prefix + j, base + j
            if (pos + 1) % W == 0:
                c.append((pos + 1, k | ((W - 1 - j if j < W - 1 else 0) << 16),
                          ref_loc(mode, m, int(rid), max(pos - W, 0)) // W, ref_loc(mode, m, int(rid), pos) // W))
            if pos >= first_write:
                w.append((k, ref_loc(mode, m, int(rid), pos)))
        base += ext
    if pad:
        c += [(-1, 0, -1, -1)] * (n - len(c))
        w += [(-1, -1)] * (n - len(w))
    return (np.array(c, np.int32).reshape(-1, 4).view(np.uint8).reshape(-1, 16),
            np.array(w, np.int32).reshape(-1, 2).view(np.uint8).reshape(-1, 8))


def _as(fw: str, a: np.ndarray) -> Any:
    if fw == "numpy":
        return a
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def _np(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.numpy()


def _batch(rng, m: Meta, max_len: int):
    seqs = rng.integers(1, max_len, len(m.rid))
    seqs[0] = 256  # a boundary
    seqs[1] = 129
    exts = np.minimum(seqs, rng.integers(1, 300, len(m.rid)))
    exts[0] = 130
    return seqs, exts


@pytest.mark.parametrize("fw", frameworks())
@pytest.mark.parametrize("mode", ["paged", "ring", "legacy"])
@pytest.mark.parametrize("sps,ring", [(256, 128), (512, 256)])
def test_plans_equal_sglang_rules(mode: str, sps: int, ring: int, fw: str, checked) -> None:
    rng = np.random.default_rng([sps, ring, len(mode)])
    max_len = 1100
    m = Meta(rng, 7, max_len, sps, ring)
    seqs, exts = _batch(rng, m, max_len)
    n = int(exts.sum())
    rid, r2t, f2s = _as(fw, m.rid), _as(fw, m.r2t), _as(fw, m.f2s)
    dseqs = seqs.copy()
    dseqs[2] = 0  # a padding row
    if mode == "legacy":
        d = CompressorDecodePlan.generate_legacy(128, rid, _as(fw, dseqs))
    else:
        d = CompressorDecodePlan.generate(128, rid, r2t, f2s, _as(fw, dseqs), sps, ring, use_req_ring=mode == "ring")
    assert d.is_decode and _np(d.plan_d).tobytes() == ref_decode(mode, m, dseqs).tobytes()
    for graph in (False, True):
        args = (_as(fw, seqs), _as(fw, exts))
        if mode == "legacy":
            p = CompressorPrefillPlan.generate_legacy(128, rid, *args, n, None, use_cuda_graph=graph)
            mtp = 0
        else:
            p = CompressorPrefillPlan.generate(128, rid, *args, r2t, f2s, sps, ring, n, use_cuda_graph=graph,
                                               use_req_ring=mode == "ring")
            mtp = 4
        c, w = ref_prefill(mode, m, seqs, exts, n, graph, mtp)
        assert not p.is_decode
        assert _np(p.plan_c).tobytes() == c.tobytes(), f"plan_c (graph={graph})"
        assert _np(p.plan_w).tobytes() == w.tobytes(), f"plan_w (graph={graph})"
    if (mode, sps, fw) == ("legacy", 512, frameworks()[-1]):
        checked(f"SGLang planners ({', '.join(frameworks())}): CompressorDecodePlan / CompressorPrefillPlan generate "
                "(paged through req_to_token + full_to_state, use_req_ring) and generate_legacy = the NumPy reference "
                "of SGLang's rules byte for byte, trimmed and padded for CUDA graphs")


def test_mtp_pad_and_refusals() -> None:
    rng = np.random.default_rng(3)
    m = Meta(rng, 3, 600, 256, 256)
    seqs, exts = np.array([300, 256, 20]), np.array([9, 8, 20])
    p = CompressorPrefillPlan.generate(128, m.rid, seqs, exts, m.r2t, m.f2s, 256, 256, 37, mtp_pad=8)
    _, w = ref_prefill("paged", m, seqs, exts, 37, False, 8)
    assert p.plan_w.tobytes() == w.tobytes()
    with pytest.raises(ValueError, match="^compress_ratio: c128 plans ratio 128 only"):
        CompressorDecodePlan.generate_legacy(4, m.rid, seqs)
    with pytest.raises(ValueError, match="^ring_size, swa_page_size: "):
        CompressorDecodePlan.generate(128, m.rid, m.r2t, m.f2s, seqs, 256, 192)
    with pytest.raises(ValueError, match="^extend_lens: every request needs 0 < extend_len <= seq_len"):
        CompressorPrefillPlan.generate_legacy(128, m.rid, seqs, np.array([9, 0, 20]), 29, None)
    with pytest.raises(ValueError, match="^num_q_tokens: 30, but extend_lens add up to 37"):
        CompressorPrefillPlan.generate_legacy(128, m.rid, seqs, exts, 30, None)


def test_plans_drive_compress_forward(checked) -> None:
    """The request ring (use_req_ring, R = 256): a chunked prefill then decode steps planned by these
    planners and run by compress_forward give every completed window within SPEC 8 of the float64
    reference of the request's tokens."""
    d, ring, sps = 128, 256, 512
    inst = c128.find_instance(d, "f32", "f32", "f32")
    assert inst is not None
    rng = np.random.default_rng(9)
    m = Meta(rng, 3, 800, sps, ring)
    pages = int(m.rid.max() + 1) * ring // W
    state = np.zeros((pages, W, 2 * d), np.float32)
    ape = (0.5 * rng.standard_normal((W, d))).astype(np.float32)
    tokens = [rng.standard_normal((700, 2 * d)).astype(np.float32) for _ in m.rid]
    lens = np.zeros(3, np.int64)
    checked_windows = 0

    def check(out_rows, ends):
        nonlocal checked_windows
        for row, (r, end) in zip(out_rows, ends):
            ref = reference_window(tokens[r][end - W:end].astype(np.float64), ape)
            assert window_error(row, "f32", ref) == "", f"request {r}, window ending {end}"
            checked_windows += 1

    for chunk in ([200, 50, 130], [100, 300, 1], [60, 2, 128]):
        ext = np.array(chunk)
        seqs = lens + ext
        x = np.concatenate([tokens[r][lens[r]:seqs[r]] for r in range(3)])
        p = CompressorPrefillPlan.generate(128, m.rid, seqs, ext, m.r2t, m.f2s, sps, ring, int(ext.sum()),
                                           use_req_ring=True)
        out = compress_forward(state, x, ape, p, head_dim=d, compress_ratio=128)
        c = p.plan_c.view(c128.COMPRESS_PLAN_DTYPE).reshape(-1)
        ends = []
        for plan in c:
            row = int(plan["ragged_id"])
            r = int(np.searchsorted(np.cumsum(ext), row, side="right"))
            ends.append((r, int(plan["seq_len"])))
        check(out, ends)
        lens = seqs
    for _ in range(150):
        lens = lens + 1
        x = np.stack([tokens[r][lens[r] - 1] for r in range(3)])
        p = CompressorDecodePlan.generate(128, m.rid, m.r2t, m.f2s, lens, sps, ring, use_req_ring=True)
        out = compress_forward(state, x, ape, p, head_dim=d, compress_ratio=128)
        done = [r for r in range(3) if lens[r] % W == 0]
        check(out[done], [(r, int(lens[r])) for r in done])
    assert checked_windows >= 8
    checked(f"SGLang planners + compress_forward: chunked prefill and 150 decode steps on the request ring, "
            f"{checked_windows} windows within SPEC 8 of the float64 reference")
