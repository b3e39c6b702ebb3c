/* A small C program over aspace's C ABI: one space, one core, a mapping, typed and byte
 * accesses, the guest's SIGSEGV as a return code, maps and stats.
 *
 * Build (from the repository root, after `cargo build --release -p aspace-capi`):
 *   cc -O2 -Icrates/aspace-capi crates/aspace-capi/examples/hello.c \
 *      target/release/libaspace_capi.a -lpthread -ldl -lm -o /tmp/aspace-hello
 */
#include "aspace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define RW (ASPACE_PROT_READ | ASPACE_PROT_WRITE)
#define PA (ASPACE_MAP_PRIVATE | ASPACE_MAP_ANONYMOUS)

int main(void) {
  AspaceConfig config = {.design = "interval", .memory = 16 << 20};
  AspaceSpace space;
  AspaceCore core;
  if (aspace_create(&config, &space) != 0 || aspace_attach(space, &core) != 0) {
    fprintf(stderr, "hello: cannot create a space\n");
    return 1;
  }

  int64_t a = aspace_mmap(core, 0, 2 * ASPACE_PAGE_SIZE, RW, PA);
  if (a < 0) {
    fprintf(stderr, "hello: mmap: %s\n", strerror((int)-a));
    return 1;
  }
  const char msg[] = "hello from a software MMU";
  /* The string crosses the page boundary: two pages, one call. */
  uint64_t at = (uint64_t)a + ASPACE_PAGE_SIZE - 10;
  aspace_write(core, at, msg, sizeof msg);
  char back[sizeof msg];
  aspace_read(core, at, back, sizeof back);
  aspace_write_u64(core, (uint64_t)a, 0x1122334455667788u);
  uint64_t word = 0;
  aspace_read_u64(core, (uint64_t)a, &word);
  printf("read back \"%s\" and %#" PRIx64 "\n", back, word);

  aspace_mprotect(core, (uint64_t)a, ASPACE_PAGE_SIZE, ASPACE_PROT_READ);
  AspaceRegion regions[8];
  int64_t n = aspace_maps(space, regions, 8);
  for (int64_t i = 0; i < n && i < 8; i++) {
    printf("%012" PRIx64 "-%012" PRIx64 " %c%c%c%c\n", regions[i].start, regions[i].end,
           regions[i].prot & ASPACE_PROT_READ ? 'r' : '-',
           regions[i].prot & ASPACE_PROT_WRITE ? 'w' : '-',
           regions[i].prot & ASPACE_PROT_EXEC ? 'x' : '-',
           regions[i].sharing == ASPACE_MAP_SHARED ? 's' : 'p');
  }

  int r = aspace_write_u8(core, (uint64_t)a, 1); /* a read-only page: the guest's SIGSEGV */
  AspaceFault fault;
  aspace_last_fault(core, &fault);
  printf("write to the read-only page: %d (-EFAULT is %d), si_code %d at %#" PRIx64 "\n", r,
         -EFAULT, fault.si_code, fault.addr);

  aspace_munmap(core, (uint64_t)a, 2 * ASPACE_PAGE_SIZE);
  AspaceStats stats;
  aspace_stats(space, &stats);
  printf("faults %" PRIu64 ", frames in use %" PRIu64 "\n", stats.faults, stats.frames_in_use);

  aspace_detach(core);
  aspace_destroy(space);
  int stale = aspace_read_u64(core, (uint64_t)a, &word);
  printf("a detached core's handle: %d (-EBADF is %d)\n", stale, -EBADF);
  int ok = strcmp(back, msg) == 0 && word == 0x1122334455667788u && r == -EFAULT &&
           fault.si_code == ASPACE_SEGV_ACCERR && stale == -EBADF && stats.frames_in_use == 0;
  return ok ? 0 : 1;
}
