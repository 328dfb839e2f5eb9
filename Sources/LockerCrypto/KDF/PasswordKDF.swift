internal import COpenSSL

/// Password-based key derivation: PBKDF2-HMAC-SHA256 (RFC 8018) and scrypt
/// (RFC 7914). Passwords are raw bytes, never strings, because they may not
/// be valid UTF-8.
public enum PasswordKDF {
    /// PBKDF2 with HMAC-SHA256.
    public static func pbkdf2SHA256(
        password: SecretBytes, salt: [UInt8], iterations: Int, outputByteCount: Int
    ) throws -> SecretBytes {
        guard iterations >= 1, iterations <= Int(Int32.max), outputByteCount > 0,
              outputByteCount <= Int(Int32.max), password.count <= Int(Int32.max), salt.count <= Int(Int32.max)
        else { throw CryptoError.invalidParameter }
        return try SecretBytes(count: outputByteCount) { out throws in
            let ok = password.withUnsafeBytes { pw in
                salt.withUnsafeBufferPointer { s in
                    PKCS5_PBKDF2_HMAC(
                        pw.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(pw.count),
                        s.baseAddress, Int32(s.count), Int32(iterations), EVP_sha256(),
                        Int32(outputByteCount), out.bindMemory(to: UInt8.self).baseAddress) == 1
                }
            }
            guard ok else { throw CryptoError.internalFailure }
        }
    }

    /// The cost parameters of scrypt.
    public struct ScryptParameters: Sendable, Equatable {
        /// CPU/memory cost; a power of two greater than 1.
        public var n: UInt64
        /// Block size.
        public var r: UInt64
        /// Parallelism.
        public var p: UInt64

        public init(n: UInt64, r: UInt64, p: UInt64) {
            self.n = n
            self.r = r
            self.p = p
        }

        /// The memory scrypt needs for these parameters, in bytes.
        public var memoryByteCount: UInt64 {
            128 &* r &* (n &+ p &+ 2)
        }
    }

    /// The most memory a scrypt call may use: 1 GiB. Parameters read from
    /// disk beyond this are refused rather than allowed to exhaust memory.
    public static let scryptMemoryLimit: UInt64 = 1 << 30

    /// scrypt.
    public static func scrypt(
        password: SecretBytes, salt: [UInt8], parameters: ScryptParameters, outputByteCount: Int
    ) throws -> SecretBytes {
        let (n, r, p) = (parameters.n, parameters.r, parameters.p)
        guard n > 1, n & (n - 1) == 0, r >= 1, p >= 1, r <= 1 << 20, p <= 1 << 20, outputByteCount > 0,
              parameters.memoryByteCount <= scryptMemoryLimit
        else { throw CryptoError.invalidParameter }
        return try SecretBytes(count: outputByteCount) { out throws in
            let ok = password.withUnsafeBytes { pw in
                salt.withUnsafeBufferPointer { s in
                    EVP_PBE_scrypt(
                        pw.baseAddress?.assumingMemoryBound(to: CChar.self), pw.count,
                        s.baseAddress, s.count, n, r, p,
                        parameters.memoryByteCount + (1 << 20),
                        out.bindMemory(to: UInt8.self).baseAddress, outputByteCount) == 1
                }
            }
            guard ok else {
                ERR_clear_error()
                throw CryptoError.invalidParameter
            }
        }
    }
}
