public import LockerCrypto

/// How a file key is wrapped for class B: an ephemeral X25519 key pair per
/// file, agreement with the class public key, the one-step KDF over the
/// shared secret and both public keys, then RFC 3394. The blob is the
/// ephemeral public key (32 bytes) followed by the wrap (40 bytes). See
/// docs/format.md, "Class B wrap".
public enum FileKeyWrap {
    /// Wraps `fileKey` for the holder of `classPublicKey`'s private half.
    public static func wrapAsymmetric(_ fileKey: SecretBytes, classPublicKey: [UInt8]) throws -> [UInt8] {
        let ephemeral = try X25519.PrivateKey()
        let shared = try ephemeral.sharedSecret(with: classPublicKey)
        let kek = try Digest.oneStepKDF(sharedSecret: shared, otherInfo: ephemeral.publicKey + classPublicKey)
        return ephemeral.publicKey + (try AESKeyWrap.wrap(fileKey, kek: kek))
    }

    /// Unwraps a 72-byte class B blob with the class private key.
    public static func unwrapAsymmetric(_ blob: [UInt8], classPrivateKey: SecretBytes, classPublicKey: [UInt8]) throws -> SecretBytes {
        guard blob.count == 72 else { throw CryptoError.invalidInputSize }
        let ephemeralPublic = Array(blob[..<32])
        let pair = try X25519.PrivateKey(rawRepresentation: classPrivateKey)
        let shared = try pair.sharedSecret(with: ephemeralPublic)
        let kek = try Digest.oneStepKDF(sharedSecret: shared, otherInfo: ephemeralPublic + classPublicKey)
        return try AESKeyWrap.unwrap(Array(blob[32...]), kek: kek)
    }
}
