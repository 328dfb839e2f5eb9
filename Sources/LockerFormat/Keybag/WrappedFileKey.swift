/// A file key wrapped for its protection class, as an object header and
/// the agent protocol carry it. See docs/format.md, "Wrapped file key".
public struct WrappedFileKey: Sendable, Equatable {
    /// 40 bytes: RFC 3394 wrap of a 32-byte key.
    public static let classWrapByteCount = 40
    /// 72 bytes: ephemeral X25519 public key, then the 40-byte wrap.
    public static let asymmetricWrapByteCount = 72

    public var protectionClass: ProtectionClass
    /// The key ID of the class key that wraps it.
    public var keyID: [UInt8]
    /// The generation of that class key.
    public var keyGeneration: UInt32
    /// The wrapped key: 40 bytes, or 72 for class B.
    public var blob: [UInt8]

    public init(protectionClass: ProtectionClass, keyID: [UInt8], keyGeneration: UInt32, blob: [UInt8]) {
        self.protectionClass = protectionClass
        self.keyID = keyID
        self.keyGeneration = keyGeneration
        self.blob = blob
    }

    /// The blob length the class requires.
    public static func blobByteCount(for protectionClass: ProtectionClass) -> Int {
        protectionClass == .completeUnlessOpen ? asymmetricWrapByteCount : classWrapByteCount
    }

    /// Encoded length: class (1), key ID (16), generation (4), blob.
    public var encodedByteCount: Int { 1 + Keybag.keyIDByteCount + 4 + blob.count }

    public func encode(into w: inout ByteWriter) {
        w.write(protectionClass.rawValue)
        w.write(keyID)
        w.write(keyGeneration)
        w.write(blob)
    }

    public static func decode(from r: inout ByteReader) throws -> WrappedFileKey {
        guard let cls = ProtectionClass(rawValue: try r.readUInt8()) else { throw FormatError.invalidField("class") }
        let keyID = try r.read(Keybag.keyIDByteCount)
        let generation = try r.readUInt32()
        let blob = try r.read(blobByteCount(for: cls))
        return WrappedFileKey(protectionClass: cls, keyID: keyID, keyGeneration: generation, blob: blob)
    }
}
