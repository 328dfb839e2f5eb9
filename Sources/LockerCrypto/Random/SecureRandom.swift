internal import COpenSSL

/// The cryptographically secure random generator (libcrypto's DRBG, seeded
/// by the kernel).
public enum SecureRandom {
    /// Fills `buffer` with random bytes.
    public static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        // RAND_priv_bytes draws from a generator kept apart from the one
        // that produces public values such as nonces.
        guard buffer.count <= Int(Int32.max), RAND_priv_bytes(base, Int32(buffer.count)) == 1 else {
            throw CryptoError.internalFailure
        }
    }

    /// Returns `count` random bytes for public use (nonces, salts, ids).
    public static func bytes(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return out }
        let ok = out.withUnsafeMutableBytes { buffer in
            RAND_bytes(buffer.baseAddress!, Int32(count)) == 1
        }
        guard ok else { throw CryptoError.internalFailure }
        return out
    }
}
