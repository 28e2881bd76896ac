// The one translation unit that holds the implementation: every instance of the default table.
#define C128_IMPLEMENTATION
#include "c128.cuh"
