internal import COpenSSL

/// X25519 key agreement (RFC 7748).
public enum X25519 {
    /// The length of keys and shared secrets, in bytes.
    public static let byteCount = 32

    /// An X25519 private key and its public half.
    public struct PrivateKey: Sendable {
        /// The 32-byte scalar.
        public let rawRepresentation: SecretBytes
        /// The 32-byte public key (u-coordinate).
        public let publicKey: [UInt8]

        /// Generates a fresh key pair.
        public init() throws {
            try self.init(rawRepresentation: SecretBytes(randomCount: X25519.byteCount))
        }

        /// Rebuilds a key pair from its 32-byte scalar.
        public init(rawRepresentation: SecretBytes) throws {
            guard rawRepresentation.count == X25519.byteCount else { throw CryptoError.invalidKeySize }
            self.rawRepresentation = rawRepresentation
            let key = try X25519.privateKey(rawRepresentation)
            defer { EVP_PKEY_free(key) }
            var out = [UInt8](repeating: 0, count: X25519.byteCount)
            var length = X25519.byteCount
            guard EVP_PKEY_get_raw_public_key(key, &out, &length) == 1, length == X25519.byteCount else {
                throw CryptoError.internalFailure
            }
            publicKey = out
        }

        /// Agrees a shared secret with `peerPublicKey`.
        ///
        /// Throws ``CryptoError/invalidPublicKey`` if the peer key is not 32
        /// bytes or the result is all zeros (a small-order point): such a
        /// key comes from an attacker, never from a real peer.
        public func sharedSecret(with peerPublicKey: [UInt8]) throws -> SecretBytes {
            guard peerPublicKey.count == X25519.byteCount else { throw CryptoError.invalidPublicKey }
            let mine = try X25519.privateKey(rawRepresentation)
            defer { EVP_PKEY_free(mine) }
            guard let peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nil, peerPublicKey, peerPublicKey.count) else {
                throw CryptoError.invalidPublicKey
            }
            defer { EVP_PKEY_free(peer) }
            guard let context = EVP_PKEY_CTX_new(mine, nil) else { throw CryptoError.internalFailure }
            defer { EVP_PKEY_CTX_free(context) }
            guard EVP_PKEY_derive_init(context) == 1 else { throw CryptoError.internalFailure }
            guard EVP_PKEY_derive_set_peer(context, peer) == 1 else { throw CryptoError.invalidPublicKey }
            let secret = try SecretBytes(count: X25519.byteCount) { out throws in
                var length = X25519.byteCount
                // libcrypto refuses an all-zero result here (RFC 7748 §6.1).
                guard EVP_PKEY_derive(context, out.bindMemory(to: UInt8.self).baseAddress, &length) == 1,
                      length == X25519.byteCount
                else {
                    ERR_clear_error()
                    throw CryptoError.invalidPublicKey
                }
            }
            // Checked again here so that the rule does not depend on the
            // libcrypto version.
            let allZero = secret.withUnsafeBytes { bytes in bytes.reduce(0 as UInt8) { $0 | $1 } == 0 }
            guard !allZero else { throw CryptoError.invalidPublicKey }
            return secret
        }
    }

    private static func privateKey(_ raw: SecretBytes) throws -> OpaquePointer {
        let key = raw.withUnsafeBytes { bytes in
            EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nil, bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count)
        }
        guard let key else { throw CryptoError.invalidKeySize }
        return key
    }
}
