/* The C test of aspace's C ABI: mappings, typed and byte accesses, faults as return codes,
 * Linux's errors, stale and forged handles, and threads (pthreads) that attach their own cores.
 * Run by tests/c_programs.rs (cargo test) and .ci/run. Prints one line per failed check and
 * closes with "capi_test: N passed, M failed"; exits non-zero if any failed. */
#include "aspace.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (cond) {                                                            \
      passed++;                                                            \
    } else {                                                               \
      failed++;                                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)
#define EQ(a, b) CHECK((int64_t)(a) == (int64_t)(b))

#define PAGE ASPACE_PAGE_SIZE
#define RW (ASPACE_PROT_READ | ASPACE_PROT_WRITE)
#define PA (ASPACE_MAP_PRIVATE | ASPACE_MAP_ANONYMOUS)

static AspaceSpace make_space(const char *design) {
  AspaceConfig config = {.design = design, .memory = 32 << 20};
  AspaceSpace s = {0};
  EQ(aspace_create(&config, &s), 0);
  return s;
}

static void creation_checks_its_arguments(void) {
  AspaceSpace s;
  AspaceConfig bad = {.design = "no-such-design"};
  EQ(aspace_create(&bad, &s), -EINVAL);
  AspaceConfig tiny = {.memory = 1}; /* less than a frame */
  EQ(aspace_create(&tiny, &s), -EINVAL);
  EQ(aspace_create(NULL, NULL), -EINVAL);
  EQ(aspace_create(NULL, &s), 0); /* the default space */
  AspaceCore c;
  EQ(aspace_attach(s, NULL), -EINVAL);
  EQ(aspace_attach(s, &c), 0);
  EQ(aspace_destroy(s), 0);
}

static void mapping_reading_and_writing(const char *design) {
  AspaceSpace s = make_space(design);
  AspaceCore c;
  EQ(aspace_attach(s, &c), 0);
  int64_t a = aspace_mmap(c, 0, 3 * PAGE, RW, PA);
  CHECK(a > 0 && a % PAGE == 0);
  uint64_t base = (uint64_t)a;

  /* Typed accesses, each width, fresh pages read as zero. */
  uint64_t v64 = 1;
  EQ(aspace_read_u64(c, base + 8, &v64), 0);
  EQ(v64, 0);
  EQ(aspace_write_u8(c, base, 0xab), 0);
  EQ(aspace_write_u16(c, base + 2, 0xbeef), 0);
  EQ(aspace_write_u32(c, base + 4, 0xdeadbeefu), 0);
  EQ(aspace_write_u64(c, base + 8, 0x0123456789abcdefu), 0);
  uint8_t v8;
  uint16_t v16;
  uint32_t v32;
  EQ(aspace_read_u8(c, base, &v8), 0);
  EQ(v8, 0xab);
  EQ(aspace_read_u16(c, base + 2, &v16), 0);
  EQ(v16, 0xbeef);
  EQ(aspace_read_u32(c, base + 4, &v32), 0);
  EQ(v32, 0xdeadbeefu);
  EQ(aspace_read_u64(c, base + 8, &v64), 0);
  CHECK(v64 == 0x0123456789abcdefu);
  /* Host byte order: the first byte of the u32 is its low byte here (x86-64, aarch64). */
  EQ(aspace_read_u8(c, base + 4, &v8), 0);
  EQ(v8, 0xef);
  /* Unaligned and across a page boundary. */
  EQ(aspace_write_u64(c, base + PAGE - 3, 0x1122334455667788u), 0);
  EQ(aspace_read_u64(c, base + PAGE - 3, &v64), 0);
  CHECK(v64 == 0x1122334455667788u);

  /* Byte buffers over three pages. */
  static char out[2 * PAGE + 100], in[2 * PAGE + 100];
  for (size_t i = 0; i < sizeof out; i++) out[i] = (char)(i * 7 + 3);
  EQ(aspace_write(c, base + 50, out, sizeof out), 0);
  EQ(aspace_read(c, base + 50, in, sizeof in), 0);
  CHECK(memcmp(in, out, sizeof in) == 0);
  EQ(aspace_read(c, base, NULL, 0), 0);

  /* maps: one region; a too-small buffer gets the count. */
  AspaceRegion r[4];
  EQ(aspace_maps(s, NULL, 0), 1);
  EQ(aspace_maps(s, r, 4), 1);
  EQ(r[0].start, base);
  EQ(r[0].end, base + 3 * PAGE);
  EQ(r[0].prot, RW);
  EQ(r[0].sharing, ASPACE_MAP_PRIVATE);

  /* mprotect splits the region; a write to the read-only page is the guest's SIGSEGV. */
  EQ(aspace_mprotect(c, base + PAGE, PAGE, ASPACE_PROT_READ), 0);
  EQ(aspace_maps(s, r, 1), 3);
  EQ(r[0].end, base + PAGE);
  EQ(aspace_write_u32(c, base + PAGE + 16, 7), -EFAULT);
  AspaceFault f;
  EQ(aspace_last_fault(c, &f), 0);
  EQ(f.addr, base + PAGE + 16);
  EQ(f.si_code, ASPACE_SEGV_ACCERR);
  EQ(f.error, -EFAULT);
  EQ(aspace_read_u32(c, base + PAGE + 16, &v32), 0); /* still readable */
  /* A write that crosses into the read-only page writes nothing, not even its first page. */
  EQ(aspace_write_u64(c, base + PAGE - 4, 0), -EFAULT);
  EQ(aspace_read_u32(c, base + PAGE - 4, &v32), 0);
  CHECK(v32 != 0);
  EQ(aspace_touch(c, base + PAGE, ASPACE_ACCESS_READ), 0);
  EQ(aspace_touch(c, base + PAGE, ASPACE_ACCESS_WRITE), -EFAULT);
  EQ(aspace_touch(c, base + PAGE, ASPACE_ACCESS_EXEC), -EFAULT);

  /* madvise(MADV_DONTNEED): private pages read back as zero. */
  EQ(aspace_madvise(c, base, PAGE, ASPACE_MADV_DONTNEED), 0);
  EQ(aspace_read_u8(c, base, &v8), 0);
  EQ(v8, 0);

  /* munmap: a read is SEGV_MAPERR. */
  EQ(aspace_munmap(c, base, 3 * PAGE), 0);
  EQ(aspace_read_u64(c, base + 8, &v64), -EFAULT);
  EQ(aspace_last_fault(c, &f), 0);
  EQ(f.si_code, ASPACE_SEGV_MAPERR);
  EQ(f.addr, base + 8);
  EQ(aspace_maps(s, r, 4), 0);

  AspaceStats st;
  EQ(aspace_stats(s, &st), 0);
  EQ(st.frames_in_use, 0);
  EQ(st.regions, 0);
  EQ(st.cores, 1);
  CHECK(st.faults > 0);
  EQ(aspace_detach(c), 0);
  EQ(aspace_destroy(s), 0);
}

