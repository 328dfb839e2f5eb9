public import LockerCrypto

/// The device record: the passcode failure counter and the keybag
/// generation, under a MAC keyed from the device secret. See
/// docs/format.md, "Device record".
public struct DeviceRecord: Sendable, Equatable {
    public static let magic: [UInt8] = Array("LKDR".utf8)
    public static let version: UInt16 = 1
    public static let byteCount = 8 + 4 + 8 + 32 + 8 + 1 + 32

    /// Failed passcode attempts since the last successful unlock.
    public var failedAttempts: UInt32
    /// When the last failed attempt happened, in seconds since 1970.
    public var lastFailureTime: Int64
    /// A tag of the last wrong passcode, derived from its passcode key
    /// (docs/format.md, "Wrong passcode tag"), so that repeating it is not
    /// counted again; all zero when there is none.
    public var lastWrongPasscodeTag: [UInt8]
    /// The generation of the current keybag. An older keybag is a
    /// rollback; one exactly one ahead is a rewrite interrupted before the
    /// record was updated, and the device completes it.
    public var keybagGeneration: UInt64
    /// Whether the device was wiped.
    public var wiped: Bool

    public init(failedAttempts: UInt32 = 0, lastFailureTime: Int64 = 0, lastWrongPasscodeTag: [UInt8] = [UInt8](repeating: 0, count: 32),
                keybagGeneration: UInt64, wiped: Bool = false) {
        self.failedAttempts = failedAttempts
        self.lastFailureTime = lastFailureTime
        self.lastWrongPasscodeTag = lastWrongPasscodeTag
        self.keybagGeneration = keybagGeneration
        self.wiped = wiped
    }

    /// The record's bytes, with an HMAC-SHA256 under `macKey` at the end.
    public func encoded(macKey: SecretBytes) throws -> [UInt8] {
        precondition(lastWrongPasscodeTag.count == 32, "tag must be 32 bytes")
        var w = ByteWriter(capacity: Self.byteCount)
        w.write(Self.magic)
        w.write(Self.version)
        w.write(UInt16(0))
        w.write(failedAttempts)
        w.write(UInt64(bitPattern: lastFailureTime))
        w.write(lastWrongPasscodeTag)
        w.write(keybagGeneration)
        w.write(UInt8(wiped ? 1 : 0))
        let mac = try HMAC.authenticationCode(for: w.bytes, key: macKey)
        w.write(mac)
        return w.bytes
    }

    /// Decodes and authenticates a record. A wrong MAC is
    /// ``CryptoError/authenticationFailure``; the fields are read only after
    /// the MAC verifies.
    public static func decode(_ bytes: [UInt8], macKey: SecretBytes) throws -> DeviceRecord {
        guard bytes.count == byteCount else { throw FormatError.truncated }
        let body = Array(bytes[..<(byteCount - 32)])
        guard try HMAC.isValid(Array(bytes[(byteCount - 32)...]), for: body, key: macKey) else {
            throw CryptoError.authenticationFailure
        }
        var r = ByteReader(body)
        guard try r.read(4) == magic else { throw FormatError.badMagic }
        let version = try r.readUInt16()
        guard version == Self.version else { throw FormatError.unsupportedVersion(version) }
        guard try r.readUInt16() == 0 else { throw FormatError.invalidField("reserved") }
        let attempts = try r.readUInt32()
        let time = Int64(bitPattern: try r.readUInt64())
        let tag = try r.read(32)
        let generation = try r.readUInt64()
        let wiped = try r.readUInt8()
        guard wiped <= 1 else { throw FormatError.invalidField("wiped") }
        try r.expectEnd()
        return DeviceRecord(failedAttempts: attempts, lastFailureTime: time, lastWrongPasscodeTag: tag,
                            keybagGeneration: generation, wiped: wiped == 1)
    }
}
