public import LockerCrypto
internal import LockerFormat

/// Seals bytes the fuzzer chose the way Locker's writers do, so that a
/// target can hand the decoders bodies that pass authentication. Each
/// function restates a construction of docs/format.md; the LockerFormat
/// types that do it themselves are internal or seal only well-formed
/// values.
///
/// The nonce is fixed: a target must give the same result for the same
/// input every time.
public enum FuzzSeal {
    public static let nonce: AESGCM.Nonce = {
        try! AESGCM.Nonce([UInt8](repeating: 0x5A, count: AESGCM.nonceByteCount))  // 12 bytes
    }()

    /// The envelope of object headers, directory records and the keybag:
    /// `magic || version (u16 1) || reserved (u16 0) || nonce ||
    /// AES-256-GCM(body)`, with the 8-byte prefix as associated data.
    /// `field` is the u16 at bytes 6–7: 0, or for an `LKOI` header the
    /// record's length.
    public static func envelope(magic: [UInt8], body: [UInt8], key: SecretBytes, field: UInt16 = 0) throws -> [UInt8] {
        let prefix = magic + [0, 1, UInt8(field >> 8), UInt8(field & 0xff)]
        return prefix + nonce.rawBytes + (try AESGCM.seal(body, key: key, nonce: nonce, authenticating: prefix))
    }

    /// A device record: `body || HMAC-SHA256(deviceMACKey, body)`.
    public static func deviceRecord(body: [UInt8]) throws -> [UInt8] {
        body + (try HMAC.authenticationCode(for: body, key: FuzzKeys.deviceMACKey))
    }

    /// An encoded name for `plain` (any bytes, not only UTF-8) in the
    /// directory `parentID`: the synthetic nonce, then the sealed name, in
    /// unpadded base64url.
    public static func name(_ plain: [UInt8], parentID: [UInt8]) throws -> String {
        let keys = FuzzKeys.metadata
        let nonceBytes = Array(try HMAC.authenticationCode(for: parentID + plain, key: keys.nameNonceKey).prefix(12))
        let sealed = try AESGCM.seal(plain, key: keys.nameKey, nonce: AESGCM.Nonce(nonceBytes), authenticating: parentID)
        return Base64URL.encode(nonceBytes + sealed)
    }

    /// The nonce of chunk record `counter` (flag 1 on the final chunk) or
    /// of the index (counter = chunk count, flag 2): an 11-byte big-endian
    /// counter, then the flag.
    public static func chunkNonce(counter: UInt64, flag: UInt8) -> AESGCM.Nonce {
        var bytes = [UInt8](repeating: 0, count: AESGCM.nonceByteCount)
        for i in 0..<8 { bytes[3 + i] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(7 - i))) }
        bytes[11] = flag
        return try! AESGCM.Nonce(bytes)  // 12 bytes
    }

    /// `plain` sealed under the chunk key with `nonce`: `ciphertext || tag`.
    public static func chunkRecord(_ plain: [UInt8], nonce: AESGCM.Nonce) throws -> [UInt8] {
        try AESGCM.seal(plain, key: FuzzKeys.chunkKey, nonce: nonce)
    }
}
