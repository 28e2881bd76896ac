"""Cache entries (DESIGN 11) through decode / prefill on NumPy arrays (the host runner): every window's
FP8 or BF16 entry against the NumPy reference of entries.py, within DESIGN 11.4 of the float64
oracle and tightly against the chain applied to the kernel's own pooled vector; nothing else of the
cache written; the state written as without entries; windows outside the cache or the RoPE table
skipped; a NaN window stored as NaN; output_index for pooled rows."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import pytest

import c128
import entries as E
from cases import BF16_ABS, BF16_REL, DECODE_FILLS, PREFILL_SHAPES, decode_case, poison, prefill_case, to_f64

EPS = 1e-6
INSTANCES = ["h512_f32_f32_f32", "h512_bf16_f32_f32", "h256_f32_bf16_f32", "h128_bf16_bf16_f32"]
POISON = 0xA5


def _inst(name: str) -> c128.Instance:
    return next(i for i in c128.instances() if i.name == name)


def _windows(case, mode: str) -> Dict[int, Tuple[int, int]]:
    """window key (decode: request b; prefill: plan k) -> (position, input row of its last token)."""
    out = {}
    if mode == "decode":
        for b in case.windows:
            out[b] = (int(case.plans[0][b]["seq_len"]) - 128, b)
    else:
        c = case.plans[0]
        for k in case.windows:
            out[k] = (int(c[k]["seq_len"]) - 128, int(c[k]["ragged_id"]))
    return out


class EntryCase:
    """A decode or prefill case of cases.py with cache entries: a poisoned cache of `pages` pages
    of P entries, output_index a random injection of input rows into entries, gamma, a RoPE table."""

    def __init__(self, name: str, kind: str, mode: str, per_page: int, seed: int, scale: float = 1.0,
                 fills=None, shapes=None):
        self.inst = inst = _inst(name)
        rng = np.random.default_rng(seed)
        self.case = decode_case(inst, rng, scale, fills or DECODE_FILLS) if mode == "decode" else \
            prefill_case(inst, rng, scale, shapes or PREFILL_SHAPES)
        self.mode, self.kind, self.per_page, self.d = mode, kind, per_page, inst.head_dim
        rows = len(self.case.input)
        self.pages = -(-2 * rows // per_page)
        self.page_bytes = E.page_bytes(kind, self.d, per_page)
        self.cache = np.full((self.pages, self.page_bytes), POISON, np.uint8)
        self.index = rng.permutation(self.pages * per_page)[:rows].astype(np.int64)
        self.gamma = E.gamma(rng, self.d)
        self.rope = E.rope_table(rng, 1024)
        self.windows = _windows(self.case, mode)

    def entry(self, **changes) -> c128.Entry:
        e = c128.Entry(kind=self.kind, norm_weight=self.gamma, rope_table=self.rope, cache=self.cache,
                       entries_per_page=self.per_page, eps=EPS)
        return e._replace(**changes)

    def run(self, state=None, index=None, **entry_changes) -> np.ndarray:
        """The entry launch on a copy of the case's state; returns that state."""
        state = self.case.state.copy() if state is None else state
        c = self.case
        index = self.index if index is None else index
        if self.mode == "decode":
            c128.decode(state, c.input, c.ape, None, c.plans[0], output_index=index, entry=self.entry(**entry_changes))
        else:
            c128.prefill(state, c.input, c.ape, None, *c.plans, output_index=index, entry=self.entry(**entry_changes))
        return state

    @property
    def jobs(self) -> int:
        """The launch's jobs: decode plans (the batch) or compress plans."""
        return len(self.case.plans[0])

    def pooled(self) -> Tuple[np.ndarray, np.ndarray]:
        """The same batch with pooled f32 rows (the instance's output dtype): (state, output)."""
        state, out = self.case.state.copy(), self.case.output.copy()
        if self.mode == "decode":
            c128.decode(state, self.case.input, self.case.ape, out, self.case.plans[0])
        else:
            c128.prefill(state, self.case.input, self.case.ape, out, *self.case.plans)
        return state, out

    def check(self, tight: np.ndarray = None) -> list:
        """Problems of every window's entry against the fp64 oracle (tight: against the kernel's
        own pooled rows, y_err 0), and of every byte no entry owns."""
        problems = []
        locs = []
        for key, (pos, row) in self.windows.items():
            loc = int(self.index[row])
            locs.append(loc)
            y = self.case.windows[key] if tight is None else to_f64(tight[key], self.inst.output_dtype)
            err = BF16_REL * np.abs(y) + BF16_ABS if tight is None else 0.0
            o = E.oracle(y, err, self.gamma, EPS, self.rope[pos])
            why = E.check_entry(self.cache, self.kind, self.d, self.per_page, self.page_bytes, loc, o)
            if why:
                problems.append(f"window {key} (entry {loc}, position {pos}): {why}")
        mask = E.written_mask(self.cache.size, self.kind, self.d, self.per_page, self.page_bytes, locs)
        stray = np.nonzero((self.cache.reshape(-1) != POISON) & ~mask)[0]
        if len(stray):
            problems.append(f"{len(stray)} cache bytes written outside the windows' entries, first at {stray[0]}")
        return problems


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("kind", ["dsv4_fp8", "dsv4_bf16"])
@pytest.mark.parametrize("name", INSTANCES)
def test_entries_against_the_reference(name: str, kind: str, mode: str, checked) -> None:
    ec = EntryCase(name, kind, mode, 4 if mode == "decode" else 16, seed=len(name) + len(kind) + len(mode))
    assert ec.windows, "the case completes windows"
    state = ec.run()
    assert ec.check() == []
    pooled_state, pooled = ec.pooled()
    assert state.tobytes() == pooled_state.tobytes() == ec.case.expected_state.tobytes()
    ec.cache[...] = POISON
    ec.run()
    assert ec.check(tight=pooled) == []
    if (name, kind, mode) == (INSTANCES[-1], "dsv4_bf16", "prefill"):
        checked(f"cache entries (host runner): FP8 and BF16, decode and prefill, {len(INSTANCES)} instances, within "
                f"DESIGN 11.4 of the NumPy fp64 reference and of the chain on the kernel's own pooled rows; no stray "
                f"cache byte; the state as without entries")


