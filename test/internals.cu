/* The library's internal arithmetic, reached from the C tests: a private copy of the
   implementation (C128_STATIC, one instance, so its kernels compile fast) whose helpers are
   exported under test_ names. */
#define C128_STATIC
#define C128_INSTANCES(X) C128_ROW(X, 128, f32, f32, f32)
#include "../c128.cuh"

extern "C" float test_exp(float x) { return c128__exp_exact(x); }
