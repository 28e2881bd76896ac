#!/usr/bin/env python3
"""Hashes the machine code of every kernel in a cubin, to show that a change left kernels alone.

    bench/kernel_text.py build.cubin                 # one line per kernel: sha256 of its .text, name
    bench/kernel_text.py old.cubin new.cubin         # which kernels differ, appeared or went

Build the cubins with the flags of meson.build, e.g.
    nvcc -cubin -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off \
         -I. examples/c128_impl.cu -o new.cubin
A kernel whose .text is byte for byte the same runs the same instructions: this is how a change to
the header is shown not to touch a launch path (no GPU needed). Needs nothing beyond Python.
"""
import hashlib
import struct
import sys


def kernel_texts(path):
    """{kernel name: .text bytes} of an ELF64 cubin."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"{path}: not an ELF64 file (a cubin from nvcc -cubin)")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]

    def name(off):
        end = data.index(b"\0", names_off + off)
        return data[names_off + off:end].decode()

    texts = {}
    for sh_name, _type, _flags, _addr, offset, size, *_ in sections:
        n = name(sh_name)
        if n.startswith(".text."):
            texts[n[len(".text."):]] = data[offset:offset + size]
    return texts


def main(argv):
    if len(argv) == 2:
        for n, text in sorted(kernel_texts(argv[1]).items()):
            print(hashlib.sha256(text).hexdigest()[:16], n)
        return 0
    if len(argv) != 3:
        sys.exit(__doc__)
    old, new = kernel_texts(argv[1]), kernel_texts(argv[2])
    same = sorted(n for n in old if n in new and old[n] == new[n])
    changed = sorted(n for n in old if n in new and old[n] != new[n])
    print(f"{len(same)} kernels identical, {len(changed)} changed, "
          f"{len(set(new) - set(old))} new, {len(set(old) - set(new))} gone")
    for n in changed:
        print("changed", n)
    for n in sorted(set(old) - set(new)):
        print("gone   ", n)
    return 1 if changed or set(old) - set(new) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