static void linux_errors(void) {
  AspaceSpace s = make_space(NULL);
  AspaceCore c;
  EQ(aspace_attach(s, &c), 0);
  EQ(aspace_mmap(c, 0, 0, RW, PA), -EINVAL);                       /* length 0 */
  EQ(aspace_mmap(c, 0, PAGE, RW, ASPACE_MAP_PRIVATE), -EBADF);    /* no file, not anonymous */
  EQ(aspace_mmap(c, 0, PAGE, RW, ASPACE_MAP_ANONYMOUS), -EINVAL); /* neither private nor shared */
  EQ(aspace_mmap(c, 0x100001, PAGE, RW, PA | ASPACE_MAP_FIXED), -EINVAL); /* unaligned */
  int64_t a = aspace_mmap(c, 0x10000000, PAGE, RW, PA | ASPACE_MAP_FIXED);
  EQ(a, 0x10000000);
  EQ(aspace_mmap(c, 0x10000000, PAGE, RW, PA | ASPACE_MAP_FIXED_NOREPLACE), -EEXIST);
  EQ(aspace_mprotect(c, 0x10000000, PAGE, 0x100), -EINVAL); /* an unknown bit */
  EQ(aspace_mprotect(c, 0x10000001, PAGE, RW), -EINVAL);     /* unaligned */
  EQ(aspace_mprotect(c, 0x20000000, PAGE, RW), -ENOMEM);     /* nothing mapped */
  EQ(aspace_madvise(c, 0x10000000, PAGE, 12345), -EINVAL);
  EQ(aspace_munmap(c, 0x10000001, PAGE), -EINVAL);
  EQ(aspace_touch(c, 0x10000000, 7), -EINVAL);
  /* Buffers: NULL with a length, a length above PTRDIFF_MAX, NULL outputs. */
  char b[8];
  EQ(aspace_read(c, 0x10000000, NULL, 8), -EINVAL);
  EQ(aspace_write(c, 0x10000000, NULL, 8), -EINVAL);
  EQ(aspace_read(c, 0x10000000, b, (size_t)PTRDIFF_MAX + 1), -EINVAL);
  EQ(aspace_write(c, 0x10000000, b, SIZE_MAX), -EINVAL);
  EQ(aspace_read_u64(c, 0x10000000, NULL), -EINVAL);
  EQ(aspace_last_fault(c, NULL), -EINVAL);
  EQ(aspace_stats(s, NULL), -EINVAL);
  EQ(aspace_maps(s, NULL, 3), -EINVAL);
  /* A fault the core never saw reads as zeros. */
  AspaceFault f;
  EQ(aspace_last_fault(c, &f), 0);
  EQ(f.error, 0);
  EQ(aspace_destroy(s), 0);
}

