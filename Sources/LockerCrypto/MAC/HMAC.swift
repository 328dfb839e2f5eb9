internal import COpenSSL
#if canImport(Glibc)
internal import Glibc
#endif

/// HMAC (RFC 2104) over SHA-256 or SHA-512.
public enum HMAC {
    /// Computes the full-length MAC of `message` under `key`.
    public static func authenticationCode(
        _ hash: HashFunction = .sha256, for message: [UInt8], key: SecretBytes
    ) throws -> [UInt8] {
        try message.withUnsafeBytes { m throws in
            try authenticationCode(hash, for: m, key: key)
        }
    }

    /// Computes the full-length MAC of `message` under `key`.
    public static func authenticationCode(
        _ hash: HashFunction = .sha256, for message: UnsafeRawBufferPointer, key: SecretBytes
    ) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: hash.byteCount)
        try key.withUnsafeBytes { k throws in
            try out.withUnsafeMutableBytes { o throws in
                try compute(hash, key: k, message: [message], into: o)
            }
        }
        return out
    }

    /// Writes the MAC of the concatenation of `message` under `key` to the
    /// first `hash.byteCount` bytes of `out`, which must hold that many.
    /// Secret outputs go straight into the caller's wiped storage; the
    /// padded key and the inner digest are in this thread's `SecretBytes`
    /// scratch, wiped before this returns, and the digest state is
    /// cleansed when its context is freed.
    static func compute(
        _ hash: HashFunction, key: UnsafeRawBufferPointer, message: [UnsafeRawBufferPointer],
        into out: UnsafeMutableRawBufferPointer
    ) throws {
        precondition(out.count >= hash.byteCount, "HMAC output buffer too small")
        // RFC 2104's steps over the fetched digest, rather than libcrypto's
        // EVP_MAC: that one copies a keyed context, with a digest context
        // for each pad, for every MAC (1.4 µs against 0.55 µs a MAC here,
        // and a small object takes six). The HMAC vectors hold the steps
        // to the RFC.
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.internalFailure }
        // The provider cleanses the digest state as it frees it.
        defer { EVP_MD_CTX_free(context) }
        let block = hash.blockByteCount
        // The padded key and the inner digest are key material: scratch in
        // wiping storage, as a key wrap's steps are, wiped after each MAC.
        try ThreadScratch.current().withUnsafeMutableBytes { whole throws in
            let scratch = UnsafeMutableRawBufferPointer(rebasing: whole[..<(block + hash.byteCount)])
            defer { OPENSSL_cleanse(scratch.baseAddress, scratch.count) }
            let pad = UnsafeMutableRawBufferPointer(rebasing: scratch[..<block])
            let inner = UnsafeMutableRawBufferPointer(rebasing: scratch[block...])
            // K0: the key zero-padded to a block, or its digest if longer.
            pad.initializeMemory(as: UInt8.self, repeating: 0)
            if key.count > block {
                try digest(context, hash, key, into: inner)
                pad.copyMemory(from: UnsafeRawBufferPointer(inner))
            } else if key.count > 0 {
                pad.copyMemory(from: key)
            }
            for i in 0..<block { pad[i] ^= 0x36 }
            try digest(context, hash, UnsafeRawBufferPointer(pad), then: message, into: inner)
            // From K0 ^ ipad to K0 ^ opad.
            for i in 0..<block { pad[i] ^= 0x36 ^ 0x5c }
            try digest(context, hash, UnsafeRawBufferPointer(pad), then: CollectionOfOne(UnsafeRawBufferPointer(inner)), into: out)
        }
    }

    /// One digest of `first` and then each of `rest`, into the start of
    /// `out`. The parts are passed as they are: no array is made per MAC.
    private static func digest(
        _ context: OpaquePointer, _ hash: HashFunction, _ first: UnsafeRawBufferPointer,
        then rest: some Sequence<UnsafeRawBufferPointer> = EmptyCollection(),
        into out: UnsafeMutableRawBufferPointer
    ) throws {
        var length: UInt32 = 0
        var ok = EVP_DigestInit_ex2(context, try hash.evp, nil) == 1
        ok = ok && (first.isEmpty || EVP_DigestUpdate(context, first.baseAddress, first.count) == 1)
        for part in rest where ok && part.count > 0 {
            ok = EVP_DigestUpdate(context, part.baseAddress, part.count) == 1
        }
        ok = ok && EVP_DigestFinal_ex(context, out.baseAddress!.assumingMemoryBound(to: UInt8.self), &length) == 1
        guard ok, Int(length) == hash.byteCount else {
            ERR_clear_error()
            throw CryptoError.internalFailure
        }
    }

    /// Checks `tag` against the MAC of `message`, in constant time. The tag
    /// must be full length.
    public static func isValid(
        _ tag: [UInt8], _ hash: HashFunction = .sha256, for message: [UInt8], key: SecretBytes
    ) throws -> Bool {
        let expected = try authenticationCode(hash, for: message, key: key)
        return constantTimeEquals(expected, tag)
    }
}

/// Each thread's HMAC scratch: a `SecretBytes` made on the thread's first
/// MAC and released (wiped) when the thread ends. A `SecretBytes` per MAC
/// took a lock on libcrypto's secure heap for each of a small object's six
/// MACs on every thread, which cost a `put -r` of small files all that the
/// digest steps saved.
private enum ThreadScratch {
    /// Room for SHA-512's padded key and digest, the larger.
    static let byteCount = 128 + 64

    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        // The destructor runs as the thread ends, with the stored pointer:
        // the retain taken in current() is given back, and the scratch
        // wiped and released with it.
        let made = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<SecretBytes>.fromOpaque(pointer).release()
        }
        return made == 0 ? key : nil
    }()

    /// This thread's scratch. Not reentrant: a MAC never computes another.
    /// Without a thread key (none could be made), a scratch of its own.
    static func current() throws -> SecretBytes {
        guard let key else { return try SecretBytes(count: byteCount) { _ in } }
        if let stored = pthread_getspecific(key) {
            return Unmanaged<SecretBytes>.fromOpaque(stored).takeUnretainedValue()
        }
        let scratch = try SecretBytes(count: byteCount) { _ in }
        let stored = Unmanaged.passRetained(scratch)
        guard pthread_setspecific(key, stored.toOpaque()) == 0 else {
            stored.release()
            throw CryptoError.internalFailure
        }
        return scratch
    }
}
