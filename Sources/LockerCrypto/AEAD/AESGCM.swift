/// AES-256-GCM with 96-bit nonces and 128-bit tags, nothing else.
///
/// libcrypto accepts GCM IVs of almost any length; this API does not. A
/// nonce is a ``AESGCM/Nonce``, which can only be built from exactly 12
/// bytes, so a format can never be talked into GHASH-derived counters.
///
/// The sealed form is `ciphertext || tag`, with the tag 16 bytes.
public enum AESGCM {
    /// The length of a key, in bytes.
    public static let keyByteCount = 32
    /// The length of a nonce, in bytes.
    public static let nonceByteCount = 12
    /// The length of a tag, in bytes.
    public static let tagByteCount = 16

    /// A 96-bit GCM nonce.
    public struct Nonce: Sendable, Equatable {
        @usableFromInline var bytes: (UInt64, UInt32)

        /// Builds a nonce from exactly 12 bytes.
        public init(_ bytes: [UInt8]) throws {
            guard bytes.count == AESGCM.nonceByteCount else { throw CryptoError.invalidNonceSize }
            self.bytes = (0, 0)
            Swift.withUnsafeMutableBytes(of: &self.bytes) { $0.copyBytes(from: bytes) }
        }

        /// A fresh random nonce.
        public static func random() throws -> Nonce {
            try Nonce(SecureRandom.bytes(AESGCM.nonceByteCount))
        }

        /// The 12 nonce bytes.
        public var rawBytes: [UInt8] {
            Swift.withUnsafeBytes(of: bytes) { Array($0.prefix(AESGCM.nonceByteCount)) }
        }

        func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
            var copy = bytes
            return try Swift.withUnsafeBytes(of: &copy) { raw throws in
                try body(UnsafeRawBufferPointer(rebasing: raw.prefix(AESGCM.nonceByteCount)))
            }
        }

        public static func == (a: Nonce, b: Nonce) -> Bool { a.bytes == b.bytes }
    }

    /// Seals `plaintext`, returning `ciphertext || tag`.
    public static func seal(
        _ plaintext: [UInt8], key: SecretBytes, nonce: Nonce, authenticating aad: [UInt8] = []
    ) throws -> [UInt8] {
        let cipher = try AESGCMCipher(key: key)
        var out = [UInt8](repeating: 0, count: plaintext.count + tagByteCount)
        try plaintext.withUnsafeBytes { (input: UnsafeRawBufferPointer) throws in
            try aad.withUnsafeBytes { (aadBytes: UnsafeRawBufferPointer) throws in
                try out.withUnsafeMutableBytes { (output: UnsafeMutableRawBufferPointer) throws in
                    try cipher.seal(input, nonce: nonce, authenticating: aadBytes, into: output)
                }
            }
        }
        return out
    }

    /// Opens `ciphertext || tag`. Throws ``CryptoError/authenticationFailure``
    /// if the tag does not verify; no plaintext is returned in that case.
    public static func open(
        _ sealed: [UInt8], key: SecretBytes, nonce: Nonce, authenticating aad: [UInt8] = []
    ) throws -> [UInt8] {
        guard sealed.count >= tagByteCount else { throw CryptoError.authenticationFailure }
        let cipher = try AESGCMCipher(key: key)
        var out = [UInt8](repeating: 0, count: sealed.count - tagByteCount)
        try sealed.withUnsafeBytes { (input: UnsafeRawBufferPointer) throws in
            try aad.withUnsafeBytes { (aadBytes: UnsafeRawBufferPointer) throws in
                try out.withUnsafeMutableBytes { (output: UnsafeMutableRawBufferPointer) throws in
                    _ = try cipher.open(input, nonce: nonce, authenticating: aadBytes, into: output)
                }
            }
        }
        return out
    }
}
