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
        var length: UInt32 = 0
        var empty: UInt8 = 0
        let ok = key.withUnsafeBytes { k in
            withUnsafeMutablePointer(to: &empty) { placeholder in
                // libcrypto wants non-null pointers even for empty inputs.
                let keyPointer = k.count > 0 ? UnsafeRawPointer(k.baseAddress!) : UnsafeRawPointer(placeholder)
                let messagePointer = message.count > 0
                    ? message.baseAddress!.assumingMemoryBound(to: UInt8.self) : UnsafePointer(placeholder)
                return out.withUnsafeMutableBufferPointer { o in
                    COpenSSL.HMAC(hash.evp, keyPointer, Int32(k.count), messagePointer, message.count, o.baseAddress, &length)
                } != nil
            }
        }
        guard ok, Int(length) == hash.byteCount else { throw CryptoError.internalFailure }
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