@pytest.mark.parametrize("kind", ["dsv4_fp8", "dsv4_bf16"])
def test_scores_of_magnitude_60(kind: str) -> None:
    ec = EntryCase("h512_f32_f32_f32", kind, "prefill", 8, seed=11, scale=60.0)
    ec.run()
    assert ec.check() == []


def test_bound_objects_and_entry_forms() -> None:
    """Decode / Prefill bound with entries write what decode() / prefill() write; the RoPE table
    as [P, 64] f32, [P, 32, 2] f32 and [P, 32] complex64, and a 1-D cache with page_bytes, agree."""
    for mode in ("decode", "prefill"):
        a = EntryCase("h512_bf16_f32_f32", "dsv4_fp8", mode, 8, seed=3)
        a.run()
        want = a.cache.copy()
        b = EntryCase("h512_bf16_f32_f32", "dsv4_fp8", mode, 8, seed=3)
        state = b.case.state.copy()
        c = b.case
        if mode == "decode":
            bound = c128.Decode(state, c.input, c.ape, None, c.plans[0], output_index=b.index, entry=b.entry())
        else:
            bound = c128.Prefill(state, c.input, c.ape, None, *c.plans, output_index=b.index, entry=b.entry())
        bound()
        assert b.cache.tobytes() == want.tobytes()
        for rope in (b.rope.reshape(-1, 64), b.rope[..., 0] + 1j * b.rope[..., 1]):
            b.cache[...] = POISON
            b.run(rope_table=np.ascontiguousarray(rope.astype(np.complex64) if rope.dtype.kind == "c" else rope))
            assert b.cache.tobytes() == want.tobytes()
        b.cache[...] = POISON
        b.run(cache=b.cache.reshape(-1), page_bytes=b.page_bytes)
        assert b.cache.tobytes() == want.tobytes()
        # rebind the entry: the next call writes the new cache
        other = np.full_like(b.cache, POISON)
        bound.rebind(state=b.case.state.copy(), entry=b.entry(cache=other))
        bound()
        assert other.tobytes() == want.tobytes()


