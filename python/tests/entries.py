"""An independent NumPy reference of the cache-entry epilogue (DESIGN 11.1) and the tolerances of
DESIGN 11.4, shared by the CPU and GPU tests. Float64 arithmetic; the bf16 and e4m3 roundings are
computed here from the values (exponent and nearest-even rounding of the scaled value), not from
bit tricks, and share nothing with the library's code.

The chain, per window, from its pooled vector y (head_dim values, the last 64 the RoPE channels):

    b   = bf16(y)
    r   = 1 / sqrt(sum(b^2) / D + eps)
    z   = bf16(gamma * (b * r))
    RoPE pair i: bf16(zr cos - zi sin), bf16(zr sin + zi cos)           (cos, sin) = table[p][i]
    FP8 block w: E = least integer with max(max |z|, 1e-4) <= 448 * 2^E, q = e4m3(z * 2^-E),
                 scale byte E + 127

What a correct kernel may differ by (DESIGN 11.4) is carried as intervals: y is known within
y_err (the pooling tolerance of DESIGN 8.2 for the fp64 oracle; 0 for the kernel's own pooled
output), which bounds b, then r, then z before its rounding (widened by the fp32 evaluation's
error); a kernel's z is a bf16 value in [z_lo, z_hi], its RoPE values bf16 roundings of values in
the rotation of that box, its scale exponent one that some amax in the box gives, and each code the
e4m3 rounding of some z of the box at the kernel's exponent, within one code of the nominal one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

ROPE = 64
BLOCK = 64
E4M3_MAX = 448.0
SCALE_FLOOR = 1e-4
U32 = 2.0 ** -24  # fp32 unit roundoff


# ---- roundings ---------------------------------------------------------------------------------------
def _exponent(a: np.ndarray) -> np.ndarray:
    """floor(log2(a)) for a > 0, exactly (log2 corrected by comparisons)."""
    e = np.floor(np.log2(a))
    e = np.where(np.exp2(e) > a, e - 1, e)
    return np.where(np.exp2(e + 1) <= a, e + 1, e)


def bf16_ulp(x) -> np.ndarray:
    """The spacing of bf16 values at |x|: 8 significant bits, that of 2^-126 below it (subnormals, zero)."""
    return np.exp2(_exponent(np.maximum(np.abs(np.asarray(x, np.float64)), 2.0 ** -126)) - 7)


def bf16_round(x) -> np.ndarray:
    """Float64 values rounded to the nearest bf16 value, ties to even; overflow to +-inf, NaN stays."""
    x = np.asarray(x, np.float64)
    out = x.copy()
    m = np.isfinite(x) & (x != 0)
    a = np.abs(x[m])
    ulp = bf16_ulp(a)
    q = np.round(a / ulp) * ulp  # a / ulp is exact; np.round ties to even
    q = np.where(q >= 2.0 ** 128, np.inf, q)
    out[m] = np.copysign(q, x[m])
    return out


def bf16_bits(x) -> np.ndarray:
    """The bf16 bit patterns of bf16-representable float64 values."""
    v = np.asarray(x, np.float64).astype(np.float32)
    return (v.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def bf16_value(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def e4m3_code(x) -> np.ndarray:
    """The nearest e4m3 (FN) code of each value, ties to even; |x| > 448 clamps to 448."""
    x = np.asarray(x, np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    sub = a < 2.0 ** -6
    code = np.round(a / 2.0 ** -9)  # subnormals: steps of 2^-9; 8 is the first normal code
    normal = ~sub & (a > 0)
    e = _exponent(np.where(normal, a, 1.0))
    mant = np.round((np.where(normal, a, 1.0) / np.exp2(e) - 1.0) * 8)
    e = np.where(mant == 8, e + 1, e)
    mant = np.where(mant == 8, 0, mant)
    code = np.where(normal, (e + 7) * 8 + mant, code).astype(np.int64)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def e4m3_value(code) -> np.ndarray:
    c = np.asarray(code, np.int64)
    mag, exp, mant = c & 0x7F, (c >> 3) & 0xF, c & 7
    v = np.where(exp == 0, mant * 2.0 ** -9, (1 + mant / 8.0) * np.exp2(exp - 7.0))
    v = np.where(mag == 0x7F, np.nan, v)
    return np.where(c & 0x80, -v, v)


def e4m3_ordinal(code) -> np.ndarray:
    """Codes in value order: +-magnitude (so that 'one code apart' is a difference of 1)."""
    c = np.asarray(code, np.int64)
    return np.where(c & 0x80, -(c & 0x7F), c & 0x7F)


def scale_exponent(a) -> np.ndarray:
    """The least integer E with max(a, 1e-4) <= 448 * 2^E (exact comparisons)."""
    a = np.maximum(np.asarray(a, np.float64), SCALE_FLOOR)
    e = np.ceil(np.log2(a / E4M3_MAX))
    e = np.where(E4M3_MAX * np.exp2(e) < a, e + 1, e)
    return np.where(E4M3_MAX * np.exp2(e - 1) >= a, e - 1, e).astype(np.int64)


# ---- the chain ---------------------------------------------------------------------------------------
@dataclass
class Oracle:
    """One window's expected entry, nominal values and the intervals a correct kernel stays in."""

    head_dim: int
    z: np.ndarray  # nominal bf16 z (before RoPE), float64
    z_lo: np.ndarray
    z_hi: np.ndarray
    rope: np.ndarray  # nominal rotated values (bf16), [64]
    rope_lo: np.ndarray  # the kernel's value is bf16(v) for some v in [rope_lo, rope_hi]
    rope_hi: np.ndarray
    exponents: List[Tuple[int, int]]  # per FP8 block: (least, greatest) allowed E
    nominal_exponent: np.ndarray


