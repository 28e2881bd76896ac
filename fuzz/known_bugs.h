/* Library bugs the fuzzer found that are not fixed yet. While an entry is set, the target steers
   its inputs around the bug so that a run keeps looking for new ones; the reproducer is in
   fuzz/crashes/. Delete the entry when the bug is fixed, or build with -DFZ_HIT_KNOWN_BUGS to
   hit them all (fuzz/run.sh repro-known). Part of fuzz_c128.cu. */
/* Bugs 1-3 (crashes/bug1-*, bug2-*, bug3-*) are fixed in c128.cuh: the target no longer steers
   around them, and their reproducers stay in the corpus of fuzz/run.sh repro-known. */
#define FZ_AVOID_KNOWN_BUG_1 0
#define FZ_AVOID_KNOWN_BUG_2 0
#define FZ_AVOID_KNOWN_BUG_3 0
/* Bugs 4-6 (crashes/bug4-*, bug5-*, bug6-*: a refused device planner left *status = SUCCESS when
   status lay inside counts; the host planner left a half-written plan when a page changed during
   emission; a page-table row naming one page for two ring chunks passed the planners) are fixed
   in c128.cuh (2212318): the target no longer steers around them. */
#define FZ_AVOID_KNOWN_BUG_4 0
#define FZ_AVOID_KNOWN_BUG_5 0
#define FZ_AVOID_KNOWN_BUG_6 0
