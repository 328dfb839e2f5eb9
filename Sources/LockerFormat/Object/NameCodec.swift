internal import LockerCrypto

/// Encrypted names. A name is sealed deterministically so that it can be
/// looked up: the nonce is the first 12 bytes of
/// `HMAC-SHA256(nameNonceKey, parentID || name)`, the associated data is
/// the parent directory's ID, and the on-disk name is the unpadded
/// base64url of `nonce || ciphertext || tag`. Opening checks the tag and
/// that the nonce is the one the name implies (a synthetic-IV check).
///
/// Encoded names longer than ``maxEncodedLength`` are stored under
/// `L.` + base64url(SHA-256(encoded)) and the full encoded name lives in
/// the entry's own record.
public enum NameCodec {
    /// The longest plaintext name component, in bytes.
    public static let maxNameLength = 1024
    /// The longest file name written as is; longer ones are hashed.
    public static let maxEncodedLength = 200
    /// The prefix of a hashed (long) name.
    public static let longNamePrefix = "L."

    /// The encoded form of `name` in the directory `parentID`.
    public static func encode(_ name: String, parentID: [UInt8], keys: MetadataKeys) throws -> String {
        let plain = Array(name.utf8)
        let nonceBytes = Array(try HMAC.authenticationCode(for: parentID + plain, key: keys.nameNonceKey).prefix(12))
        let sealed = try AESGCM.seal(plain, key: keys.nameKey, nonce: AESGCM.Nonce(nonceBytes), authenticating: parentID)
        return Base64URL.encode(nonceBytes + sealed)
    }

    /// The file name an entry is stored under: the encoded name, or its
    /// hash when too long.
    public static func fileName(forEncoded encoded: String) throws -> String {
        guard encoded.utf8.count > maxEncodedLength else { return encoded }
        return longNamePrefix + Base64URL.encode(try Digest.hash(.sha256, Array(encoded.utf8)))
    }

    /// The length of the file name an entry whose name is `nameLength`
    /// bytes long is stored under (``fileName(forEncoded:)`` of its
    /// encoded name): it depends on nothing else.
    public static func fileNameLength(nameLength: Int) -> Int {
        let encoded = Base64URL.encodedLength(12 + nameLength + AESGCM.tagByteCount)
        return encoded > maxEncodedLength ? longNamePrefix.utf8.count + Base64URL.encodedLength(32) : encoded
    }

    /// Decodes an encoded name. Throws ``CryptoError/authenticationFailure``
    /// for anything this store did not write for this parent.
    public static func decode(_ encoded: String, parentID: [UInt8], keys: MetadataKeys) throws -> String {
        guard let raw = Base64URL.decode(encoded), raw.count >= 12 + AESGCM.tagByteCount else {
            throw CryptoError.authenticationFailure
        }
        let nonceBytes = Array(raw[..<12])
        let plain = try AESGCM.open(Array(raw[12...]), key: keys.nameKey, nonce: AESGCM.Nonce(nonceBytes),
                                    authenticating: parentID)
        let expected = Array(try HMAC.authenticationCode(for: parentID + plain, key: keys.nameNonceKey).prefix(12))
        guard constantTimeEquals(expected, nonceBytes) else { throw CryptoError.authenticationFailure }
        guard let name = String(validating: plain, as: UTF8.self) else { throw CryptoError.authenticationFailure }
        return name
    }

    /// Whether `name` may name an entry: 1–``maxNameLength`` bytes of UTF-8, with no
    /// "/" or NUL byte, and not "." or "..". Checked on the bytes: a "/"
    /// followed by a combining mark is one Swift `Character`, which a
    /// check of characters would let through, and such a name would be a
    /// path when a fetch writes it out.
    public static func isValidName(_ name: String) -> Bool {
        let bytes = name.utf8
        return !bytes.isEmpty && bytes.count <= maxNameLength && !bytes.contains(UInt8(ascii: "/")) && !bytes.contains(0)
            && !bytes.elementsEqual(".".utf8) && !bytes.elementsEqual("..".utf8)
    }
}

/// Unpadded base64url (RFC 4648 §5).
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    /// Each byte's value in the alphabet, or 0xFF for a byte not in it.
    private static let values: [UInt8] = {
        var values = [UInt8](repeating: 0xFF, count: 256)
        for (value, byte) in alphabet.enumerated() { values[Int(byte)] = UInt8(value) }
        return values
    }()

    /// The length of the unpadded encoding of `count` bytes.
    public static func encodedLength(_ count: Int) -> Int { (count * 4 + 2) / 3 }

    // Both directions work a group at a time into one array reserved
    // whole: every entry listed decodes its name, and every object stored
    // encodes one, so an array per group cost a fetch of small files more
    // than the rest of the codec.
    public static func encode(_ bytes: [UInt8]) -> String {
        alphabet.withUnsafeBufferPointer { alphabet in
            var out: [UInt8] = []
            out.reserveCapacity(encodedLength(bytes.count))
            var i = 0
            while i + 3 <= bytes.count {
                let v = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                out.append(alphabet[Int(v >> 18 & 63)])
                out.append(alphabet[Int(v >> 12 & 63)])
                out.append(alphabet[Int(v >> 6 & 63)])
                out.append(alphabet[Int(v & 63)])
                i += 3
            }
            let rest = bytes.count - i
            if rest > 0 {
                let v = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
                out.append(alphabet[Int(v >> 18 & 63)])
                out.append(alphabet[Int(v >> 12 & 63)])
                if rest == 2 { out.append(alphabet[Int(v >> 6 & 63)]) }
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    public static func decode(_ text: String) -> [UInt8]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decode($0) }) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer { decode($0) }
    }

    private static func decode(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        if text.count % 4 == 1 { return nil }
        return values.withUnsafeBufferPointer { values in
            var out: [UInt8] = []
            out.reserveCapacity(text.count / 4 * 3 + 2)
            var v: UInt32 = 0
            var n = 0
            for c in text {
                let value = values[Int(c)]
                if value == 0xFF { return nil }
                v = v << 6 | UInt32(value)
                n += 1
                if n == 4 {
                    out.append(UInt8(v >> 16 & 0xFF))
                    out.append(UInt8(v >> 8 & 0xFF))
                    out.append(UInt8(v & 0xFF))
                    v = 0
                    n = 0
                }
            }
            // Non-canonical trailing bits would give two spellings of one
            // name; refuse them.
            switch n {
            case 2:
                // 12 bits: a byte and 4 bits that must be zero.
                if v & 0xF != 0 { return nil }
                out.append(UInt8(v >> 4))
            case 3:
                // 18 bits: two bytes and 2 bits that must be zero.
                if v & 0x3 != 0 { return nil }
                out.append(UInt8(v >> 10 & 0xFF))
                out.append(UInt8(v >> 2 & 0xFF))
            default:
                break
            }
            return out
        }
    }
}
