#!/usr/bin/env python3
"""serve.py: the serving simulation of examples/serve.c, through the Python binding.

An engine keeps `live` requests in flight on a speculative request ring (R = 256: every request
owns two state pages, pool row = its slot). Each step is one batch of one kind:
- prefill: requests still reading their prompt get a chunk of it (chunked prefill under a token
  budget; chunks start anywhere in a window);
- decode: one new token for every generating request;
- verify: speculative decoding; each generating request brings n_draft rows (the root token and
  its drafts: mostly a few, sometimes up to 130, the most R = 256 persists), the engine accepts
  the first `a` and rolls back the rest. Windows that end in the rejected part were compressed
  from drafts: their outputs are dropped, and the window is compressed again once committed.
A request that reached its length leaves; a new one takes its pool row (stale state rows stay).
Every compressed window is checked against a float64 reference computed from the request's
committed tokens only (the engine keeps the open window's rows per request).

On a GPU (PyTorch CUDA tensors; kernels on PyTorch's current stream): head_dim 512, 32 requests,
3000 steps, with the kernels' time per step. Otherwise NumPy arrays and the host runner: 16
requests, 1000 steps. --cpu forces the host runner; --gpu insists on a GPU (exit 77 = skipped
without one); --steps N. All tensors are f32 (h512_f32_f32_f32), so a row read back from the
state is the row that went in and the reference needs no rounding model. Exit status 0 iff every
window matched (relative L2 <= 1e-5, max abs <= 1e-4).

    python examples/python/serve.py            # GPU if PyTorch sees one, else the host runner
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional

import numpy as np

import c128

W, RING = 128, 256
MAX_DRAFTS = RING - W + 2
KINDS = ("prefill", "decode", "verify")


class Request:
    def __init__(self, rng: np.random.Generator, head_dim: int) -> None:
        self.window = np.zeros((W, 2 * head_dim), np.float32)  # committed rows of the open window
        self.reset(rng)

    def reset(self, rng: np.random.Generator) -> None:
        self.len = 0
        self.prompt_left = int(rng.integers(1, (600 if rng.integers(0, 4) else 2000) + 1))
        self.target = self.prompt_left + int(rng.integers(1, 501))


def reference(rows: np.ndarray, ape: np.ndarray) -> np.ndarray:
    """The window's compressed vector in float64: per-channel softmax of score + ape, weighted kv."""
    d = ape.shape[1]
    rows = rows.astype(np.float64)
    s = rows[:, d:] + ape
    w = np.exp(s - s.max(axis=0))
    return (w * rows[:, :d]).sum(axis=0) / w.sum(axis=0)


