#define _GNU_SOURCE
#include <malloc.h>
#include "CLockerSupport.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <errno.h>
#include <unistd.h>

int locker_set_undumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int locker_syncfs(int fd) {
    return syncfs(fd);
}

int locker_rename_noreplace(const char *from, const char *to) {
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
}

int locker_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

int locker_o_noatime(void) {
    return O_NOATIME;
}

int locker_o_direct(void) {
    return O_DIRECT;
}

// Not in every libc's headers yet: the kernel's numbers and layouts.
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct locker_cachestat_range { unsigned long long off, len; };
struct locker_cachestat {
    unsigned long long nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

int locker_cached_pages(int fd, unsigned long long *pages) {
    struct locker_cachestat_range range = { 0, 0 };  // len 0: to the end
    struct locker_cachestat stat = { 0, 0, 0, 0, 0 };
    long rc = syscall(__NR_cachestat, fd, &range, &stat, 0);
    if (rc != 0) return -1;
    *pages = stat.nr_cache;
    return 0;
}
