#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_c128.cu into fuzz/corpus/ (or the directory given).

Each seed is a named case encoded in the target's input format: a stream of little-endian
fields read in order by the mode's decoder (see the mode files). The encoder below mirrors the
decoders field by field; `C128_FUZZ_VERBOSE=1 fuzz/run.sh repro fuzz/corpus/*` prints what each
seed decodes to. Seeds are valid batches, edge cases of SPEC 6.5 and argument errors.

    python3 fuzz/make_corpus.py [DIR]           the seeds (default fuzz/corpus)
    python3 fuzz/make_corpus.py --crashes [DIR] the fixed bugs' reproducers (default fuzz/crashes)
"""
import os
import struct
import sys

INSTANCES = ["h128_f32_f32_f32", "h128_bf16_bf16_bf16", "h128_bf16_f32_f32", "h128_f32_bf16_bf16",
             "h64_bf16_f32_bf16", "h256_f32_f32_f32"]
F32, BF16, BF16_F32, F32_BF16, H64, H256 = range(6)


class Enc:
    def __init__(self):
        self.b = bytearray()

    def u8(self, v):
        self.b += struct.pack("<B", v & 0xFF)

    def u16(self, v):
        self.b += struct.pack("<H", v & 0xFFFF)

    def u32(self, v):
        self.b += struct.pack("<I", v & 0xFFFFFFFF)

    def u64(self, v):
        self.b += struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)

    def below(self, n, v):  # rd_below: one byte, value mod n
        assert 0 <= v < max(n, 1), (n, v)
        if n > 1:
            self.u8(v)

    def below16(self, n, v):
        assert 0 <= v < max(n, 1), (n, v)
        if n > 1:
            self.u16(v)

    def raw(self, data):
        self.b += data


# ---- shared pieces (kernels.h) ----------------------------------------------------------------
def layout(e, size=1, rank=0, ppr=0, raw=None):
    """rd_layout: sel < 4 -> unsharded; 4..6 -> size 2..4; 7 -> raw int32s."""
    if raw is not None:
        e.below(8, 7)
        e.u32(raw[0]), e.u32(raw[1]), e.u32(raw[2])
    elif size <= 1:
        e.below(8, size & 1)
        e.below(4, ppr)
    else:
        e.below(8, 4)
        e.below(3, size - 2)
        e.below(size, rank)
        e.below(6, ppr)


def span_of(pages, size, ppr):
    s = size * ppr if size > 1 else pages
    return max(0, min(12, s))


def page(e, span, p):  # rd_page: -1 .. span + 1
    e.below(span + 3, p + 1)


def slot(e, s):  # rd_slot
    e.u8(s if s < 128 else 200)


def corruption(e, c):
    e.u8(0 if c == 0 else 200 + c - 1)


def decode_plan(e, span, seq=None, wpage=None, wslot=0, rpage=None, rpage0=0, raw=None, pad=False):
    """rd_decode_plan. raw: 16 bytes. pad: seq_len 0 (kind % 16 == 1)."""
    if raw is not None:
        e.u8(0)
        e.raw(raw)
        return
    same = rpage is None
    kind = 0x82 if same else 0x02  # kind % 4 != 0: structured; bit 7: read page = write page
    if pad:
        kind = 0x81 if same else 0x01  # kind % 16 == 1: seq_len 0
    e.u8(kind)
    if not pad:
        e.u16((seq or 1) - 1)
    page(e, span, wpage)
    if wpage >= 0:
        slot(e, wslot)
    if not same:
        page(e, span, rpage)
    page(e, span, rpage0)


def compress_plan(e, n_rows, span, seq=128, bl=0, rag=None, rpage=0, raw=None, sentinel=False, rag_raw=None):
    """rd_compress_plan; rag is the ragged_id wanted (encoded relative to its lower bound)."""
    if raw is not None:
        e.u8(0)
        e.raw(raw)
        return
    e.u8(3 if rag_raw is not None else 1)
    if sentinel:
        e.u8(0)
    elif seq % 128 or seq > 1024 or seq == 0:
        e.u8(1)
        e.u32(seq)
    else:
        e.u8(8 + seq // 128 - 1)  # sel % 8 + 1 == seq / 128, sel >= 2
    if bl < 128:
        e.u8(bl)
    elif bl == 0:
        e.u8(150)
    else:
        e.u8(192 + (bl - 127))  # 127 + sel % 4
    lo = 0 if bl >= 127 else 127 - bl
    m = max(1, n_rows - lo + 2)
    r = (rag if rag is not None else lo) - lo
    minus = 0
    if r < 0:
        r, minus = 0, 1
    e.below16(m, r % m)
    e.below(2, minus)
    if rag_raw is not None:
        e.u16(rag_raw)
    page(e, span, rpage)
    page(e, span, 0)


def write_plan(e, n_rows, span, rag=0, wpage=0, wslot=0, raw=None, sentinel=False, neg=None):
    if raw is not None:
        e.u8(0)
        e.raw(raw)
        return
    if sentinel:
        e.u8(0x11)
        page(e, span, wpage)
        if wpage < 0:
            e.below(200, 0)
        else:
            slot(e, wslot)
        return
    kind = 0x82 if neg is None else 0x02
    e.u8(kind)
    e.below16(n_rows + 2, rag)
    page(e, span, wpage)
    if wpage < 0:
        if neg is not None:
            e.below(200, neg)
    else:
        slot(e, wslot)


def ext_fields(e, layout=None, index=None, entry=None, xc=0, ws=None):
    """rd_ext (fuzz/extras.h): the state layout, output index and cache entries, read after every
    older field of modes 0, 1 and 4.
    layout: dict(B=8..256 | 0 (= 128) | bad=k, split, biased, table, stab, refused, adj (no table: 0, -1, +1) or
            blocks (with a table), rs (7..10) or rs_edge=k, rows (table rows) or rows_edge=k, stride_d
            (stride - need, -1..1) or stride_edge=k, style, seed).
    index: dict(sel=0..3, seed) (sel 0: a permutation of the targets, 1 random, 2 a mix of bad ones, 3 a few bad).
    entry: dict(kind='fp8'|'bf16'|'bad'|'pooled', P=index of (1, 2, 4, 64, 1, 2, 8, 16) or P_bad=k, pb=0..9,
           cp=0..3 or cp_edge=k, rope=index of (0, 1, 2, 3, 128, 1100, 1100, 300) or rope_edge=k, eps=0..9, seed).
    ws: the entries' workspace (after xc; left out, the byte reads 0: a good one of the exact size):
        dict(claim=0..7) a good one claiming more bytes (index of (0, 0, 0, 0, 16, 1, 4096, INT64_MAX - size)), or
        dict(corrupt=1..25) a corruption (fz_corrupt_workspace in extras.h)."""
    if layout is None:
        e.u8(0)
    else:
        L = layout
        e.u8(1)
        if "bad" in L:
            e.u8(224 + L["bad"])
        elif L.get("B", 128) == 0:
            e.u8(200)
        else:
            e.u8({8: 0, 16: 1, 32: 2, 64: 3, 128: 4, 256: 5}[L.get("B", 128)])
        e.u8(L.get("split", 0) | L.get("biased", 0) << 1 | L.get("table", 0) << 2 | L.get("stab", 0) << 3 |
             L.get("refused", 0) << 4)
        if L.get("table", 0):
            e.u8(L.get("blocks", 8))
        else:
            e.u8({0: 0, -1: 1, 1: 2}[L.get("adj", 0)])
        e.u8(200 + L["rs_edge"] if "rs_edge" in L else L.get("rs", 7) - 7)
        e.u8(200 + L["rows_edge"] if "rows_edge" in L else L.get("rows", 1))
        e.u8(200 + L["stride_edge"] if "stride_edge" in L else L.get("stride_d", 0) + 1)
        e.u8(L.get("style", 0))
        e.u64(L.get("seed", 7))
    if index is None:
        e.u8(0)
    else:
        e.u8(index.get("sel", 0) or 4)
        e.u64(index.get("seed", 5))
    if entry is None:
        e.u8(0)
    else:
        E = entry
        e.u8({"fp8": 1, "bf16": 5, "bad": 7 + 8 * E.get("bad_kind", 0), "pooled": 8}[E.get("kind", "fp8")])
        e.u8(224 + E["P_bad"] if "P_bad" in E else E.get("P", 1))
        e.u8(E.get("pb", 0))
        e.u8(200 + E["cp_edge"] if "cp_edge" in E else E.get("cp", 2))
        e.u8(240 + E["rope_edge"] if "rope_edge" in E else E.get("rope", 5))
        e.u8(E.get("eps", 0))
        e.u64(E.get("seed", 11))
    e.u8(0 if xc == 0 else 200 + xc - 1)
    if ws is not None:
        e.u8(200 + ws["corrupt"] - 1 if "corrupt" in ws else ws.get("claim", 0))


# ---- mode 0: decode ------------------------------------------------------------------------------
def decode_case(inst, flags, pages, plans, out_extra=0, lay=None, corrupt=0, seed=1, style=0, msg=0, group=0, group2=4,
                ext=None):
    e = Enc()
    e.below(5, 0)
    e.below(6, inst)
    e.u8(flags)
    e.below(5, pages)
    e.below(9, len(plans))
    e.u8(out_extra)  # < 224: output_rows = batch + osel % 3
    lay = lay or {}
    layout(e, **lay)
    corruption(e, corrupt)
    e.u64(seed)
    e.below(3, style)
    e.u8(0 if group == 0 else 128 + group - 1 if 1 <= group <= 16 else 248 if group == -1 else 249)
    span = span_of(pages, lay.get("size", 1), lay.get("ppr", 0))
    for p in plans:
        decode_plan(e, span, **p)
    e.below(16, group2 - 1)  # the second run's requests_per_block (when results must agree)
    e.below(3, msg)
    if ext is not None:
        ext_fields(e, **ext)
    return bytes(e.b)


# ---- mode 1: prefill ------------------------------------------------------------------------------
def prefill_case(inst, flags, pages, rows, compress, writes, out_extra=0, lay=None, corrupt=0, seed=2, style=0, msg=0,
                 ext=None, wgroup=0, wgroup2=2):
    """ext: the fields of ext_fields; with it, windows_per_block (wgroup) and the second run's (wgroup2)
    come before msg as the decoder reads them (older seeds leave them out)."""
    e = Enc()
    e.below(5, 1)
    e.below(6, inst)
    e.u8(flags)
    e.below(5, pages)
    e.below16(301, rows)
    e.below(7, len(compress))
    e.below(25, len(writes))
    e.u8(out_extra)
    lay = lay or {}
    layout(e, **lay)
    corruption(e, corrupt)
    e.u64(seed)
    e.below(3, style)
    span = span_of(pages, lay.get("size", 1), lay.get("ppr", 0))
    for c in compress:
        compress_plan(e, rows, span, **c)
    for w in writes:
        write_plan(e, rows, span, **w)
    if ext is None:
        e.below(3, msg)
        return bytes(e.b)
    e.u8(0 if wgroup == 0 else 128 + wgroup - 1)
    e.below(32, wgroup2 - 1)
    e.below(3, msg)
    ext_fields(e, **ext)
    return bytes(e.b)


# ---- mode 2: scenario -------------------------------------------------------------------------------
def scenario_case(inst, steps, kind=0, R=128, spec=0, shards=1, num_pool=1, spare=0, nreq=1, flags=0, style=0,
                  seed=3, perm_choices=None, ppr_extra=0):
    """steps: ("extend", [(req, e), ...]) / ("verify", [(req, n, accept), ...]) / ("decode", [req or -1, ...])
    / ("reset", req). A request left out of an extend batch is skipped (first in the list is the rotation)."""
    e = Enc()
    e.below(5, 2)
    e.below(6, inst)
    e.u8(flags)
    e.below(4, kind)
    if kind != 0:
        e.below(3, R // 128 - 1)
    else:
        R = 128
    e.below(2, spec)
    if shards == 1:
        e.below(8, 0)
    else:
        e.below(8, 6)
        e.below(2, shards - 2)
    e.below(2 if shards > 1 else 4, num_pool - 1)
    e.below(3, spare)
    e.below(min(num_pool, 3), nreq - 1)
    for k in range(num_pool - 1, 0, -1):
        e.below(k + 1, (perm_choices or {}).get(k, 0))
    e.u64(seed)
    e.below(2, style)
    logical = num_pool * (R // 128) + spare
    if shards > 1:
        e.below(2, ppr_extra)
        pages = shards * ((logical + shards - 1) // shards + ppr_extra)
    else:
        e.below(2, 0)
        e.below(3, 0)
        pages = logical
    if kind >= 2:
        for k in range(pages - 1, 0, -1):
            e.below(k + 1, (k * 7 + 3) % (k + 1))  # a fixed shuffle
        if kind == 3:
            for _ in range(num_pool):
                e.below(3, 1)
    lens = [0] * nreq
    max_drafts = R - 128 + 2 if spec else 1
    e.below(8, len(steps) - 1)
    for step in steps:
        op = step[0]
        if op == "extend" or op == "verify":
            items = step[1]
            verify = op == "verify"
            e.below(8, 5 if verify else 0)
            first = items[0][0]
            e.below(nreq, first)
            want = {it[0]: it for it in items}
            rows = 0
            chosen = []
            for t in range(nreq):
                i = (first + t) % nreq
                if i not in want:
                    e.u8(5)  # sel % 5 == 0 -> left out (t > 0)
                    continue
                it = want[i]
                if verify:
                    n, acc = it[1], it[2]
                    if n > max_drafts:
                        e.u8(1)  # sel % 16 == 1 -> max_drafts + 1
                        n = max_drafts + 1
                    else:
                        e.u8(2)
                        e.below16(max_drafts, n - 1)
                else:
                    n = it[1]
                    # a sel % 5 == 0 would leave a request other than the first out
                    if n <= 40:
                        assert t == 0 or (n - 1) % 5, "extend %d cannot follow the first request" % n
                        e.u8(n - 1)
                    elif n >= 100:
                        e.u8(181)
                        e.below(201, n - 100)
                    else:
                        d = n - (128 - lens[i] % 128)
                        assert -2 <= d <= 2, "extend of 41..99 must be within 2 of the boundary"
                        assert t == 0 or d != -2
                        e.u8(100 + d + 2)
                    acc = n
                if lens[i] + n > 768 or rows + n > 320:
                    continue
                if verify:
                    e.below16(n, acc - 1)
                rows += n
                chosen.append((i, n, acc))
            if not chosen:
                continue
            e.below(3, 0)  # capacity = rows
            refused = verify and any(n > max_drafts for _, n, _ in chosen)
            if refused:
                continue
            if (flags & 8) and (flags & 4):
                for _ in chosen:
                    e.below(4, 1)  # no absent request before it
            e.below(2, 0)  # output rows = launched count
            for i, n, acc in chosen:
                lens[i] += acc
        elif op == "decode":
            e.below(8, 3)
            reqs = step[1]
            # the decoder walks the requests in order, padding rows before each
            B = 0
            order = []
            pos = 0
            for i in range(nreq):
                while pos < len(reqs) and reqs[pos] == -1:
                    e.below(4, 0)
                    order.append(-1)
                    pos += 1
                e.below(4, 1)
                if pos < len(reqs) and reqs[pos] == i:
                    e.below(6, 1)
                    order.append(i)
                    pos += 1
                else:
                    e.below(6, 0)
            assert pos == len(reqs), "decode rows must list requests in order, padding (-1) anywhere before them"
            for w in order:
                if w < 0:
                    e.u8(3)
                else:
                    e.below(2, 0)
            e.below(2, 0)
            e.below(17, step[2] if len(step) > 2 else 0)  # requests_per_block
            for w in order:
                if w >= 0:
                    lens[w] += 1
        elif op == "reset":
            e.below(8, 7)
            e.below(nreq, step[1])
            lens[step[1]] = 0
    return bytes(e.b)


# ---- mode 3: planners ---------------------------------------------------------------------------------
def seq_field(e, v):
    if v == 0:
        e.below(16, 7)
    elif 0 < v < 600:
        e.below(16, 0)
        e.below16(600, v)
    elif v < 0 and v >= -256:
        e.below(16, 10)
        e.u8(-1 - v)
    elif v >= 0x7FFFFFFF - 255:
        e.below(16, 9)
        e.u8(0x7FFFFFFF - v)
    else:
        e.below(16, 11)
        e.u32(v)


def extend_field(e, seq, v):
    if v == 0:
        e.below(12, 0)
        return
    e.below(12, 1)
    if v > (1 << 17):  # as is (rd_extend keeps a raw u32)
        e.below(16, 13)
        e.u32(v)
    elif 0 < v <= min(seq, 300) and seq > 0:
        e.below(16, 0)
        e.below16(min(seq, 300), v - 1)
    elif v == seq:
        e.below(16, 9)
    elif v == seq + 1:
        e.below(16, 10)
    elif 65535 <= v <= 65537:
        e.below(16, 12)
        e.below(3, v - 65535)
    elif v < 0:
        e.below(16, 11)
        e.u8(-1 - v)
    else:
        e.below(16, 13)
        e.u32(v)


def pool_field(e, num_pool, v):
    m = (num_pool if 0 < num_pool < 200 else 4) + 2
    if -1 <= v < m - 1:
        e.below(16, 0)
        e.below(m, v + 1)
    elif v == 0x7FFFFFFF:
        e.below(16, 13)
    else:
        e.below(16, 12)
        e.u32(v)


def pages_field(e, v):
    if 0 <= v < 25:
        e.below(16, 0)
        e.below(25, v)
    elif v == 0x7FFFFFFF // 128:
        e.below(16, 10)
    elif v == 0x7FFFFFFF // 128 + 1:
        e.below(16, 11)
    else:
        e.below(16, 13)
        e.u64(v)


def planner_case(decode, requests, R=0, spec=0, pages=8, table=None, stride=None, num_pool=None, verify=0,
                 capacity=600, counts=True, corrupt=0, extra=0, kind=0, seed=1, huge=None, dup=None, new=None):
    """extra (the hardening fields): 9 huge request count (huge: rd_huge_requests case), 10 capacity
    past the limit, 11 host planner's arguments aliased (kind), 12 device planner's (kind), 13 a
    thread scribbling the requests, 14 the page table, 15 a duplicate (dup: (i, j) pool copy)."""
    e = Enc()
    e.below(5, 3)
    e.below(3, 0 if decode else 1)
    if R == 0:
        e.below(8, 0)
    elif R in (128, 256, 384):
        e.below(8, R // 128)
    elif R % 128 == 0 and 0 <= R // 128 < 40:
        e.below(8, 4)
        e.below(40, R // 128)
    elif R == -128:
        e.below(8, 6)
    elif R == 100:
        e.below(8, 7)
    else:
        e.below(8, 5)
        e.u32(R)
    e.below(3, spec)
    pages_field(e, pages)
    Rv = R if R else 128
    chunks = Rv // 128 if Rv > 0 and Rv % 128 == 0 else 1
    e.below(2, 1 if table is not None else 0)
    assert table is None or chunks <= 64
    if table is not None:
        np_ = num_pool
        if np_ == -1:
            e.below(8, 0)
        else:
            e.below(8, 1)
            e.below(6, np_)
        st = stride if stride is not None else chunks
        d = st - chunks
        if d == -1:
            e.below(3, 0)
            e.below(8, 0)
        else:
            e.below(3, d)
            e.below(8, 1)
        entries = max(np_, 0) * max(st, 0)
        assert len(table) == entries
        for v in table:
            if -1 <= v < 11:
                e.below(8, 0)
                e.below(12, v + 1)
            else:
                e.below(8, 6)
                e.u32(v)
    e.below(2, verify)
    n = len(requests)
    if n < 9:
        e.u8(0)
        e.below(9, n)
    else:
        e.u8(224)
        e.below16(601, n)
    npool = num_pool if table is not None else 0
    for pool, seq, ext in requests:
        pool_field(e, npool, pool)
        seq_field(e, seq)
        extend_field(e, seq, ext)
        e.below(12, 1)  # not absent (absent requests are given as seq 0, extend 0)
    if capacity == 0:
        e.below(16, 12)
    elif capacity == -1:
        e.below(16, 13)
    elif capacity == 65536:
        e.below(16, 14)
    else:
        e.below(16, 0)
        e.below16(700, capacity)
    e.below(4, 1 if counts else 0)
    e.u8(0 if corrupt == 0 else 224 + corrupt - 1)
    e.below(16, extra)
    e.below(10, kind)
    e.u64(seed)
    if extra == 9:
        e.below(6, huge or 0)
        if huge == 1:
            e.u16(7)
        elif huge == 4:
            e.below(3, 1)
        elif huge == 5:
            e.u8(3)
    elif extra == 10:
        e.u16(1)
    elif extra == 15 and n >= 2:
        i, j = dup
        e.below16(n, i)
        e.below16(n - 1, (j - i - 1) % n)
        if table is not None and len(table) >= 2:
            e.below(2, 0)
    if new is not None:
        planner_new_fields(e, **new)
    return bytes(e.b)


def planner_new_fields(e, write_all=0, btable=None, rope=None, lens=0, qs0=None, lcorrupt=0):
    """Mode 3's fields added with other engines' layouts (fuzz/planner.h).
    btable: dict(B=8..256 or bad=k, rs=7..10 or rs_edge=k, rows=0..6 or rows_edge=k, stride_d=-1..1 or
            stride_edge=k, style, null=(has, value -1..2), seed, rmode=0 (ring_tokens 0) / 1 (R) / 2 (as drawn) /
            3 (wrong), stab, plane, no_plane, page_table).
    rope: index into (1, 127, 128, 129, 200, 256, 383, 384, 1000, -1, 600, 65536, INT64_MAX), or None.
    lens: the engine arrays' form (0 none; 1 all, 2 without pool_indices, 3 decreasing query_start, 4 beside a
          request array); qs0: query_start[0]; lcorrupt 1..10."""
    e.below(2, write_all)
    if btable is None:
        e.u8(0)
    else:
        T = btable
        tsel = 1 | T.get("rmode", 0) << 1 | T.get("stab", 0) << 3 | T.get("plane", 0) << 4 | \
            T.get("no_plane", 0) << 5 | T.get("page_table", 0) << 6
        e.u8(tsel)
        e.u8(220 + T["bad"] if "bad" in T else {8: 0, 16: 1, 32: 2, 64: 3, 128: 4, 256: 5}[T.get("B", 8)])
        e.u8(200 + T["rs_edge"] if "rs_edge" in T else T.get("rs", 7) - 7)
        e.u8(200 + T["rows_edge"] if "rows_edge" in T else T.get("rows", 2))
        e.u8(200 + T["stride_edge"] if "stride_edge" in T else T.get("stride_d", 0) + 1)
        e.u8(T.get("style", 0))
        has, val = T.get("null", (0, -1))
        e.u8(has | (val + 1) << 1)
        e.u64(T.get("seed", 3))
    e.u8(0 if rope is None else 13 + rope)
    lsel = {0: 0, 1: 1, 2: 2, 3: 3, 4: 16}[lens]
    if qs0 is not None and lsel:
        lsel |= 4
    e.u8(lsel)
    if lsel & 4:
        e.u32(qs0)
    e.u8(0 if lcorrupt == 0 else 200 + lcorrupt - 1)


# ---- mode 4: checker ------------------------------------------------------------------------------------
def size_field(e, v):
    if 0 <= v < 700:
        e.below(16, 0)
        e.below16(700, v)
    elif -256 <= v < 0:
        e.below(16, 9)
        e.u8(-1 - v)
    else:
        e.below(16, 12)
        e.u64(v)


def checker_case(prefill, head_dim=128, dtypes=(0, 0, 0), pages=4, in_rows=300, out_rows=8, lay=None, plans=(),
                 writes=(), null_plans=False, msg=64, null_args=False, null_report=False, group=0, extra=0, huge=0,
                 misalign=1, ext=None):
    """group: requests/windows per block; extra (the hardening fields): 1 / 2 a huge count
    (rd_huge_count case `huge`) in the first / write array, 3 a misaligned plan array, 4 counts at
    the prefill limit over full arrays."""
    e = Enc()
    e.below(5, 4)
    e.below(2, prefill)
    if head_dim % 64 == 0 and 64 <= head_dim <= 512:
        e.below(12, 0)
        e.below(8, head_dim // 64 - 1)
    else:
        e.below(12, 6)
        e.u32(head_dim)
    for d in dtypes:
        if d == 0:
            e.below(8, 0)
        elif d == 14:
            e.below(8, 3)
        else:
            e.below(8, 6)
            e.u32(d)
    for v in (pages, in_rows, out_rows):
        size_field(e, v)
    lay = lay or {}
    layout(e, **lay)
    e.below(17, len(plans))
    if prefill:
        e.below(17, len(writes))
    e.below(16, 3 if null_plans else 4)
    span = pages if 0 <= pages < 12 else 12
    rows = in_rows if 0 < in_rows < 700 else 300
    for p in plans:
        if prefill:
            compress_plan(e, rows, span, **p)
        else:
            decode_plan(e, span, **p)
    for w in writes:
        write_plan(e, rows, span, **w)
    if msg == 0:
        e.below(8, 6)
    else:
        e.below(8, 0)
        e.below(120, msg)
    e.below(64, 0 if null_args else 1)
    e.below(64, 0 if null_report else 1)
    if group == 0:
        e.below(16, 0)
    elif 1 <= group <= 32:
        e.below(16, 10)
        e.below(32, group - 1)
    elif 33 <= group <= 36:
        e.below(16, 13)
        e.below(4, group - 33)
    else:
        e.below(16, 15)
        e.u32(group)
    e.below(16, extra)
    if extra in (1, 2):
        e.below(8, huge)
        if huge == 1:
            e.u16(5)
        elif huge == 5:
            e.below(3, 0)
        elif huge == 7:
            e.u8(1)
    elif extra == 3:
        e.below(2, misalign - 1)
        if misalign == 2 and prefill:
            e.below(2, 0)
    if ext is not None:
        # the fields the decoder reads after the checks (instance, bf16 bits, status, dtype, group sizes), then ext
        e.u8(0), e.u32(0), e.u32(0x3F800000), e.u32(0), e.u32(0)
        e.below(2, 0)
        e.u64(100)
        e.u32(132)
        ext_fields(e, **ext)
    return bytes(e.b)


def cases():
    c = {}
    P = 4
    # -- decode kernel
    c["decode-valid-boundary"] = decode_case(F32, 0x01, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=6, wpage=1, wslot=5), dict(pad=True, wpage=1, wslot=3)])
    c["decode-bf16-race-same-slot"] = decode_case(BF16, 0x01, 2, [
        dict(seq=9, wpage=1, wslot=8), dict(seq=9, wpage=1, wslot=8), dict(seq=256, wpage=0, wslot=127)])
    c["decode-window-written-by-other"] = decode_case(H64, 0x03, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=40, wpage=0, wslot=39)])
    c["decode-shared-rank1"] = decode_case(BF16_F32, 0x01, 4, [
        dict(seq=128, wpage=1, wslot=127), dict(seq=300, wpage=2, wslot=127), dict(seq=5, wpage=3, wslot=4),
        dict(seq=256, wpage=5, wslot=127)], lay=dict(size=2, rank=1, ppr=2))
    c["decode-out-of-range"] = decode_case(F32_BF16, 0x2C, 2, [
        dict(seq=9, wpage=2, wslot=5), dict(seq=128, wpage=0, wslot=127, rpage=-1),
        dict(seq=128, wpage=1, wslot=127, rpage=3), dict(raw=struct.pack("<IiII", 7, -5, 0, 0)),
        dict(raw=struct.pack("<IiII", 0xFFFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, 0x80000000))])
    c["decode-specials-reverse"] = decode_case(H256, 0x02, 1, [dict(seq=128, wpage=0, wslot=127)], style=2)
    c["decode-grouped-ordered-writes"] = decode_case(F32, 0x01, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=11, wpage=0, wslot=10), dict(seq=256, wpage=1, wslot=127),
        dict(seq=4, wpage=1, wslot=3)], group=4, group2=1)
    c["decode-grouped-race"] = decode_case(BF16, 0x01, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=2, wpage=1, wslot=1), dict(seq=6, wpage=0, wslot=5)], group=3)
    c["decode-group-out-of-range"] = decode_case(F32, 0, 1, [dict(seq=3, wpage=0, wslot=2)], group=17)
    c["decode-null-state"] = decode_case(F32, 0, 1, [dict(seq=3, wpage=0, wslot=2)], corrupt=1)
    c["decode-misaligned-input"] = decode_case(BF16, 0, 1, [dict(seq=3, wpage=0, wslot=2)], corrupt=7)
    c["decode-batch-int32-max"] = decode_case(H64, 0, 1, [dict(seq=3, wpage=0, wslot=2)], corrupt=18)
    c["decode-bad-layout"] = decode_case(F32, 0, 2, [dict(seq=3, wpage=0, wslot=2)], lay=dict(raw=(3, 2, 1)))
    # -- prefill kernels
    c["prefill-mixed-window"] = prefill_case(F32, 0x01, 2, 200, [
        dict(seq=256, bl=120, rag=6, rpage=1), dict(seq=384, bl=0, rag=134)],
        [dict(rag=135 + k, wpage=0, wslot=k) for k in range(6)])
    c["prefill-bf16-duplicate-writes"] = prefill_case(BF16, 0x03, 2, 140, [dict(seq=128, bl=0, rag=127)],
                                                      [dict(rag=1, wpage=1, wslot=7), dict(rag=2, wpage=1, wslot=7),
                                                       dict(rag=3, wpage=0, wslot=0), dict(sentinel=True, wpage=0)])
    c["prefill-edges"] = prefill_case(F32_BF16, 0x0D, 2, 128, [
        dict(seq=128, bl=127, rag=0, rpage=0), dict(seq=128, bl=128, rag=0), dict(seq=130, bl=5, rag=122, rpage=1),
        dict(seq=128, bl=0, rag=126), dict(seq=128, bl=0, rag=128), dict(sentinel=True)],
        [dict(rag=127, wpage=1, wslot=0), dict(rag=128, wpage=1, wslot=1), dict(rag=0, wpage=-1, neg=5),
         dict(rag=0, wpage=2, wslot=0)], out_extra=1)
    c["prefill-shared-size3"] = prefill_case(BF16_F32, 0x01, 4, 260, [
        dict(seq=256, bl=60, rag=66, rpage=2), dict(seq=256, bl=0, rag=259, rpage=4)],
        [dict(rag=k, wpage=k % 6, wslot=k) for k in range(12)], lay=dict(size=3, rank=2, ppr=2))
    c["prefill-too-many-rows"] = prefill_case(F32, 0, 1, 10, [], [dict(rag=1, wpage=0, wslot=1)], corrupt=17)
    c["prefill-too-many-plans"] = prefill_case(F32, 0, 1, 130, [dict(seq=128, bl=0, rag=127)], [], corrupt=18)
    c["prefill-h256-splits"] = prefill_case(H256, 0x10, 1, 128, [dict(seq=128, bl=0, rag=127)],
                                            [dict(rag=5, wpage=0, wslot=5)])
    c["prefill-h64-specials"] = prefill_case(H64, 0x01, 2, 150, [dict(seq=256, bl=100, rag=30, rpage=1)],
                                             [dict(rag=k, wpage=1, wslot=k) for k in range(20)], style=2)
    c["prefill-raw-plans"] = prefill_case(BF16, 0x01, 3, 64, [dict(raw=struct.pack("<IHHii", 128, 63, 127, 0, 2)),
                                                              dict(raw=bytes([0xFF] * 16))],
                                          [dict(raw=struct.pack("<Ii", 63, 3 * 128 - 1)),
                                           dict(raw=struct.pack("<Ii", 0xFFFFFFFE, 0))])
    c["prefill-output-too-small"] = prefill_case(F32, 0, 1, 128, [dict(seq=128, bl=0, rag=127)] * 2, [],
                                                 out_extra=225)
    # -- scenarios
    c["scen-legacy-prefix120-extend"] = scenario_case(F32, [("extend", [(0, 120)]), ("extend", [(0, 128)]),
                                                            ("decode", [0])])
    c["scen-legacy-boundary-decode"] = scenario_case(BF16, [("extend", [(0, 127)]), ("decode", [0], 1), ("decode", [0])],
                                                     flags=0x01)
    c["scen-ring256-verify130"] = scenario_case(F32, [("extend", [(0, 126)]), ("verify", [(0, 130, 1)]),
                                                      ("decode", [0]), ("verify", [(0, 5, 3)])],
                                                kind=1, R=256, spec=1, flags=0x01)
    c["scen-verify-over-limit"] = scenario_case(BF16_F32, [("extend", [(0, 10)]), ("verify", [(0, 131, 1)]),
                                                           ("verify", [(0, 2, 2)])], kind=1, R=256, spec=1)
    c["scen-pagetable384-two-requests"] = scenario_case(
        BF16, [("extend", [(1, 300), (0, 5)]), ("decode", [-1, 0, 1], 2), ("verify", [(0, 200, 77), (1, 3, 2)]),
               ("extend", [(0, 129)])], kind=3, R=384, spec=1, num_pool=3, spare=1, nreq=2, flags=0x0D,
        perm_choices={2: 1, 1: 0})
    c["scen-shards2-boundary"] = scenario_case(F32, [("extend", [(0, 127)]), ("decode", [0]), ("extend", [(0, 200)])],
                                               kind=1, R=256, shards=2, num_pool=2, flags=0x01)
    c["scen-shards3-pagetable"] = scenario_case(BF16_F32, [("extend", [(0, 250), (1, 7)]), ("decode", [0, 1]),
                                                           ("extend", [(1, 128)])],
                                                kind=2, R=128, shards=3, num_pool=2, nreq=2, flags=0x41, ppr_extra=1)
    c["scen-reset-reuse-pool"] = scenario_case(H64, [("extend", [(0, 100)]), ("reset", 0), ("extend", [(0, 127)]),
                                                     ("decode", [0])], flags=0x02)
    c["scen-device-planner-padded"] = scenario_case(
        F32_BF16, [("extend", [(0, 256), (1, 20)]), ("decode", [0, -1, 1]), ("extend", [(1, 108)])],
        kind=2, R=256, num_pool=2, nreq=2, flags=0x0C, style=1)
    c["scen-h256-prefill512"] = scenario_case(H256, [("extend", [(0, 300)]), ("extend", [(0, 212)])], kind=1, R=128)
    c["scen-spec128-verify2"] = scenario_case(F32, [("extend", [(0, 126)]), ("verify", [(0, 2, 1)]),
                                                    ("verify", [(0, 2, 2)]), ("decode", [0])], spec=1)
    # -- planners
    c["plan-ring-three-requests"] = planner_case(False, [(0, 300, 300), (2, 140, 12), (1, 128, 1)], R=256, pages=6)
    c["plan-pagetable-bad-entry"] = planner_case(False, [(1, 200, 200), (0, 5, 5)], R=256, pages=6, table=[0, 1, 2, -1],
                                                 num_pool=2)
    c["plan-too-many-rows"] = planner_case(False, [(0, 65537, 65537)], pages=4)
    c["plan-rows-exactly-65536"] = planner_case(False, [(0, 65536, 65535), (1, 1, 1)], pages=4, capacity=600)
    c["plan-capacity-exact"] = planner_case(False, [(0, 383, 383), (1, 129, 2)], R=256, spec=1, pages=4, capacity=132)
    c["plan-verify-at-limit"] = planner_case(False, [(0, 500, 130), (1, 10, 1)], R=256, spec=1, pages=8, verify=1)
    c["plan-last-pool-row"] = planner_case(False, [(2, 300, 300), (3, 1, 1)], R=128, pages=3)
    c["plan-verify-limit"] = planner_case(False, [(0, 500, 131), (1, 10, 1)], R=256, spec=1, pages=8, verify=1)
    c["plan-300-requests"] = planner_case(False, [(k % 4, 1 + k, 1) for k in range(300)], pages=4)
    c["plan-bad-ring"] = planner_case(False, [(0, 10, 10)], R=100, pages=4)
    c["plan-state-too-large"] = planner_case(True, [(0, 10, 0)], pages=0x7FFFFFFF // 128 + 1)
    c["plan-decode-padding-negative"] = planner_case(True, [(0, 0, 0), (1, 129, 0), (2, -5, 0), (0, 1, 0)], pages=3)
    c["plan-seq-int32-max"] = planner_case(False, [(0, 0x7FFFFFFF, 300)], R=256, spec=1, pages=4)
    c["plan-capacity-too-small"] = planner_case(False, [(0, 300, 300)], pages=2, capacity=5, counts=False)
    c["plan-decode-pagetable"] = planner_case(True, [(0, 385, 0), (1, 1, 0)], R=384, pages=9,
                                              table=[3, 4, 5, 0, 1, 2], num_pool=2)
    # -- checker
    c["check-decode-duplicates"] = checker_case(0, pages=P, out_rows=4, plans=[
        dict(seq=128, wpage=0, wslot=127), dict(seq=9, wpage=1, wslot=8), dict(seq=9, wpage=1, wslot=8)])
    c["check-prefill-conditions"] = checker_case(1, head_dim=256, pages=P, in_rows=300, out_rows=2, plans=[
        dict(seq=130, bl=10, rag=200, rpage=1), dict(seq=128, bl=0, rag=127), dict(seq=128, bl=0, rag=127)],
        writes=[dict(rag=3, wpage=1, wslot=3), dict(rag=4, wpage=1, wslot=3)])
    c["check-odd-dtypes-layout"] = checker_case(1, dtypes=(7, 14, 0x7FFFFFFF), lay=dict(size=2, rank=1, ppr=3),
                                                writes=[dict(rag=1, wpage=4, wslot=0)], msg=1)
    c["check-null-report"] = checker_case(0, null_report=True, plans=[dict(seq=1, wpage=0, wslot=0)])
    c["check-huge-sizes"] = checker_case(0, head_dim=512, pages=(1 << 62), out_rows=-3,
                                         plans=[dict(seq=1, wpage=0, wslot=0)], msg=0)
    c["check-head-dim-not-64"] = checker_case(1, head_dim=100, plans=[dict(seq=128)])
    # -- the host side's hardening (test/test_attack.c's classes)
    c["check-decode-count-wraps"] = checker_case(0, pages=P, out_rows=-1 & 0x7FFFFFFFFFFFFFFF,
                                                 plans=[dict(seq=1, wpage=0, wslot=0)], extra=1, huge=5)
    c["check-write-count-int64-max"] = checker_case(1, pages=P, writes=[dict(rag=1, wpage=0, wslot=1)], extra=2, huge=4)
    c["check-misaligned-plans"] = checker_case(0, pages=P, out_rows=4, plans=[dict(seq=128, wpage=0, wslot=127)],
                                               extra=3, misalign=2)
    c["check-prefill-at-limit"] = checker_case(1, pages=P, in_rows=300, out_rows=(1 << 20),
                                               plans=[dict(seq=128, bl=0, rag=127)], writes=[dict(rag=1, wpage=0, wslot=1)],
                                               extra=4)
    c["check-group-33"] = checker_case(0, pages=P, out_rows=4, plans=[dict(seq=9, wpage=1, wslot=8)], group=33)
    c["check-output-below-batch"] = checker_case(0, pages=P, out_rows=1, plans=[dict(seq=9, wpage=1, wslot=8)] * 2)
    c["check-first-offending-duplicate"] = checker_case(1, pages=P, in_rows=300, out_rows=2, writes=[
        dict(rag=3, wpage=1, wslot=3), dict(rag=4, wpage=1, wslot=3), dict(rag=299 + 2, wpage=1, wslot=4)])
    c["decode-alias-output-in-state"] = decode_case(F32, 0x01, 2, [dict(seq=128, wpage=0, wslot=127)], corrupt=19)
    c["decode-alias-plans-in-state"] = decode_case(BF16, 0x01, 1, [dict(seq=3, wpage=0, wslot=2)], corrupt=21)
    c["prefill-alias-output-in-input"] = prefill_case(F32, 0x01, 1, 200, [dict(seq=128, bl=0, rag=127)], [],
                                                      corrupt=22)
    c["prefill-alias-state-is-ape"] = prefill_case(H64, 0x00, 1, 10, [], [dict(rag=1, wpage=0, wslot=1)], corrupt=24,
                                                   out_extra=1)
    c["plan-shared-pool-index"] = planner_case(False, [(1, 300, 300), (1, 10, 10)], pages=4)
    c["plan-decode-shared-pool"] = planner_case(True, [(2, 5, 0), (2, 130, 0)], pages=4)
    c["plan-absent-any-pool"] = planner_case(False, [(3, 0, 0), (0, 200, 200), (2, 0, 0)], pages=2)
    c["plan-extend-int32-max"] = planner_case(False, [(0, 0x7FFFFFFF, 0x7FFFFFFF)], R=256, spec=1, pages=4)
    c["plan-huge-request-count"] = planner_case(False, [(0, 10, 10)], pages=4, extra=9, huge=4)
    c["plan-capacity-past-limit"] = planner_case(False, [(0, 10, 10)], pages=4, capacity=65536, extra=10)
    c["plan-alias-requests-in-plans"] = planner_case(False, [(0, 256, 256), (1, 300, 300)], pages=4, capacity=8,
                                                     extra=11, kind=0)
    c["plan-alias-plans-struct"] = planner_case(False, [(0, 256, 256)], pages=4, capacity=8, extra=11, kind=4)
    c["plan-decode-alias-table"] = planner_case(True, [(0, 129, 0), (1, 5, 0)], R=256, pages=6,
                                                table=[0, 1, 2, 3], num_pool=2, extra=11, kind=3)
    c["plan-device-alias-requests"] = planner_case(False, [(0, 256, 256), (1, 3, 3)], pages=4, extra=12, kind=0)
    c["plan-device-counts-over-plans"] = planner_case(True, [(0, 256, 0), (1, 3, 0)], pages=4, extra=12, kind=7)
    c["plan-scribbled-requests"] = planner_case(False, [(k, 40 + k % 50, 1 + k % 40) for k in range(200)], pages=200,
                                                capacity=699, extra=13, seed=12345)
    c["plan-scribbled-table"] = planner_case(False, [(0, 300, 200), (1, 140, 30)], R=256, spec=1, pages=8,
                                             table=[0, 1, 2, 3], num_pool=2, extra=14, seed=99)
    c["plan-duplicate-pool"] = planner_case(True, [(0, 129, 0), (1, 5, 0), (2, 9, 0)], pages=4, extra=15, dup=(0, 2))
    # -- other engines' layouts (DESIGN 5.9), output rows by index (5.10), cache entries (11)
    vllm = dict(B=8, biased=1, table=1, blocks=40, rs=7, rows=2)
    c["decode-vllm-table-biased"] = decode_case(F32, 0x01, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=134, wpage=1, wslot=5), dict(pad=True, wpage=1, wslot=3)],
        ext=dict(layout=vllm))
    c["decode-trtllm-planes"] = decode_case(BF16, 0x01, 2, [
        dict(seq=256, wpage=1, wslot=127), dict(seq=10, wpage=0, wslot=9)],
        ext=dict(layout=dict(B=128, split=1, biased=1, table=1, stab=1, blocks=6, rows=3)))
    c["decode-table-two-rows-one-block"] = decode_case(F32, 0x01, 2, [
        dict(seq=3, wpage=0, wslot=2), dict(seq=251, wpage=1, wslot=122), dict(seq=128, wpage=0, wslot=127)],
        group=1, ext=dict(layout=dict(vllm, style=3)))
    c["decode-blocks16-no-table"] = decode_case(BF16_F32, 0x03, 2, [
        dict(seq=128, wpage=1, wslot=127), dict(seq=7, wpage=0, wslot=6)], ext=dict(layout=dict(B=16, split=1)))
    c["decode-output-index"] = decode_case(F32_BF16, 0x01, 3, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127), dict(seq=9, wpage=2, wslot=8)],
        out_extra=1, ext=dict(index=dict(sel=0)))
    c["decode-output-index-bad-and-duplicate"] = decode_case(F32, 0x01, 3, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127), dict(seq=384, wpage=2, wslot=127)],
        group=1, ext=dict(index=dict(sel=2, seed=3)))
    c["decode-entry-fp8"] = decode_case(F32, 0x01, 3, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127), dict(seq=7, wpage=2, wslot=6)],
        ext=dict(index=dict(sel=0), entry=dict(kind="fp8", P=1, pb=0, cp=2, rope=5, eps=0)))
    c["decode-entry-bf16-h256"] = decode_case(H256, 0x03, 1, [dict(seq=128, wpage=0, wslot=127)],
                                              ext=dict(entry=dict(kind="bf16", P=2, pb=3, cp=1, rope=7, eps=3)))
    c["decode-entry-rope-too-short"] = decode_case(F32, 0x01, 2, [
        dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127)],
        ext=dict(entry=dict(kind="fp8", P=1, cp=1, rope=1)))
    c["decode-entry-h64-rope-only"] = decode_case(H64, 0x01, 1, [dict(seq=128, wpage=0, wslot=127)], style=2,
                                                  ext=dict(layout=dict(B=32), entry=dict(kind="fp8", P=0, pb=3, cp=1)))
    c["decode-entry-bad-page-size"] = decode_case(F32, 0, 1, [dict(seq=128, wpage=0, wslot=127)],
                                                  ext=dict(entry=dict(kind="fp8", P=1, pb=5)))
    c["decode-entry-bad-kind"] = decode_case(F32, 0, 1, [dict(seq=128, wpage=0, wslot=127)],
                                             ext=dict(entry=dict(kind="bad")))
    c["decode-layout-row-shift-31"] = decode_case(F32, 0, 2, [dict(seq=3, wpage=0, wslot=2)],
                                                  ext=dict(layout=dict(vllm, rs_edge=2)))
    c["decode-layout-sharded-refused"] = decode_case(F32, 0, 2, [dict(seq=3, wpage=0, wslot=2)],
                                                     lay=dict(size=2, rank=0, ppr=1), ext=dict(layout=dict(B=8)))
    c["decode-cache-inside-state"] = decode_case(F32, 0x01, 1, [dict(seq=128, wpage=0, wslot=127)],
                                                 ext=dict(entry=dict(kind="fp8", P=1, cp=1), xc=11))
    c["prefill-vllm-table-window"] = prefill_case(F32, 0x01, 2, 200, [dict(seq=256, bl=120, rag=6, rpage=1)],
                                                  [dict(rag=7 + k, wpage=1, wslot=120 + k) for k in range(6)],
                                                  ext=dict(layout=vllm))
    c["prefill-planes-blocks16"] = prefill_case(BF16, 0x03, 2, 140, [dict(seq=128, bl=100, rag=26, rpage=0)],
                                                [dict(rag=k, wpage=1, wslot=k) for k in range(4)],
                                                ext=dict(layout=dict(B=16, split=1, biased=1)))
    c["prefill-entry-fp8-index"] = prefill_case(F32, 0x01, 2, 260, [
        dict(seq=128, bl=0, rag=127), dict(seq=256, bl=0, rag=255), dict(seq=384, bl=60, rag=68, rpage=1)], [],
        ext=dict(index=dict(sel=0), entry=dict(kind="fp8", P=0, pb=3, cp=3, rope=5)))
    c["prefill-index-duplicate-same-block"] = prefill_case(F32, 0x01, 1, 256, [
        dict(seq=128, bl=0, rag=127), dict(seq=256, bl=0, rag=255)], [], wgroup=2, out_extra=226,
        ext=dict(index=dict(sel=0)))
    c["prefill-index-duplicate-window"] = prefill_case(BF16_F32, 0x01, 1, 256, [
        dict(seq=128, bl=0, rag=127), dict(seq=256, bl=0, rag=255)], [], wgroup=1,
        ext=dict(index=dict(sel=1, seed=1)))
    c["prefill-table-at-limit"] = prefill_case(F32, 0x01, 2, 140, [dict(seq=128, bl=10, rag=117, rpage=0)],
                                               [dict(rag=1, wpage=0, wslot=1)],
                                               ext=dict(layout=dict(B=8, table=1, blocks=20, rs_edge=7, rows_edge=0)))
    c["prefill-entry-eps-nan"] = prefill_case(F32, 0, 1, 128, [dict(seq=128, bl=0, rag=127)], [],
                                              ext=dict(entry=dict(kind="fp8", eps=6)))
    c["prefill-entry-cache-misaligned"] = prefill_case(F32, 0, 1, 128, [dict(seq=128, bl=0, rag=127)], [],
                                                       ext=dict(entry=dict(kind="bf16", cp=1), xc=4))
    # -- the entries' workspace (DESIGN 11.3): NULL, misaligned, short, placed on another tensor
    entry3 = dict(kind="fp8", P=1, pb=0, cp=2, rope=5, eps=0)
    three = [dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127), dict(seq=7, wpage=2, wslot=6)]
    for name, ws in [("null", dict(corrupt=1)), ("misaligned", dict(corrupt=3)), ("short-4", dict(corrupt=7)),
                     ("row-short", dict(corrupt=9)), ("negative", dict(corrupt=12)), ("on-state", dict(corrupt=14)),
                     ("on-gamma", dict(corrupt=19)), ("on-index", dict(corrupt=21)), ("on-plans", dict(corrupt=23)),
                     ("claims-int64-max", dict(claim=7))]:
        c["decode-entry-workspace-" + name] = decode_case(F32, 0x01, 3, three, ext=dict(
            index=dict(sel=0), entry=entry3, ws=ws))
    c["decode-entry-workspace-reused-h256"] = decode_case(H256, 0x03, 2, three[:2], group=1, group2=2, ext=dict(
        entry=dict(kind="bf16", P=1, cp=2, rope=5), ws=dict(claim=4)))
    c["decode-entry-no-cache-workspace-null"] = decode_case(F32, 0x01, 1, [dict(seq=128, wpage=0, wslot=127)], ext=dict(
        entry=dict(kind="fp8", P=1, cp=0), ws=dict(corrupt=1)))
    two = [dict(seq=128, bl=0, rag=127), dict(seq=256, bl=0, rag=255)]
    for name, ws in [("counters-only", dict(corrupt=10)), ("on-input-tail", dict(corrupt=18)),
                     ("on-cache", dict(corrupt=16)), ("on-rope", dict(corrupt=20)), ("misaligned-1", dict(corrupt=5))]:
        c["prefill-entry-workspace-" + name] = prefill_case(BF16_F32, 0x01, 1, 256, two, [], ext=dict(
            entry=dict(kind="bf16", P=1, cp=2, rope=5), ws=ws))
    c["prefill-entry-workspace-reused"] = prefill_case(F32, 0x01, 1, 256, two, [], wgroup=1, wgroup2=2, ext=dict(
        entry=dict(kind="fp8", P=1, cp=2, rope=5), ws=dict(claim=5)))
    c["prefill-entry-writes-only-workspace-null"] = prefill_case(F32, 0x01, 1, 10, [], [dict(rag=1, wpage=0, wslot=1)],
                                                                 ext=dict(entry=dict(kind="fp8", P=1, cp=1),
                                                                          ws=dict(corrupt=1)))
    c["check-table-conflict"] = checker_case(0, pages=40, out_rows=4, plans=[
        dict(seq=3, wpage=0, wslot=2), dict(seq=251, wpage=1, wslot=122)], ext=dict(layout=dict(vllm, style=3)))
    c["check-entry-position"] = checker_case(0, pages=4, out_rows=4, plans=[
        dict(seq=128, wpage=0, wslot=127), dict(seq=256, wpage=1, wslot=127)],
        ext=dict(entry=dict(kind="fp8", P=1, cp=2, rope=1)))
    c["check-index-two-windows"] = checker_case(1, pages=4, in_rows=300, out_rows=1, plans=[
        dict(seq=128, bl=0, rag=127), dict(seq=256, bl=0, rag=255)], ext=dict(index=dict(sel=0)))
    c["check-layout-score-table-no-plane"] = checker_case(1, pages=4, writes=[dict(rag=1, wpage=0, wslot=1)],
                                                          ext=dict(layout=dict(vllm, stab=1, refused=1)))
    c["plan-write-all-ring"] = planner_case(False, [(0, 300, 300), (1, 140, 12)], R=256, pages=6,
                                            new=dict(write_all=1))
    vtab = dict(B=8, rs=10, rows=2, stride_d=0, rmode=1)
    c["plan-vllm-block-table"] = planner_case(False, [(0, 300, 300), (1, 200, 72)], pages=300,
                                              new=dict(write_all=1, btable=vtab))
    c["plan-block-missing"] = planner_case(False, [(0, 300, 300)], pages=300, new=dict(btable=dict(vtab, style=4)))
    c["plan-null-block"] = planner_case(True, [(0, 128, 0), (1, 5, 0)], pages=4,
                                        new=dict(btable=dict(vtab, null=(1, 0), seed=9)))
    c["plan-block-column-past-stride"] = planner_case(False, [(0, 1024, 500)], pages=300,
                                                      new=dict(write_all=1, btable=dict(vtab, stride_d=-1)))
    c["plan-trtllm-score-table"] = planner_case(False, [(0, 300, 300), (1, 20, 20)], pages=40,
                                                new=dict(btable=dict(B=128, rs=8, rows=2, stab=1, plane=1)))
    c["plan-rope-too-short"] = planner_case(False, [(0, 300, 300)], R=128, pages=4, new=dict(rope=2))
    c["plan-decode-rope-boundary"] = planner_case(True, [(0, 256, 0), (1, 129, 0)], pages=4, new=dict(rope=2))
    c["plan-engine-arrays"] = planner_case(False, [(0, 300, 300), (2, 140, 12), (1, 10, 10)], R=256, pages=8,
                                           new=dict(lens=1, qs0=5))
    c["plan-engine-arrays-decode"] = planner_case(True, [(0, 128, 0), (1, 7, 0)], pages=4, new=dict(lens=2))
    c["plan-engine-arrays-decreasing"] = planner_case(False, [(0, 300, 300), (1, 10, 10)], pages=4,
                                                      new=dict(lens=3))
    c["plan-engine-arrays-alias-workspace"] = planner_case(False, [(0, 300, 300)], pages=4,
                                                           new=dict(lens=1, lcorrupt=8))
    c["plan-requests-from-lens-null"] = planner_case(False, [(0, 30, 30)], pages=4, new=dict(lens=1, lcorrupt=1))
    return c


def crashes():
    """Reproducers of the fixed bugs (fuzz/crashes/*.bin, see the .md files there)."""
    return {
        "bug1-checker-head-dim-overflow.bin": checker_case(0, head_dim=1 << 24, plans=[dict(seq=1, wpage=0, wslot=0)]),
        "bug1-checker-head-dim-overflow-ub.bin": checker_case(1, head_dim=1 << 23, plans=[dict(seq=128)]),
        "bug2-enum-out-of-range.bin": checker_case(0, dtypes=(0x7FFFFFFF, 0, 0), plans=[dict(seq=1, wpage=0, wslot=0)]),
        "bug3-legacy-nan-race.bin": prefill_case(F32, 0x0D, 1, 128, [dict(seq=128, bl=0, rag=127)], [], seed=1,
                                                 style=2),
        "bug4-device-planner-status-inside-counts.bin": planner_case(False, [(0, 256, 256), (1, 3, 3)], pages=4,
                                                                     extra=12, kind=1, seed=0),
        "bug6-row-naming-one-page-twice.bin": planner_case(False, [(0, 300, 300)], R=256, spec=1, pages=8,
                                                           table=[5, 5, 2, 3], num_pool=2),
        "bug7-biased-writes-null-ape-decode.bin": decode_case(
            F32, 0x00, 1, [dict(seq=3, wpage=0, wslot=2)], out_extra=224, corrupt=3,
            ext=dict(layout=dict(B=128, biased=1), index=dict(sel=1))),
        "bug7-biased-writes-null-ape-prefill.bin": prefill_case(
            F32, 0x00, 1, 10, [], [dict(rag=1, wpage=0, wslot=1)], corrupt=3, ext=dict(layout=dict(B=128, biased=1))),
        "bug8-output-index-ignores-shards.bin": decode_case(
            F32, 0x01, 4, [dict(seq=128, wpage=1, wslot=127), dict(seq=5, wpage=2, wslot=4)],
            lay=dict(size=2, rank=1, ppr=2), ext=dict(index=dict(sel=0))),
        "bug9-block-table-shared-block.bin": planner_case(
            True, [(0, 128, 0), (1, 5, 0)], pages=4, new=dict(btable=dict(B=8, rs=10, rows=2, stride_d=0, rmode=1))),
    }


# Inputs the fuzzer found that joined the corpus as they are (not encoded here): kept when the
# corpus is regenerated.
FOUND = {"planner-alias-null-workspace", "prefill-aliased-nothing-to-do", "entry-launch-without-ape-pooled-twin",
         "entry-launch-with-misaligned-ape-pooled-twin",
         # the model checked a request's windows before its writes, the planners go chunk by chunk
         "plan-write-blocks-before-a-later-window",
         # whole windows: the model grouped requests by the group, a block takes group / splits
         "decode-whole-windows-one-row-two-blocks",
         # the plan checker read the plans aliased onto a state of 0 bytes (the harness's buffer)
         "prefill-plans-aliased-onto-an-empty-state"}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--crashes":
        out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "crashes")
        for name, data in sorted(crashes().items()):
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print(f"{len(crashes())} reproducers in {out}")
        return
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if name not in FOUND:
            os.remove(os.path.join(out, name))
    for name, data in sorted(cases().items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(cases())} seeds in {out}")


if __name__ == "__main__":
    main()
