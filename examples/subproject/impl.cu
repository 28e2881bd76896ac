// The one translation unit of this program that holds c128's implementation, with only the
// instance that app.cu uses (the same table row).
#define C128_INSTANCES(X) C128_ROW(X, 512, f32, f32, f32)
#define C128_IMPLEMENTATION
#include "c128.cuh"
