#!/usr/bin/env bash
# The QUICK START block on c128.cuh's first screen says it is an excerpt of
# examples/quickstart.c: every line of it (whitespace-normalised) must be a line of that file,
# in the file's order. A line of the excerpt may leave out the line's trailing /* comment */,
# and a line "..." stands for lines left out. The block runs from the line that starts
# "QUICK START" to the next heading (an all-capitals line at the same indent).
source "$(dirname "$0")/common.bash"
python3 - c128.cuh examples/quickstart.c <<'PY' || fail "the QUICK START block of c128.cuh is not an excerpt of examples/quickstart.c (above)"
import difflib, re, sys

header, example = sys.argv[1], sys.argv[2]
norm = lambda s: " ".join(s.split())
lines = open(header).read().splitlines()
start = next((i for i, l in enumerate(lines) if l.strip().startswith("QUICK START")), None)
if start is None:
    sys.exit(f"{header}: no QUICK START block")
indent = len(lines[start]) - len(lines[start].lstrip())
block = []
for i in range(start + 1, len(lines)):
    l = lines[i]
    if re.fullmatch(r" {%d}[A-Z][A-Z0-9 ,/()-]*" % indent, l) or l.strip() == "*/":
        break
    if l.strip() and l.strip() != "...":
        block.append((i + 1, norm(l)))
if not block:
    sys.exit(f"{header}:{start + 1}: the QUICK START block is empty")

# Each line of the example, whole and without its trailing comment.
source = open(example).read().splitlines()
forms = []
for l in source:
    whole = norm(l)
    bare = norm(re.sub(r"/\*.*?\*/\s*$|//.*$", "", l))
    forms.append({whole, bare})

bad, at = 0, 0
for lineno, text in block:
    hit = next((j for j in range(at, len(forms)) if text in forms[j]), None)
    if hit is None:
        anywhere = next((j for j in range(len(forms)) if text in forms[j]), None)
        if anywhere is not None:
            print(f"{header}:{lineno}: out of order: is line {anywhere + 1} of {example}: {text}")
        else:
            close = difflib.get_close_matches(text, [norm(l) for l in source], n=1, cutoff=0.5)
            print(f"{header}:{lineno}: not in {example}: {text}")
            print(f"    closest line there: {close[0] if close else '(none)'}")
        bad += 1
    else:
        at = hit + 1
sys.exit(1 if bad else 0)
PY
ok