class Sim:
    def __init__(self, use_gpu: bool, live: int, head_dim: int, seed: int = 0x243F6A88) -> None:
        self.rng = np.random.default_rng(seed)
        self.d, self.live, self.use_gpu = head_dim, live, use_gpu
        self.ring = c128.Ring(state_pages=live * (RING // W), ring_tokens=RING, speculative=True)
        self.max_rows = live * MAX_DRAFTS + 4096
        self.reqs = [Request(self.rng, head_dim) for _ in range(live)]
        d = head_dim
        self.ape = (0.25 * np.sin(0.37 * np.arange(W * d, dtype=np.float32))).reshape(W, d).astype(np.float32)
        self.input = np.zeros((self.max_rows, 2 * d), np.float32)
        self.output = np.zeros((self.max_rows, d), np.float32)
        self.compress = np.zeros((self.max_rows, 16), np.uint8)  # SGLang's plan layout
        self.write = np.zeros((self.max_rows, 8), np.uint8)
        self.decode_plans = np.zeros((live, 16), np.uint8)
        state = np.full((self.ring.state_pages, W, 2 * d), np.nan, np.float32)  # a stale read shows as NaN
        self.stats = dict(emitted=0, discarded=0, committed=0, finished=0, rows=0, max_rel=0.0, max_abs=0.0,
                          planner=0.0, steps={k: 0 for k in KINDS}, rows_of={k: 0 for k in KINDS},
                          kernel_ms={k: 0.0 for k in KINDS})
        if use_gpu:
            import torch

            self.torch = torch
            dev = "cuda"
            self.dev = dict(state=torch.from_numpy(state).to(dev), ape=torch.from_numpy(self.ape).to(dev),
                            input=torch.zeros((self.max_rows, 2 * d), device=dev),
                            output=torch.zeros((self.max_rows, d), device=dev),
                            compress=torch.zeros((self.max_rows, 16), dtype=torch.uint8, device=dev),
                            write=torch.zeros((self.max_rows, 8), dtype=torch.uint8, device=dev),
                            decode=torch.zeros((live, 16), dtype=torch.uint8, device=dev))
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        else:
            self.state = state

    # ---- the workload ---------------------------------------------------------------------------
    def rows(self, n: int) -> np.ndarray:
        d = self.d
        u = self.rng.random((n, 2 * d), dtype=np.float32) - np.float32(0.5)
        u[u == 0] = np.float32(0.25)
        u[:, :d] *= 2.0  # kv in (-1, 1)
        u[:, d:] *= 8.0  # scores in (-4, 4)
        return u

    def choose_kind(self) -> str:
        waiting = sum(q.prompt_left > 0 for q in self.reqs)
        steps = sum(self.stats["steps"].values())
        if waiting == self.live or 4 * waiting >= self.live or (waiting and steps % 4 == 0):
            return "prefill"
        return "verify" if self.rng.integers(0, 2) else "decode"

    # ---- one step -------------------------------------------------------------------------------
    def step(self) -> None:
        kind = self.choose_kind()
        order = self.rng.permutation(self.live)  # batch position != pool row
        batch: List[tuple] = []
        members, accept = [], []
        rows, budget = 0, 4096
        for i in order:
            q = self.reqs[i]
            if kind == "prefill":
                if q.prompt_left == 0 or budget == 0:
                    continue
                extend = min(int(self.rng.integers(1, min(q.prompt_left, 1024) + 1)), budget)
                q.prompt_left -= extend
                accepted = extend
            elif q.prompt_left > 0:
                continue  # still reading its prompt
            elif kind == "verify":
                extend = int(self.rng.integers(1, (6 if self.rng.integers(0, 4) else MAX_DRAFTS) + 1))
                accepted = extend if self.rng.integers(0, 4) == 0 else int(self.rng.integers(1, extend + 1))
            else:
                extend = accepted = 1
            batch.append((int(i), q.len + extend, extend))
            members.append(int(i))
            accept.append(accepted)
            self.input[rows:rows + extend] = self.rows(extend)
            rows += extend
            budget -= extend
        if not batch:
            return
        reqs = np.array(batch, np.int32)
        n = len(batch)
        t0 = time.perf_counter()
        if kind == "decode":
            c128.plan_decode(self.ring, reqs, out=self.decode_plans)
            num_compress = num_write = 0
        else:
            plans = c128.plan_prefill(self.ring, reqs, verify=kind == "verify", capacity=rows, compress=self.compress,
                                      write=self.write)
            num_compress, num_write = plans.num_compress, plans.num_write
        self.stats["planner"] += time.perf_counter() - t0
        out_rows = n if kind == "decode" else num_compress
        self.run(kind, n, rows, num_compress, num_write)
        s = self.stats
        s["steps"][kind] += 1
        s["rows_of"][kind] += rows
        s["rows"] += rows
        self.commit(kind, batch, members, accept, num_compress, out_rows)

    def run(self, kind: str, n: int, rows: int, num_compress: int, num_write: int) -> None:
        if not self.use_gpu:
            t0 = time.perf_counter()
            if kind == "decode":
                c128.decode(self.state, self.input[:n], self.ape, self.output[:n], self.decode_plans[:n])
            else:
                c128.prefill(self.state, self.input[:rows], self.ape, self.output[:max(num_compress, 1)],
                             self.compress[:num_compress], self.write[:num_write])
            self.stats["kernel_ms"][kind] += 1e3 * (time.perf_counter() - t0)
            return
        torch, dev = self.torch, self.dev
        dev["input"][:rows].copy_(torch.from_numpy(self.input[:rows]))
        if kind == "decode":
            dev["decode"][:n].copy_(torch.from_numpy(self.decode_plans[:n]))
        else:
            dev["compress"][:num_compress].copy_(torch.from_numpy(self.compress[:num_compress]))
            dev["write"][:num_write].copy_(torch.from_numpy(self.write[:num_write]))
        self.events[0].record()
        if kind == "decode":
            c128.decode(dev["state"], dev["input"][:n], dev["ape"], dev["output"][:n], dev["decode"][:n])
            out_rows = n
        else:
            c128.prefill(dev["state"], dev["input"][:rows], dev["ape"], dev["output"][:max(num_compress, 1)],
                         dev["compress"][:num_compress], dev["write"][:num_write])
            out_rows = num_compress
        self.events[1].record()
        self.events[1].synchronize()
        self.stats["kernel_ms"][kind] += self.events[0].elapsed_time(self.events[1])
        self.output[:out_rows] = dev["output"][:out_rows].cpu().numpy()

    # ---- commit what the engine accepted; check every window that completed ----------------------
    def commit(self, kind: str, batch: List[tuple], members: List[int], accept: List[int], num_compress: int,
               out_rows: int) -> None:
        s = self.stats
        base, k = 0, 0
        plan_seq = self.compress[:num_compress, :4].copy().view(np.uint32)[:, 0]
        plan_rag = self.compress[:num_compress, 4:6].copy().view(np.uint16)[:, 0]
        for m, i in enumerate(members):
            q = self.reqs[i]
            extend, prefix = batch[m][2], q.len
            ends = {}
            if kind == "decode":
                if (prefix + 1) % W == 0:
                    ends[prefix] = m
            else:
                while k < num_compress and plan_rag[k] < base + extend:
                    end = int(plan_seq[k]) - 1
                    if end >= prefix + accept[m]:
                        s["discarded"] += 1  # computed on rejected drafts
                    ends[end] = k
                    k += 1
            for j in range(accept[m]):
                q.window[q.len % W] = self.input[base + j]
                if q.len % W == W - 1:
                    row = ends.get(q.len)
                    if row is None:
                        sys.exit(f"request on pool row {i}: window ending at {q.len} was not compressed")
                    self.check(q.window, self.output[row])
                q.len += 1
            s["committed"] += accept[m]
            base += extend
            if q.prompt_left == 0 and q.len >= q.target:
                s["finished"] += 1
                q.reset(self.rng)  # same pool row, stale state rows

    def check(self, rows: np.ndarray, out: np.ndarray) -> None:
        ref = reference(rows, self.ape)
        err = np.abs(out.astype(np.float64) - ref)
        rel = float(np.sqrt((err ** 2).sum() / (ref ** 2).sum()))
        s = self.stats
        s["max_rel"] = rel if not rel <= s["max_rel"] else s["max_rel"]  # NaN sticks
        worst = float(err.max()) if not np.isnan(err).any() else float("nan")
        s["max_abs"] = worst if not worst <= s["max_abs"] else s["max_abs"]
        s["emitted"] += 1


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="the host runner on NumPy arrays")
    ap.add_argument("--gpu", action="store_true", help="insist on a GPU (exit 77 without one)")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args(argv)
    have_gpu = False
    try:
        import torch

        have_gpu = torch.cuda.is_available()
    except ImportError:
        pass
    if args.gpu and not have_gpu:
        print("serve.py --gpu: no CUDA device through PyTorch, skipped")
        return 77
    use_gpu = have_gpu and not args.cpu
    sim = Sim(use_gpu, live=32 if use_gpu else 16, head_dim=512)
    steps = args.steps if args.steps is not None else (3000 if use_gpu else 1000)
    print(f"c128 {c128.__version__} ({c128.build_info().math} math); path: "
          f"{'GPU (PyTorch tensors, CUDA kernels)' if use_gpu else 'CPU (NumPy arrays, host runner)'}, instance "
          f"h{sim.d}_f32_f32_f32, request ring R = {RING} with speculation, {sim.live} requests in flight")
    start = time.perf_counter()
    for _ in range(steps):
        sim.step()
    wall = time.perf_counter() - start
    s = sim.stats
    print(f"{steps} steps: {s['steps']['prefill']} prefill, {s['steps']['decode']} decode, {s['steps']['verify']} "
          f"verify; {s['rows']} rows, {s['committed']} tokens committed, {s['finished']} requests done")
    print(f"windows: {s['emitted']} emitted and checked against the float64 reference, {s['discarded']} dropped "
          f"(rejected drafts)")
    print(f"max error: relative L2 {s['max_rel']:.2e}, abs {s['max_abs']:.2e}")
    for kind in KINDS:
        if s["steps"][kind]:
            what = "kernels (CUDA events)" if use_gpu else "host runner"
            print(f"{kind:<7} {what} per step: {1e3 * s['kernel_ms'][kind] / s['steps'][kind]:8.1f} us "
                  f"({s['rows_of'][kind] / s['steps'][kind]:.1f} rows per step)")
    print(f"planner (host) per step: {1e6 * s['planner'] / steps:.1f} us; whole run {wall:.2f} s")
    ok = s["emitted"] > 0 and s["max_rel"] <= 1e-5 and s["max_abs"] <= 1e-4
    print("all windows match the float64 reference" if ok else "MISMATCH against the reference")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
