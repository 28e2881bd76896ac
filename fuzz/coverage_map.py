#!/usr/bin/env python3
"""Line coverage of c128.cuh (and the fuzz sources) from an lcov export of the fuzz target.

nvcc hands the host compiler a preprocessed file (*.cudafe1.cpp); clang's coverage refers to
lines of that file. Its `# N "file"` markers map them back to the sources. Usage (fuzz/run.sh
coverage calls it):

    coverage_map.py LCOV_FILE CUDAFE1_CPP [--uncovered FILE_SUFFIX]
"""
import collections
import re
import sys


def line_map(cpp):
    """cudafe1.cpp line number -> (source file, line)."""
    m = {}
    cur_file, cur_line = cpp, 0
    marker = re.compile(r'^#(?:line)? (\d+)(?: "([^"]*)")?')  # `# N "file"`, or `# N` in the same file
    with open(cpp, errors="replace") as f:
        for n, text in enumerate(f, start=1):
            hit = marker.match(text)
            if hit:
                cur_line, cur_file = int(hit.group(1)) - 1, hit.group(2) or cur_file
                continue
            cur_line += 1
            m[n] = (cur_file, cur_line)
    return m


def main():
    lcov, cpp = sys.argv[1], sys.argv[2]
    want = sys.argv[sys.argv.index("--uncovered") + 1] if "--uncovered" in sys.argv else "c128.cuh"
    lm = line_map(cpp)
    lines = collections.defaultdict(dict)  # file -> line -> max count
    funcs = {}  # (file, name) -> [first line, hits]
    branches = collections.defaultdict(lambda: [0, 0])
    in_cpp = False
    fn_line = {}
    for text in open(lcov):
        text = text.rstrip("\n")
        if text.startswith("SF:"):
            in_cpp = text[3:].endswith(".cudafe1.cpp")
            fn_line = {}
        elif not in_cpp:
            continue
        elif text.startswith("DA:"):
            n, count = text[3:].split(",")[:2]
            src = lm.get(int(n))
            if src:
                f, l = src
                lines[f][l] = max(lines[f].get(l, 0), int(count))
        elif text.startswith("FN:"):
            n, name = text[3:].split(",", 1)
            fn_line[name] = int(n)
        elif text.startswith("FNDA:"):
            count, name = text[5:].split(",", 1)
            src = lm.get(fn_line.get(name, -1))
            if src:
                key = (src[0], name)
                old = funcs.get(key, [src[1], 0])
                funcs[key] = [old[0], old[1] + int(count)]
        elif text.startswith("BRDA:"):
            n, _, _, taken = text[5:].split(",")
            src = lm.get(int(n))
            if src:
                b = branches[src[0]]
                b[0] += 1
                b[1] += taken not in ("-", "0")
    print(f"{'file':60s} {'lines':>14s} {'functions':>12s} {'branches':>14s}")
    for f in sorted(lines):
        if "/usr/" in f or f.startswith("/usr") or "<" in f:
            continue
        ls = lines[f]
        hit = sum(1 for c in ls.values() if c > 0)
        fs = [v for (ff, _), v in funcs.items() if ff == f]
        fh = sum(1 for v in fs if v[1] > 0)
        b = branches[f]
        print(f"{f[-60:]:60s} {hit:6d}/{len(ls):<6d}{100.0 * hit / max(len(ls), 1):5.1f}% {fh:4d}/{len(fs):<4d}"
              f" {b[1]:6d}/{b[0]:<6d}{100.0 * b[1] / max(b[0], 1):5.1f}%")
    for f in sorted(lines):
        if not f.endswith(want):
            continue
        print(f"\nfunctions of {f} never run:")
        for (ff, name), (line, count) in sorted(funcs.items(), key=lambda kv: kv[1][0]):
            if ff == f and count == 0:
                print(f"  {line:5d}  {name}")
        missed = sorted(l for l, c in lines[f].items() if c == 0)
        ranges, start = [], None
        for i, l in enumerate(missed):
            if start is None:
                start = l
            if i + 1 == len(missed) or missed[i + 1] != l + 1:
                ranges.append((start, l))
                start = None
        print(f"lines of {f} never run ({len(missed)}): " + ", ".join(
            f"{a}" if a == b else f"{a}-{b}" for a, b in ranges))


if __name__ == "__main__":
    main()
