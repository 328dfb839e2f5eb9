// The libcrypto headers LockerCrypto needs. Nothing else imports this module.
#ifndef LOCKER_COPENSSL_SHIM_H
#define LOCKER_COPENSSL_SHIM_H
#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#endif
