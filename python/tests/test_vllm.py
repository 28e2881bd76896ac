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

    def __init__(self, rng, reqs: int, max_len: int, ring: int = 0, d: int = D) -> None:
        self.d = d
        self.ring = ring
        self.b = ring or 8
        cols = 1 if ring else -(-max_len // 8)
        self.blocks = reqs * cols + 4
        self.table = rng.permutation(self.blocks)[:reqs * cols].astype(np.int32).reshape(reqs, cols)
        self.state = rng.standard_normal((self.blocks, self.b, 2 * d)).astype(np.float32)  # stale rows
        self.ape = (0.5 * rng.standard_normal((W, d))).astype(np.float32)
        self.tokens = [rng.standard_normal((max_len, 2 * d)).astype(np.float32) for _ in range(reqs)]
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
        rows.append(np.zeros(2 * self.d, np.float32))
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
            self.state[blk, off, :self.d] = rows[t, :self.d]
            self.state[blk, off, self.d:] = rows[t, self.d:] + self.ape[pos[t] % W]

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


@pytest.mark.parametrize("ring", [0, 256])
def test_step_over_65536_tokens(ring: int, checked) -> None:
    """A step of 71001 tokens (a 66000-token prefill, then 5000 and one padding token): save_partial_states
    and the pooling split it into launches of at most 65536 tokens (the plans' u16 input row), cutting
    inside a window; the state is vLLM's bit for bit and every window is the model's (head_dim 128)."""
    d = 128
    m = VllmModel(np.random.default_rng(5), 2, 66000, ring=ring, d=d)
    state = m.state.copy()
    rows, pos, req, slot, qs = m.batch(np.array([66000, 5000]))
    out = np.full((len(pos), d), np.nan, np.float32)
    extra = dict(kv=rows[:, :d], score=rows[:, d:], ape=m.ape, query_start_loc=qs, is_circular=True) if ring else {}
    V.compress_norm_rope_store_cutedsl(state_cache=state, token_to_req_indices=req, positions=pos, slot_mapping=slot,
                                       block_table=m.table, block_size=m.b, state_width=d, compress_ratio=128,
                                       compressed_kv=out, **extra)
    saved = slot
    if ring:  # the ring's compress reads this step's rows from kv / score; vLLM then saves each tail
        tail = np.array([slot[t] >= 0 and pos[t] >= [66000, 5000][req[t]] - ring for t in range(len(pos))])
        saved = np.where(tail, slot, -1)
    V.save_partial_states(rows[:, :d], rows[:, d:], m.ape, pos, state, saved, m.b, d, 128)
    m.save(rows, pos, saved)
    assert state.tobytes() == m.state.tobytes()
    if not ring:  # main branch: the pooling reads the rows just saved
        V.compress_norm_rope_store_cutedsl(state_cache=state, token_to_req_indices=req, positions=pos,
                                           slot_mapping=slot, block_table=m.table, block_size=8, state_width=d,
                                           compress_ratio=128, compressed_kv=out)
    ref = m.windows(pos, req, slot)
    assert len(ref) == 66000 // W + 5000 // W
    for t in range(len(pos)):
        if t in ref:
            assert window_error(out[t], "f32", ref[t]) == "", f"token {t}"
        else:
            assert np.isnan(out[t]).all(), f"row {t} written"
    checked(f"vLLM {'ring of 256' if ring else 'main branch'}: a step of {len(pos)} tokens in launches of at most "
            f"65536; state bit for bit, {len(ref)} windows within SPEC 8")


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


# ---- cache entries, real slots, install() ----------------------------------------------------------------
import sys  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402

import entries as E  # noqa: E402

P_ENTRIES = 2  # vLLM's C128 entries a page at cache block 256 (256 // 128)


class CacheModel:
    """vLLM's fp8_ds_mla compressed cache: uint8 [pages, P, 584] whose pages are 584 P rounded up to 576
    bytes apart (a view of the page buffer), a compressed block table, and the compressed slot mapping
    (get_compressed_slot_mapping: a token completing window n gets table[r][n // P] * P + n % P, others -1)."""

    def __init__(self, rng, reqs: int, max_len: int) -> None:
        self.page_bytes = E.page_bytes("dsv4_fp8", D, P_ENTRIES)
        cols = -(-max_len // (W * P_ENTRIES))
        self.pages = reqs * cols + 3
        self.table = rng.permutation(self.pages)[:reqs * cols].reshape(reqs, cols)
        self.buf = rng.integers(0, 256, (self.pages, self.page_bytes), dtype=np.uint8)  # stale bytes
        self.kv_cache = self.buf[:, :P_ENTRIES * 584].reshape(self.pages, P_ENTRIES, 584)
        assert self.kv_cache.base is not None and self.kv_cache.strides[0] == self.page_bytes
        angles = rng.uniform(-np.pi, np.pi, (max_len, 32))
        self.cos_sin = np.concatenate([np.cos(angles), np.sin(angles)], 1).astype(np.float32)  # vLLM's layout
        self.rope = np.stack([self.cos_sin[:, :32], self.cos_sin[:, 32:]], -1)  # c128's (cos, sin) pairs
        self.gamma = E.gamma(rng, D)

    def view(self, fw: str) -> Any:
        """The cache as vLLM holds it: a view of the padded page buffer (whose storage it spans)."""
        if fw == "numpy":
            return self.kv_cache
        import torch

        return torch.from_numpy(self.buf)[:, :P_ENTRIES * 584].unflatten(1, (P_ENTRIES, 584))

    def slots(self, pos, req, slot, drop=()):
        out = np.full(len(pos), -1, np.int64)
        for t in range(len(pos)):
            if slot[t] >= 0 and (pos[t] + 1) % W == 0 and t not in drop:
                n = pos[t] // W
                out[t] = self.table[req[t], n // P_ENTRIES] * P_ENTRIES + n % P_ENTRIES
        return out


def _cutedsl_kwargs(fw, m, cm, state, pos, req, slot, kslots):
    return dict(state_cache=_as(fw, state), num_actual=len(slot), token_to_req_indices=_as(fw, req),
                positions=_as(fw, pos), slot_mapping=_as(fw, slot), block_table=_as(fw, m.table), block_size=8,
                state_width=D, cos_sin_cache=_as(fw, cm.cos_sin), kv_cache=cm.view(fw),
                k_cache_metadata=types.SimpleNamespace(slot_mapping=_as(fw, kslots)), pdl_kwargs={"launch_pdl": False},
                head_dim=D, rope_head_dim=64, compress_ratio=128, overlap=False, use_fp4_cache=False,
                rms_norm_weight=_as(fw, cm.gamma), rms_norm_eps=1e-6, quant_block=64, token_stride=576, scale_dim=8,
                store_full_kv=False, store_full_fp8=False, fp8_scale=None)


@pytest.mark.parametrize("fw", frameworks())
def test_cache_entries(fw: str) -> None:
    """The drop-in with kv_cache writes each window's FP8 entry at its compressed slot (DESIGN 11 within
    its tolerance, from the kernel's own pooled row) and no other byte; a boundary with slot -1 writes none."""
    rng = np.random.default_rng(5)
    m = VllmModel(rng, 3, 700)
    cm = CacheModel(rng, 3, 700)
    state = m.state.copy()
    checked_entries = 0
    for ext in ([200, 129, 5], [56, 1, 300], [1, 1, 1]) + tuple([1, 1, 1] for _ in range(130)):
        ext = np.array(ext)
        rows, pos, req, slot, _ = m.batch(ext)
        V.save_partial_states(_as(fw, rows)[:, :D], _as(fw, rows)[:, D:], _as(fw, m.ape), _as(fw, pos),
                              _as(fw, state), _as(fw, slot), 8, D, 128)
        bounds = [t for t in range(len(pos)) if slot[t] >= 0 and (pos[t] + 1) % W == 0]
        kslots = cm.slots(pos, req, slot, drop=bounds[1:2])  # one boundary without a cache slot
        pooled = np.full((len(pos), D), np.nan, np.float32)
        V.compress_norm_rope_store_cutedsl(state_cache=_as(fw, state), token_to_req_indices=_as(fw, req),
                                           positions=_as(fw, pos), slot_mapping=_as(fw, slot),
                                           block_table=_as(fw, m.table), block_size=8, state_width=D,
                                           compress_ratio=128, compressed_kv=_as(fw, pooled))
        before = cm.buf.copy()
        got = V.compress_norm_rope_store_cutedsl(**_cutedsl_kwargs(fw, m, cm, state, pos, req, slot, kslots))
        assert got is None
        locs = [int(kslots[t]) for t in range(len(pos)) if kslots[t] >= 0]
        mask = E.written_mask(cm.buf.size, "dsv4_fp8", D, P_ENTRIES, cm.page_bytes, locs).reshape(cm.buf.shape)
        assert (cm.buf[~mask] == before[~mask]).all(), "bytes outside the entries written"
        for t in range(len(pos)):
            if kslots[t] >= 0:
                o = E.oracle(pooled[t].astype(np.float64), 0.0, cm.gamma, 1e-6, cm.rope[pos[t] - W + 1])
                err = E.check_entry(cm.buf, "dsv4_fp8", D, P_ENTRIES, cm.page_bytes, int(kslots[t]), o)
                assert err == "", f"token {t}: {err}"
                checked_entries += 1
        m.lens += ext
    assert checked_entries >= 6


def test_cache_entry_refusals() -> None:
    rng = np.random.default_rng(6)
    m = VllmModel(rng, 1, 300)
    cm = CacheModel(rng, 1, 300)
    rows, pos, req, slot, _ = m.batch(np.array([256]))
    kw = _cutedsl_kwargs("numpy", m, cm, m.state, pos, req, slot, cm.slots(pos, req, slot))
    before = cm.buf.copy()
    with pytest.raises(NotImplementedError, match="^store_full_kv / store_full_fp8: "):
        V.compress_norm_rope_store_cutedsl(**dict(kw, store_full_kv=True))
    with pytest.raises(NotImplementedError, match="^kv_cache: dtype float32"):
        V.compress_norm_rope_store_cutedsl(**dict(kw, kv_cache=np.zeros((4, 2, 512), np.float32)))
    with pytest.raises(NotImplementedError, match="^kv_cache: 3 entries a page"):
        V.compress_norm_rope_store_cutedsl(**dict(kw, kv_cache=np.zeros((4, 3, 584), np.uint8)))
    with pytest.raises(ValueError, match="^kv_cache, k_cache_metadata: "):
        V.compress_norm_rope_store_cutedsl(**dict(kw, k_cache_metadata=None))
    assert (cm.buf == before).all()


@pytest.mark.parametrize("fw", frameworks())
def test_save_real_slots(fw: str) -> None:
    """save_partial_states writes slot_mapping[t] itself, also where its offset in the block is not
    pos % 8 (host memory; vLLM's own slot mappings keep pos % 8)."""
    rng = np.random.default_rng(7)
    m = VllmModel(rng, 3, 300)
    state = m.state.copy()
    rows, pos, req, slot, _ = m.batch(np.array([200, 129, 5]))
    valid = np.nonzero(slot >= 0)[0]
    shuffled = slot.copy()
    shuffled[valid] = rng.permutation(m.blocks * 8)[:len(valid)]  # distinct rows, any offset
    assert (shuffled[valid] % 8 != pos[valid] % 8).sum() > 100 and (shuffled[valid] % 8 == pos[valid] % 8).sum() > 10
    V.save_partial_states(_as(fw, rows)[:, :D], _as(fw, rows)[:, D:], _as(fw, m.ape), _as(fw, pos), _as(fw, state),
                          _as(fw, shuffled), 8, D, 128)
    m.save(rows, pos, shuffled)
    assert state.tobytes() == m.state.tobytes()


def _fake_vllm(monkeypatch, with_cutedsl: bool = True):
    """Fake vLLM modules: the save module, the compressor (holding save_partial_states by name, as its
    module-level import does) and, optionally, nvidia.ops and its sparse_attn_compress_cutedsl."""
    calls = []

    def vllm_save(*a, **k):
        calls.append("vllm save")

    def vllm_store(*a, **k):
        calls.append("vllm store")

    names = ["vllm", "vllm.models", "vllm.models.deepseek_v4", "vllm.models.deepseek_v4.common",
             "vllm.models.deepseek_v4.common.ops", "vllm.models.deepseek_v4.common.ops.save_partial_states",
             "vllm.models.deepseek_v4.compressor"]
    if with_cutedsl:
        names += ["vllm.models.deepseek_v4.nvidia", "vllm.models.deepseek_v4.nvidia.ops",
                  "vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl"]
    mods = {}
    for n in names:
        mod = types.ModuleType(n)
        mod.__path__ = []  # a package: import_module finds its children in sys.modules
        monkeypatch.setitem(sys.modules, n, mod)
        mods[n] = mod
        if "." in n:
            setattr(mods[n.rsplit(".", 1)[0]], n.rsplit(".", 1)[1], mod)
    mods["vllm.models.deepseek_v4.common.ops.save_partial_states"].save_partial_states = vllm_save
    mods["vllm.models.deepseek_v4.compressor"].save_partial_states = vllm_save
    if with_cutedsl:
        mods["vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl"].compress_norm_rope_store_cutedsl = \
            vllm_store
        mods["vllm.models.deepseek_v4.nvidia.ops"].compress_norm_rope_store_cutedsl = vllm_store
    monkeypatch.setattr(V, "_SAVED", [None])
    return mods, calls


def _forward_store():
    """What DeepseekCompressor.forward does: import the function from the kernel module at call time."""
    from vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl import compress_norm_rope_store_cutedsl

    return compress_norm_rope_store_cutedsl


def test_install_routes(monkeypatch) -> None:
    mods, calls = _fake_vllm(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        V.install()
    comp = mods["vllm.models.deepseek_v4.compressor"]
    assert getattr(comp.save_partial_states, "_c128", False)
    assert mods["vllm.models.deepseek_v4.common.ops.save_partial_states"].save_partial_states is \
        comp.save_partial_states
    routed = _forward_store()
    assert getattr(routed, "_c128", False)
    assert mods["vllm.models.deepseek_v4.nvidia.ops"].compress_norm_rope_store_cutedsl is routed
    V.install()  # twice: no double wrapping
    assert _forward_store() is routed
    routed(compress_ratio=4, head_dim=512)  # ratio 4 stays vLLM's
    comp.save_partial_states(None, None, None, None, None, None, 4, D, 4)
    assert calls == ["vllm store", "vllm save"]

    # ratio 128 through the routes: the same entries as the drop-in called directly (the pooling reads
    # the window's last row from the kv / score that the routed save just wrote, in place)
    rng = np.random.default_rng(8)
    m = VllmModel(rng, 2, 300)
    cm = CacheModel(rng, 2, 300)
    state = m.state.copy()
    rows, pos, req, slot, _ = m.batch(np.array([256, 130]))
    kslots = cm.slots(pos, req, slot)
    comp.save_partial_states(kv=rows[:, :D], score=rows[:, D:], ape=m.ape, positions=pos, state_cache=state,
                             slot_mapping=slot, block_size=8, state_width=D, compress_ratio=128,
                             pdl_kwargs={"launch_pdl": False})
    kw = _cutedsl_kwargs("numpy", m, cm, state, pos, req, slot, kslots)
    kw["positions"], kw["slot_mapping"], kw["state_cache"] = pos, slot, state  # the objects the save saw
    assert V._SAVED[0] is not None
    cm.buf[:] = 0
    seen = []
    real = V.compress_c128
    monkeypatch.setattr(V, "compress_c128", lambda *a, **k: (seen.append(k["kv"] is not None), real(*a, **k)))
    _forward_store()(**kw)
    monkeypatch.setattr(V, "compress_c128", real)
    assert seen == [True], "the routed pooling did not take the saved kv / score"
    assert V._SAVED[0] is None
    routed_bytes = cm.buf.copy()
    cm.buf[:] = 0
    V.compress_norm_rope_store_cutedsl(**kw)
    assert (cm.buf == routed_bytes).all() and routed_bytes.any() and int(kslots.max()) >= 0
    assert calls == ["vllm store", "vllm save"]
    # what c128 does not write stays vLLM's, with a warning
    with pytest.warns(RuntimeWarning, match="stays vLLM's here: store_full_kv"):
        _forward_store()(**dict(kw, store_full_kv=True))
    assert calls[-1] == "vllm store"


def test_install_warns_on_missing(monkeypatch) -> None:
    mods, calls = _fake_vllm(monkeypatch, with_cutedsl=False)
    with pytest.warns(RuntimeWarning, match="compress_norm_rope_store_cutedsl: module "
                                            "vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl did not "
                                            "import"):
        V.install()
    assert getattr(mods["vllm.models.deepseek_v4.compressor"].save_partial_states, "_c128", False)
    del mods["vllm.models.deepseek_v4.compressor"].save_partial_states
    mods["vllm.models.deepseek_v4.common.ops.save_partial_states"].save_partial_states = lambda *a: None
    with pytest.warns(RuntimeWarning, match="save_partial_states: vllm.models.deepseek_v4.compressor does not hold"):
        V.install()


@pytest.mark.parametrize("fw", frameworks())
def test_hostile_slots_and_tables(fw: str) -> None:
    """A slot past the state and a window past the block table's columns (whose positions would wrap onto
    the request's first blocks): ValueError, nothing written. Halves of two separate buffers are rows too."""
    rng = np.random.default_rng(5)
    d, blocks = 128, 40
    state = rng.standard_normal((blocks, 8, 2 * d)).astype(np.float32)
    ape = rng.standard_normal((W, d)).astype(np.float32)
    rows = rng.standard_normal((3, 2 * d)).astype(np.float32)
    pos = np.arange(3, dtype=np.int64)
    before = state.tobytes()
    # the first row past the state (its offset not pos % 8), the first aligned one, and a block past int32
    for slots in ([0, 1, blocks * 8], [0, 1, blocks * 8 + 2], [0, 1, ((1 << 32) + 3) * 8 + 2]):
        with pytest.raises(ValueError, match="^slot_mapping: a slot past the state's 320 rows"):
            V.save_partial_states(_as(fw, rows[:, :d]), _as(fw, rows[:, d:]), _as(fw, ape), _as(fw, pos),
                                  _as(fw, state), _as(fw, np.array(slots, np.int64)), 8, d, 128)
    assert state.tobytes() == before
    table = rng.permutation(blocks)[:16].astype(np.int32).reshape(1, 16)  # 128 positions
    out = np.full((256, d), 7.0, np.float32)
    p = np.arange(256, dtype=np.int64)
    with pytest.raises(ValueError, match="^block_table: a window ends at a position past the 128 tokens"):
        V.compress_norm_rope_store_cutedsl(
            state_cache=_as(fw, state), token_to_req_indices=_as(fw, np.zeros(256, np.int32)),
            positions=_as(fw, p), slot_mapping=_as(fw, table[0, p % 128 // 8].astype(np.int64) * 8 + p % 8),
            block_table=_as(fw, table), block_size=8, state_width=d, compress_ratio=128, compressed_kv=_as(fw, out))
    assert np.all(out == 7.0)
    if fw != "numpy":  # kv and score: adjacent halves, but of two buffers (from_numpy of two views)
        import torch

        got, want = state.copy(), state.copy()
        for s, (k, sc) in ((got, (torch.from_numpy(rows[:, :d]), torch.from_numpy(rows[:, d:]))),
                           (want, (torch.from_numpy(rows[:, :d].copy()), torch.from_numpy(rows[:, d:].copy())))):
            V.save_partial_states(k, sc, torch.from_numpy(ape), torch.from_numpy(pos), torch.from_numpy(s),
                                  torch.from_numpy(pos), 8, d, 128)
        assert got.tobytes() == want.tobytes() != before
