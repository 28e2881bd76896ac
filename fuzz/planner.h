/* Mode 3: the host planners against the device planners' host path on fuzzed rings and request
   arrays, valid or not. Part of fuzz_c128.cu.

   Property 4: both give the same status; on success the same plans byte for byte (the device
   path pads to capacity with sentinels, counts equal); on failure the host planner leaves its
   arrays and counts untouched and the device path writes zero counts and sentinels / padding
   rows only. The device path treats a request {any, 0, 0} as absent, so the host planner sees
   the array without them.
   Also (property 3 at the edges of the value ranges): a successful host plan is SPEC 5 byte for
   byte, and a failure names an error of the first request that SPEC 5 says is bad (or a ring,
   row-limit or capacity error). */

static int32_t rd_seq(fz_reader *r) {
  const int sel = rd_below(r, 16);
  static const int32_t edges[] = {127, 128, 129, 255, 256, 257, 383, 384, 65535, 65536, 65537, 1};
  if (sel < 7) return rd_below16(r, 600);
  if (sel == 7) return 0;
  if (sel == 8) return edges[rd_below(r, 12)];
  if (sel == 9) return INT32_MAX - rd_u8(r);
  if (sel == 10) return -1 - rd_u8(r);
  if (sel == 11) return (int32_t)rd_u32(r);
  const int32_t windows = rd_below16(r, 1200);
  return 128 * windows + rd_below(r, 130) - 1;
}
static int32_t rd_extend(fz_reader *r, int32_t seq) {
  const int sel = rd_below(r, 16);
  int64_t e;
  if (sel < 8) e = seq > 0 ? 1 + rd_below16(r, seq < 300 ? seq : 300) : rd_below(r, 3);
  else if (sel == 8) e = 0;
  else if (sel == 9) e = seq;
  else if (sel == 10) e = (int64_t)seq + 1;
  else if (sel == 11) e = -1 - rd_u8(r);
  else if (sel == 12) e = 65535 + rd_below(r, 3);
  else if (sel == 13) e = (int32_t)rd_u32(r);
  else e = (int64_t)seq - rd_below16(r, 400);
  /* Long extends cost the device path a page check per 128 tokens: keep them under 2^17. */
  if (e > (1 << 17) && e <= seq) e %= 1 << 17;
  return (int32_t)(e > INT32_MAX ? INT32_MAX : e);
}
static int32_t rd_pool(fz_reader *r, int64_t num_pool) {
  const int sel = rd_below(r, 16);
  if (sel < 12) return (int32_t)rd_below(r, (int)(num_pool > 0 && num_pool < 200 ? num_pool : 4) + 2) - 1;
  if (sel == 12) return (int32_t)rd_u32(r);
  if (sel == 13) return INT32_MAX;
  if (sel == 14) return INT32_MIN;
  return rd_u16(r);
}
static int64_t rd_pages(fz_reader *r) {
  const int sel = rd_below(r, 16);
  if (sel < 10) return rd_below(r, 25);
  if (sel == 10) return INT32_MAX / 128;
  if (sel == 11) return INT32_MAX / 128 + 1;
  if (sel == 12) return -1 - rd_u8(r);
  if (sel == 13) return (int64_t)rd_u64(r);
  if (sel == 14) return 1 + rd_u16(r);
  return 40000 + rd_u16(r);
}

/* The ring checks of SPEC 5 / the header, in no particular order. */
static uint32_t m_ring_errors(const c128_ring *ring) {
  uint32_t e = 0;
  const int64_t R = ring->ring_tokens ? ring->ring_tokens : 128;
  if (R <= 0 || R % 128) return FZ_BIT(C128_ERROR_INVALID_RING);
  if (ring->state_pages < 0 || (ring->page_table && ring->num_pool < 0)) e |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
  if (ring->state_pages > INT32_MAX / 128) e |= FZ_BIT(C128_ERROR_STATE_TOO_LARGE);
  if (ring->page_table && ring->page_table_stride < R / 128) e |= FZ_BIT(C128_ERROR_INVALID_RING);
  return e;
}

