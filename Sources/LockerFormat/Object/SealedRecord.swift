internal import LockerCrypto

/// The envelope shared by object headers and directory records: an 8-byte
/// plaintext prefix (magic, version, a 16-bit field), a 12-byte nonce, and
/// the record sealed with AES-256-GCM under the metadata record key with
/// the prefix as associated data. Nothing inside is read before it
/// verifies. The field is reserved (0) in every record but an object header
/// with inline data, where it holds the record's own length.
enum SealedRecord {
    static let version: UInt16 = 1
    static let maxByteCount = 8 << 10
    /// Prefix, nonce and tag.
    static let overhead = 8 + AESGCM.nonceByteCount + AESGCM.tagByteCount

    /// Seals `body`; the record is `overhead + body.count` bytes long.
    /// `nonce` is drawn here unless given: a caller sealing many records
    /// may draw their nonces together, each fresh and used once.
    static func seal(magic: [UInt8], body: [UInt8], key: SecretBytes, field: UInt16 = 0,
                     nonce given: AESGCM.Nonce? = nil) throws -> [UInt8] {
        // Never write a record that open refuses as too large.
        guard overhead + body.count <= maxByteCount else {
            throw FormatError.inputTooLarge
        }
        let prefix = magic + [UInt8(version >> 8), UInt8(version & 0xff), UInt8(field >> 8), UInt8(field & 0xff)]
        let nonce = try given ?? AESGCM.Nonce.random()
        return prefix + nonce.rawBytes + (try AESGCM.seal(body, key: key, nonce: nonce, authenticating: prefix))
    }

    /// Opens a record that is all of `bytes`, whose field must be `field`.
    static func open(_ bytes: [UInt8], magic: [UInt8], key: SecretBytes, field: UInt16 = 0) throws -> [UInt8] {
        guard bytes.count <= maxByteCount else { throw FormatError.inputTooLarge }
        var r = ByteReader(bytes)
        guard try r.read(4) == magic else { throw FormatError.badMagic }
        let version = try r.readUInt16()
        guard version == Self.version else { throw FormatError.unsupportedVersion(version) }
        guard try r.readUInt16() == field else { throw FormatError.invalidField("reserved") }
        let nonce = try AESGCM.Nonce(try r.read(AESGCM.nonceByteCount))
        guard r.remaining >= AESGCM.tagByteCount else { throw FormatError.truncated }
        return try AESGCM.open(try r.read(r.remaining), key: key, nonce: nonce, authenticating: Array(bytes[..<8]))
    }
}

extension ByteWriter {
    mutating func writeString(_ s: String) {
        let bytes = Array(s.utf8)
        write(UInt16(bytes.count))
        write(bytes)
    }
}

extension ByteReader {
    mutating func readString(max: Int) throws -> String {
        let count = Int(try readUInt16())
        guard count <= max else { throw FormatError.invalidField("string length") }
        guard let s = String(validating: try read(count), as: UTF8.self) else { throw FormatError.invalidField("utf-8") }
        return s
    }
}
