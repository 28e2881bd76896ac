#!/usr/bin/env python3
"""PyTorch versions of the c128 benchmark cases, for the c128 / best-PyTorch ratios.

The same cases as bench.c (same state layouts, same rotation over inputs larger than L2), written
the way one would in PyTorch: write the new rows into the state, gather each window, add ape,
softmax over the 128 rows of every channel, weighted sum, store the compressed row. Three
variants: "eager" (torch.softmax), "eager_manual" (explicit max / exp / sum) and "compile"
(torch.compile of the pooling function; the state/output writes stay eager), each launched back
to back ("stream") and replayed from CUDA graphs ("graph"), timed with CUDA events after a
warm-up; medians and p10/p90 of per-unit times.

    python3 bench/torch_ref.py --csv bench_torch.csv [--budget-s 200] [--quick] [--no-compile]
"""
import argparse
import csv
import math
import sys
import time

D = 512
ROW = 2 * D
WIN = 128
FOOTPRINT = 256 * 2**20
MAX_SETS = 4096
MAX_GRAPHS = 16
SAMPLE_US = 2000.0
SAMPLES = 10
MAX_CALL_ROWS = 65536
EXTEND_LEN = 1024
EXTEND_PREFIX = 4 * WIN + 64
BATCHES = [1, 8, 32, 64, 128, 256, 1024]
TOKENS = [8192, 32768, 131072]
IN_BYTES, OUT_BYTES = ROW * 4, D * 4

import torch  # noqa: E402  (after the constants: --help works without a GPU stack)


