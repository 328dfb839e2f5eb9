internal import COpenSSL

/// SHA-2 digests, and the one-step key derivation built on them.
public enum Digest {
    /// The SHA-256 (or SHA-512) digest of `message`.
    public static func hash(_ hash: HashFunction = .sha256, _ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.internalFailure }
        defer { EVP_MD_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: hash.byteCount)
        var length: UInt32 = 0
        let digest = try hash.evp
        let ok = message.withUnsafeBytes { m in
            EVP_DigestInit_ex(context, digest, nil) == 1
                && EVP_DigestUpdate(context, m.baseAddress, m.count) == 1
                && EVP_DigestFinal_ex(context, &out, &length) == 1
        }
        guard ok else { throw CryptoError.internalFailure }
        return out
    }

    /// The single-step key derivation of NIST SP 800-56C rev. 2 §4.1 with
    /// SHA-256 (the "concatenation KDF"): for one 32-byte output,
    /// `SHA-256(0x00000001 || z || otherInfo)`.
    public static func oneStepKDF(sharedSecret z: SecretBytes, otherInfo: [UInt8]) throws -> SecretBytes {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError.internalFailure }
        defer { EVP_MD_CTX_free(context) }
        let counter: [UInt8] = [0, 0, 0, 1]
        let digest = try HashFunction.sha256.evp
        return try SecretBytes(count: 32) { out throws in
            var length: UInt32 = 0
            let ok = z.withUnsafeBytes { secret in
                EVP_DigestInit_ex(context, digest, nil) == 1
                    && EVP_DigestUpdate(context, counter, 4) == 1
                    && EVP_DigestUpdate(context, secret.baseAddress, secret.count) == 1
                    && otherInfo.withUnsafeBytes { EVP_DigestUpdate(context, $0.baseAddress, $0.count) } == 1
                    && EVP_DigestFinal_ex(context, out.bindMemory(to: UInt8.self).baseAddress, &length) == 1
            }
            guard ok, length == 32 else { throw CryptoError.internalFailure }
        }
    }
}
