// The liblz4 headers LockerFormat needs. Nothing else imports this module.
#ifndef LOCKER_CLZ4_SHIM_H
#define LOCKER_CLZ4_SHIM_H
#include <lz4.h>
#include <lz4frame.h>
#endif