def oracle(y, y_err, gamma, eps: float, rope_row) -> Oracle:
    """DESIGN 11.1 on pooled vector y (float64 [D]) known within y_err (float64 [D] or scalar),
    gamma (f32 [D]), eps, and rope_row (f32 [32, 2]: (cos, sin) per pair)."""
    y = np.asarray(y, np.float64)
    d = len(y)
    err = np.broadcast_to(np.asarray(y_err, np.float64), y.shape)
    g = np.asarray(gamma, np.float32).astype(np.float64)
    eps = float(np.float32(eps))
    b = bf16_round(y)
    b_lo, b_hi = bf16_round(y - err), bf16_round(y + err)
    sq_lo = np.where((b_lo <= 0) & (b_hi >= 0), 0.0, np.minimum(b_lo ** 2, b_hi ** 2))
    sq_hi = np.maximum(b_lo ** 2, b_hi ** 2)
    margin_r = (d + 8) * U32  # the fp32 sum of squares, the division, the square root, 1 / x
    r = 1.0 / np.sqrt((b ** 2).sum() / d + eps)
    r_lo = 1.0 / np.sqrt(sq_hi.sum() / d + eps) * (1 - margin_r)
    r_hi = 1.0 / np.sqrt(sq_lo.sum() / d + eps) * (1 + margin_r)
    corners = np.stack([g * b_lo * r_lo, g * b_lo * r_hi, g * b_hi * r_lo, g * b_hi * r_hi])
    t_lo, t_hi = corners.min(axis=0), corners.max(axis=0)
    t_lo = t_lo - np.abs(t_lo) * 2 * U32  # two fp32 multiplies
    t_hi = t_hi + np.abs(t_hi) * 2 * U32
    z = bf16_round(g * (b * r))
    z_lo, z_hi = bf16_round(t_lo), bf16_round(t_hi)
    # RoPE on the last 64 channels
    rope_row = np.asarray(rope_row, np.float32).astype(np.float64).reshape(ROPE // 2, 2)
    cos, sin = rope_row[:, 0], rope_row[:, 1]
    zr, zi = z[d - ROPE::2], z[d - ROPE + 1::2]
    zr_box = np.stack([z_lo[d - ROPE::2], z_hi[d - ROPE::2]])
    zi_box = np.stack([z_lo[d - ROPE + 1::2], z_hi[d - ROPE + 1::2]])
    re = [zr_box[i] * cos - zi_box[j] * sin for i in (0, 1) for j in (0, 1)]
    im = [zr_box[i] * sin + zi_box[j] * cos for i in (0, 1) for j in (0, 1)]
    slack = 3 * U32 * (np.abs(zr_box).max(axis=0) * np.abs(cos) + np.abs(zi_box).max(axis=0) * np.abs(sin) +
                       np.abs(zr_box).max(axis=0) * np.abs(sin) + np.abs(zi_box).max(axis=0) * np.abs(cos))
    rope = np.empty(ROPE)
    rope[0::2], rope[1::2] = bf16_round(zr * cos - zi * sin), bf16_round(zr * sin + zi * cos)
    rope_lo, rope_hi = np.empty(ROPE), np.empty(ROPE)
    rope_lo[0::2], rope_hi[0::2] = np.min(re, axis=0) - slack, np.max(re, axis=0) + slack
    rope_lo[1::2], rope_hi[1::2] = np.min(im, axis=0) - slack, np.max(im, axis=0) + slack
    # FP8 blocks
    blocks = d // BLOCK - 1
    exps, nominal = [], []
    for w in range(blocks):
        sl = slice(BLOCK * w, BLOCK * (w + 1))
        lo, hi = z_lo[sl], z_hi[sl]
        amax_lo = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi))).max()
        amax_hi = np.maximum(np.abs(lo), np.abs(hi)).max()
        exps.append((int(scale_exponent(amax_lo)), int(scale_exponent(amax_hi))))
        nominal.append(int(scale_exponent(np.abs(z[sl]).max())))
    return Oracle(d, z, z_lo, z_hi, rope, rope_lo, rope_hi, exps, np.array(nominal))