static void stale_and_forged_handles(void) {
  AspaceSpace s = make_space("coarse");
  AspaceCore c1, c2;
  EQ(aspace_attach(s, &c1), 0);
  EQ(aspace_attach(s, &c2), 0);
  int64_t a = aspace_mmap(c1, 0, PAGE, RW, PA);
  CHECK(a > 0);
  uint64_t v;
  /* Detached: stale; detaching twice is an error, not a crash. */
  EQ(aspace_detach(c1), 0);
  EQ(aspace_detach(c1), -EBADF);
  EQ(aspace_read_u64(c1, (uint64_t)a, &v), -EBADF);
  EQ(aspace_mmap(c1, 0, PAGE, RW, PA), -EBADF);
  EQ(aspace_write_u64(c2, (uint64_t)a, 5), 0); /* the other core is unaffected */
  /* A new core may reuse the slot, never the handle. */
  AspaceCore c3;
  EQ(aspace_attach(s, &c3), 0);
  CHECK(c3.raw != c1.raw);
  EQ(aspace_read_u64(c1, (uint64_t)a, &v), -EBADF);
  EQ(aspace_read_u64(c3, (uint64_t)a, &v), 0);
  EQ(v, 5);
  /* Forged handles, and handles of the other kind. */
  /* c3 took the slot after c2's: the neighbour's index with c2's generation is not c3. */
  AspaceCore zero = {0}, ones = {UINT64_MAX}, off = {c2.raw + 1}, gen = {c2.raw ^ (1ull << 40)};
  EQ(aspace_read_u64(zero, (uint64_t)a, &v), -EBADF);
  EQ(aspace_read_u64(ones, (uint64_t)a, &v), -EBADF);
  EQ(aspace_read_u64(off, (uint64_t)a, &v), -EBADF);
  EQ(aspace_read_u64(gen, (uint64_t)a, &v), -EBADF);
  AspaceCore space_as_core = {s.raw};
  AspaceSpace core_as_space = {c2.raw};
  EQ(aspace_write_u64(space_as_core, (uint64_t)a, 1), -EBADF);
  EQ(aspace_detach(space_as_core), -EBADF);
  EQ(aspace_destroy(core_as_space), -EBADF);
  AspaceStats st;
  EQ(aspace_stats(core_as_space, &st), -EBADF);
  /* Destroying the space makes its handle and its cores' handles stale. */
  EQ(aspace_destroy(s), 0);
  EQ(aspace_destroy(s), -EBADF);
  EQ(aspace_stats(s, &st), -EBADF);
  EQ(aspace_maps(s, NULL, 0), -EBADF);
  AspaceCore c4;
  EQ(aspace_attach(s, &c4), -EBADF);
  EQ(aspace_read_u64(c2, (uint64_t)a, &v), -EBADF);
  EQ(aspace_write_u64(c3, (uint64_t)a, 1), -EBADF);
  EQ(aspace_detach(c2), -EBADF);
  EQ(aspace_munmap(c3, (uint64_t)a, PAGE), -EBADF);
}

/* Threads: each attaches its own core, maps its own chunk (at its own fixed address), writes
 * and reads it back, reads a page the main thread shares, unmaps, and faults on the chunk. */
#define THREADS 8
#define ROUNDS 50
#define CHUNK (4 * PAGE)

struct worker {
  AspaceSpace space;
  uint64_t shared;
  int id;
  int errors;
  const char *first; /* the first failed step */
};

#define WORKER_FAIL(w, step)       \
  do {                             \
    if ((w)->errors++ == 0) (w)->first = (step); \
  } while (0)

