/* The library's internal arithmetic, reached from the C tests: a private copy of the
   implementation (C128_STATIC, one instance, so its kernels compile fast) whose helpers are
   exported under test_ names. */
#define C128_STATIC
#define C128_INSTANCES(X) X(h128_f32_f32_f32, 128, float, float, float, C128_F32, C128_F32, C128_F32)
#include "../c128.cuh"

extern "C" float test_exp(float x) { return c128__exp(x); }
