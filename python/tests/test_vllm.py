"""The vLLM drop-ins on the CPU against a NumPy model of vLLM's DeepSeek-V4 ratio-128 compressor written
here: its state ([blocks, 8, 2D] fp32 through block_table, or PR #58074's ring of C rows per request),
save_partial_states' rows (kv | score + ape[pos % 128] at slot_mapping[t], slots < 0 skipped) and the C128
pooling into compressed_kv[t] at the tokens that complete a window (other rows untouched). A chunked prefill
and decode steps; NumPy arrays and, where installed, PyTorch CPU tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import c128.vllm as V
from cases import frameworks, reference_window, window_error

W, D = 128, 512


def _as(fw: str, a: np.ndarray) -> Any:
    if fw == "numpy":
        return a
    import torch

    return torch.from_numpy(a)


class VllmModel:
    """vLLM's metadata and state for `reqs` requests: main branch (block 8, block_table [reqs, cdiv(max_len, 8)]
    of distinct shuffled blocks) or the ring (one block of C rows per request)."""

    def __init__(self, rng, reqs: int, max_len: int, ring: int = 0) -> None:
        self.ring = ring
        self.b = ring or 8
        cols = 1 if ring else -(-max_len // 8)
        self.blocks = reqs * cols + 4
        self.table = rng.permutation(self.blocks)[:reqs * cols].astype(np.int32).reshape(reqs, cols)
        self.state = rng.standard_normal((self.blocks, self.b, 2 * D)).astype(np.float32)  # stale rows
        self.ape = (0.5 * rng.standard_normal((W, D))).astype(np.float32)
        self.tokens = [rng.standard_normal((max_len, 2 * D)).astype(np.float32) for _ in range(reqs)]
        self.lens = np.zeros(reqs, np.int64)

    def slot(self, r: int, pos: int) -> int:
        if self.ring:
            return int(self.table[r, 0]) * self.ring + pos % self.ring
        return int(self.table[r, pos // 8]) * 8 + pos % 8

    def batch(self, ext):
        """The step's vLLM arrays: kv_score rows, positions, token_to_req_indices, slot_mapping (one padding
        token of slot -1 at the end), query_start_loc."""
        rows, pos, req, slot = [], [], [], []
        for r, e in enumerate(ext):
            for p in range(int(self.lens[r]), int(self.lens[r] + e)):
                rows.append(self.tokens[r][p])
                pos.append(p)
                req.append(r)
                slot.append(self.slot(r, p))
        rows.append(np.zeros(2 * D, np.float32))
        pos.append(0)
        req.append(0)
        slot.append(-1)
        qs = np.concatenate([[0], np.cumsum(ext)]).astype(np.int32)
        return (np.stack(rows), np.array(pos, np.int64), np.array(req, np.int32), np.array(slot, np.int64), qs)

    def save(self, rows, pos, slot, only=None) -> None:
        """save_partial_states as vLLM's kernel writes it."""
        for t in range(len(pos)):
            if slot[t] < 0 or (only is not None and not only[t]):
                continue
            blk, off = divmod(int(slot[t]), self.b)
            self.state[blk, off, :D] = rows[t, :D]
            self.state[blk, off, D:] = rows[t, D:] + self.ape[pos[t] % W]

    def windows(self, pos, req, slot):
        """t -> the float64 reference of the window that token t completes."""
        out = {}
        for t in range(len(pos)):
            if slot[t] >= 0 and (pos[t] + 1) % W == 0:
                r = int(req[t])
                out[t] = reference_window(self.tokens[r][pos[t] - W + 1:pos[t] + 1].astype(np.float64), self.ape)
        return out