def test_windows_outside_are_skipped() -> None:
    """An index that is negative or past the cache's entries, and a window at or past the RoPE
    table's positions, write nothing; the other windows are written."""
    ec = EntryCase("h512_f32_f32_f32", "dsv4_fp8", "prefill", 4, seed=5)
    keys = sorted(ec.windows)
    rows = [ec.windows[k][1] for k in keys]
    index = ec.index.copy()
    index[rows[0]] = -1
    index[rows[1]] = ec.pages * ec.per_page  # one past the last entry
    index[rows[2]] = 2 ** 62
    ec.run(index=index)
    ec.index = index
    kept = {k: ec.windows[k] for k in keys[3:]}
    ec.windows = kept
    assert ec.check() == []  # every other byte still poison, the rest right
    # RoPE table shorter than the last window's position: that window (and any later) skipped
    ec = EntryCase("h512_f32_f32_f32", "dsv4_fp8", "prefill", 4, seed=5)
    positions = sorted(p for p, _ in ec.windows.values())
    cut = positions[-1]  # windows starting at `cut` are outside a table of `cut` rows
    ec.run(rope_table=ec.rope[:cut])
    ec.windows = {k: v for k, v in ec.windows.items() if v[0] < cut}
    ec.rope = ec.rope[:cut]
    assert ec.check() == []


@pytest.mark.parametrize("kind", ["dsv4_fp8", "dsv4_bf16"])
def test_nan_window(kind: str) -> None:
    """A window whose pooled vector holds a NaN is stored as NaN (DESIGN 11.2): FP8 codes 0x7F,
    scale bytes 0xFF, pad 0, RoPE NaN; BF16 every value NaN."""
    ec = EntryCase("h512_f32_f32_f32", kind, "decode", 4, seed=8)
    b = min(ec.windows)
    x = ec.case.input.copy()
    x[b, 3] = np.nan  # kv channel 3 of the window's last row
    ec.case.input = x
    ec.run()
    value, scale = E.entry_bytes(ec.cache, kind, 512, 4, ec.page_bytes, int(ec.index[b]))
    if kind == "dsv4_fp8":
        assert (value[:448] == 0x7F).all() and (scale[:7] == 0xFF).all() and scale[7] == 0
        assert np.isnan(E.bf16_value(value[448:].view(np.uint16))).all()
    else:
        assert np.isnan(E.bf16_value(value.view(np.uint16))).all()
    del ec.windows[b]
    mask = E.written_mask(ec.cache.size, kind, 512, 4, ec.page_bytes, [int(ec.index[b])])
    ec.cache.reshape(-1)[mask] = POISON
    assert ec.check() == []


