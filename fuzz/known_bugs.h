/* Library bugs the fuzzer found that are not fixed yet. While an entry is set, the target steers
   its inputs around the bug so that a run keeps looking for new ones; the reproducer is in
   fuzz/crashes/. Delete the entry when the bug is fixed, or build with -DFZ_HIT_KNOWN_BUGS to
   hit them all (fuzz/run.sh repro-known). Part of fuzz_c128.cu. */
#ifndef FZ_HIT_KNOWN_BUGS
/* Bug 1: c128_check_{decode,prefill}_plans with head_dim >= 2^23 overflow int in
   C128_PAGE_ELEMS(head_dim) (signed overflow; divides by zero at 2^24, SIGFPE).
   crashes/bug1-checker-head-dim-overflow.md */
#define FZ_AVOID_KNOWN_BUG_1 1
/* Bug 2: a c128_dtype (or c128_status) value outside the enum's range, which a C caller may
   pass, is undefined behaviour in the C++ implementation (UBSan: load of value ..., which is not
   a valid value for type 'c128_dtype'). crashes/bug2-enum-out-of-range.md */
#define FZ_AVOID_KNOWN_BUG_2 1
/* Bug 3: legacy epilogue only: NaNs with different payloads in one channel's window make the
   lanes of a half-warp store different NaN bits on the host (x86 keeps payloads), and the race
   checker reports a write-after-write race on a valid plan. crashes/bug3-legacy-nan-race.md */
#define FZ_AVOID_KNOWN_BUG_3 (C128_EPILOGUE == C128_EPILOGUE_LEGACY)
#else
#define FZ_AVOID_KNOWN_BUG_1 0
#define FZ_AVOID_KNOWN_BUG_2 0
#define FZ_AVOID_KNOWN_BUG_3 0
#endif