@pytest.mark.parametrize("fw", frameworks())
def test_main_branch(fw: str, checked) -> None:
    rng = np.random.default_rng(1)
    m = VllmModel(rng, 3, 700)
    state = m.state.copy()
    table = _as(fw, m.table)
    windows = 0
    for ext in ([200, 129, 5], [56, 1, 300], [1, 1, 1]) + tuple([1, 1, 1] for _ in range(130)):
        ext = np.array(ext)
        rows, pos, req, slot, _ = m.batch(ext)
        kv, score = _as(fw, rows)[:, :D], _as(fw, rows)[:, D:]
        V.save_partial_states(kv, score, _as(fw, m.ape), _as(fw, pos), _as(fw, state), _as(fw, slot), 8, D, 128)
        m.save(rows, pos, slot)
        assert state.tobytes() == m.state.tobytes()
        out = np.full((len(pos), D), np.nan, np.float32)
        V.compress_norm_rope_store_cutedsl(state_cache=_as(fw, state), token_to_req_indices=_as(fw, req),
                                           positions=_as(fw, pos), slot_mapping=_as(fw, slot), block_table=table,
                                           block_size=8, state_width=D, compress_ratio=128,
                                           compressed_kv=_as(fw, out))
        ref = m.windows(pos, req, slot)
        for t in range(len(pos)):
            if t in ref:
                # every row from the state: scores already hold ape, rows as stored (f32)
                assert window_error(out[t], "f32", ref[t]) == "", f"token {t}"
                windows += 1
            else:
                assert np.isnan(out[t]).all(), f"row {t} written"
        m.lens += ext
    assert windows >= 6
    if fw == frameworks()[-1]:
        checked(f"vLLM main branch ({', '.join(frameworks())}): save_partial_states = vLLM's rows bit for bit over a "
                f"chunked prefill and 130 decode steps, C128 pooling of {windows} windows within SPEC 8, no other "
                f"row written")


@pytest.mark.parametrize("fw", frameworks())
@pytest.mark.parametrize("ring", [128, 256])
def test_ring(ring: int, fw: str) -> None:
    """PR #58074's ring: compress first (this chunk's rows from kv / score, older ones from the ring), then
    vLLM saves each request's last C rows (tail_slot_mapping)."""
    rng = np.random.default_rng(ring)
    m = VllmModel(rng, 3, 700, ring=ring)
    state = m.state.copy()
    windows = 0
    for ext in ([200, 129, 5], [56, 1, 300], [100, 127, 2]) + tuple([1, 1, 1] for _ in range(130)):
        ext = np.array(ext)
        rows, pos, req, slot, qs = m.batch(ext)
        out = np.full((len(pos), D), np.nan, np.float32)
        r = _as(fw, rows)
        V.compress_norm_rope_store_cutedsl(state_cache=_as(fw, state), token_to_req_indices=_as(fw, req),
                                           positions=_as(fw, pos), slot_mapping=_as(fw, slot),
                                           block_table=_as(fw, m.table), block_size=ring, state_width=D,
                                           compress_ratio=128, compressed_kv=_as(fw, out), kv=r[:, :D],
                                           score=r[:, D:], ape=_as(fw, m.ape), query_start_loc=_as(fw, qs),
                                           is_circular=True)
        assert state.tobytes() == m.state.tobytes(), "the compress call wrote the state"
        ref = m.windows(pos, req, slot)
        for t in range(len(pos)):
            if t in ref:
                assert window_error(out[t], "f32", ref[t]) == "", f"token {t}"
                windows += 1
            else:
                assert np.isnan(out[t]).all()
        seq = m.lens + ext
        tail = np.array([slot[t] >= 0 and pos[t] >= seq[req[t]] - ring for t in range(len(pos))])
        tail_slot = np.where(tail, slot, -1)
        V.save_partial_states(r[:, :D], r[:, D:], _as(fw, m.ape), _as(fw, pos), _as(fw, state), _as(fw, tail_slot),
                              ring, D, 128)
        m.save(rows, pos, slot, only=tail)
        assert state.tobytes() == m.state.tobytes()
        m.lens = seq
    assert windows >= 6


def test_refusals() -> None:
    rng = np.random.default_rng(2)
    m = VllmModel(rng, 1, 200)
    rows, pos, req, slot, _ = m.batch(np.array([5]))
    kw = dict(state_cache=m.state, token_to_req_indices=req, positions=pos, slot_mapping=slot, block_table=m.table,
              block_size=8, state_width=D, compress_ratio=128)
    with pytest.raises(ValueError, match="^compress_ratio: c128 implements ratio 128 only, got 4"):
        V.compress_norm_rope_store_cutedsl(**dict(kw, compress_ratio=4))
    with pytest.raises(ValueError, match="^overlap: "):
        V.compress_norm_rope_store_cutedsl(**kw, overlap=True)
    with pytest.raises(ValueError, match="^use_fp4_cache: "):
        V.compress_norm_rope_store_cutedsl(**kw, use_fp4_cache=True)
    with pytest.raises(ValueError, match="^state_cache: expected \\[blocks, block_size = 16"):
        V.save_partial_states(rows[:, :D], rows[:, D:], m.ape, pos, m.state, slot, 16, D, 128)


def test_install_without_vllm() -> None:
    """The plugin entry point does nothing where vLLM is not installed."""
    V.install()
