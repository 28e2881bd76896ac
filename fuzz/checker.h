/* Mode 4: the plan checker on arbitrary arguments and plan bytes: any head_dim and dtype values,
   sizes anywhere in int64 (huge plan counts included), any layout and group, NULL and
   misaligned arguments, reports with messages of any size. Part of fuzz_c128.cu.

   Property 5: no crash and no undefined behaviour; the checker accepts exactly the arguments
   the launch accepts: its status is the argument error m_validate (below: the launch's checks,
   in the launch's order) gives, and the launch itself, called with the same arguments, gives the
   same status; for valid arguments it is SUCCESS / INVALID_PLAN exactly as the offending plans
   of SPEC 6.5 say, naming the first offending plan (see fz_check_report); the report's message
   is NUL-terminated inside its buffer. */

static int64_t rd_size(fz_reader *r) {
  const int sel = rd_below(r, 16);
  if (sel < 9) return rd_below16(r, 700);
  if (sel == 9) return -1 - rd_u8(r);
  if (sel == 10) return INT64_MAX - rd_u8(r);
  if (sel == 11) return INT64_MIN + rd_u8(r);
  if (sel == 12) return (int64_t)rd_u64(r);
  if (sel == 13) return INT64_MAX / ((int64_t)128 * 2 * 64 * 4) + rd_below(r, 3) - 1;
  return (int64_t)rd_u32(r);
}
static int32_t rd_head_dim(fz_reader *r) {
  const int sel = rd_below(r, 12);
  int64_t d;
  if (sel < 6) d = 64 * (1 + rd_below(r, 8));
  else if (sel == 6) d = (int32_t)rd_u32(r);
  else if (sel == 7) d = (int64_t)64 * rd_u32(r);
  else if (sel == 8) d = 0;
  else if (sel == 9) d = -64 * (int64_t)rd_u16(r);
  else if (sel == 10) d = 64 * (int64_t)(1 + rd_u16(r)) * 128;
  else {
    d = 64 * (int64_t)rd_u8(r);
    d += rd_below(r, 64);
  }
  d = (int32_t)(uint32_t)(uint64_t)d;
  return (int32_t)d;
}
/* A dtype as the int a C caller may pass. Stored into the argument struct with memcpy: in the
   C++ of this file a c128_dtype outside the enum's range (0..15) is itself undefined. */
static int32_t rd_dtype(fz_reader *r) {
  const int sel = rd_below(r, 8);
  int32_t v = sel < 3 ? C128_F32 : sel < 6 ? C128_BF16 : (int32_t)rd_u32(r);
  return v;
}
static void fz_put_dtype(c128_dtype *dst, int32_t v) { memcpy(dst, &v, sizeof v); }

/* A plan count: mostly the array's own, sometimes one at or past a limit (the array then holds
   only what the checker may read: a count past a limit must be refused before any plan is). */
static int64_t rd_huge_count(fz_reader *r, int32_t D, int prefill) {
  const int64_t splits = D >= 64 && D % 64 == 0 ? D / 64 : 1;
  const int64_t limit = prefill ? C128_MAX_PREFILL_ROWS : INT32_MAX / splits;
  int64_t v;
  switch (rd_below(r, 8)) {
  case 0:
    v = limit + 1;
    break;
  case 1:
    v = limit + 1 + rd_u16(r);
    break;
  case 2:
    v = INT32_MAX;
    break;
  case 3:
    v = (int64_t)INT32_MAX + 1;
    break;
  case 4:
    v = INT64_MAX;
    break;
  case 5:
    v = INT64_C(1) << (60 + rd_below(r, 3));
    break; /* * 16 bytes wraps a 64-bit size */
  case 6:
    v = (int64_t)(UINT64_MAX / 16 + 1);
    break; /* the same in two's complement */
  default:
    v = INT64_MAX / 8 + rd_u8(r);
    break;
  }
  return v > limit ? v : limit + 1;
}
static int32_t rd_group(fz_reader *r) {
  const int sel = rd_below(r, 16);
  if (sel < 10) return 0;
  if (sel < 13) return 1 + rd_below(r, 32);
  if (sel == 13) return 33 + rd_below(r, 4);
  if (sel == 14) return -1 - rd_below(r, 4);
  return (int32_t)rd_u32(r);
}

