#define _GNU_SOURCE
#include <malloc.h>
#include "CLockerSupport.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <errno.h>
#include <string.h>
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

int locker_renameat_noreplace(int from_dir, const char *from, int to_dir, const char *to) {
    return renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE);
}

int locker_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

int locker_fix_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

int locker_o_noatime(void) {
    return O_NOATIME;
}

int locker_o_path(void) {
    return O_PATH;
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

long long locker_thread_blocks_read(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
    return usage.ru_inblock;
}

// The kernel's openat2(2) interface (Linux 5.6), declared here so that the
// build needs no particular kernel headers.
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
struct locker_open_how { unsigned long long flags, mode, resolve; };
#define LOCKER_RESOLVE_NO_SYMLINKS 0x04
#define LOCKER_RESOLVE_BENEATH 0x08

int locker_open_beneath_by_components(int root, const char *relative, int flags) {
    char part[4096];
    int dir = root;
    const char *p = relative;
    if (*p == '/') {
        errno = EXDEV;
        return -1;
    }
    for (;;) {
        while (*p == '/') p++;
        const char *end = p;
        while (*end != '\0' && *end != '/') end++;
        size_t n = (size_t)(end - p);
        const char *rest = end;
        while (*rest == '/') rest++;
        int last = *rest == '\0';
        if (n == 0 || n >= sizeof part || (n == 2 && p[0] == '.' && p[1] == '.')) {
            if (dir != root) close(dir);
            errno = n == 0 ? ENOENT : n >= sizeof part ? ENAMETOOLONG : EXDEV;
            return -1;
        }
        memcpy(part, p, n);
        part[n] = '\0';
        int fd = last ? openat(dir, part, flags | O_NOFOLLOW | O_CLOEXEC)
                      : openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        // O_DIRECTORY | O_NOFOLLOW on a link fails with ENOTDIR: say ELOOP,
        // as openat2 does for a link on the way.
        struct stat st;
        if (fd < 0 && saved == ENOTDIR && fstatat(dir, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            saved = ELOOP;
        if (dir != root) close(dir);
        if (fd < 0) {
            errno = saved;
            return -1;
        }
        if (last) return fd;
        dir = fd;
        p = rest;
    }
}

// Set once openat2 is found refused for what it is, not for its flags: from
// then on every open takes the walk.
static int openat2_refused;

int locker_open_beneath(int root, const char *relative, int flags) {
    if (!__atomic_load_n(&openat2_refused, __ATOMIC_RELAXED)) {
        struct locker_open_how how = {
            (unsigned long long)(flags | O_NOFOLLOW | O_CLOEXEC), 0,
            LOCKER_RESOLVE_BENEATH | LOCKER_RESOLVE_NO_SYMLINKS };
        long fd = syscall(__NR_openat2, root, relative, &how, sizeof how);
        if (fd >= 0) return (int)fd;
        int saved = errno;
        // A directory asked for that is a link fails with ENOTDIR: say
        // ELOOP. (This look only chooses the error.)
        struct stat st;
        if (saved == ENOTDIR && fstatat(root, relative, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
            saved = ELOOP;
        // ENOSYS: a kernel before 5.6. EPERM without O_NOATIME: a sandbox
        // that refuses system calls it does not know. EPERM with O_NOATIME
        // is most likely the flag refused (a file the caller does not own),
        // which the caller retries without it.
        if (saved != ENOSYS && !(saved == EPERM && !(flags & O_NOATIME))) {
            errno = saved;
            return -1;
        }
        __atomic_store_n(&openat2_refused, 1, __ATOMIC_RELAXED);
    }
    return locker_open_beneath_by_components(root, relative, flags);
}

int locker_flush_stdout(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    return errno != 0 ? errno : EIO;
}
