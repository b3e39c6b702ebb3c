/* The C test of access sessions: accesses
 * inside aspace_session_run, faults, -EDEADLK for every other entry point inside the callback,
 * stale tokens, and a munmap by another thread while a session reads the page in a loop (the
 * munmap returns; every read the session starts after it returned faults). Closes with
 * "sessions_test: N passed, M failed". */
#include "aspace.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

static int passed, failed;
#define CHECK(cond)                                                               \
  do {                                                                            \
    if (cond) {                                                                   \
      passed++;                                                                   \
    } else {                                                                      \
      failed++;                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
    }                                                                             \
  } while (0)
#define EQ(a, b) CHECK((int64_t)(a) == (int64_t)(b))

#define PAGE ASPACE_PAGE_SIZE
#define RW (ASPACE_PROT_READ | ASPACE_PROT_WRITE)
#define PA (ASPACE_MAP_PRIVATE | ASPACE_MAP_ANONYMOUS)

struct ctx {
  AspaceSpace space;
  AspaceCore core;
  uint64_t base;
  AspaceSession seen;
};

static int32_t accesses(AspaceSession s, void *p) {
  struct ctx *c = p;
  c->seen = s;
  for (uint64_t i = 0; i < 1000; i++) EQ(aspace_session_write_u64(s, c->base + 8 * i, i * 3), 0);
  uint64_t sum = 0, v = 0;
  for (uint64_t i = 0; i < 1000; i++) {
    EQ(aspace_session_read_u64(s, c->base + 8 * i, &v), 0);
    sum += v;
  }
  EQ(sum, 3 * 999 * 1000 / 2);
  EQ(aspace_session_poll(s), 0);
  char buf[5] = "abcd", back[5] = {0};
  EQ(aspace_session_write(s, c->base + PAGE - 2, buf, 5), 0); /* across pages */
  EQ(aspace_session_read(s, c->base + PAGE - 2, back, 5), 0);
  EQ(back[3], 'd');
  EQ(aspace_session_read_u64(s, 0x7000000, &v), -EFAULT); /* unmapped */
  EQ(aspace_session_read_u64(s, c->base, NULL), -EINVAL);
  /* Everything else is refused inside the callback. */
  EQ(aspace_read_u64(c->core, c->base, &v), -EDEADLK);
  EQ(aspace_munmap(c->core, c->base, PAGE), -EDEADLK);
  EQ(aspace_detach(c->core), -EDEADLK);
  EQ(aspace_destroy(c->space), -EDEADLK);
  AspaceStats st;
  EQ(aspace_stats(c->space, &st), -EDEADLK);
  EQ(aspace_session_run(c->core, accesses, c), -EDEADLK);
  AspaceSession forged = {s.raw + 1};
  EQ(aspace_session_poll(forged), -EBADF);
  return 7;
}

/* A session reads a page in a loop while the main thread unmaps it. */
struct reader {
  AspaceCore core;
  uint64_t addr;
  atomic_int reads;
  atomic_int unmapped; /* set by main after munmap returned */
  int stale_reads;     /* reads that succeeded although started after munmap returned */
  int faulted;
};

static int32_t read_loop(AspaceSession s, void *p) {
  struct reader *r = p;
  for (;;) {
    int after = atomic_load(&r->unmapped);
    uint64_t v;
    int rc = aspace_session_read_u64(s, r->addr, &v);
    atomic_fetch_add(&r->reads, 1);
    if (rc == -EFAULT) {
      r->faulted = 1;
      return 0;
    }
    if (rc == 0 && after) r->stale_reads++;
    if (rc != 0 && rc != -EFAULT) return rc;
  }
}

static void *reader_main(void *p) {
  struct reader *r = p;
  EQ(aspace_session_run(r->core, read_loop, r), 0);
  return NULL;
}

int main(void) {
  const char *designs[] = {"coarse", "interval", "radix"};
  for (size_t d = 0; d < 3; d++) {
    AspaceConfig cfg = {.design = designs[d], .memory = 16 << 20};
    struct ctx c;
    EQ(aspace_create(&cfg, &c.space), 0);
    EQ(aspace_attach(c.space, &c.core), 0);
    int64_t a = aspace_mmap(c.core, 0, 2 * PAGE, RW, PA);
    CHECK(a > 0);
    c.base = (uint64_t)a;
    EQ(aspace_session_run(c.core, accesses, &c), 7);
    uint64_t v;
    EQ(aspace_session_poll(c.seen), -EBADF); /* the session is closed */
    EQ(aspace_read_u64(c.core, c.base + 8, &v), 0); /* the core is usable again */
    EQ(v, 3);
    AspaceFault f;
    EQ(aspace_last_fault(c.core, &f), 0);
    EQ(f.addr, 0x7000000);
    EQ(f.si_code, ASPACE_SEGV_MAPERR);
    EQ(aspace_session_run(c.core, NULL, NULL), -EINVAL);

    struct reader r = {.addr = c.base};
    EQ(aspace_attach(c.space, &r.core), 0);
    pthread_t t;
    EQ(pthread_create(&t, NULL, reader_main, &r), 0);
    while (atomic_load(&r.reads) < 1000) sched_yield();
    EQ(aspace_munmap(c.core, c.base, 2 * PAGE), 0); /* returns although the session runs */
    atomic_store(&r.unmapped, 1);
    pthread_join(t, NULL);
    EQ(r.faulted, 1);
    EQ(r.stale_reads, 0);
    EQ(aspace_detach(r.core), 0);
    EQ(aspace_destroy(c.space), 0);
  }
  printf("sessions_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
