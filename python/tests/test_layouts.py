"""State layouts (DESIGN 5.9) on NumPy arrays: the same logical data stored as today's pages of 128
rows and as blocks of B rows (with and without a block table, one plane or kv and score planes,
raw or biased scores) gives the same pooled bits and the same state rows, decode and prefill; the
planners' plans for a block table of row_shift 7 are today's plans byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

import c128
from cases import DECODE_FILLS, PREFILL_SHAPES, decode_case, np_dtype, prefill_case, random_ape, random_rows

W = 128


class Layout:
    """A StateLayout over the logical state of a case (pages of 128 rows, page = table row):
    block_rows B, a shuffled block table (row_shift 7) or none, one or two planes, biased scores."""

    def __init__(self, rng, pages: int, head_dim: int, rows: int, table: bool, planes: int, biased: bool,
                 own_score_table: bool = False):
        self.b, self.d, self.planes, self.biased = rows, head_dim, planes, biased
        per_page = max(W // rows, 1)
        self.blocks = pages * per_page + 3  # spare blocks nobody names
        self.pages = pages
        if table:
            self.table = rng.permutation(self.blocks)[:pages * per_page].astype(np.int32).reshape(pages, per_page)
            self.score_table = rng.permutation(self.blocks)[:pages * per_page].astype(np.int32).reshape(
                pages, per_page) if own_score_table else None
        else:
            assert rows <= W and not own_score_table
            self.table = self.score_table = None
            self.blocks = pages * per_page
        self.spare = rng.standard_normal((self.blocks, rows, 2 * head_dim)).astype(np.float32)

    def _where(self, page: int, k: int, table) -> int:
        return int(table[page][k]) if table is not None else page * (W // self.b) + k

    def store(self, legacy: np.ndarray, ape: np.ndarray):
        """The layout's tensors (state, score plane or None) holding the legacy state's rows."""
        d, b = self.d, self.b
        dtype = legacy.dtype
        spare = self.spare.astype(dtype) if dtype == np.float32 else c128.bf16_from_float(self.spare)
        kv = spare[..., :d].copy() if self.planes == 2 else spare.copy()
        sc = spare[..., d:].copy() if self.planes == 2 else None
        used = min(b, W)
        for p in range(self.pages):
            for k in range(max(W // b, 1)):
                rows = legacy[p, k * used:(k + 1) * used]
                scores = rows[:, d:]
                if self.biased:
                    assert dtype == np.float32
                    scores = (scores + ape[k * used:(k + 1) * used]).astype(np.float32)
                kb, sb = self._where(p, k, self.table), self._where(p, k, self.score_table if self.score_table
                                                                          is not None else self.table)
                if self.planes == 2:
                    kv[kb, :used] = rows[:, :d]
                    sc[sb, :used] = scores
                else:
                    kv[kb, :used, :d] = rows[:, :d]
                    kv[kb, :used, d:] = scores
        return kv, sc

    def state_layout(self, score_plane) -> c128.StateLayout:
        return c128.StateLayout(block_rows=self.b, block_table=self.table, row_shift=7 if self.table is not None else 0,
                                score_plane=score_plane, score_block_table=self.score_table,
                                score_biased=self.biased)


LAYOUTS = {
    "blocks8": dict(rows=8, table=False, planes=1, biased=False),
    "table8": dict(rows=8, table=True, planes=1, biased=False),
    "table32_planes": dict(rows=32, table=True, planes=2, biased=False),
    "table16_planes_own_tables": dict(rows=16, table=True, planes=2, biased=False, own_score_table=True),
    "table128": dict(rows=128, table=True, planes=1, biased=False),
    "table256": dict(rows=256, table=True, planes=1, biased=False),
    "table8_biased": dict(rows=8, table=True, planes=1, biased=True),
    "table64_planes_biased": dict(rows=64, table=True, planes=2, biased=True, own_score_table=True),
}
INSTANCES = ["h128_f32_f32_f32", "h256_bf16_f32_bf16", "h512_f32_bf16_f32"]


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("layout_name", sorted(LAYOUTS))
@pytest.mark.parametrize("name", INSTANCES)
def test_same_bits_as_todays_layout(name: str, layout_name: str, mode: str, checked) -> None:
    inst = next(i for i in c128.instances() if i.name == name)
    spec = LAYOUTS[layout_name]
    if spec["biased"] and inst.state_dtype != "f32":
        pytest.skip("biased scores give today's bits with an f32 state only (DESIGN 5.9)")
    rng = np.random.default_rng([len(name), len(layout_name), len(mode)])
    case = decode_case(inst, rng, 60.0, DECODE_FILLS) if mode == "decode" else \
        prefill_case(inst, rng, 1.0, PREFILL_SHAPES)
    pages = case.state.shape[0]
    lay = Layout(rng, pages, inst.head_dim, **spec)
    kv, sc = lay.store(case.state, case.ape)
    want_kv, want_sc = lay.store(case.expected_state, case.ape)
    sl = lay.state_layout(sc)
    # today's launch
    legacy_state, legacy_out = case.state.copy(), case.output.copy()
    out = case.output.copy()
    if mode == "decode":
        c128.decode(legacy_state, case.input, case.ape, legacy_out, case.plans[0])
        c128.decode(kv, case.input, case.ape, out, case.plans[0], state_layout=sl)
    else:
        c128.prefill(legacy_state, case.input, case.ape, legacy_out, *case.plans)
        c128.prefill(kv, case.input, case.ape, out, *case.plans, state_layout=sl,
                     host_options=c128.HostOptions(check_races=True))
    assert case.check(legacy_state, legacy_out) == []
    assert out.tobytes() == legacy_out.tobytes(), "pooled rows differ from today's layout"
    assert kv.tobytes() == want_kv.tobytes(), "state (kv plane) rows differ"
    if sc is not None:
        assert sc.tobytes() == want_sc.tobytes(), "score plane rows differ"
    if (name, layout_name, mode) == (INSTANCES[-1], sorted(LAYOUTS)[-1], "prefill"):
        checked(f"state layouts (host runner): {len(LAYOUTS)} layouts (B = 8..256, block tables, kv/score planes, "
                f"biased scores) x {len(INSTANCES)} instances, decode and prefill: today's pooled bits and state rows")


@pytest.mark.parametrize("layout_name", ["table8", "table32_planes", "table16_planes_own_tables", "table256"])
def test_planner_with_a_block_table(layout_name: str) -> None:
    """Ring(state_layout=...) with a block table of row_shift 7: logical rows are today's request
    ring of R = 128, so the host planner (and the device planners' code on the host) emit today's
    plans byte for byte; a missing or null block is refused."""
    spec = LAYOUTS[layout_name]
    rng = np.random.default_rng(3)
    pages, d = 12, 128
    lay = Layout(rng, pages, d, **spec)
    plane = np.zeros((lay.blocks, lay.b, d if lay.planes == 2 else 2 * d), np.float32)
    sl = lay.state_layout(plane if lay.planes == 2 else None)
    ring = c128.Ring(lay.blocks, state_layout=sl)
    legacy = c128.Ring(pages)
    reqs = c128.requests([3, 0, 7, 5], [300, 140, 127, 256], [300, 20, 5, 128])
    want = c128.plan_prefill(legacy, reqs, capacity=500, pad_to_capacity=True)
    got = c128.plan_prefill(ring, reqs, capacity=500, pad_to_capacity=True)
    assert (got.num_compress, got.num_write) == (want.num_compress, want.num_write)
    assert got.compress.tobytes() == want.compress.tobytes() and got.write.tobytes() == want.write.tobytes()
    dreqs = c128.requests([3, 0, 7, 5], [128, 5, 129, 256])
    assert c128.plan_decode(ring, dreqs).tobytes() == c128.plan_decode(legacy, dreqs).tobytes()
    # the device planners' code on the host, from the engine's arrays
    compress, write = np.zeros((500, 16), np.uint8), np.zeros((500, 8), np.uint8)
    status, counts = np.full(1, -1, np.int32), np.zeros(2, np.int64)
    workspace = np.zeros(c128.plan_workspace_size(4), np.uint8)
    c128.plan_prefill_device(ring, None, compress, write, counts, status, workspace, seq_lens=reqs[:, 1].copy(),
                             query_start=np.concatenate([[0], np.cumsum(reqs[:, 2])]).astype(np.int32),
                             pool_indices=reqs[:, 0].copy())
    assert status[0] == 0 and compress.tobytes() == want.compress.tobytes() and write.tobytes() == want.write.tobytes()
    # a missing block (negative) and the null block: BLOCK_MISSING; a block past the state: PAGE_OUT_OF_RANGE
    for value, ring_changes, status_name in ((-1, {}, "ERROR_BLOCK_MISSING"), (None, {"null_block": "x"},
                                                                                 "ERROR_BLOCK_MISSING"),
                                             (lay.blocks, {}, "ERROR_PAGE_OUT_OF_RANGE")):
        table = lay.table.copy()
        if value is None:
            value = int(table[3][0])
            ring_changes = {"null_block": value}
        table[3][0] = value
        bad = c128.Ring(lay.blocks, state_layout=sl._replace(block_table=table), **ring_changes)
        with pytest.raises(c128.Error) as e:
            c128.plan_prefill(bad, reqs, capacity=500)
        assert e.value.status == c128.Status[status_name]


@pytest.mark.parametrize("name, biased, bound", [("h128_f32_f32_f32", True, False), ("h128_f32_f32_f32", False, True),
                                                 ("h256_bf16_bf16_bf16", False, False)])
def test_prefill_write_slots(name: str, biased: bool, bound: bool, checked) -> None:
    """c128.prefill(write_slots=, write_positions=) (and the bound Prefill): input row t goes to physical
    state row slots[t], with ape row positions[t] % 128 added to its score where scores are biased (the
    fp32 add); a negative slot or one past the state writes nothing, and every other byte of the state
    stays; the checker reads the slots (a slot past the state, two tokens with one slot); refusals."""
    inst = next(i for i in c128.instances() if i.name == name)
    d, sd = inst.head_dim, inst.state_dtype
    rng = np.random.default_rng(11)
    b, blocks, t = 16, 9, 70
    state = random_rows(rng, blocks * b, d, sd, 1.0).reshape(blocks, b, 2 * d)
    before = state.copy()
    rows = random_rows(rng, t, d, sd, 60.0)
    ape = random_ape(rng, d)
    slots = rng.permutation(blocks * b)[:t].astype(np.int64)
    slots[[3, 40]] = -1  # padding
    slots[17] = blocks * b + 5  # past the state: skipped by the kernel, named by the checker
    pos = rng.integers(0, 1 << 40, t).astype(np.int64)
    layout = c128.StateLayout(block_rows=b, score_biased=biased)
    out = np.zeros((0, d), np_dtype(inst.output_dtype))
    no_compress = np.zeros((0, 16), np.uint8)
    ok = slots.copy()
    ok[17] = -1
    report = c128.check_prefill_plans(state, rows, ape, out, no_compress, None, state_layout=layout, write_slots=ok,
                                      write_positions=pos)
    assert report.ok, report
    if bound:
        launch = c128.Prefill(state, rows, ape, out, no_compress, None, state_layout=layout,
                              write_slots=np.full(t, -1, np.int64), write_positions=pos)
        launch()
        assert state.tobytes() == before.tobytes()  # every slot negative: nothing written
        launch.rebind(write_slots=slots)
        launch()
    else:
        c128.prefill(state, rows, ape, out, no_compress, None, state_layout=layout, write_slots=slots,
                     write_positions=pos)
    want = before.reshape(blocks * b, 2 * d).copy()
    for k in np.flatnonzero((slots >= 0) & (slots < blocks * b)):
        row = rows[k].copy()
        if biased:
            row[d:] = row[d:] + ape[pos[k] % W]  # float32 + float32: the kernels' fp32 add
        want[slots[k]] = row
    assert state.reshape(blocks * b, 2 * d).tobytes() == want.tobytes()
    # the checker names a slot past the state, and two tokens with one slot at the later one
    report = c128.check_prefill_plans(state, rows, ape, out, no_compress, None, state_layout=layout,
                                      write_slots=slots, write_positions=pos)
    assert (report.index, report.kind) == (17, "write"), report
    twice = ok.copy()
    twice[50] = twice[20]
    report = c128.check_prefill_plans(state, rows, ape, out, no_compress, None, state_layout=layout,
                                      write_slots=twice, write_positions=pos)
    assert (report.index, report.kind) == (50, "write"), report
    # refused before any launch, the state unchanged
    after = state.copy()
    for kw, error, match in (
            (dict(write_slots=slots), ValueError, "give both"),
            (dict(write_positions=pos), ValueError, "give both"),
            (dict(write_slots=slots.astype(np.int32), write_positions=pos), TypeError, "write_slots: expected int64"),
            (dict(write_slots=slots, write_positions=pos[:-1]), ValueError, "one position a slot"),
            (dict(write_slots=np.zeros(t + 1, np.int64), write_positions=np.zeros(t + 1, np.int64)), ValueError,
             "one per input row"),
            (dict(write_slots=slots, write_positions=pos, plans=np.zeros((0, 8), np.uint8)), ValueError,
             "one source")):
        plans = kw.pop("plans", None)
        with pytest.raises(error, match=match):
            c128.prefill(state, rows, ape, out, no_compress, plans, state_layout=layout, **kw)
    for kw, error in ((dict(write_slots="slots", write_positions=pos), TypeError),
                      (dict(write_slots=slots.reshape(2, -1), write_positions=pos.reshape(2, -1)), ValueError)):
        with pytest.raises(error):
            c128.prefill(state, rows, ape, out, no_compress, None, state_layout=layout, **kw)
    # no slot (0 of them), and garbage slots and positions: nothing written
    garbage = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1, blocks * b], np.int64)
    for sl, ps in ((np.zeros(0, np.int64), np.zeros(0, np.int64)), (garbage, garbage[::-1].copy())):
        c128.prefill(state, rows, ape, out, no_compress, None, state_layout=layout, write_slots=sl, write_positions=ps)
    with pytest.raises(c128.Error) as e:  # slots are physical rows: not on a sharded state
        c128.prefill(state, rows, ape, out, no_compress, None, layout=(0, 2, blocks), state_layout=layout,
                     write_slots=slots, write_positions=pos)
    assert e.value.status == c128.Status.ERROR_INVALID_STATE_LAYOUT
    assert state.tobytes() == after.tobytes()
    checked("c128.prefill / Prefill with write_slots and write_positions (host runner): rows at their physical "
            "slots (ape added where biased), padding and slots past the state not written, the rest of the state "
            "unchanged; the checker names a slot past the state and a slot named twice; refusals; 0 slots and "
            "garbage slots (INT64_MIN / MAX, -1, past the state) write nothing")