def _codes_ok(codes: np.ndarray, o: Oracle, w: int, e: int) -> str:
    """'' when the block's codes are right for exponent e."""
    sl = slice(BLOCK * w, BLOCK * (w + 1))
    scale = 2.0 ** -e
    got = e4m3_ordinal(codes)
    nominal = e4m3_ordinal(e4m3_code(o.z[sl] * scale))
    lo, hi = e4m3_ordinal(e4m3_code(o.z_lo[sl] * scale)), e4m3_ordinal(e4m3_code(o.z_hi[sl] * scale))
    bad = (np.abs(got - nominal) > 1) | (got < lo) | (got > hi) | ((np.asarray(codes) & 0x7F) == 0x7F)
    if bad.any():
        k = int(np.argmax(bad))
        want = int(e4m3_code(o.z[sl][k] * scale))
        return (f"block {w} channel {BLOCK * w + k}: code {int(codes[k]):#04x}, expected {want:#04x} "
                f"(z {o.z[sl][k]:.6g}, E {e})")
    return ""


def _rope_ok(values: np.ndarray, o: Oracle) -> str:
    lo, hi = bf16_round(o.rope_lo), bf16_round(o.rope_hi)
    bad = ~((values >= lo) & (values <= hi))
    if bad.any():
        k = int(np.argmax(bad))
        return f"RoPE value {k}: {values[k]:.6g} outside [{lo[k]:.6g}, {hi[k]:.6g}] (nominal {o.rope[k]:.6g})"
    return ""


def check_fp8(value: np.ndarray, scale: np.ndarray, o: Oracle) -> str:
    """'' when an FP8 entry (value: D + 64 bytes, scale: D / 64 bytes) is within DESIGN 11.4."""
    d = o.head_dim
    blocks = d // BLOCK - 1
    for w in range(blocks):
        e = int(scale[w]) - 127
        least, greatest = o.exponents[w]
        if not least <= e <= greatest:
            return f"block {w}: scale byte {int(scale[w])} (E {e}), expected E in [{least}, {greatest}]"
        why = _codes_ok(value[BLOCK * w: BLOCK * (w + 1)], o, w, e)
        if why:
            return why
    if scale[blocks] != 0:
        return f"pad byte {int(scale[blocks])}, expected 0"
    rope = bf16_value(value[d - ROPE:].view(np.uint16))
    return _rope_ok(rope, o)


