/* The instance table of the bare nvcc tests (test/meson.build): every head_dim, and f32 and bf16
   in each of the state, input and output columns. */
#define C128_INSTANCES(X)           \
  C128_ROW(X, 128, f32, bf16, bf16) \
  C128_ROW(X, 256, bf16, f32, f32) C128_ROW(X, 512, f32, f32, f32) C128_ROW(X, 512, bf16, bf16, bf16)
