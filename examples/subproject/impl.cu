// The one translation unit of this program that holds c128's implementation, with only the
// instance that app.cu uses (the same table row).
#define C128_INSTANCES(X) X(h512_f32_f32_f32, 512, float, float, float, C128_F32, C128_F32, C128_F32)
#define C128_IMPLEMENTATION
#include "c128.cuh"
