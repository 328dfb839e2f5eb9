#define _GNU_SOURCE
#include "CLockerSupport.h"
#include <sys/prctl.h>
#include <unistd.h>

int locker_set_undumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int locker_syncfs(int fd) {
    return syncfs(fd);
}
