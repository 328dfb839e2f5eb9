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
        // A copy of a keyless context with the digest already set: no
        // lookup by name per MAC (see Fetched).
        guard let context = EVP_MAC_CTX_dup(try hash.hmacTemplate) else { throw CryptoError.internalFailure }
        // Frees and cleanses the keyed state.
        defer { EVP_MAC_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: hash.byteCount)
        var length = 0
        var empty: UInt8 = 0
        let ok = key.withUnsafeBytes { k in
            withUnsafeMutablePointer(to: &empty) { placeholder in
                // libcrypto wants non-null pointers even for empty inputs
                // (a null key would mean "the key set before").
                let keyPointer = k.count > 0 ? k.baseAddress!.assumingMemoryBound(to: UInt8.self) : UnsafePointer(placeholder)
                let messagePointer = message.count > 0
                    ? message.baseAddress!.assumingMemoryBound(to: UInt8.self) : UnsafePointer(placeholder)
                return EVP_MAC_init(context, keyPointer, k.count, nil) == 1
                    && EVP_MAC_update(context, messagePointer, message.count) == 1
                    && out.withUnsafeMutableBufferPointer { o in
                        EVP_MAC_final(context, o.baseAddress, &length, o.count) == 1
                    }
            }
        }
        guard ok, length == hash.byteCount else {
            ERR_clear_error()
            throw CryptoError.internalFailure
        }
        return out
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
