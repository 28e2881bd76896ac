"""The package and the library it loads: version, build information, the instance table, the
statuses, the ctypes structures against a C compiler's layout, bf16 rounding."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import c128
from c128 import _lib

ROOT = Path(__file__).resolve().parents[2]


def test_version(checked) -> None:
    info = c128.build_info()
    assert c128.__version__ == info.version
    assert info.version_number == sum(int(p) * m for p, m in zip(info.version.split("."), (10000, 100, 1)))
    meson = ROOT / "meson.build"
    if meson.exists():
        assert re.search(r"version: '([^']+)'", meson.read_text()).group(1) == c128.__version__
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return
    try:
        installed = version("c128")
    except PackageNotFoundError:
        installed = None
    if installed is not None and not os.environ.get(_lib.LIBRARY_ENV):
        assert installed == c128.__version__
    checked(f"c128 {c128.__version__} ({info.math} math, {info.epilogue} epilogue) from {c128.library_path()}")


def test_instances() -> None:
    table = c128.instances()
    assert len(table) == c128.build_info().instance_count == 24
    assert len({i.name for i in table}) == 24
    for i in table:
        assert i.name == f"h{i.head_dim}_{i.state_dtype}_{i.input_dtype}_{i.output_dtype}"
        assert c128.find_instance(i.head_dim, i.state_dtype, i.input_dtype, i.output_dtype) == i
        assert i.num_split == i.head_dim // 64 and i.row_elems == 2 * i.head_dim and i.page_elems == 128 * i.row_elems
    assert {i.head_dim for i in table} == {128, 256, 512}
    assert c128.find_instance(384, "f32", "f32", "f32") is None
    assert c128.find_instance(512, c128.BF16, "float32", "f32").name == "h512_bf16_f32_f32"
    with pytest.raises(TypeError, match="^state_dtype: "):
        c128.find_instance(512, "f16", "f32", "f32")


def test_statuses() -> None:
    assert [s.value for s in c128.Status] == list(range(32))
    assert c128.Status.SUCCESS == 0 and c128.Status.ERROR_ALIASED == 23 and c128.Status.ERROR_PAGE_SHARED == 24
    assert c128.Status.ERROR_INVALID_STATE_LAYOUT == 25 and c128.Status.ERROR_ROPE_TABLE_TOO_SHORT == 29
    assert c128.Status.ERROR_INVALID_PDL == 30 and c128.Status.ERROR_WORKSPACE_TOO_SMALL == 31
    # kept in the enumeration, never returned since the cache entries stopped using clusters
    assert c128.Status.ERROR_UNSUPPORTED_DEVICE == 27 and "not returned" in _lib.STATUS_TEXT[27]
    assert _lib.status_string(32).decode().startswith("unknown")
    for s in c128.Status:
        assert _lib.STATUS_TEXT[s].startswith(f"C128_{s.name}: ")


def test_entry_workspace_bytes() -> None:
    """A counter a job, rounded up to 16 bytes, then head_dim floats a job; -1 where the C function
    refuses (a negative count, a head_dim that is no multiple of 64 in 64..65536, a size past int64)."""
    rng = np.random.default_rng(17)
    for jobs in [0, 1, 2, 3, 4, 5, 17, 4096, 65536] + [int(j) for j in rng.integers(0, 1 << 20, 8)]:
        for d in (64, 128, 256, 448, 512, 576, 65536):
            assert c128.entry_workspace_bytes(jobs, d) == -(-4 * jobs // 16) * 16 + 4 * d * jobs, (jobs, d)
    assert c128.entry_workspace_bytes(np.int64(3), 512) == 16 + 3 * 2048
    for jobs, d in ((-1, 512), (1, 0), (1, 96), (1, 65536 + 64), (1, -64), (2**62, 512)):
        assert c128.entry_workspace_bytes(jobs, d) == -1, (jobs, d)
    with pytest.raises(ValueError, match="^jobs: "):
        c128.entry_workspace_bytes(2**63, 512)
    with pytest.raises(TypeError, match="^head_dim: "):
        c128.entry_workspace_bytes(1, "512")


def test_group_sizes() -> None:
    assert c128.decode_group_size(0, 512, 132) == 1
    assert 1 <= c128.decode_group_size(4096, 512, 132) <= c128.MAX_DECODE_GROUP
    assert 1 <= c128.prefill_group_size(4096, 512, 132) <= c128.MAX_PREFILL_GROUP
    with pytest.raises(ValueError, match="^head_dim: "):
        c128.decode_group_size(1, 2**40, 1)


def _cuda_include() -> Path | None:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for base in (Path(nvcc).resolve().parent.parent, Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))):
        if (base / "include" / "cuda_runtime_api.h").exists():
            return base / "include"
    return None


def test_tolerances_are_the_references(checked) -> None:
    """cases.py holds SPEC 8's tolerances as ref/reference.h defines them."""
    import cases

    header = ROOT / "ref" / "reference.h"
    if not header.exists():
        pytest.skip("needs ref/reference.h (a source tree)")
    defined = dict(re.findall(r"^#define (REF_\w+) (\S+)$", header.read_text(), re.M))
    mine = {"REF_TOL_REL_L2": cases.TOL_REL_L2, "REF_TOL_MAX_ABS": cases.TOL_MAX_ABS, "REF_BF16_REL": cases.BF16_REL,
            "REF_BF16_ABS": cases.BF16_ABS}
    assert {name: float(defined[name]) for name in mine} == mine
    checked(f"tolerances: cases.py = ref/reference.h ({', '.join(f'{k} {v:g}' for k, v in mine.items())})")


def test_structures_match_the_header(tmp_path: Path, checked) -> None:
    """Every ctypes structure has c128.cuh's size and field offsets, as a C compiler lays them out."""
    header, include, cc = ROOT / "c128.cuh", _cuda_include(), shutil.which("cc") or shutil.which("gcc")
    if not header.exists() or include is None or cc is None:
        pytest.skip("needs c128.cuh (a source tree), the CUDA headers and a C compiler")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "c128.cuh"', "int main(void) {"]
    expected = []
    for cname, struct in _lib.STRUCTURES.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expected.append(("sizeof", cname, _sizeof(struct)))
        for field, _ in struct._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {field}));')
            expected.append((field, cname, getattr(struct, field).offset))
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", f"-I{ROOT}", f"-I{include}", str(src), "-o", str(exe)], check=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert [(f, c, v) for (f, c, _), v in zip(expected, got)] == expected
    checked(f"ABI: {len(_lib.STRUCTURES)} ctypes structures = c128.cuh's layouts ({len(expected)} sizes and offsets)")


def _sizeof(struct) -> int:
    import ctypes

    return ctypes.sizeof(struct)


def test_bf16_rounding_is_the_librarys() -> None:
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.standard_normal(2000).astype(np.float32) * np.float32(1e3),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-45, 3.4e38, 1.00390625, 1.01171875], np.float32),
        np.frombuffer(rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).tobytes(), np.float32),
    ])
    got = c128.bf16_from_float(values)
    want = np.array([_lib.bf16_from_float(float(v)) for v in values], np.uint16)
    assert got.tobytes() == want.tobytes()
    back = c128.bf16_to_float(got)
    want_back = np.array([_lib.bf16_to_float(int(b)) for b in got], np.float32)
    assert back.tobytes() == want_back.tobytes()
