internal import COpenSSL

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
    /// Secret outputs go straight into the caller's wiped storage; the keyed
    /// state is cleansed when the context is freed.
    static func compute(
        _ hash: HashFunction, key: UnsafeRawBufferPointer, message: [UnsafeRawBufferPointer],
        into out: UnsafeMutableRawBufferPointer
    ) throws {
        precondition(out.count >= hash.byteCount, "HMAC output buffer too small")
        // A copy of a keyless context with the digest already set: no
        // lookup by name per MAC (see Fetched).
        guard let context = EVP_MAC_CTX_dup(try hash.hmacTemplate) else { throw CryptoError.internalFailure }
        // Frees and cleanses the keyed state.
        defer { EVP_MAC_CTX_free(context) }
        var length = 0
        var empty: UInt8 = 0
        let ok = withUnsafeMutablePointer(to: &empty) { placeholder in
            // libcrypto wants a non-null key pointer even for an empty key
            // (a null key would mean "the key set before").
            let keyPointer = key.count > 0 ? key.baseAddress!.assumingMemoryBound(to: UInt8.self) : UnsafePointer(placeholder)
            guard EVP_MAC_init(context, keyPointer, key.count, nil) == 1 else { return false }
            for part in message where part.count > 0 {
                guard EVP_MAC_update(context, part.baseAddress!.assumingMemoryBound(to: UInt8.self), part.count) == 1 else {
                    return false
                }
            }
            return EVP_MAC_final(context, out.baseAddress!.assumingMemoryBound(to: UInt8.self), &length, out.count) == 1
        }
        guard ok, length == hash.byteCount else {
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
