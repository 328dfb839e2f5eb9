internal import COpenSSL

/// Algorithm implementations fetched from libcrypto once per process.
///
/// OpenSSL 3 looks an algorithm up by name, under a lock, every time a
/// legacy getter such as `EVP_aes_256_gcm()` is passed to an init call or
/// a one-shot such as `HMAC()` runs; storing many small objects made that
/// lookup a measurable share of the CPU. A fetched implementation is
/// looked up once, shared by every thread (libcrypto allows it), and never
/// freed. Nil when libcrypto lacks it; callers then throw
/// ``CryptoError/internalFailure``.
enum Fetched {
    /// A libcrypto object that is only read after it is made.
    struct Handle: @unchecked Sendable {
        let pointer: OpaquePointer
    }

    static let aes256GCM: Handle? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil).map(Handle.init)
    static let aes256ECB: Handle? = EVP_CIPHER_fetch(nil, "AES-256-ECB", nil).map(Handle.init)
    static let aes256WrapPad: Handle? = EVP_CIPHER_fetch(nil, "AES-256-WRAP-PAD", nil).map(Handle.init)
    static let sha256: Handle? = EVP_MD_fetch(nil, "SHA2-256", nil).map(Handle.init)
    static let sha512: Handle? = EVP_MD_fetch(nil, "SHA2-512", nil).map(Handle.init)
}
