/* The library's internal arithmetic, reached from the C tests: a private copy of the
   implementation (C128_STATIC, one instance, so its kernels compile fast) whose helpers are
   exported under test_ names. */
#define C128_STATIC
#define C128_INSTANCES(X) C128_ROW(X, 128, f32, f32, f32)
#include "../c128.cuh"

extern "C" float test_exp(float x) { return c128__exp_exact(x); }

/* A decode launch's form at head_dim `D` (host logic: any head_dim, though this copy's one instance
   is 128) after its group was picked, from the kernel variant (layout, entry) and whether the
   device runs clusters: whole windows, the one-request kernel, entries in clusters, and the group
   a block takes. */
extern "C" void test_decode_form(int D, int32_t requested, int32_t group, int layout, int entry, int clusters,
                                 int *whole, int *single, int *cluster, int32_t *block_group) {
  c128__params p;
  c128__more m;
  memset(&p, 0, sizeof p), memset(&m, 0, sizeof m);
  p.group = group;
  c128__trait t = {D, C128_F32, C128_F32, C128_F32, layout, entry, 0, 0};
  c128__decode_form(requested, layout + 2 * entry, clusters, &p, &m, &t);
  *whole = m.whole, *single = t.single, *cluster = t.cluster, *block_group = p.group;
}
