public import LockerCrypto

/// The keys derived from the device's metadata key, which protect
/// everything in the store that is not object content: names, directory
/// records and object headers. See docs/format.md, "Metadata keys".
public struct MetadataKeys: Sendable {
    /// Seals object headers and directory records (AES-256-GCM).
    public let recordKey: SecretBytes
    /// Encrypts names (AES-256-GCM with a synthetic nonce).
    public let nameKey: SecretBytes
    /// Derives a name's synthetic nonce (HMAC-SHA256).
    public let nameNonceKey: SecretBytes

    public init(metadataKey: SecretBytes) throws {
        func derive(_ label: String) throws -> SecretBytes {
            try HKDF.deriveKey(inputKeyMaterial: metadataKey, salt: Array("locker v1 metadata".utf8),
                               info: Array(label.utf8), outputByteCount: 32)
        }
        recordKey = try derive("record seal")
        nameKey = try derive("name encryption")
        nameNonceKey = try derive("name nonce")
    }
}
