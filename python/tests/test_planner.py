"""Planner and checker round trips: host planner -> plan checker accepts; the device planners' code
on the host (the *_device_host twins) = the host planner byte for byte, error batches included;
caller-given arrays in every accepted form; the checker finds corrupted plans."""

from __future__ import annotations

import numpy as np
import pytest

import c128


def _tensors(head_dim=128, pages=64, rows=4, out_rows=4):
    state = np.zeros((pages, 128, 2 * head_dim), np.float32)
    x = np.zeros((rows, 2 * head_dim), np.float32)
    ape = np.zeros((128, head_dim), np.float32)
    out = np.zeros((max(out_rows, 1), head_dim), np.float32)
    return state, x, ape, out


RINGS = {
    "legacy": lambda pages: c128.Ring(pages),
    "ring256": lambda pages: c128.Ring(pages, ring_tokens=256, speculative=True),
    "page_table": lambda pages: c128.Ring(
        pages, ring_tokens=256, speculative=True,
        page_table=np.random.default_rng(1).permutation(pages).astype(np.int32).reshape(pages // 2, 2)),
}


def _batch(rng, num_pool, verify, speculative):
    pools = rng.permutation(num_pool)[:6]
    reqs = []
    for p in pools:
        if verify:
            extend = int(rng.integers(1, 131 if rng.integers(0, 4) == 0 else 7)) if speculative else 1
        else:
            extend = int(rng.integers(1, 400))
        seq = extend + int(rng.integers(0, 600))
        reqs.append((int(p), seq, extend))
    reqs.append((0, 0, 0))  # an absent request
    return c128.requests(*zip(*reqs))


@pytest.mark.parametrize("ring_name", sorted(RINGS))
@pytest.mark.parametrize("verify", [False, True])
def test_prefill_round_trip(ring_name: str, verify: bool, checked) -> None:
    pages = 64
    ring = RINGS[ring_name](pages)
    num_pool = pages if ring_name == "legacy" else pages // 2
    rng = np.random.default_rng([len(ring_name), verify])
    for _ in range(20):
        reqs = _batch(rng, num_pool, verify, ring.speculative)
        rows = int(reqs[:, 2].sum())
        host = c128.plan_prefill(ring, reqs, verify=verify, capacity=rows + 5, pad_to_capacity=True)
        state, x, ape, out = _tensors(pages=pages, rows=rows, out_rows=rows + 5)
        report = c128.check_prefill_plans(state, x, ape, out, host.compress, host.write)
        assert report.ok, report
        # The device planner's code on the host: the same bytes, counts and a success status.
        compress = np.zeros((rows + 5, 16), np.uint8)
        write = np.zeros((rows + 5, 8), np.uint8)
        counts = np.zeros(2, np.int64)
        status = np.full(1, -1, np.int32)
        workspace = np.zeros(c128.plan_workspace_size(len(reqs)), np.uint8)
        c128.plan_prefill_device(ring, reqs, compress, write, counts, status, workspace, verify=verify)
        assert status[0] == 0 and list(counts) == [host.num_compress, host.num_write]
        assert compress.tobytes() == host.compress.tobytes() and write.tobytes() == host.write.tobytes()
    if ring_name == "page_table" and verify:
        checked("planners: host planner = device planner (host twin) byte for byte, checker accepts, over legacy, "
                "R = 256 and page-table layouts, prefill and verify")


@pytest.mark.parametrize("ring_name", sorted(RINGS))
def test_decode_round_trip(ring_name: str) -> None:
    pages = 64
    ring = RINGS[ring_name](pages)
    num_pool = pages if ring_name == "legacy" else pages // 2
    rng = np.random.default_rng(7)
    for _ in range(20):
        pools = rng.permutation(num_pool)[:9]
        seqs = rng.integers(0, 1000, len(pools))
        seqs[0] = 0  # a padding row
        reqs = c128.requests(pools, seqs)
        host = c128.plan_decode(ring, reqs)
        state, x, ape, out = _tensors(pages=pages, rows=len(reqs), out_rows=len(reqs))
        assert c128.check_decode_plans(state, x, ape, out, host).ok
        plans = np.zeros((len(reqs), 4), np.int32)
        status = np.full(1, -1, np.int32)
        workspace = np.zeros(c128.plan_workspace_size(len(reqs)), np.uint8)
        c128.plan_decode_device(ring, reqs, plans, status, workspace)
        assert status[0] == 0 and plans.tobytes() == host.tobytes()
        assert host["seq_len"][0] == 0 and host["write_loc"][0] == -1


def test_error_batches_agree() -> None:
    """A batch the host planner refuses: c128.Error with its status, the arrays untouched; the device
    planner's twin writes the same status and sentinels (no exception: a captured step reads it)."""
    ring = c128.Ring(8)
    bad = [
        ([(0, 10, 20)], c128.Status.ERROR_EXTEND_EXCEEDS_SEQ),
        ([(0, 10, 0)], c128.Status.ERROR_EMPTY_EXTEND),
        ([(9, 10, 5)], c128.Status.ERROR_POOL_INDEX_OUT_OF_RANGE),
        ([(0, 10, 5), (0, 20, 5)], c128.Status.ERROR_PAGE_SHARED),
        ([(0, -1, 5)], c128.Status.ERROR_NEGATIVE_SIZE),
    ]
    for reqs, status_expected in bad:
        compress = np.full((32, 16), 0xAB, np.uint8)
        write = np.full((32, 8), 0xAB, np.uint8)
        with pytest.raises(c128.Error) as e:
            c128.plan_prefill(ring, reqs, compress=compress, write=write)
        assert e.value.status == status_expected
        assert (compress == 0xAB).all() and (write == 0xAB).all()
        status = np.zeros(1, np.int32)
        counts = np.full(2, 7, np.int64)
        workspace = np.zeros(c128.plan_workspace_size(len(reqs)), np.uint8)
        c128.plan_prefill_device(ring, reqs, compress, write, counts, status, workspace)
        assert status[0] == status_expected and list(counts) == [0, 0]
        sentinel = np.frombuffer(compress.tobytes(), np.uint32).reshape(32, 4)[:, 0]
        assert (sentinel == 0xFFFFFFFF).all()
    with pytest.raises(c128.Error) as e:  # verify batches on a non-speculative ring: one draft at most
        c128.plan_prefill(ring, [(0, 10, 2)], verify=True)
    assert e.value.status == c128.Status.ERROR_TOO_MANY_DRAFTS
    with pytest.raises(c128.Error) as e:
        c128.plan_prefill(c128.Ring(8, ring_tokens=256, speculative=True), [(0, 200, 131)], verify=True)
    assert e.value.status == c128.Status.ERROR_TOO_MANY_DRAFTS
    with pytest.raises(c128.Error) as e:
        c128.plan_prefill(ring, [(0, 300, 300)], capacity=2)
    assert e.value.status == c128.Status.ERROR_CAPACITY_TOO_SMALL


def test_caller_given_arrays() -> None:
    """Plans into caller-given arrays (uint8, int32, records; larger than needed), padded to a capacity."""
    ring = c128.Ring(16)
    reqs = [(3, 300, 300), (5, 140, 20)]
    ref = c128.plan_prefill(ring, reqs, capacity=400, pad_to_capacity=True)
    for cf, wf in ((np.zeros((400, 16), np.uint8), np.zeros((400, 8), np.uint8)),
                   (np.zeros((500, 4), np.int32), np.zeros((450, 2), np.int32)),
                   (np.zeros(400, c128.COMPRESS_PLAN_DTYPE), np.zeros(400, c128.WRITE_PLAN_DTYPE))):
        got = c128.plan_prefill(ring, reqs, capacity=400, pad_to_capacity=True, compress=cf, write=wf)
        assert got.compress is cf and got.write is wf
        assert (got.num_compress, got.num_write) == (ref.num_compress, ref.num_write)
        assert cf.tobytes()[: 400 * 16] == ref.compress.tobytes() and wf.tobytes()[: 400 * 8] == ref.write.tobytes()
    assert ref.compress[ref.num_compress:]["seq_len"].tolist() == [0xFFFFFFFF] * (400 - ref.num_compress)
    out = np.zeros((4, 16), np.uint8)
    assert c128.plan_decode(ring, [(1, 128, 1), (2, 5, 1)], out=out) is out
    assert (out[2:] == 0).all()  # rows past the batch untouched
    with pytest.raises(ValueError, match="capacity"):
        c128.plan_prefill(ring, reqs, capacity=401, compress=np.zeros((400, 16), np.uint8))
    with pytest.raises(ValueError, match="out"):
        c128.plan_decode(ring, [(1, 128, 1), (2, 5, 1)], out=np.zeros((1, 16), np.uint8))


def test_checker_reports() -> None:
    """Corrupted plans: the checker names the first offending plan, its array and why."""
    ring = c128.Ring(8)
    plans = c128.plan_prefill(ring, [(1, 300, 300)])
    state, x, ape, out = _tensors(pages=8, rows=300, out_rows=plans.num_compress)
    compress, write = plans.compress[: plans.num_compress].copy(), plans.write[: plans.num_write].copy()
    assert c128.check_prefill_plans(state, x, ape, out, compress, write).ok
    bad = compress.copy()
    bad[1]["read_page_1"] = 99
    bad[1]["buffer_len"] = 3
    r = c128.check_prefill_plans(state, x, ape, out, bad, write)
    assert (r.index, r.kind, r.ok) == (1, "compress", False) and "page" in r.message
    bad = write.copy()
    bad[5]["write_loc"] = bad[2]["write_loc"]
    r = c128.check_prefill_plans(state, x, ape, out, compress, bad)
    assert (r.index, r.kind) == (5, "write") and "plan 2" in r.message
    bad = compress.copy()
    bad[0]["seq_len"] = 129
    r = c128.check_prefill_plans(state, x, ape, out, bad, write)
    assert (r.index, r.kind) == (0, "compress") and "multiple of 128" in r.message
    dplans = c128.plan_decode(ring, [(1, 128, 1), (2, 256, 1)])
    state, x, ape, out = _tensors(pages=8, rows=2, out_rows=2)
    dplans[1]["read_page_1"] = 5
    r = c128.check_decode_plans(state, x, ape, out, dplans)
    assert (r.index, r.kind) == (1, "decode") and "row 127" in r.message
    with pytest.raises(c128.Error) as e:  # what the launch refuses, the checker refuses
        c128.check_decode_plans(state, x, ape, out, dplans, requests_per_block=33)
    assert e.value.status == c128.Status.ERROR_INVALID_GROUP


def test_workspace_size() -> None:
    assert c128.plan_workspace_size(0) > 0
    assert c128.plan_workspace_size(1000) > c128.plan_workspace_size(10)
    assert c128.plan_workspace_size(-1) == 0
    assert c128.plan_workspace_size(2**40) == 0
    with pytest.raises(ValueError, match="workspace"):
        c128.plan_decode_device(c128.Ring(8), [(0, 5, 1)], np.zeros((1, 16), np.uint8), np.zeros(1, np.int32),
                                np.zeros(8, np.uint8))


def test_requests_from_lens() -> None:
    """requests_from_lens = the engine's arrays as request triples (lists, int32 / int64 arrays);
    decode without query_start; a decreasing query_start is C128_ERROR_NEGATIVE_SIZE."""
    got = c128.requests_from_lens([300, 20, 7], [0, 300, 320, 321], [4, 1, 9])
    assert got.dtype == np.int32 and got.tolist() == [[4, 300, 300], [1, 20, 20], [9, 7, 1]]
    got = c128.requests_from_lens(np.array([5, 6], np.int64), np.array([0, 2, 5], np.int32))
    assert got.tolist() == [[0, 5, 2], [1, 6, 3]]
    assert c128.requests_from_lens([128, 5], None).tolist() == [[0, 128, 1], [1, 5, 1]]
    assert c128.requests_from_lens([], [0]).shape == (0, 3)
    with pytest.raises(c128.Error) as e:
        c128.requests_from_lens([5, 6], [0, 4, 3])
    assert e.value.status == c128.Status.ERROR_NEGATIVE_SIZE
    with pytest.raises(ValueError, match="^query_start: expected n \\+ 1 = 3"):
        c128.requests_from_lens([5, 6], [0, 4])
    with pytest.raises(ValueError, match="^pool_indices: expected n = 2"):
        c128.requests_from_lens([5, 6], [0, 1, 2], [1])
    with pytest.raises(ValueError, match="^seq_lens: values do not fit int32"):
        c128.requests_from_lens([2**31], None)
    with pytest.raises(TypeError, match="^seq_lens: expected integers"):
        c128.requests_from_lens([1.5], None)
    with pytest.raises(ValueError, match="^query_start: expected a 1-D"):
        c128.requests_from_lens([5], [[0, 5]])
    # the planners agree with the requests they stand for
    ring = c128.Ring(16)
    reqs = c128.requests_from_lens([300, 140], [0, 300, 320], [3, 5])
    assert c128.plan_prefill(ring, reqs, capacity=320, pad_to_capacity=True).compress.tobytes() == \
        c128.plan_prefill(ring, [(3, 300, 300), (5, 140, 20)], capacity=320, pad_to_capacity=True).compress.tobytes()


@pytest.mark.parametrize("write_all", [False, True])
def test_engine_arrays_in_the_device_planners(write_all: bool) -> None:
    """plan_*_device with seq_lens / query_start / pool_indices in place of requests (on the CPU
    through the *_device_host twins) = the host planner on requests_from_lens of the same arrays."""
    rng = np.random.default_rng(12)
    ring = c128.Ring(64, ring_tokens=256, speculative=True, write_all=write_all)
    for _ in range(10):
        n = 6
        ext = rng.integers(1, 300, n).astype(np.int32)
        seq = (ext + rng.integers(0, 500, n)).astype(np.int32)
        qs = np.concatenate([[0], np.cumsum(ext)]).astype(np.int32)
        pool = rng.permutation(32)[:n].astype(np.int32)
        for pool_arg in (pool, None):
            reqs = c128.requests_from_lens(seq, qs, pool_arg)
            cap = int(ext.sum()) + 4
            host = c128.plan_prefill(ring, reqs, capacity=cap, pad_to_capacity=True)
            compress, write = np.zeros((cap, 16), np.uint8), np.zeros((cap, 8), np.uint8)
            counts, status = np.zeros(2, np.int64), np.full(1, -1, np.int32)
            workspace = np.zeros(c128.plan_workspace_size(n), np.uint8)
            c128.plan_prefill_device(ring, None, compress, write, counts, status, workspace, seq_lens=seq,
                                     query_start=qs, pool_indices=pool_arg)
            assert status[0] == 0 and list(counts) == [host.num_compress, host.num_write]
            assert compress.tobytes() == host.compress.tobytes() and write.tobytes() == host.write.tobytes()
            dplans = np.zeros((n, 16), np.uint8)
            c128.plan_decode_device(ring, None, dplans, status, workspace, seq_lens=seq, pool_indices=pool_arg)
            assert status[0] == 0
            assert dplans.tobytes() == c128.plan_decode(ring, c128.requests_from_lens(seq, None, pool_arg)).tobytes()


def test_device_planner_rows_and_output_rows() -> None:
    """query_start past 0 moves every plan's input row by query_start[0]; output_first writes the
    launch's output_index (request i's j-th window at output_first[i] + j, at its input row, no other
    entry); output_first without output_index is refused."""
    ring = c128.Ring(16, write_all=True)
    seq, ext, row0 = np.array([300, 140, 0, 129], np.int32), np.array([300, 20, 0, 2], np.int32), 40
    qs = (row0 + np.concatenate([[0], np.cumsum(ext)])).astype(np.int32)
    first = np.array([7, 3, 90, 11], np.int32)
    cap = int(ext.sum()) + row0 + 2
    host = c128.plan_prefill(ring, c128.requests_from_lens(seq, qs - row0), capacity=cap, pad_to_capacity=True)
    compress, write = np.zeros((cap, 16), np.uint8), np.zeros((cap, 8), np.uint8)
    counts, status = np.zeros(2, np.int64), np.full(1, -1, np.int32)
    workspace = np.zeros(c128.plan_workspace_size(4), np.uint8)
    index = np.full(cap, -5, np.int64)
    c128.plan_prefill_device(ring, None, compress, write, counts, status, workspace, seq_lens=seq, query_start=qs,
                             output_first=first, output_index=index)
    assert status[0] == 0 and list(counts) == [host.num_compress, host.num_write] == [4, 150]
    got_c, got_w = compress.reshape(-1).view(c128.COMPRESS_PLAN_DTYPE), write.reshape(-1).view(c128.WRITE_PLAN_DTYPE)
    hc, hw = host.compress[:4], host.write[:150]
    assert (got_c["ragged_id"][:4] == hc["ragged_id"] + row0).all() and (got_c["seq_len"][:4] == hc["seq_len"]).all()
    assert (got_w["ragged_id"][:150] == hw["ragged_id"] + row0).all()
    assert (got_w["write_loc"][:150] == hw["write_loc"]).all()
    want = np.full(cap, -5, np.int64)
    # request 0: windows ending at its rows 127 and 255; request 1 (positions 120..139) at its row 7; request 3
    # (positions 127, 128) at its first row; request 2 is absent
    want[[row0 + 127, row0 + 255, row0 + 307, row0 + 320]] = [7, 8, 3, 11]
    assert index.tolist() == want.tolist()
    with pytest.raises(ValueError, match="output_first, output_index"):
        c128.plan_prefill_device(ring, None, compress, write, counts, status, workspace, seq_lens=seq,
                                 query_start=qs, output_first=first)


def test_write_all_and_rope_positions() -> None:
    """write_all persists the last R tokens of each request (not only the open window's);
    rope_positions refuses a window starting at or past it (C128_ERROR_ROPE_TABLE_TOO_SHORT),
    in the host planners and the device planners' twins alike."""
    reqs = [(0, 300, 300), (1, 140, 20)]
    some = c128.plan_prefill(c128.Ring(8), reqs, capacity=320)
    every = c128.plan_prefill(c128.Ring(8, write_all=True), reqs, capacity=320)
    assert some.num_write == (300 - 256) + (140 - 128)
    assert every.num_write == 128 + 20  # R = 128: the last 128 tokens of a request of 300, the 20 new ones
    assert every.num_compress == some.num_compress
    rows = every.write[: every.num_write]
    assert rows["ragged_id"].tolist() == list(range(172, 300)) + list(range(300, 320))
    # rope_positions: the windows of request 0 start at 0 and 128; request 1's at 0
    assert c128.plan_prefill(c128.Ring(8, rope_positions=129), reqs, capacity=320).num_compress == 3
    for positions in (128, 1):
        with pytest.raises(c128.Error) as e:
            c128.plan_prefill(c128.Ring(8, rope_positions=positions), reqs, capacity=320)
        assert e.value.status == c128.Status.ERROR_ROPE_TABLE_TOO_SHORT
        status = np.zeros(1, np.int32)
        c128.plan_prefill_device(c128.Ring(8, rope_positions=positions), reqs, np.zeros((320, 16), np.uint8),
                                 np.zeros((320, 8), np.uint8), None, status,
                                 np.zeros(c128.plan_workspace_size(2), np.uint8))
        assert status[0] == c128.Status.ERROR_ROPE_TABLE_TOO_SHORT
    with pytest.raises(c128.Error) as e:  # decode: the boundary window of position 128
        c128.plan_decode(c128.Ring(8, rope_positions=128), [(0, 256, 1)])
    assert e.value.status == c128.Status.ERROR_ROPE_TABLE_TOO_SHORT
    c128.plan_decode(c128.Ring(8, rope_positions=128), [(0, 255, 1)])  # no window: nothing to refuse
    with pytest.raises(c128.Error) as e:
        c128.plan_decode(c128.Ring(8, rope_positions=-1), [(0, 5, 1)])
    assert e.value.status == c128.Status.ERROR_NEGATIVE_SIZE