def check_bf16(value: np.ndarray, o: Oracle) -> str:
    """'' when a BF16 entry (D bf16 values) is within DESIGN 11.4: each FP8 block dequantised at
    an allowed exponent, the RoPE values as in the FP8 layout."""
    d = o.head_dim
    v = bf16_value(value.view(np.uint16))
    for w in range(d // BLOCK - 1):
        sl = slice(BLOCK * w, BLOCK * (w + 1))
        least, greatest = o.exponents[w]
        whys = []
        for e in range(least, greatest + 1):
            codes = e4m3_code(v[sl] * 2.0 ** -e)
            if not np.array_equal(e4m3_value(codes) * 2.0 ** e, v[sl]):
                whys.append(f"E {e}: values are not e4m3 codes times 2^{e}")
                continue
            why = _codes_ok(codes, o, w, e)
            if not why:
                break
            whys.append(why)
        else:
            return f"block {w}: " + "; ".join(whys)
    return _rope_ok(v[d - ROPE:], o)


# ---- cache layouts (DESIGN 11.2) -------------------------------------------------------------------------
def entry_bytes(cache: np.ndarray, kind: str, head_dim: int, per_page: int, page_bytes: int, loc: int
                ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(value bytes, scale bytes or None) of entry loc in a cache (viewed as bytes)."""
    flat = cache.reshape(-1).view(np.uint8)
    page, t = divmod(loc, per_page)
    base = page * page_bytes
    if kind == "dsv4_fp8":
        at = base + (head_dim + 64) * t
        sc = base + (head_dim + 64) * per_page + (head_dim // 64) * t
        return flat[at: at + head_dim + 64], flat[sc: sc + head_dim // 64]
    at = base + 2 * head_dim * t
    return flat[at: at + 2 * head_dim], None


def written_mask(cache_bytes: int, kind: str, head_dim: int, per_page: int, page_bytes: int, locs) -> np.ndarray:
    """The bytes the entries at locs occupy."""
    mask = np.zeros(cache_bytes, bool)
    for loc in locs:
        page, t = divmod(int(loc), per_page)
        base = page * page_bytes
        if kind == "dsv4_fp8":
            at = base + (head_dim + 64) * t
            mask[at: at + head_dim + 64] = True
            sc = base + (head_dim + 64) * per_page + (head_dim // 64) * t
            mask[sc: sc + head_dim // 64] = True
        else:
            at = base + 2 * head_dim * t
            mask[at: at + 2 * head_dim] = True
    return mask


def check_entry(cache: np.ndarray, kind: str, head_dim: int, per_page: int, page_bytes: int, loc: int,
                o: Oracle) -> str:
    value, scale = entry_bytes(cache, kind, head_dim, per_page, page_bytes, loc)
    return check_fp8(value, scale, o) if kind == "dsv4_fp8" else check_bf16(value, o)


# ---- test data -------------------------------------------------------------------------------------------
def rope_table(rng: np.random.Generator, positions: int) -> np.ndarray:
    """A (cos, sin) table float32 [positions, 32, 2] of random angles (the library takes any)."""
    angles = rng.uniform(-np.pi, np.pi, (positions, ROPE // 2))
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)


def gamma(rng: np.random.Generator, head_dim: int) -> np.ndarray:
    """f32 holding bf16 values, as DeepSeek-V4's norm weight."""
    g = (1.0 + 0.5 * rng.standard_normal(head_dim)).astype(np.float32)
    return bf16_value(bf16_bits(bf16_round(g))).astype(np.float32)


def page_bytes(kind: str, head_dim: int, per_page: int) -> int:
    """FlashMLA's page size for FP8 (584 P rounded up to a multiple of 576 at head_dim 512; the
    entries plus their scale bytes, rounded to 4, elsewhere); 2 D P for BF16."""
    if kind == "dsv4_bf16":
        return 2 * head_dim * per_page
    need = (head_dim + 64 + head_dim // 64) * per_page
    if head_dim == 512:
        return -(-need // 576) * 576
    return -(-need // 4) * 4