def test_pooled_output_index() -> None:
    """output_index with pooled rows: window r goes to output row output_index[r]; a row outside
    the output is skipped; the rows equal today's rows, permuted, bit for bit; no other row is
    written; the state is written as without an index."""
    inst = _inst("h256_bf16_f32_bf16")
    for mode in ("decode", "prefill"):
        rng = np.random.default_rng(21)
        case = decode_case(inst, rng, 1.0, DECODE_FILLS) if mode == "decode" else \
            prefill_case(inst, rng, 1.0, PREFILL_SHAPES)
        ref_state, ref_out = case.state.copy(), case.output.copy()
        rows = len(case.input)
        if mode == "decode":
            c128.decode(ref_state, case.input, case.ape, ref_out, case.plans[0])
        else:
            c128.prefill(ref_state, case.input, case.ape, ref_out, *case.plans)
        windows = _windows(case, mode)
        out = poison((rows + 3, inst.head_dim), inst.output_dtype)
        index = rng.permutation(rows + 3)[:rows].astype(np.int64)
        state = case.state.copy()
        if mode == "decode":
            c128.decode(state, case.input, case.ape, out, case.plans[0], output_index=index)
        else:
            c128.prefill(state, case.input, case.ape, out, *case.plans, output_index=index)
        assert state.tobytes() == ref_state.tobytes()
        skipped = sorted(windows)[0]
        index[windows[skipped][1]] = rows + 3  # outside the output: skipped
        out = poison((rows + 3, inst.head_dim), inst.output_dtype)
        state = case.state.copy()
        if mode == "decode":
            c128.decode(state, case.input, case.ape, out, case.plans[0], output_index=index)
        else:
            c128.prefill(state, case.input, case.ape, out, *case.plans, output_index=index)
        written = set()
        for key, (_, row) in windows.items():
            if key == skipped:
                continue
            assert out[index[row]].tobytes() == ref_out[key].tobytes(), (mode, key)
            written.add(int(index[row]))
        untouched = [r for r in range(len(out)) if r not in written]
        assert out[untouched].tobytes() == poison((len(untouched), inst.head_dim), inst.output_dtype).tobytes()


def test_checker_refuses_one_entry_twice() -> None:
    """Two windows of one launch with one output index: the plan checker reports the later one."""
    ec = EntryCase("h512_f32_f32_f32", "dsv4_fp8", "decode", 4, seed=2)
    c = ec.case
    keys = sorted(ec.windows)
    assert c128.check_decode_plans(c.state, c.input, c.ape, None, c.plans[0], output_index=ec.index,
                                   entry=ec.entry()).ok
    index = ec.index.copy()
    index[ec.windows[keys[1]][1]] = index[ec.windows[keys[0]][1]]
    report = c128.check_decode_plans(c.state, c.input, c.ape, None, c.plans[0], output_index=index, entry=ec.entry())
    assert not report.ok and report.kind == "decode" and report.index == ec.windows[keys[1]][1], report
    pc = EntryCase("h512_f32_f32_f32", "dsv4_fp8", "prefill", 4, seed=2)
    p = pc.case
    assert c128.check_prefill_plans(p.state, p.input, p.ape, None, *p.plans, output_index=pc.index,
                                    entry=pc.entry()).ok
    keys = sorted(pc.windows)
    index = pc.index.copy()
    index[pc.windows[keys[2]][1]] = index[pc.windows[keys[0]][1]]
    report = c128.check_prefill_plans(p.state, p.input, p.ape, None, *p.plans, output_index=index, entry=pc.entry())
    assert not report.ok and (report.kind, report.index) == ("compress", keys[2]), report


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("cause", ["pooled_index_past_output", "entry_index_negative", "entry_past_rope_table"])
def test_skipped_window_still_persists_its_row(mode: str, cause: str) -> None:
    """A window that is skipped because its output row or entry lies outside the output or cache
    (DESIGN 5.10) or because it starts past the RoPE table (DESIGN 11.4) is not written. In
    prefill the batch's new tokens are still persisted (the write plans are plans of their own);
    a decode plan is skipped whole, its new row included, as DESIGN 6.5 has every decode plan
    that fails a check (whether such a row should be persisted anyway is an open question)."""
    if cause == "pooled_index_past_output":
        inst = _inst("h512_f32_f32_f32")
        rng = np.random.default_rng(4)
        case = decode_case(inst, rng, 1.0, DECODE_FILLS) if mode == "decode" else \
            prefill_case(inst, rng, 1.0, PREFILL_SHAPES)
        windows = _windows(case, mode)
        index = np.arange(len(case.input), dtype=np.int64)
        index[windows[sorted(windows)[0]][1]] = len(case.output)  # one past the output's rows
        state = case.state.copy()
        if mode == "decode":
            c128.decode(state, case.input, case.ape, case.output, case.plans[0], output_index=index)
        else:
            c128.prefill(state, case.input, case.ape, case.output, *case.plans, output_index=index)
        expected = case.expected_state
    else:
        ec = EntryCase("h512_f32_f32_f32", "dsv4_fp8", mode, 4, seed=5)
        if cause == "entry_index_negative":
            index = ec.index.copy()
            index[ec.windows[sorted(ec.windows)[0]][1]] = -1
            state = ec.run(index=index)
        else:
            state = ec.run(rope_table=ec.rope[:1])  # a table of position 0 only: later windows are skipped
        expected = ec.case.expected_state
    if mode == "decode":  # the skipped plans' rows keep their old contents
        c = case if cause == "pooled_index_past_output" else ec.case
        keys = sorted(_windows(c, mode))
        skipped = keys[:1] if cause != "entry_past_rope_table" else [b for b in keys if _windows(c, mode)[b][0] > 0]
        expected = expected.copy()
        flat, before = expected.reshape(-1, expected.shape[-1]), c.state.reshape(-1, c.state.shape[-1])
        for b in skipped:
            flat[int(c.plans[0][b]["write_loc"])] = before[int(c.plans[0][b]["write_loc"])]
    rows = np.nonzero((state.view(np.uint8) != expected.view(np.uint8)).reshape(state.shape[0], 128, -1).any(axis=2))
    assert state.tobytes() == expected.tobytes(), f"state rows (page, slot) differ: {list(zip(*rows))[:8]}"


