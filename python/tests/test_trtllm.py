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
    def __init__(self, rng, reqs: int, max_len: int, tpb: int, d: int = D, lens: Any = None,
                 spare: bool = True) -> None:
        """lens: each request's most tokens (default max_len each); spare: pages the tables do not name."""
        self.tpb, self.d = tpb, d
        lens = [max_len] * reqs if lens is None else list(lens)
        cols = -(-max(lens) // tpb)
        need = [-(-n // tpb) for n in lens]
        pages = (2 if spare else 1) * sum(need) + 3
        self.t_kv, self.t_sc = (np.zeros((reqs, cols), np.int32) for _ in range(2))
        for t in (self.t_kv, self.t_sc):
            ids = rng.permutation(pages)[:sum(need)].astype(np.int32)
            for b, k in enumerate(need):
                t[b, :k], ids = ids[:k], ids[k:]
        self.kv = rng.standard_normal((pages, tpb, d)).astype(np.float32)
        self.sc = rng.standard_normal((pages, tpb, d)).astype(np.float32)
        self.ape = (0.5 * rng.standard_normal((W, d))).astype(np.float32)
        self.tokens = [rng.standard_normal((n, 2 * d)).astype(np.float32) for n in lens]
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
                self.kv[self.t_kv[b, p // self.tpb], p % self.tpb] = row[:self.d]
                self.sc[self.t_sc[b, p // self.tpb], p % self.tpb] = row[self.d:] + self.ape[p % W]
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


def _context(m: TrtModel, fw: str, ext: list, kv: np.ndarray, sc: np.ndarray, rows: Any = None) -> tuple:
    """One compressor_prefill_reduction of m's next context batch on copies kv, sc (as fw); (output, windows)."""
    x, (kv_lens, start, cu, comp), expect = m.step(np.array(ext))
    out = np.full((max(int(comp[-1]), 1), m.d), np.nan, np.float32)
    per = (kv_lens.astype(np.int64) // W - start.astype(np.int64) // W)
    T.compressor_prefill_reduction(_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, m.t_kv),
                                   _as(fw, m.t_sc), _as(fw, out), _as(fw, kv_lens), _as(fw, start), _as(fw, cu),
                                   _as(fw, comp), len(ext), m.tpb, m.d, 128, int(per.max()))
    return out, expect


@pytest.mark.parametrize("fw", _frameworks()[:2])
def test_refused_batch_raises(fw: str) -> None:
    import c128

    rng = np.random.default_rng(7)
    m = TrtModel(rng, 2, 400, 128)
    kv, sc = m.kv.copy(), m.sc.copy()
    _context(m, fw, [200, 300], kv, sc)
    before = (kv.tobytes(), sc.tobytes())
    x, (kv_lens, start, cu, comp), _ = m.step(np.array([100, 2]))
    table = m.t_kv.copy()
    table[0, 2] = m.kv.shape[0] + 5  # positions 256..383 of request 0: a block outside the planes
    out = np.full((int(comp[-1]), D), 7.0, np.float32)
    with pytest.raises(c128.Error) as e:
        T.compressor_prefill_reduction(_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, table),
                                       _as(fw, m.t_sc), _as(fw, out), _as(fw, kv_lens), _as(fw, start), _as(fw, cu),
                                       _as(fw, comp), 2, 128, D, 128, 1)
    assert e.value.status != 0 and e.value.function.startswith("c128_plan_prefill_device")
    pages = m.kv.shape[0]
    assert f"refused: block_table_kv[0][2] = {pages + 5}, but request 0 uses that block (positions 256..383) and " \
           f"the planes hold {pages} pages; nothing was written" in str(e.value), str(e.value)
    assert (kv.tobytes(), sc.tobytes()) == before and np.all(out == 7.0)
    status = T.last_status()
    assert int(status[0]) == int(e.value.status) and int(status[1]) == 0
    # the other refusals the arguments' checks leave to the planner, named in TensorRT-LLM's terms
    head = (_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, m.t_kv), _as(fw, m.t_sc), _as(fw, out))
    score = m.t_sc.copy()
    score[1, 3] = -1  # request 1 writes positions 300 and 301: block 2; its window 256..383 reads block 2 too
    score[1, 2] = -1
    short, short_start = kv_lens.copy(), start.copy()
    short[1], short_start[1] = 1, -1  # request 1's 2 new tokens
    empty_cu, empty_start = cu.copy(), start.copy()
    empty_cu[2], empty_start[1] = empty_cu[1], kv_lens[1]  # request 1 without new tokens
    for args, text in (((score, kv_lens, start, cu), "block_table_score[1][2] = -1, but request 1 uses that block "
                                                      "(positions 256..383)"),
                       ((m.t_sc, short, short_start, cu),
                        "kv_lens: kv_lens[1] = 1, fewer than request 1's 2 new tokens"),
                       ((m.t_sc, kv_lens, empty_start, empty_cu), "request 1 has no new tokens (cu_seq_lens[2] = "
                                                            "cu_seq_lens[1]) but kv_lens[1] = 302")):
        t_sc, lens, sp, cus = args
        with pytest.raises((c128.Error, ValueError)) as e:
            T.compressor_prefill_reduction(*head[:5], _as(fw, t_sc), head[6], _as(fw, lens), _as(fw, sp),
                                           _as(fw, cus), _as(fw, comp), 2, 128, D, 128, 1)
        assert isinstance(e.value, ValueError if text.startswith("kv_lens") else c128.Error), repr(e.value)
        assert text in str(e.value), str(e.value)
        assert (kv.tobytes(), sc.tobytes()) == before and np.all(out == 7.0)


def test_mismatched_arguments_raise() -> None:
    rng = np.random.default_rng(3)
    m = TrtModel(rng, 2, 400, 128)
    kv, sc = m.kv.copy(), m.sc.copy()
    _context(m, "numpy", [200, 300], kv, sc)
    assert T.last_status().tolist() == [0, 0]
    before = (kv.tobytes(), sc.tobytes())
    x, (kv_lens, start, cu, comp), _ = m.step(np.array([2, 2]))
    out = np.zeros((2, D), np.float32)
    head = (x, m.ape, kv, sc, m.t_kv, m.t_sc, out, kv_lens)
    with pytest.raises(ValueError, match=r"^next_n: 3, but request 0 has 2 new tokens"):
        T.compressor_paged_kv_compress(*head, cu, comp, 2, 128, D, 128, 3)
    with pytest.raises(ValueError, match=r"^cu_seq_lens: cu_seq_lens\[2\] = 5, but kv_score has 4 rows"):
        T.compressor_paged_kv_compress(*head, np.array([0, 2, 5], np.int32), comp, 2, 128, D, 128, 2)
    with pytest.raises(ValueError, match=r"^start_pos: start_pos\[1\] = 299, but kv_lens\[1\] - new tokens = "
                                         r"302 - 2 = 300"):
        T.compressor_prefill_reduction(*head, start - np.array([0, 1], np.int32), cu, comp, 2, 128, D, 128, 1)
    with pytest.raises(ValueError, match=r"^start_pos: 1 entries, but batch_size 2 needs 2"):
        T.compressor_prefill_reduction(*head, start[:1], cu, comp, 2, 128, D, 128, 1)
    x2, (kv_lens2, start2, cu2, comp2), _ = TrtModel(np.random.default_rng(3), 2, 400, 128).step(np.array([300, 2]))
    head2 = (x2, m.ape, kv, sc, m.t_kv, m.t_sc, np.zeros((3, D), np.float32), kv_lens2)
    with pytest.raises(ValueError, match=r"^max_outputs: 1, but request 0 completes 2 windows"):
        T.compressor_prefill_reduction(*head2, start2, cu2, comp2, 2, 128, D, 128, 1)
    with pytest.raises(ValueError, match=r"^cu_kv_comp: request 0 completes 2 windows from output row 0, but "
                                         r"output has 1 rows"):
        T.compressor_prefill_reduction(*head2[:6], np.zeros((1, D), np.float32), kv_lens2, start2, cu2, comp2, 2,
                                       128, D, 128, 2)
    assert (kv.tobytes(), sc.tobytes()) == before


@pytest.mark.parametrize("fw", _frameworks()[:2])
def test_mixed_batch_generation_rows_after_context(fw: str) -> None:
    """TensorRT-LLM's mixed step: the context call on kv_score[:num_ctx_tokens], the generation call on all
    of kv_score with cu_seq_lens[num_contexts:] (its first entry num_ctx_tokens, not 0)."""
    rng = np.random.default_rng(11)
    m = TrtModel(rng, 3, 700, 128)
    kv, sc = m.kv.copy(), m.sc.copy()
    _context(m, fw, [300, 254, 40], kv, sc)
    x, (kv_lens, start, cu, comp), expect = m.step(np.array([100, 2, 88]))
    k = 1  # one context request, then generation requests 1 and 2: next_n must be their common count
    out = np.full((int(comp[-1]), D), np.nan, np.float32)
    T.compressor_prefill_reduction(_as(fw, x[:int(cu[k])]), _as(fw, m.ape), _as(fw, kv), _as(fw, sc),
                                   _as(fw, m.t_kv[:k]), _as(fw, m.t_sc[:k]), _as(fw, out), _as(fw, kv_lens[:k]),
                                   _as(fw, start[:k]), _as(fw, cu[:k + 1]), _as(fw, comp[:k + 1]), k, 128, D, 128, 2)
    with pytest.raises(ValueError, match=r"^next_n: 2, but request 1 has 88 new tokens"):
        T.compressor_paged_kv_compress(_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, m.t_kv[k:]),
                                       _as(fw, m.t_sc[k:]), _as(fw, out), _as(fw, kv_lens[k:]), _as(fw, cu[k:]),
                                       _as(fw, comp[k:]), 2, 128, D, 128, 2)
    for g in (1, 2):  # each generation request alone, its rows after the context rows (and after request 1's)
        T.compressor_paged_kv_compress(_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, m.t_kv[g:]),
                                       _as(fw, m.t_sc[g:]), _as(fw, out), _as(fw, kv_lens[g:]), _as(fw, cu[g:]),
                                       _as(fw, comp[g:]), 1, 128, D, 128, int(cu[g + 1] - cu[g]))
    assert kv.tobytes() == m.kv.tobytes() and sc.tobytes() == m.sc.tobytes()
    assert len(expect) == int(comp[-1]) >= 2
    for row, ref in expect.items():
        assert window_error(out[row], "f32", ref) == "", f"output row {row}"


@pytest.mark.parametrize("fw", _frameworks())
def test_ragged_generation_new_tokens_per_seq(fw: str) -> None:
    """Newer TensorRT-LLM's ragged generation batch: next_n the most new tokens a request has, the counts in
    new_tokens_per_seq (a 16th argument, optional); the planes and windows are the model's; counts that
    disagree with cu_seq_lens, or exceed next_n, are refused with nothing written."""
    rng = np.random.default_rng(21)
    m = TrtModel(rng, 3, 700, 128)
    kv, sc = m.kv.copy(), m.sc.copy()
    _context(m, "numpy", [126, 382, 127], kv, sc)  # windows close in steps 1 (0, 2) and 2 (1)
    fn = T.compressor_paged_kv_compress
    if fw == "ops":
        import torch

        import c128.torch  # noqa: F401

        fn = torch.ops.c128.compressor_paged_kv_compress
    windows = 0
    for ext in ([3, 1, 2], [1, 3, 3], [2, 2, 1]):
        x, (kv_lens, start, cu, comp), expect = m.step(np.array(ext))
        out = np.full((max(int(comp[-1]), 1), D), np.nan, np.float32)
        head = (_as(fw, x), _as(fw, m.ape), _as(fw, kv), _as(fw, sc), _as(fw, m.t_kv), _as(fw, m.t_sc), _as(fw, out),
                _as(fw, kv_lens), _as(fw, cu), _as(fw, comp), 3, 128, D, 128)
        if fw != "ops":  # the refusals name the argument (the operator raises them as well, wrapped by PyTorch)
            before = (kv.tobytes(), sc.tobytes())
            wrong = np.array(ext, np.int32)
            wrong[1] += 1
            with pytest.raises(ValueError, match=r"^new_tokens_per_seq: new_tokens_per_seq\[1\] = "):
                fn(*head, 4, new_tokens_per_seq=_as(fw, wrong))
            wrong[1] = -1
            with pytest.raises(ValueError, match=r"^new_tokens_per_seq: new_tokens_per_seq\[1\] = -1, but "):
                fn(*head, 4, new_tokens_per_seq=_as(fw, wrong))
            with pytest.raises(ValueError, match=r"^new_tokens_per_seq: 2 entries, but batch_size 3 needs 3"):
                fn(*head, 4, new_tokens_per_seq=_as(fw, np.array(ext[:2], np.int32)))
            most = max(ext)
            with pytest.raises(ValueError, match=rf"^new_tokens_per_seq: new_tokens_per_seq\[\d\] = {most}, more "
                                                 rf"than next_n = {most - 1}"):
                fn(*head, most - 1, new_tokens_per_seq=_as(fw, np.array(ext, np.int32)))
            assert (kv.tobytes(), sc.tobytes()) == before
        fn(*head, 3, new_tokens_per_seq=_as(fw, np.array(ext, np.int32)))
        assert kv.tobytes() == m.kv.tobytes() and sc.tobytes() == m.sc.tobytes(), f"{ext}: planes"
        for row in range(int(comp[-1])):
            assert window_error(out[row], "f32", expect[row]) == "", f"{ext}: output row {row}"
            windows += 1
    assert windows >= 3


def test_context_batch_over_65536_rows(checked) -> None:
    """71300 rows: one call splits them at row 65536, inside request 1 (66000 tokens, itself more than one
    call's rows, cut mid-window); the planes and the windows are those of the requests run one by one (request
    1 in two calls) and of the model."""
    d, tpb, ext = 128, 128, [300, 66000, 5000]
    lens = [500, 66000, 5100]
    m = TrtModel(np.random.default_rng(5), 3, 0, tpb, d=d, lens=lens, spare=False)
    kv, sc = m.kv.copy(), m.sc.copy()
    warm = [200, 0, 100]  # prefixes of requests 0 and 2 (request 1 is new: it starts empty)
    for b in (0, 2):
        one = TrtModel.__new__(TrtModel)
        one.__dict__.update(tpb=tpb, d=d, kv=m.kv, sc=m.sc, ape=m.ape, tokens=[m.tokens[b]],
                            t_kv=m.t_kv[b:b + 1], t_sc=m.t_sc[b:b + 1], lens=m.lens[b:b + 1].copy())
        _context(one, "numpy", [warm[b]], kv, sc)
        m.lens[b] = warm[b]
    kv1, sc1 = kv.copy(), sc.copy()
    assert sum(ext) > T._ROWS == 65536
    out, expect = _context(m, "numpy", ext, kv, sc)
    assert T.last_status().tolist() == [0, 0, 0]
    assert kv.tobytes() == m.kv.tobytes() and sc.tobytes() == m.sc.tobytes(), "planes: the model's"
    # one by one: each request alone (request 1 in calls of 40000 and 26000 tokens), on copies of the planes
    rows, starts = [], list(warm)
    for b, parts in ((0, [300]), (1, [40000, 26000]), (2, [5000])):
        for e in parts:
            p0 = starts[b]
            x = m.tokens[b][p0:p0 + e]
            kv_lens, start = np.array([p0 + e], np.int32), np.array([p0], np.int32)
            nwin = (p0 + e) // W - p0 // W
            o = np.full((max(nwin, 1), d), np.nan, np.float32)
            T.compressor_prefill_reduction(x, m.ape, kv1, sc1, m.t_kv[b:b + 1], m.t_sc[b:b + 1], o, kv_lens, start,
                                           np.array([0, e], np.int32), np.array([0, nwin], np.int32), 1, tpb, d, 128,
                                           nwin)
            rows.append(o[:nwin])
            starts[b] += e
    assert kv1.tobytes() == kv.tobytes() and sc1.tobytes() == sc.tobytes(), "planes: one by one"
    alone = np.concatenate(rows)
    assert alone.shape == out.shape and alone.tobytes() == out.tobytes(), "windows: one by one"
    for row, ref in expect.items():
        assert window_error(out[row], "f32", ref) == "", f"output row {row}"
    checked(f"TensorRT-LLM context batch of {sum(ext)} rows (> 65536, cut inside a 66000-token request): planes "
            f"and {len(expect)} windows bit for bit those of the requests run one by one")


@pytest.mark.parametrize("fw", _frameworks()[:2])
def test_hostile_metadata(fw: str) -> None:
    """No request: nothing written, status zero. kv_lens past the block table (whose positions would wrap onto
    the row's first blocks) and a negative cu_kv_comp: ValueError naming them, nothing written."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((200, 2 * D)).astype(np.float32)
    ape = rng.standard_normal((W, D)).astype(np.float32)
    kv, sc = rng.standard_normal((4, 128, D)).astype(np.float32), rng.standard_normal((4, 128, D)).astype(np.float32)
    before = (kv.tobytes(), sc.tobytes())
    out = np.full((2, D), 7.0, np.float32)
    none, zero = np.zeros((0, 1), np.int32), np.zeros(1, np.int32)
    T.compressor_paged_kv_compress(_as(fw, x), _as(fw, ape), _as(fw, kv), _as(fw, sc), _as(fw, none),
                                   _as(fw, none), _as(fw, out), _as(fw, np.zeros(0, np.int32)), _as(fw, zero),
                                   _as(fw, zero), 0, 128, D, 128, 1)
    assert [int(v) for v in T.last_status()] == [0, 0]
    table = np.array([[2]], np.int32)  # one column: positions 0..127
    args = lambda lens, comp: (_as(fw, x), _as(fw, ape), _as(fw, kv), _as(fw, sc), _as(fw, table), _as(fw, table),
                               _as(fw, out), _as(fw, np.array([lens], np.int32)), _as(fw, np.array([0], np.int32)),
                               _as(fw, np.array([0, lens], np.int32)), _as(fw, np.array(comp, np.int32)), 1, 128, D,
                               128, 1)
    for lens in (129, 200):  # just past the table, and well past it
        with pytest.raises(ValueError, match=rf"^kv_lens: kv_lens\[0\] = {lens}, but block_table_kv holds 128 "):
            T.compressor_prefill_reduction(*args(lens, [0, 1]))
    with pytest.raises(ValueError, match=r"^cu_kv_comp: cu_kv_comp\[0\] = -1 is negative"):
        T.compressor_prefill_reduction(*args(128, [-1, 0]))
    assert (kv.tobytes(), sc.tobytes()) == before and np.all(out == 7.0)