static void fz_mode_checker(fz_reader *r) {
  const int prefill = rd_below(r, 2);
  const int32_t D = rd_head_dim(r);
  const int32_t sd = rd_dtype(r), id = rd_dtype(r), od = rd_dtype(r);
  const int64_t pages = rd_size(r), in_rows = rd_size(r), out_rows = rd_size(r);
  const c128_shared_layout lay = rd_layout(r);
  const int64_t n1 = rd_below(r, 17), n2 = prefill ? rd_below(r, 17) : 0;
  const int csel = rd_below(r, 16);
  /* The count the arguments claim: the array's, or 0 / negative with the array or NULL. */
  int64_t count1 = csel == 0 ? -1 - rd_u8(r) : csel == 1 ? 0 : n1, count2 = prefill && csel == 2 ? -1 : n2;
  const int null_plans = csel == 3;
  const int64_t span = pages >= 0 && pages < 12 ? pages : 12;
  void *p1 = fz_alloc((size_t)n1 * 16 + 1), *p2 = fz_alloc((size_t)n2 * 8 + 1);
  for (int64_t k = 0; k < n1; ++k) {
    if (prefill)
      ((c128_compress_plan *)p1)[k] = rd_compress_plan(r, in_rows > 0 && in_rows < 700 ? in_rows : 300, span);
    else ((c128_decode_plan *)p1)[k] = rd_decode_plan(r, span);
  }
  for (int64_t k = 0; k < n2; ++k)
    ((c128_write_plan *)p2)[k] = rd_write_plan(r, in_rows > 0 && in_rows < 700 ? in_rows : 300, span);
  const int msel = rd_below(r, 8);
  const size_t msg_size = msel < 4 ? (size_t)rd_below(r, 120) : msel == 4 ? 1 : 0;
  char *msg = msel == 5 ? NULL : (char *)fz_alloc(msg_size + (msg_size == 0));
  if (msg) memset(msg, 'x', msg_size + (msg_size == 0)); /* a missing NUL shows */
  const int null_args = rd_below(r, 64) == 0, null_report = rd_below(r, 64) == 0;
  /* Fields added with the checker = launch rule (old inputs read them as 0). */
  const int32_t group = rd_group(r);
  const int xsel = rd_below(r, 16);
  if (xsel == 1) count1 = rd_huge_count(r, D, prefill); /* huge counts over small arrays */
  if (xsel == 2 && prefill) count2 = rd_huge_count(r, D, prefill);
  const int misalign = xsel == 3 ? 1 + rd_below(r, 2) : 0; /* a plan array off its alignment */
  /* A count at the prefill limit over a full array: n1 fuzzed plans, the rest sentinels. */
  const int at_limit = xsel == 4;
  if (at_limit) {
    const int64_t big = C128_MAX_PREFILL_ROWS;
    void *q1 = fz_alloc((size_t)big * 16), *q2 = fz_alloc((size_t)big * 8);
    memcpy(q1, p1, (size_t)n1 * 16), memcpy(q2, p2, (size_t)n2 * 8);
    const c128_compress_plan no_c = C128_INVALID_COMPRESS_PLAN;
    const c128_write_plan no_w = C128_INVALID_WRITE_PLAN;
    const c128_decode_plan no_d = {0, -1, -1, -1};
    for (int64_t k = n1; k < big; ++k) {
      if (prefill) ((c128_compress_plan *)q1)[k] = no_c;
      else ((c128_decode_plan *)q1)[k] = no_d;
    }
    for (int64_t k = n2; k < big; ++k) ((c128_write_plan *)q2)[k] = no_w;
    free(p1), free(p2);
    p1 = q1, p2 = q2;
    count1 = big, count2 = prefill ? big : 0;
  }
  const int64_t len1 = at_limit ? C128_MAX_PREFILL_ROWS : n1, len2 = at_limit && prefill ? C128_MAX_PREFILL_ROWS : n2;
  /* The misaligned array is a copy one byte (or half a plan) off, of the same length. */
  void *m1 = NULL;
  const void *plans1 = null_plans ? NULL : p1, *plans2 = null_plans ? NULL : p2;
  if (misalign) {
    const size_t off = misalign == 1 ? 1 : (prefill && rd_below(r, 2) ? 4 : 8);
    const size_t bytes = prefill && off == 4 ? (size_t)len2 * 8 : (size_t)len1 * 16;
    m1 = fz_alloc(bytes + 16);
    memcpy((char *)m1 + off, prefill && off == 4 ? p2 : p1, bytes);
    if (prefill && off == 4) plans2 = (char *)m1 + off;
    else plans1 = (char *)m1 + off;
  }
  /* read after the checks in older versions of this mode: the same order */
  const int osel = rd_u8(r);
  const int idx = (int)(int32_t)rd_u32(r);
  const uint32_t fbits = rd_u32(r);
  const int32_t status_value = (int32_t)rd_u32(r);
  const int32_t dtype_value = (int32_t)rd_u32(r);
  const int64_t jobs = rd_below(r, 2) ? rd_huge_count(r, D, prefill) : (int64_t)rd_u64(r);
  const int32_t sms = (int32_t)rd_u32(r);
  /* the state layout, output index and cache entries (zero for older inputs): what the checker
     reads, the table and the index, in buffers of their own sizes; entries as values only */
  fz_ext x;
  rd_ext(r, &x);
  const int Dsafe = D >= 64 && D <= 512 && D % 64 == 0 ? D : 128;
  const int64_t index_rows =
      prefill ? (in_rows > 0 ? (in_rows < C128_MAX_PREFILL_ROWS ? in_rows : C128_MAX_PREFILL_ROWS) : 0) : len1;
  fz_build_ext(&x, Dsafe, 4, pages >= 0 && pages < 12 ? pages : 12, span, index_rows, out_rows,
               pages >= 0 && pages <= 4096 ? pages : 64);
  fz_set_context("mode 4 (checker) %s head_dim %d dtypes %d/%d/%d pages %lld input_rows %lld output_rows %lld layout "
                 "{%d, %d, %d} plans %lld/%lld counts %lld/%lld%s%s group %d message %zu%s%s",
                 prefill ? "prefill" : "decode", D, sd, id, od, (long long)pages, (long long)in_rows,
                 (long long)out_rows, lay.rank, lay.size, lay.pages_per_rank, (long long)len1, (long long)len2,
                 (long long)count1, (long long)count2, null_plans ? " NULL plans" : "",
                 misalign ? " misaligned plans" : "", group, msg_size, null_args ? " NULL args" : "",
                 null_report ? " NULL report" : "");
  fz_ext_context(&x);

  c128_plan_report rep = {777, C128_PLAN_DECODE, msg, msg_size};
  c128_status st;
  c128_prefill_args pa;
  c128_decode_args da;
  memset(&pa, 0, sizeof pa), memset(&da, 0, sizeof da);
  if (prefill) {
    pa.head_dim = D;
    fz_put_dtype(&pa.state_dtype, sd), fz_put_dtype(&pa.input_dtype, id), fz_put_dtype(&pa.output_dtype, od);
    pa.state_pages = pages, pa.input_rows = in_rows, pa.output_rows = out_rows, pa.layout = lay;
    pa.compress_plans = (const c128_compress_plan *)plans1, pa.num_compress = count1;
    pa.write_plans = (const c128_write_plan *)plans2, pa.num_write = count2;
    pa.windows_per_block = group;
    fz_apply_ext(&x, &pa.state_layout, &pa.output_index, &pa.entry);
    st = c128_check_prefill_plans(null_args ? NULL : &pa, null_report ? NULL : &rep);
  } else {
    da.head_dim = D;
    fz_put_dtype(&da.state_dtype, sd), fz_put_dtype(&da.input_dtype, id), fz_put_dtype(&da.output_dtype, od);
    da.state_pages = pages, da.output_rows = out_rows, da.layout = lay;
    da.plans = (const c128_decode_plan *)plans1, da.batch = count1;
    da.requests_per_block = group;
    fz_apply_ext(&x, &da.state_layout, &da.output_index, &da.entry);
    st = c128_check_decode_plans(null_args ? NULL : &da, null_report ? NULL : &rep);
  }
  fz_add_context(" -> %s", c128_status_string(st));

  /* The status the launch's validation gives. */
  const m_args ma = {prefill,
                     D,
                     sd,
                     id,
                     od,
                     pages,
                     in_rows,
                     out_rows,
                     count1,
                     count2,
                     lay,
                     group,
                     plans1,
                     plans2,
                     prefill ? &pa.state_layout : &da.state_layout,
                     prefill ? pa.output_index : da.output_index,
                     prefill ? &pa.entry : &da.entry};
  const c128_status vwant = m_validate(&ma); /* the launch's, which has no report to be NULL */
  const c128_status want = null_args || null_report ? C128_ERROR_NULL_POINTER : vwant;
  FZ_CHECK(5, st == want || (want == C128_SUCCESS && st == C128_ERROR_INVALID_PLAN),
           "checker: %s; the launch's validation gives %s", c128_status_string(st), c128_status_string(want));
  if (!null_report && !null_args)
    FZ_CHECK(5,
             want != C128_SUCCESS ? rep.index == -1
             : st == C128_SUCCESS ? rep.index == -1
                                  : rep.index >= 0,
             "checker %s reports index %lld", c128_status_string(st), (long long)rep.index);

  /* Checker = launch: the generic host launch, and the typed entry point of the named instance,
     with the same arguments and no tensors (a launch with work stops at the NULL state; one
     whose arguments are bad stops earlier with the checker's status; neither reads anything). */
  {
    const c128_status lwant = null_args               ? C128_ERROR_NULL_POINTER
                              : vwant != C128_SUCCESS ? vwant
                              : m_has_work(&ma)       ? C128_ERROR_NULL_POINTER
                                                      : C128_SUCCESS;
    const int inst = fz_find_instance(D, sd, id, od);
    const int other =
        inst >= 0 ? (inst + 1 + osel % (FZ_NUM_INSTANCES - 1)) % FZ_NUM_INSTANCES : osel % FZ_NUM_INSTANCES;
    c128_status lst, tst = lwant, ost = C128_ERROR_INSTANCE_MISMATCH;
    if (prefill) {
      lst = c128_prefill_host(null_args ? NULL : &pa, NULL);
      if (inst >= 0) tst = fz_instances[inst].prefill_host(null_args ? NULL : &pa, NULL);
      if (other >= 0 && other != inst) ost = fz_instances[other].prefill_host(null_args ? NULL : &pa, NULL);
    } else {
      lst = c128_decode_host(null_args ? NULL : &da, NULL);
      if (inst >= 0) tst = fz_instances[inst].decode_host(null_args ? NULL : &da, NULL);
      if (other >= 0 && other != inst) ost = fz_instances[other].decode_host(null_args ? NULL : &da, NULL);
    }
    FZ_CHECK(5, lst == lwant && tst == lwant, "launch without tensors: generic %s, typed %s; expected %s",
             c128_status_string(lst), c128_status_string(tst), c128_status_string(lwant));
    FZ_CHECK(5, ost == (null_args ? C128_ERROR_NULL_POINTER : C128_ERROR_INSTANCE_MISMATCH),
             "another instance's typed entry point: %s", c128_status_string(ost));
  }

  if (!null_args && !null_report && want == C128_SUCCESS) {
    int *off1 = (int *)fz_alloc((size_t)len1 * sizeof(int) + 1),
        *off2 = (int *)fz_alloc((size_t)len2 * sizeof(int) + 1);
    if (prefill) {
      m_check_prefill(&ma, (const c128_compress_plan *)plans1, count1, (const c128_write_plan *)plans2, count2, off1,
                      off2);
      fz_check_report(st, &rep, msg, msg_size, off1, count1, off2, count2, C128_PLAN_COMPRESS, C128_PLAN_WRITE);
    } else {
      m_check_decode(&ma, (const c128_decode_plan *)plans1, count1, off1);
      fz_check_report(st, &rep, msg, msg_size, off1, count1, NULL, 0, C128_PLAN_DECODE, C128_PLAN_DECODE);
    }
    free(off1), free(off2);
  }
  { /* the small API: instance lookups for any index, bf16 conversions for any bits */
    c128_instance_info info;
    const c128_status ist = c128_instance_info_get(idx, &info);
    const int count = c128_instance_count();
    FZ_CHECK(5, count == FZ_NUM_INSTANCES, "c128_instance_count() = %d, compiled %d", count, FZ_NUM_INSTANCES);
    FZ_CHECK(5, (idx >= 0 && idx < count) == (ist == C128_SUCCESS) && (c128_instance_name(idx) != NULL) == (ist == 0),
             "instance %d: %s", idx, c128_status_string(ist));
    if (ist == C128_SUCCESS)
      FZ_CHECK(5,
               !strcmp(info.name, fz_instances[idx].name) && info.head_dim == fz_instances[idx].head_dim &&
                   c128_find_instance(info.head_dim, info.state_dtype, info.input_dtype, info.output_dtype) == idx &&
                   info.decode_host == fz_instances[idx].decode_host &&
                   info.prefill_host == fz_instances[idx].prefill_host,
               "instance %d: info differs from the table", idx);
    FZ_CHECK(5, c128_instance_info_get(0, NULL) == C128_ERROR_NULL_POINTER, "c128_instance_info_get(0, NULL)");
    const float f = fz_float(fbits);
    const uint16_t h = c128_bf16_from_float(f);
    if (f != f) FZ_CHECK(5, (h & 0x7FFF) > 0x7F80, "bf16 of NaN 0x%08x is 0x%04x, not a NaN", fbits, h);
    else
      FZ_CHECK(5, h == fz_bf16(f), "bf16 of 0x%08x is 0x%04x, round to nearest even gives 0x%04x", fbits, h,
               fz_bf16(f));
    const float w = c128_bf16_to_float((uint16_t)fbits);
    FZ_CHECK(5, fz_bits(w) == (fbits & 0xFFFFu) << 16, "bf16 0x%04x widens to 0x%08x", fbits & 0xFFFFu, fz_bits(w));
  }
  { /* c128_status_string on any value a C caller may hold; the public helpers on any sizes */
    const int32_t v = status_value;
    c128_status any;
    memcpy(&any, &v, sizeof v);
    const char *text = c128_status_string(any);
    FZ_CHECK(5, text && strlen(text) > 0, "c128_status_string(%d) is empty", v);
    int32_t dt = dtype_value;
    c128_dtype anyd;
    memcpy(&anyd, &dt, sizeof dt);
    const size_t es = c128_dtype_size(anyd);
    FZ_CHECK(5, es == (dt == C128_F32 ? 4u : dt == C128_BF16 ? 2u : 0u), "c128_dtype_size(%d) = %zu", dt, es);
    /* Group sizes and the workspace size are defined for every argument (UBSan sees overflow). */
    const int32_t gd = c128_decode_group_size(jobs, D, sms), gp = c128_prefill_group_size(jobs, D, sms);
    FZ_CHECK(5, gd >= 1 && gd <= C128_MAX_DECODE_GROUP && gp >= 1 && gp <= C128_MAX_PREFILL_GROUP,
             "group sizes %d / %d for %lld jobs, head_dim %d, %d SMs", gd, gp, (long long)jobs, D, sms);
    const size_t ws = c128_plan_workspace_size(jobs);
    FZ_CHECK(5, (jobs < 0 || jobs > INT32_MAX / 2) ? ws == 0 : ws >= (size_t)jobs * sizeof(c128_request),
             "c128_plan_workspace_size(%lld) = %zu", (long long)jobs, ws);
    /* c128_entry_workspace_bytes (DESIGN 11.3): a uint32 counter a job, then, 16-byte aligned, D
       floats a job, for a head_dim in range (64 .. C128_MAX_HEAD_DIM, a multiple of 64); -1 for a
       negative count or another head_dim, and where the size passes INT64_MAX. The exact size while
       jobs * (4 D + 4) + 16 fits int64; past that, -1 or the exact size. */
    const int dim_ok = D >= 64 && D <= C128_MAX_HEAD_DIM && D % 64 == 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t j = i == 0   ? jobs
                        : i == 1 ? (int64_t)((uint64_t)jobs % 70001u)
                                 : -1 - (int64_t)((uint64_t)jobs % 3u);
      const int64_t got = c128_entry_workspace_bytes(j, D);
      const __int128 exact = ((__int128)4 * j + 15) / 16 * 16 + (__int128)j * D * 4;
      const __int128 bound = (__int128)j * (4 * (__int128)D + 4) + 16;
      const int ok = j < 0 || !dim_ok     ? got == -1
                     : bound <= INT64_MAX ? got == (int64_t)exact
                                          : got == -1 || (exact <= INT64_MAX && got == (int64_t)exact);
      FZ_CHECK(5, ok, "c128_entry_workspace_bytes(%lld, %d) = %lld", (long long)j, D, (long long)got);
    }
  }
  free(p1), free(p2), free(m1), free(msg);
  fz_free_ext(&x);
}
