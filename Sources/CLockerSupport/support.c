#define _GNU_SOURCE
#include <malloc.h>
#include "CLockerSupport.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/prctl.h>
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