/* Page errors of every plan a (basically valid) request emits. */
static uint32_t m_request_page_errors(const m_ring *mr, c128_request q) {
  uint32_t e = 0;
  int64_t page;
  const int64_t seq = q.seq_len, prefix = seq - q.extend_len, fw = m_first_write(mr, seq);
  for (int64_t end = (prefix / 128 + 1) * 128 - 1; end < seq; end += 128) {
    const c128_status a = m_page(mr, q.pool_index, end, &page);
    const c128_status b = m_page(mr, q.pool_index, end >= 128 ? end - 128 : 0, &page);
    if (a) e |= FZ_BIT(a);
    if (b) e |= FZ_BIT(b);
  }
  for (int64_t pos = fw > prefix ? fw : prefix; pos < seq; pos = (pos / 128 + 1) * 128) {
    const c128_status a = m_page(mr, q.pool_index, pos, &page);
    if (a) e |= FZ_BIT(a);
  }
  if (e & FZ_BIT(C128_ERROR_POOL_INDEX_OUT_OF_RANGE) && !mr->pt) e |= FZ_BIT(C128_ERROR_PAGE_OUT_OF_RANGE);
  return e;
}

static void fz_mode_planner(fz_reader *r) {
  const int decode = rd_below(r, 3) == 0;
  c128_ring ring;
  memset(&ring, 0, sizeof ring);
  const int rsel = rd_below(r, 8);
  ring.ring_tokens = rsel == 0   ? 0
                     : rsel < 4  ? 128 * rsel
                     : rsel == 4 ? 128 * rd_below(r, 40)
                     : rsel == 5 ? (int32_t)rd_u32(r)
                     : rsel == 6 ? -128
                                 : 100;
  ring.speculative = rd_below(r, 3);
  ring.state_pages = rd_pages(r);
  const int64_t R = ring.ring_tokens ? ring.ring_tokens : 128;
  const int64_t chunks = R > 0 && R % 128 == 0 ? R / 128 : 1;
  int32_t *table = NULL;
  if (rd_below(r, 2) && chunks <= 64) {
    ring.num_pool = rd_below(r, 8) == 0 ? -1 : rd_below(r, 6);
    ring.page_table_stride = chunks + rd_below(r, 3);
    ring.page_table_stride -= rd_below(r, 8) == 0;
    const int64_t entries =
        (ring.num_pool > 0 ? ring.num_pool : 0) * (ring.page_table_stride > 0 ? ring.page_table_stride : 0);
    table = (int32_t *)fz_alloc(sizeof(int32_t) * (size_t)entries + 1);
    for (int64_t k = 0; k < entries; ++k) {
      const int sel = rd_below(r, 8);
      table[k] = sel < 6    ? (int32_t)rd_below(r, 12) - 1
                 : sel == 6 ? (int32_t)rd_u32(r)
                            : (int32_t)ring.state_pages - 1 + rd_below(r, 3);
    }
    ring.page_table = table;
  }
  const int verify = rd_below(r, 2);
  const int64_t n = rd_u8(r) < 224 ? rd_below(r, 9) : rd_below16(r, 601);
  c128_request *q = (c128_request *)fz_alloc(sizeof *q * (size_t)n + 1);
  c128_request *qh = (c128_request *)fz_alloc(sizeof *qh * (size_t)n + 1);
  int64_t nh = 0;
  for (int64_t k = 0; k < n; ++k) {
    q[k].pool_index = rd_pool(r, ring.num_pool);
    q[k].seq_len = rd_seq(r);
    q[k].extend_len = rd_below(r, 12) == 0 ? 0 : rd_extend(r, q[k].seq_len);
    if (rd_below(r, 12) == 0) q[k].seq_len = 0, q[k].extend_len = 0; /* absent */
    if (decode || q[k].seq_len != 0 || q[k].extend_len != 0) qh[nh++] = q[k];
  }
  const int csel = rd_below(r, 16);
  int64_t capacity = csel < 12 ? rd_below16(r, 700) : csel == 12 ? 0 : csel == 13 ? -1 : csel == 14 ? 65536 : -2;
  fz_set_context("mode 3 (planner) %s ring {R %d, spec %d, table %s stride %lld pool %lld, pages %lld} requests %lld "
                 "verify %d capacity %lld",
                 decode ? "decode" : "prefill", ring.ring_tokens, ring.speculative, table ? "yes" : "no",
                 (long long)ring.page_table_stride, (long long)ring.num_pool, (long long)ring.state_pages, (long long)n,
                 verify, (long long)capacity);

  /* SPEC 5: the status to expect (a set), the plans on success. */
  const m_ring mr = m_ring_of(&ring);
  uint32_t want = m_ring_errors(&ring);
  int64_t nc = 0, nw = 0, rows = 0;
  if (!want && !decode) {
    const int64_t max_drafts = ring.speculative ? R - 128 + 2 : 1;
    for (int64_t k = 0; k < nh && !want; ++k) {
      const c128_request x = qh[k];
      uint32_t e = 0;
      if (x.seq_len < 0 || x.extend_len < 0) e |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
      else if (x.extend_len == 0) e |= FZ_BIT(C128_ERROR_EMPTY_EXTEND);
      else if (x.extend_len > x.seq_len) e |= FZ_BIT(C128_ERROR_EXTEND_EXCEEDS_SEQ);
      if (verify && x.extend_len > max_drafts) e |= FZ_BIT(C128_ERROR_TOO_MANY_DRAFTS);
      if (!e && rows + x.extend_len > 65536) e |= FZ_BIT(C128_ERROR_TOO_MANY_ROWS);
      if (!(e & ~FZ_BIT(C128_ERROR_TOO_MANY_ROWS))) e |= m_request_page_errors(&mr, x);
      want = e;
      if (e) break;
      const int64_t prefix = x.seq_len - x.extend_len, fw = m_first_write(&mr, x.seq_len);
      nc += x.seq_len / 128 - prefix / 128, nw += x.seq_len - (fw > prefix ? fw : prefix), rows += x.extend_len;
    }
    if (!want && (nc > capacity || nw > capacity)) want = FZ_BIT(C128_ERROR_CAPACITY_TOO_SMALL);
    if (!want && capacity < 0) want = FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
  } else if (!want) {
    for (int64_t k = 0; k < n && !want; ++k) {
      int64_t page;
      if (q[k].seq_len < 0) want = FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
      if (q[k].seq_len <= 0) continue;
      const int64_t p = (int64_t)q[k].seq_len - 1;
      const c128_status a = m_page(&mr, q[k].pool_index, p, &page);
      const c128_status b = m_page(&mr, q[k].pool_index, p >= 128 ? p - 128 : 0, &page);
      if (a) want |= FZ_BIT(a);
      if (b) want |= FZ_BIT(b);
      if (want & FZ_BIT(C128_ERROR_POOL_INDEX_OUT_OF_RANGE) && !mr.pt) want |= FZ_BIT(C128_ERROR_PAGE_OUT_OF_RANGE);
    }
  }
  if (!decode && capacity < 0) want |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);

  /* Host planner. */
  const int64_t cap = capacity > 0 ? capacity : 0;
  const int64_t slots = decode ? n : cap;
  c128_compress_plan *hc = (c128_compress_plan *)fz_alloc(sizeof *hc * (size_t)cap + 1);
  c128_write_plan *hw = (c128_write_plan *)fz_alloc(sizeof *hw * (size_t)cap + 1);
  c128_decode_plan *hd = (c128_decode_plan *)fz_alloc(sizeof *hd * (size_t)n + 1);
  memset(hc, 0xCD, sizeof *hc * (size_t)cap), memset(hw, 0xCD, sizeof *hw * (size_t)cap);
  memset(hd, 0xCD, sizeof *hd * (size_t)n);
  c128_prefill_plans plans = {hc, hw, capacity, 1, -7, -7};
  const c128_status hst = decode ? c128_plan_decode(&ring, q, n, hd) : c128_plan_prefill(&ring, qh, nh, verify, &plans);
  const uint32_t hbit = fz_bit_of(hst);
  fz_add_context(" -> %s", c128_status_string(hst));
  if (want) FZ_CHECK(3, hbit & want, "host planner: %s, SPEC 5 expects one of 0x%x", c128_status_string(hst), want);
  else FZ_CHECK(3, hst == C128_SUCCESS, "host planner: %s for a batch SPEC 5 accepts", c128_status_string(hst));

  /* Device planner's host path. */
  c128_device_plan_args a;
  memset(&a, 0, sizeof a);
  a.ring = ring, a.requests = q, a.num_requests = n, a.verify = verify, a.capacity = decode ? 0 : capacity;
  a.workspace = fz_alloc(c128_plan_workspace_size(n));
  int32_t *status = (int32_t *)fz_alloc(sizeof(int32_t));
  int64_t *counts = rd_below(r, 4) ? (int64_t *)fz_alloc(2 * sizeof(int64_t)) : NULL;
  *status = 0x5A5A5A5A;
  if (counts) counts[0] = counts[1] = -9;
  a.status = status, a.counts = counts;
  c128_compress_plan *dc = (c128_compress_plan *)fz_alloc(sizeof *dc * (size_t)cap + 1);
  c128_write_plan *dw = (c128_write_plan *)fz_alloc(sizeof *dw * (size_t)cap + 1);
  c128_decode_plan *dd = (c128_decode_plan *)fz_alloc(sizeof *dd * (size_t)n + 1);
  memset(dc, 0xEE, sizeof *dc * (size_t)cap), memset(dw, 0xEE, sizeof *dw * (size_t)cap);
  memset(dd, 0xEE, sizeof *dd * (size_t)n);
  if (decode) a.decode = dd;
  else a.compress = dc, a.write = dw;

  /* Now and then one bad pointer argument: the device path must refuse it and write nothing. */
  const int csel2 = rd_u8(r), corrupt = csel2 < 224 ? 0 : 1 + (csel2 - 224) % 8;
  if (corrupt) {
    c128_device_plan_args b = a;
    uint32_t want_dev = FZ_BIT(C128_SUCCESS);
    switch (corrupt) {
    case 1:
      b.status = NULL, want_dev = FZ_BIT(C128_ERROR_NULL_POINTER);
      break;
    case 2:
      b.workspace = NULL, want_dev = FZ_BIT(C128_ERROR_NULL_POINTER);
      break;
    case 3:
      b.requests = NULL;
      if (n > 0) want_dev = FZ_BIT(C128_ERROR_NULL_POINTER);
      break;
    case 4:
      b.workspace = (char *)a.workspace + 4, want_dev = FZ_BIT(C128_ERROR_MISALIGNED);
      break;
    case 5:
      b.counts = counts ? (int64_t *)((char *)counts + 4) : NULL;
      if (counts) want_dev = FZ_BIT(C128_ERROR_MISALIGNED);
      break;
    case 6:
      if (decode) b.decode = (c128_decode_plan *)((char *)dd + 8);
      else b.compress = (c128_compress_plan *)((char *)dc + 8);
      want_dev = FZ_BIT(C128_ERROR_MISALIGNED);
      break;
    case 7:
      b.requests = (const c128_request *)((const char *)q + 2);
      if (n > 0) want_dev = FZ_BIT(C128_ERROR_MISALIGNED);
      break;
    default:
      if (decode) b.decode = NULL;
      else b.compress = NULL;
      if (decode ? n > 0 : capacity > 0) want_dev = FZ_BIT(C128_ERROR_NULL_POINTER);
      break;
    }
    if (want_dev != FZ_BIT(C128_SUCCESS)) { /* the earlier argument errors may come first */
      want_dev |= m_ring_errors(&ring);
      if (!decode && capacity < 0) want_dev |= FZ_BIT(C128_ERROR_NEGATIVE_SIZE);
      const c128_status bst = decode ? c128_plan_decode_device_host(&b) : c128_plan_prefill_device_host(&b);
      FZ_CHECK(4, fz_bit_of(bst) & want_dev, "device planner with bad argument %d: %s, expected one of 0x%x", corrupt,
               c128_status_string(bst), want_dev);
      FZ_CHECK(4, *status == 0x5A5A5A5A && (!counts || (counts[0] == -9 && counts[1] == -9)),
               "device planner refused its arguments (%s) but wrote status or counts", c128_status_string(bst));
      for (size_t k = 0; k < sizeof *dc * (size_t)cap; ++k)
        FZ_CHECK(4, ((uint8_t *)dc)[k] == 0xEE && ((uint8_t *)dw)[k / 2] == 0xEE,
                 "device planner refused its arguments but wrote plans");
      for (size_t k = 0; k < sizeof *dd * (size_t)n; ++k)
        FZ_CHECK(4, ((uint8_t *)dd)[k] == 0xEE, "device planner refused its arguments but wrote decode plans");
    }
  }
  const c128_status dret = decode ? c128_plan_decode_device_host(&a) : c128_plan_prefill_device_host(&a);
  const c128_status dst = dret != C128_SUCCESS ? dret : (c128_status)*status;
  FZ_CHECK(4, dst == hst, "host planner %s, device planner %s (returned %s)", c128_status_string(hst),
           c128_status_string(dst), c128_status_string(dret));

  if (hst == C128_SUCCESS && decode) {
    FZ_CHECK(4, memcmp(hd, dd, sizeof *hd * (size_t)n) == 0,
             "decode plans differ between the host and device planners");
    for (int64_t k = 0; k < n; ++k) { /* SPEC 5 */
      c128_decode_plan w = {0, -1, -1, -1};
      if (q[k].seq_len > 0) {
        const int64_t p = (int64_t)q[k].seq_len - 1;
        int64_t p1 = 0, p0 = 0;
        m_page(&mr, q[k].pool_index, p, &p1), m_page(&mr, q[k].pool_index, p >= 128 ? p - 128 : 0, &p0);
        w.seq_len = (uint32_t)q[k].seq_len, w.write_loc = (int32_t)(p1 * 128 + p % 128);
        w.read_page_0 = (int32_t)p0, w.read_page_1 = (int32_t)p1;
      }
      FZ_CHECK(3, memcmp(&hd[k], &w, sizeof w) == 0, "decode plan %lld: {%u, %d, %d, %d}, SPEC 5 {%u, %d, %d, %d}",
               (long long)k, hd[k].seq_len, hd[k].write_loc, hd[k].read_page_0, hd[k].read_page_1, w.seq_len,
               w.write_loc, w.read_page_0, w.read_page_1);
    }
  } else if (hst == C128_SUCCESS) {
    FZ_CHECK(4, !counts || (counts[0] == plans.num_compress && counts[1] == plans.num_write),
             "counts: device %lld/%lld, host %lld/%lld", (long long)counts[0], (long long)counts[1],
             (long long)plans.num_compress, (long long)plans.num_write);
    FZ_CHECK(4, memcmp(hc, dc, sizeof *hc * (size_t)cap) == 0 && memcmp(hw, dw, sizeof *hw * (size_t)cap) == 0,
             "prefill plans differ between the host and device planners");
    FZ_CHECK(3, plans.num_compress == nc && plans.num_write == nw, "host counts %lld/%lld, SPEC 5 %lld/%lld",
             (long long)plans.num_compress, (long long)plans.num_write, (long long)nc, (long long)nw);
    int64_t kc = 0, kw = 0, base = 0;
    for (int64_t k = 0; k < nh; ++k) { /* SPEC 5, plan by plan */
      const int64_t seq = qh[k].seq_len, prefix = seq - qh[k].extend_len, fw = m_first_write(&mr, seq);
      for (int64_t j = 0; j < qh[k].extend_len; ++j) {
        const int64_t pos = prefix + j;
        int64_t p0 = 0, p1 = 0;
        if ((pos + 1) % 128 == 0) {
          m_page(&mr, qh[k].pool_index, pos, &p1), m_page(&mr, qh[k].pool_index, pos >= 128 ? pos - 128 : 0, &p0);
          const c128_compress_plan c = {(uint32_t)(pos + 1), (uint16_t)(base + j), (uint16_t)(j < 127 ? 127 - j : 0),
                                        (int32_t)p0, (int32_t)p1};
          FZ_CHECK(3, memcmp(&hc[kc], &c, sizeof c) == 0, "compress plan %lld differs from SPEC 5", (long long)kc);
          ++kc;
        }
        if (pos >= fw) {
          m_page(&mr, qh[k].pool_index, pos, &p1);
          const c128_write_plan w = {(uint32_t)(base + j), (int32_t)(p1 * 128 + pos % 128)};
          FZ_CHECK(3, memcmp(&hw[kw], &w, sizeof w) == 0, "write plan %lld differs from SPEC 5", (long long)kw);
          ++kw;
        }
      }
      base += qh[k].extend_len;
    }
  } else {
    for (size_t k = 0; k < sizeof *hc * (size_t)cap; ++k)
      FZ_CHECK(3, ((uint8_t *)hc)[k] == 0xCD, "host planner failed with %s but wrote compress plans",
               c128_status_string(hst));
    for (size_t k = 0; k < sizeof *hw * (size_t)cap; ++k)
      FZ_CHECK(3, ((uint8_t *)hw)[k] == 0xCD, "host planner failed but wrote write plans");
    for (size_t k = 0; k < sizeof *hd * (size_t)n; ++k)
      FZ_CHECK(3, ((uint8_t *)hd)[k] == 0xCD, "host planner failed but wrote decode plans");
    FZ_CHECK(3, plans.num_compress == -7 && plans.num_write == -7, "host planner failed but set counts");
    if (dret == C128_SUCCESS) { /* the device path ran: zero counts and sentinels only */
      const c128_compress_plan no_c = C128_INVALID_COMPRESS_PLAN;
      const c128_write_plan no_w = C128_INVALID_WRITE_PLAN;
      const c128_decode_plan no_d = {0, -1, -1, -1};
      FZ_CHECK(4, !counts || (counts[0] == 0 && counts[1] == 0), "device planner failed with counts %lld/%lld",
               (long long)counts[0], (long long)counts[1]);
      for (int64_t k = 0; k < slots; ++k) {
        if (decode)
          FZ_CHECK(4, memcmp(&dd[k], &no_d, sizeof no_d) == 0, "device planner failed, decode plan %lld is not padding",
                   (long long)k);
        else
          FZ_CHECK(4, memcmp(&dc[k], &no_c, sizeof no_c) == 0 && memcmp(&dw[k], &no_w, sizeof no_w) == 0,
                   "device planner failed, plan slot %lld is not a sentinel", (long long)k);
      }
    }
  }
  free(a.workspace), free(status), free(counts), free(dc), free(dw), free(dd), free(hc), free(hw), free(hd);
  free(q), free(qh), free(table);
}