# ---- the workspace ------------------------------------------------------------------------------------------
def _aligned_zeros(nbytes: int, offset: int = 0) -> np.ndarray:
    """nbytes zero bytes starting `offset` bytes past a 64-byte boundary."""
    raw = np.zeros(nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    return raw[start:start + nbytes]


def _counter_bytes(jobs: int) -> int:
    return -(-4 * jobs // 16) * 16


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_given_workspace_refusals(mode: str) -> None:
    """A given workspace too small or misaligned: c128.Error with C128_ERROR_WORKSPACE_TOO_SMALL /
    C128_ERROR_MISALIGNED, naming entry.workspace and the bytes it needs; read-only or strided: a
    ValueError naming it; over the state or the input: C128_ERROR_ALIASED. Nothing is written by a
    refused launch; the plan checker reads no workspace."""
    ec = EntryCase("h512_bf16_f32_f32", "dsv4_fp8", mode, 8, seed=41)
    need = c128.entry_workspace_bytes(ec.jobs, 512)
    assert need == _counter_bytes(ec.jobs) + 4 * 512 * ec.jobs
    fn = "c128_decode_host" if mode == "decode" else "c128_prefill_host"

    def refused(workspace, status=None, exc=c128.Error, match=None, state=None):
        state = ec.case.state.copy() if state is None else state
        before = state.copy()
        with pytest.raises(exc, match=match) as info:
            ec.run(state=state, workspace=workspace)
        assert state.tobytes() == before.tobytes(), "a refused launch wrote the state"
        assert (ec.cache == POISON).all(), "a refused launch wrote the cache"
        if status is not None:
            assert info.value.status == status and info.value.function == fn, info.value
        return info.value

    for short in (need - 4, need - 16, 16, 0):
        e = refused(_aligned_zeros(short), c128.Status.ERROR_WORKSPACE_TOO_SMALL)
        assert e.detail == f"entry.workspace: {short} bytes, c128.entry_workspace_bytes({ec.jobs}, 512) = {need}", e
    for offset in (4, 8, 12):
        ws = _aligned_zeros(need + 16, offset)
        e = refused(ws, c128.Status.ERROR_MISALIGNED)
        assert e.detail == f"entry.workspace: the data pointer {ws.ctypes.data:#x} is not aligned to 16 bytes"
    refused(np.frombuffer(bytes(need), np.uint8), exc=ValueError, match="^entry.workspace: the tensor is read-only")
    refused(np.zeros(2 * need, np.uint8)[::2], exc=ValueError, match="^entry.workspace: expected a contiguous")
    refused("workspace", exc=TypeError, match="^entry.workspace: expected a tensor")
    state = ec.case.state.copy()
    refused(state.reshape(-1).view(np.uint8)[256:256 + need], c128.Status.ERROR_ALIASED, state=state)
    x = np.zeros(ec.case.input.nbytes + need, np.uint8)  # the input, then (overlapping its tail) the workspace
    x[:ec.case.input.nbytes] = ec.case.input.reshape(-1).view(np.uint8)
    ec.case.input = x[:ec.case.input.nbytes].view(ec.case.input.dtype).reshape(ec.case.input.shape)
    refused(x[ec.case.input.nbytes - 64:ec.case.input.nbytes - 64 + need], c128.Status.ERROR_ALIASED)
    # a workspace of exactly `need` bytes, even of another dtype, is taken
    ec.run(workspace=_aligned_zeros(need).view(np.float32))
    assert ec.check() == []
    c = ec.case
    check = c128.check_decode_plans if mode == "decode" else c128.check_prefill_plans
    assert check(c.state, c.input, c.ape, None, *c.plans[:1 if mode == "decode" else 2], output_index=ec.index,
                 entry=ec.entry(workspace=_aligned_zeros(4))).ok


@pytest.mark.parametrize("kind", ["dsv4_fp8", "dsv4_bf16"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_given_workspace_left_all_zero(kind: str, mode: str) -> None:
    """A zeroed workspace given to a launch: the entries are right and the whole workspace is zero
    again afterwards (counters and rows), so the same workspace serves the next launch (another
    batch, other random data and plans), which writes the same bytes as with the binding's workspace."""
    fills = [127, 3, 127, 60, 126, 127]
    shapes = [(0, 300), (127, 1), (64, 200), (5, 3), (130, 254)]
    cases = [EntryCase("h256_f32_bf16_f32", kind, mode, 4, seed=s, fills=fills, shapes=shapes) for s in (51, 52)]
    jobs = cases[0].jobs
    assert cases[1].jobs == jobs and len(cases[0].windows) >= 3
    ws = _aligned_zeros(c128.entry_workspace_bytes(jobs, 256))
    for ec in cases:
        ec.run(workspace=ws)
        assert ec.check() == []
        assert not ws.any(), "the launch left its workspace non-zero"
        given = ec.cache.copy()
        ec.cache[...] = POISON
        ec.run()
        assert ec.cache.tobytes() == given.tobytes()


def test_given_workspace_across_job_counts(checked) -> None:
    """One zeroed workspace given to launches of other job counts in turn (more jobs, then fewer,
    decode and prefill, two head_dims, FP8 and BF16): each writes the same cache and state bytes as
    with a fresh zeroed workspace of its own exact size, and leaves the workspace all zero. (Rows
    left non-zero would break this: a launch of more jobs would count where the last left a row.)"""
    runs = [("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 0, 127]),
            ("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 126, 127, 64, 127, 1, 127, 127] * 2),
            ("h512_bf16_f32_f32", "dsv4_bf16", "prefill", [(0, 300), (127, 1), (64, 64)]),
            ("h256_f32_bf16_f32", "dsv4_fp8", "decode", [127, 5] * 10),
            ("h512_f32_f32_f32", "dsv4_fp8", "prefill", PREFILL_SHAPES + [(3, 700)]),
            ("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 127])]
    cases = [EntryCase(name, kind, mode, 8, seed=110 + k, fills=layout if mode == "decode" else None,
                       shapes=layout if mode == "prefill" else None)
             for k, (name, kind, mode, layout) in enumerate(runs)]
    jobs = [ec.jobs for ec in cases]
    assert len(set(jobs)) >= 5 and all(ec.windows for ec in cases)
    assert any(a > b for a, b in zip(jobs, jobs[1:])) and any(a < b for a, b in zip(jobs, jobs[1:]))
    fresh = []
    for ec in cases:  # each on a fresh workspace of exactly its size
        state = ec.run(workspace=_aligned_zeros(c128.entry_workspace_bytes(ec.jobs, ec.d)))
        assert ec.check() == []
        fresh.append((state.tobytes(), ec.cache.tobytes()))
        ec.cache[...] = POISON
    ws = _aligned_zeros(max(c128.entry_workspace_bytes(ec.jobs, ec.d) for ec in cases))
    for _ in range(2):
        for ec, (state, cache) in zip(cases, fresh):
            got = ec.run(workspace=ws)
            assert got.tobytes() == state and ec.cache.tobytes() == cache, (ec.mode, ec.jobs, ec.d)
            assert not ws.any(), f"a launch of {ec.jobs} jobs left the workspace non-zero"
            ec.cache[...] = POISON
    checked(f"cache-entry workspace (host runner): one given workspace serves {len(jobs)} launches of "
            f"{len(set(jobs))} job counts in turn ({jobs}), twice: bytes equal to fresh workspaces', all zero "
            "after each")


def test_automatic_workspace_across_job_counts(checked) -> None:
    """The binding's workspace serves successive launches of other job counts (decode batches of 3,
    8, 2 and 20 requests, prefills of other compress-plan counts, two head_dims, FP8 and BF16, bound
    Decode / Prefill objects in between): every entry is right each time, and the thread's workspace
    is all zero afterwards."""
    runs = [("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 0, 127]),
            ("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 126, 127, 64, 127, 1, 127, 127]),
            ("h512_bf16_f32_f32", "dsv4_bf16", "prefill", [(0, 300), (127, 1), (64, 64)]),
            ("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 127]),
            ("h512_f32_f32_f32", "dsv4_fp8", "prefill", PREFILL_SHAPES + [(3, 700)]),
            ("h256_f32_bf16_f32", "dsv4_fp8", "decode", [127, 5] * 10),
            ("h512_f32_f32_f32", "dsv4_fp8", "decode", [127, 0, 127])]
    seen = set()
    bound = None
    for k, (name, kind, mode, layout) in enumerate(runs):
        ec = EntryCase(name, kind, mode, 8, seed=60 + k, fills=layout if mode == "decode" else None,
                       shapes=layout if mode == "prefill" else None)
        assert ec.windows
        seen.add(ec.jobs)
        state = ec.run()
        assert ec.check() == [], (k, name, mode, ec.jobs)
        assert state.tobytes() == ec.case.expected_state.tobytes()
        if bound is not None:  # a bound launch of another job count, between the plain ones
            b_ec, b = bound
            b_ec.cache[...] = POISON
            b.rebind(state=b_ec.case.state.copy())
            b()
            assert b_ec.check() == []
        if k == 1:
            c = ec.case
            ec2 = EntryCase(name, kind, mode, 8, seed=60 + k, fills=layout)
            bound = (ec2, c128.Decode(ec2.case.state.copy(), c.input, c.ape, None, c.plans[0], output_index=ec2.index,
                                      entry=ec2.entry()))
    assert len(seen) >= 5
    raw, ptr, size = c128._tls.workspace
    assert ptr % 16 == 0 and raw.ctypes.data <= ptr and ptr + size <= raw.ctypes.data + raw.nbytes
    assert not raw.any(), "the thread's workspace was left non-zero"
    checked(f"cache-entry workspace (host runner): a given one too small / misaligned refused with "
            f"WORKSPACE_TOO_SMALL / MISALIGNED, all zero after each launch; the binding's own serves "
            f"launches of {len(seen)} job counts in turn")


def test_automatic_workspace_per_thread() -> None:
    """Threads running the host runner at the same time (ctypes releases the GIL) each get a
    workspace of their own: every launch of four threads writes the right entries."""
    import threading

    cases = [EntryCase("h512_f32_f32_f32", "dsv4_fp8", mode, 8, seed=70 + k)
             for k, mode in enumerate(["decode", "prefill", "decode", "prefill"])]
    problems: list = []
    barrier = threading.Barrier(len(cases))

    def work(ec: EntryCase) -> None:
        barrier.wait()
        for _ in range(3):
            ec.cache[...] = POISON
            ec.run()
            problems.extend(ec.check())

    threads = [threading.Thread(target=work, args=(ec,)) for ec in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
