#include "CLockerSupport.h"
#include <sys/prctl.h>

int locker_set_undumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}