def ceil_div(a, b):
    return -(-a // b)


def round_up(x, m):
    return ceil_div(x, m) * m


def sets_for(bytes_per_unit):
    return max(2, min(MAX_SETS, math.ceil(FOOTPRINT / bytes_per_unit)))


def rand_(t, scale_kv, scale_score):
    """Uniform kv in [-scale_kv, scale_kv), scores in [-scale_score, scale_score): never zeros."""
    v = torch.rand(t.shape, device=t.device, dtype=torch.float32) * 2 - 1
    if t.dim() >= 1 and t.shape[-1] == ROW:
        v[..., :D] *= scale_kv
        v[..., D:] *= scale_score
    else:
        v *= scale_score
    t.copy_(v)
    return t


# ---- the PyTorch implementation --------------------------------------------------------------
# The pooling is a pure function (torch.compile'd as is); the state and output writes stay eager,
# because a compiled function that mutates the state is functionalised into a copy of the whole
# state (seen here: +100..500 us per step). Two formulations: torch.softmax over the window axis,
# and the explicit max / exp / sum, which is faster in eager mode at small batches.
def decode_pool_softmax(state, ape, bpage):
    win = state[bpage]  # [Bb, 128, 2D]: rows 0..126 and the token just written
    w = torch.softmax(win[..., D:].float() + ape, dim=1)
    return (w * win[..., :D].float()).sum(dim=1)


def decode_pool_manual(state, ape, bpage):
    win = state[bpage]
    s = win[..., D:].float() + ape
    e = torch.exp(s - s.amax(dim=1, keepdim=True))
    return (e * win[..., :D].float()).sum(dim=1) / e.sum(dim=1)


def decode_step_with(pool):
    def decode_step(state, inp, ape, out, write_rows, bidx, bpage):
        """state [P, 128, 2D]; inp [B, 2D] f32; write_rows [B]; bidx / bpage: the requests that
        complete a window this step and their pages (None when there are none)."""
        state.view(-1, ROW)[write_rows] = inp.to(state.dtype)
        if bidx is not None:
            out[bidx] = pool(state, ape, bpage)

    return decode_step


def prefill_windows(inp, state, windows, in_rows, st_dst, st_src):
    """Windows that tile the input from row 0 (prefix a multiple of 128) are a view; otherwise
    gather them, then overwrite the rows that come from the state."""
    if in_rows is None:
        return inp[: windows * WIN].view(windows, WIN, ROW)
    x = inp[in_rows]  # [windows * 128, 2D]
    if st_dst is not None:
        x[st_dst] = state.view(-1, ROW)[st_src].float()
    return x.view(windows, WIN, ROW)


def prefill_pool_softmax(inp, state, ape, windows, in_rows, st_dst, st_src):
    x = prefill_windows(inp, state, windows, in_rows, st_dst, st_src)
    w = torch.softmax(x[..., D:] + ape, dim=1)
    return (w * x[..., :D]).sum(dim=1)


def prefill_pool_manual(inp, state, ape, windows, in_rows, st_dst, st_src):
    x = prefill_windows(inp, state, windows, in_rows, st_dst, st_src)
    s = x[..., D:] + ape
    e = torch.exp(s - s.amax(dim=1, keepdim=True))
    return (e * x[..., :D]).sum(dim=1) / e.sum(dim=1)


def prefill_step_with(pool):
    def prefill_step(state, inp, ape, out, windows, in_rows, st_dst, st_src, w_src, w_dst):
        """One prefill/extend call: compress every window, then persist the trailing rows."""
        out[:windows] = pool(inp, state, ape, windows, in_rows, st_dst, st_src)
        if w_src is not None:
            state.view(-1, ROW)[w_dst] = inp[w_src].to(state.dtype)

    return prefill_step


# ---- cases (the layouts of bench.c) ------------------------------------------------------------
class Case:
    pass


def build_decode(kind, B, state_dtype, dev):
    sb = ROW * (2 if state_dtype == torch.bfloat16 else 4)
    emit = (WIN - 1) * sb + IN_BYTES + sb + OUT_BYTES
    quiet = IN_BYTES + sb
    share = {"decode_boundary": 1.0, "decode_off": 0.0, "decode_mix": 1.0 / WIN}[kind]
    period = WIN // math.gcd(B, WIN) if kind == "decode_mix" else 1
    nsets = round_up(sets_for(B * (share * emit + (1 - share) * quiet)), period)
    q = torch.arange(nsets * B)
    if kind == "decode_boundary":
        isb = torch.ones_like(q, dtype=torch.bool)
    elif kind == "decode_off":
        isb = torch.zeros_like(q, dtype=torch.bool)
    else:
        isb = q % WIN == 0
    nb = int(isb.sum())
    m = ceil_div(nsets, WIN - 2)
    po = 0 if kind == "decode_boundary" else B * m
    bpage_all = torch.cumsum(isb.long(), 0) - 1
    page = torch.where(isb, bpage_all, nb + (q % max(po, 1)))
    slot = torch.where(isb, torch.full_like(q, WIN - 1), (q // max(po, 1)) % (WIN - 2))
    write_row = page * WIN + slot
    c = Case()
    c.kind, c.size, c.nsets, c.period, c.calls = kind, B, nsets, period, 1
    c.state = rand_(torch.empty(nb + po, WIN, ROW, device=dev, dtype=state_dtype), 1.0, 4.0)
    c.ape = rand_(torch.empty(WIN, D, device=dev), 0.5, 0.5)
    c.sets = []
    for r in range(nsets):
        sl = slice(r * B, (r + 1) * B)
        b = torch.nonzero(isb[sl]).flatten()
        inp = rand_(torch.empty(B, ROW, device=dev), 1.0, 4.0)
        out = torch.full((B, D), float("nan"), device=dev)
        wr = write_row[sl].to(dev)
        if len(b):
            c.sets.append([(c.state, inp, c.ape, out, wr, b.to(dev), page[sl][b].to(dev))])
        else:
            c.sets.append([(c.state, inp, c.ape, out, wr, None, None)])
    return c


def prefill_requests(kind, N, calls, s, call):
    """(pool index, prefix, extend) of the requests of prefill call `call` of set s (bench.c)."""
    per_call = N // calls
    if kind in ("prefill_1req", "prefill_8req"):
        nreq = 1 if kind == "prefill_1req" else 8
        chunk = per_call // nreq
        return [(s * nreq + i, call * chunk, chunk) for i in range(nreq)]
    nreq_total = N // EXTEND_LEN
    nreq = nreq_total // calls
    return [(s * nreq_total + call * nreq + i, EXTEND_PREFIX, EXTEND_LEN) for i in range(nreq)]


def plan_call(reqs):
    """Window input rows (or None when the windows tile the input), state-sourced rows, writes."""
    in_rows, st_dst, st_src, w_src, w_dst = [], [], [], [], []
    base = 0
    aligned = True
    for pool, prefix, ext in reqs:
        aligned &= prefix % WIN == 0 and ext % WIN == 0
        for j in range(ext):
            pos = prefix + j
            if (pos + 1) % WIN == 0:
                k = len(in_rows) // WIN
                for t in range(WIN):
                    src = j - (WIN - 1) + t
                    if src < 0:  # from the state page, slot t
                        st_dst.append(k * WIN + t)
                        st_src.append(pool * WIN + t)
                        in_rows.append(base)
                    else:
                        in_rows.append(base + src)
        tail = (prefix + ext) % WIN  # non-speculative: persist the trailing partial window
        for j in range(ext - min(tail, ext), ext):
            w_src.append(base + j)
            w_dst.append(pool * WIN + (prefix + j) % WIN)
        base += ext
    return len(in_rows) // WIN, (None if aligned else in_rows), st_dst, st_src, w_src, w_dst


def build_prefill(kind, N, state_dtype, dev):
    calls = ceil_div(N, MAX_CALL_ROWS)
    rows = N // calls
    nreq_total = {"prefill_1req": 1, "prefill_8req": 8}.get(kind, N // EXTEND_LEN)
    c = Case()
    c.kind, c.size, c.calls, c.period = kind, N, calls, 1
    c.nsets = sets_for(N * IN_BYTES)
    c.state = rand_(torch.empty(c.nsets * nreq_total, WIN, ROW, device=dev, dtype=state_dtype), 1.0, 4.0)
    c.ape = rand_(torch.empty(WIN, D, device=dev), 0.5, 0.5)
    c.sets = []

    def t(x):
        return torch.tensor(x, dtype=torch.long, device=dev) if x else None

    for s in range(c.nsets):
        unit = []
        for k in range(calls):
            windows, in_rows, st_dst, st_src, w_src, w_dst = plan_call(prefill_requests(kind, N, calls, s, k))
            inp = rand_(torch.empty(rows, ROW, device=dev), 1.0, 4.0)
            out = torch.full((windows, D), float("nan"), device=dev)
            unit.append((c.state, inp, c.ape, out, windows, t(in_rows), t(st_dst), t(st_src), t(w_src), t(w_dst)))
        c.sets.append(unit)
    return c


# ---- checks ------------------------------------------------------------------------------------
def reference_error(c, fn):
    """Run set 0 once with fn; compare its outputs with a float64 evaluation of SPEC section 1
    on the same inputs (taken before the step: extends overwrite state rows they read)."""
    state0 = c.state.clone()
    refs = []
    for args in c.sets[0]:
        if c.kind.startswith("decode"):
            _, inp, ape, out, wr, bidx, bpage = args
            if bidx is None:
                refs.append(None)
                continue
            win = state0[bpage].double()
            win[:, WIN - 1] = inp[bidx].to(state0.dtype).double()
        else:
            _, inp, ape, out, windows, in_rows, st_dst, st_src, _, _ = args
            if in_rows is None:
                win = inp[: windows * WIN].double().view(windows, WIN, ROW)
            else:
                x = inp[in_rows].double()
                if st_dst is not None:
                    x[st_dst] = state0.view(-1, ROW)[st_src].double()
                win = x.view(windows, WIN, ROW)
        w = torch.softmax(win[..., D:] + ape.double(), dim=1)
        refs.append((w * win[..., :D]).sum(dim=1))
    c.state.copy_(state0)
    for args in c.sets[0]:
        fn(*args)
    torch.cuda.synchronize()
    err = 0.0
    for args, ref in zip(c.sets[0], refs):
        if ref is None:
            continue
        out = args[3]
        got = out[args[5]] if c.kind.startswith("decode") else out[: args[4]]
        err = max(err, float(((got.double() - ref).abs() / (ref.abs() + 1e-3)).max()))
    c.state.copy_(state0)
    del state0
    return err


# ---- timing ------------------------------------------------------------------------------------
def quantile(v, q):
    v = sorted(v)
    pos = q * (len(v) - 1)
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (pos - i) * (v[i + 1] - v[i])


def run_unit(c, fn, index):
    for args in c.sets[index % c.nsets]:
        fn(*args)


def time_case(c, fn, stream):
    """Returns {mode: (median, p10, p90, reps)} in microseconds per unit."""
    res = {}
    index = 0
    for _ in range(max(c.nsets, 3)):  # warm-up: every set once
        run_unit(c, fn, index)
        index += 1
    torch.cuda.synchronize()
    e = [torch.cuda.Event(enable_timing=True) for _ in range(SAMPLES + 1)]
    e[0].record()
    for _ in range(4):
        run_unit(c, fn, index)
        index += 1
    e[1].record()
    e[1].synchronize()
    est = 1000.0 * e[0].elapsed_time(e[1]) / 4
    reps = round_up(max(1, min(256, math.ceil(SAMPLE_US / max(est, 1.0)))), c.period)
    e[0].record()
    for k in range(SAMPLES):
        for _ in range(reps):
            run_unit(c, fn, index)
            index += 1
        e[k + 1].record()
    e[SAMPLES].synchronize()
    v = [1000.0 * e[k].elapsed_time(e[k + 1]) / reps for k in range(SAMPLES)]
    res["stream"] = (quantile(v, 0.5), quantile(v, 0.1), quantile(v, 0.9), reps)

    ngraphs = max(1, min(MAX_GRAPHS, ceil_div(c.nsets, reps)))
    graphs = []
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream before capture, as PyTorch asks
        for g in range(ngraphs):
            run_unit(c, fn, g * reps)
    torch.cuda.current_stream().wait_stream(side)
    for g in range(ngraphs):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(reps):
                run_unit(c, fn, g * reps + i)
        graphs.append(graph)
    for graph in graphs:
        graph.replay()
    torch.cuda.synchronize()
    e[0].record()
    for k in range(SAMPLES):
        graphs[k % ngraphs].replay()
        e[k + 1].record()
    e[SAMPLES].synchronize()
    v = [1000.0 * e[k].elapsed_time(e[k + 1]) / reps for k in range(SAMPLES)]
    res["graph"] = (quantile(v, 0.5), quantile(v, 0.1), quantile(v, 0.9), reps)
    del graphs
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default="bench_torch.csv")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting new cases after this")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_ref.py: no CUDA GPU available to PyTorch: nothing to measure.", file=sys.stderr)
        return 77
    import torch._dynamo as dynamo  # binds `dynamo` only: `import torch._dynamo` would shadow torch here

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, 1024)
    t0 = time.time()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(0)
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001
        triton_version = "none"
    print(f"torch {torch.__version__}, triton {triton_version}, CUDA {torch.version.cuda}, {gpu}")
    variants = {  # name -> (decode step, prefill step)
        "eager": (decode_step_with(decode_pool_softmax), prefill_step_with(prefill_pool_softmax)),
        "eager_manual": (decode_step_with(decode_pool_manual), prefill_step_with(prefill_pool_manual)),
    }
    if not args.no_compile:
        variants["compile"] = (decode_step_with(torch.compile(decode_pool_softmax, dynamic=True)),
                               prefill_step_with(torch.compile(prefill_pool_softmax, dynamic=True)))
    batches = [1, 128] if args.quick else BATCHES
    tokens = [8192] if args.quick else TOKENS
    cases = []
    for dt in (torch.float32, torch.bfloat16):  # f32 first: if the budget runs out, bf16 goes
        for kind in ("decode_boundary", "decode_mix", "decode_off"):
            cases += [(kind, dt, B) for B in batches]
        for kind in ("prefill_1req", "prefill_8req", "prefill_extend"):
            cases += [(kind, dt, N) for N in tokens]
    f = open(args.csv, "w", newline="")
    out = csv.writer(f)
    out.writerow(["gpu", "torch", "triton", "case", "state", "size", "variant", "mode", "units_per_sample",
                  "samples", "median_us", "p10_us", "p90_us", "nsets", "warmup_s", "check"])
    stream = torch.cuda.current_stream()
    for kind, dt, size in cases:
        sname = "f32" if dt == torch.float32 else "bf16"
        if time.time() - t0 > args.budget_s:
            print(f"budget spent: skipping {kind} {sname} {size}")
            continue
        try:
            c = (build_decode if kind.startswith("decode") else build_prefill)(kind, size, dt, dev)
            line = f"{kind:16s} {sname:4s} {size:7d} sets {c.nsets:4d} |"
            for vname, fns in variants.items():
                fn = fns[0] if kind.startswith("decode") else fns[1]
                w0 = time.time()
                check = reference_error(c, fn)  # also the compile for a new shape
                warm = time.time() - w0
                res = time_case(c, fn, stream)
                for mode, (med, p10, p90, reps) in res.items():
                    out.writerow([gpu, torch.__version__, triton_version, kind, sname, size, vname, mode, reps,
                                  SAMPLES, f"{med:.3f}", f"{p10:.3f}", f"{p90:.3f}", c.nsets, f"{warm:.1f}",
                                  f"{check:.1e}"])
                line += f" {vname} {res['stream'][0]:8.2f} graph {res['graph'][0]:8.2f} (err {check:.0e}, {warm:3.1f}s) |"
            f.flush()
            print(line, flush=True)
            del c
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001  keep going: one failure must not lose the rest
            print(f"{kind} {sname} {size}: FAILED: {type(exc).__name__}: {exc}", flush=True)
            torch.cuda.empty_cache()
    f.close()
    print(f"wrote {args.csv} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