static void *worker_main(void *arg) {
  struct worker *w = arg;
  AspaceCore c;
  if (aspace_attach(w->space, &c) != 0) {
    WORKER_FAIL(w, "attach");
    return NULL;
  }
  for (int round = 0; round < ROUNDS; round++) {
    /* Each thread in its own range: an address it unmapped is not another thread's next. */
    uint64_t want = 0x40000000u + (uint64_t)w->id * 0x100000u;
    int64_t a = aspace_mmap(c, want, CHUNK, RW, PA | ASPACE_MAP_FIXED_NOREPLACE);
    if (a != (int64_t)want) {
      WORKER_FAIL(w, "mmap");
      continue;
    }
    for (uint64_t off = 0; off < CHUNK; off += 512) {
      if (aspace_write_u64(c, (uint64_t)a + off, ((uint64_t)w->id << 32) | off) != 0)
        WORKER_FAIL(w, "write");
    }
    for (uint64_t off = 0; off < CHUNK; off += 512) {
      uint64_t v = 0;
      if (aspace_read_u64(c, (uint64_t)a + off, &v) != 0 || v != (((uint64_t)w->id << 32) | off))
        WORKER_FAIL(w, "read back");
    }
    uint64_t shared = 0;
    if (aspace_read_u64(c, w->shared, &shared) != 0 || shared != 0x5eed)
      WORKER_FAIL(w, "shared read");
    if (aspace_munmap(c, (uint64_t)a, CHUNK) != 0) WORKER_FAIL(w, "munmap");
    uint64_t v;
    if (aspace_read_u64(c, (uint64_t)a, &v) != -EFAULT) WORKER_FAIL(w, "read after munmap");
  }
  if (aspace_detach(c) != 0) WORKER_FAIL(w, "detach");
  return NULL;
}

static void threads_attach_their_own_cores(const char *design) {
  AspaceSpace s = make_space(design);
  AspaceCore main_core;
  EQ(aspace_attach(s, &main_core), 0);
  int64_t shared = aspace_mmap(main_core, 0, PAGE, RW, PA);
  CHECK(shared > 0);
  EQ(aspace_write_u64(main_core, (uint64_t)shared, 0x5eed), 0);
  pthread_t t[THREADS];
  struct worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){.space = s, .shared = (uint64_t)shared, .id = i + 1};
    EQ(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    if (w[i].errors) fprintf(stderr, "%s: thread %d: %d errors, first: %s\n", design, i, w[i].errors, w[i].first);
    EQ(w[i].errors, 0);
  }
  AspaceStats st;
  EQ(aspace_stats(s, &st), 0);
  EQ(st.cores, 1);
  EQ(st.regions, 1);
  EQ(aspace_munmap(main_core, (uint64_t)shared, PAGE), 0);
  EQ(aspace_detach(main_core), 0);
  EQ(aspace_stats(s, &st), 0);
  EQ(st.frames_in_use, 0);
  EQ(aspace_destroy(s), 0);
}

/* A space destroyed while threads use its cores: every call returns 0 or -EBADF (never a crash),
 * and after the destroy each thread sees -EBADF. The destroy comes after every thread has made
 * 1000 reads; each thread reads until it sees -EBADF (the destroy is certain to come). */
struct racer {
  AspaceCore core;
  uint64_t addr;
  atomic_int reads;
  int bad_codes;
  int saw_ebadf;
};

static void *racer_main(void *arg) {
  struct racer *r = arg;
  while (!r->saw_ebadf) {
    uint64_t v;
    int rc = aspace_read_u64(r->core, r->addr, &v);
    if (rc == -EBADF)
      r->saw_ebadf = 1;
    else if (rc != 0)
      r->bad_codes++;
    atomic_fetch_add_explicit(&r->reads, 1, memory_order_relaxed);
  }
  return NULL;
}

static void destroy_while_threads_use_their_cores(void) {
  AspaceSpace s = make_space(NULL);
  AspaceCore c0;
  EQ(aspace_attach(s, &c0), 0);
  int64_t a = aspace_mmap(c0, 0, PAGE, RW, PA);
  CHECK(a > 0);
  pthread_t t[4];
  struct racer r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = (struct racer){.addr = (uint64_t)a};
    EQ(aspace_attach(s, &r[i].core), 0);
    EQ(pthread_create(&t[i], NULL, racer_main, &r[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    while (atomic_load_explicit(&r[i].reads, memory_order_relaxed) < 1000) sched_yield();
  }
  EQ(aspace_destroy(s), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    EQ(r[i].bad_codes, 0);
    EQ(r[i].saw_ebadf, 1);
    uint64_t v;
    EQ(aspace_read_u64(r[i].core, (uint64_t)a, &v), -EBADF);
  }
  EQ(aspace_detach(c0), -EBADF);
}

int main(void) {
  const char *designs[] = {"coarse", "interval", "radix", "hybrid"};
  creation_checks_its_arguments();
  for (size_t i = 0; i < sizeof designs / sizeof designs[0]; i++) {
    mapping_reading_and_writing(designs[i]);
    threads_attach_their_own_cores(designs[i]);
  }
  linux_errors();
  stale_and_forged_handles();
  destroy_while_threads_use_their_cores();
  printf("capi_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
