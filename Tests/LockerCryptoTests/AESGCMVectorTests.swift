import LockerCrypto
import Testing

// Wycheproof aes_gcm_test.json against AESGCM.
//
// Our API takes only 256-bit keys, 96-bit nonces and 128-bit tags. Groups
// with exactly those parameters get the full check; every other group is
// "notApplicable" and the runner asserts that the API refuses the input:
//   - an IV that is not 12 bytes: AESGCM.Nonce.init throws invalidNonceSize
//     (this also covers the 2056-bit IVs OpenSSL 3.0 itself cannot do, and the
//     empty-IV ZeroLengthIv cases);
//   - a key that is not 32 bytes: AESGCMCipher.init, AESGCM.seal and
//     AESGCM.open throw invalidKeySize;
//   - a tag that is not 16 bytes cannot be expressed at all (the sealed form
//     is always ciphertext || 16-byte tag); the file has no such group.

struct AEADGroup: Decodable, Sendable {
    let type: String
    let keySize: Int
    let ivSize: Int
    let tagSize: Int
    let tests: [AEADCase]
}

struct AEADCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let key: HexBytes
    let iv: HexBytes
    let aad: HexBytes
    let msg: HexBytes
    let ct: HexBytes
    let tag: HexBytes
    let result: WycheproofResult
}

@Suite("AES-GCM vectors")
struct AESGCMVectorTests {
    @Test("wycheproof aes_gcm_test.json")
    func wycheproofAESGCM() throws {
        let file = "aes_gcm_test.json"
        let vectors: WycheproofFile<AEADGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "AeadTest", "\(file): unexpected group type \(group.type)")
            let supported = group.keySize == 256 && group.ivSize == 96 && group.tagSize == 128
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                // Guard against a parsing slip: the bytes must match the group.
                #expect(tc.key.count * 8 == group.keySize, "\(id): key length disagrees with keySize")
                #expect(tc.iv.count * 8 == group.ivSize, "\(id): iv length disagrees with ivSize")
                #expect(tc.tag.count * 8 == group.tagSize, "\(id): tag length disagrees with tagSize")
                #expect(tc.ct.count == tc.msg.count || tc.result == .invalid, "\(id): ct and msg lengths differ")
                if supported {
                    return try Self.fullCheck(tc, id: id)
                } else {
                    try Self.assertRefused(tc, id: id, run: &run)
                    return .notApplicable
                }
            }
        }
        run.note("notApplicable = groups with keySize != 256 or ivSize != 96, refused by the API")
        // 256/96/128 groups: 39 valid + 27 invalid. Everything else (190
        // valid + 60 invalid) must be refused.
        run.finish(
            expecting: VectorCounts(valid: 39, invalid: 27, acceptable: 0, notApplicable: 250),
            details: ["refusedNonce": 119, "refusedKey": 211, "refusedValid": 190, "refusedInvalid": 60])
    }

    /// keySize 256, ivSize 96, tagSize 128: seal must give ct || tag and open
    /// must give msg (valid); open must fail with authenticationFailure and
    /// no plaintext (invalid).
    static func fullCheck(_ tc: AEADCase, id: String) throws -> VectorOutcome {
        let key = SecretBytes(copying: tc.key.bytes)
        let nonce = try AESGCM.Nonce(tc.iv.bytes)
        let sealed = tc.ct.bytes + tc.tag.bytes
        switch tc.result {
        case .valid:
            let produced = try AESGCM.seal(tc.msg.bytes, key: key, nonce: nonce, authenticating: tc.aad.bytes)
            #expect(produced == sealed, "\(id): seal gave \(produced.hex), expected \(sealed.hex)")
            let opened = try AESGCM.open(sealed, key: key, nonce: nonce, authenticating: tc.aad.bytes)
            #expect(opened == tc.msg.bytes, "\(id): open gave \(opened.hex), expected \(tc.msg.bytes.hex)")
            let cipher = try AESGCMCipher(key: key)
            for split in splitPoints(tc.msg.count) {
                let produced = try sealSplit(cipher, tc.msg.bytes, at: split, nonce: nonce, aad: tc.aad.bytes)
                #expect(produced == sealed, "\(id): seal split at \(split) gave \(produced.hex), expected \(sealed.hex)")
                let (head, body) = try openSplit(cipher, sealed, at: split, nonce: nonce, aad: tc.aad.bytes)
                #expect(head + body == tc.msg.bytes, "\(id): open split at \(split) gave \((head + body).hex)")
            }
            return .valid
        case .invalid:
            var plaintext: [UInt8]?
            #expect(throws: CryptoError.authenticationFailure, "\(id): invalid ciphertext was not rejected") {
                plaintext = try AESGCM.open(sealed, key: key, nonce: nonce, authenticating: tc.aad.bytes)
            }
            #expect(plaintext == nil, "\(id): open returned plaintext for an invalid case")
            if sealed.count >= AESGCM.tagByteCount {
                let cipher = try AESGCMCipher(key: key)
                for split in splitPoints(sealed.count - AESGCM.tagByteCount) {
                    var head = [UInt8](repeating: 0xA5, count: split)
                    var body = [UInt8](repeating: 0xA5, count: sealed.count - AESGCM.tagByteCount - split)
                    #expect(throws: CryptoError.authenticationFailure, "\(id): open split at \(split) accepted it") {
                        try openSplit(cipher, sealed, nonce: nonce, aad: tc.aad.bytes, head: &head, body: &body)
                    }
                    #expect((head + body).allSatisfy { $0 == 0 }, "\(id): unverified plaintext survived a split open")
                }
            }
            return .invalid
        case .acceptable:
            Issue.record("\(id): aes_gcm_test.json has no acceptable cases; this one needs a deliberate decision")
            return .acceptable
        }
    }

    /// Where to cut a message of `count` bytes for the two-part seal and
    /// open: the ends, inside and at the first AES block, and the middle.
    static func splitPoints(_ count: Int) -> [Int] {
        Array(Set([0, 1, 15, 16, 17, count / 2, count - 1, count].filter { $0 >= 0 && $0 <= count })).sorted()
    }

    static func sealSplit(_ cipher: AESGCMCipher, _ message: [UInt8], at split: Int, nonce: AESGCM.Nonce,
                          aad: [UInt8]) throws -> [UInt8] {
        let head = Array(message[..<split])
        let body = Array(message[split...])
        var out = [UInt8](repeating: 0, count: message.count + AESGCM.tagByteCount)
        try head.withUnsafeBytes { h in
            try body.withUnsafeBytes { b in
                try aad.withUnsafeBytes { a in
                    try out.withUnsafeMutableBytes { try cipher.seal(head: h, body: b, nonce: nonce, authenticating: a, into: $0) }
                }
            }
        }
        return out
    }

    static func openSplit(_ cipher: AESGCMCipher, _ sealed: [UInt8], at split: Int, nonce: AESGCM.Nonce,
                          aad: [UInt8]) throws -> ([UInt8], [UInt8]) {
        var head = [UInt8](repeating: 0, count: split)
        var body = [UInt8](repeating: 0, count: sealed.count - AESGCM.tagByteCount - split)
        try openSplit(cipher, sealed, nonce: nonce, aad: aad, head: &head, body: &body)
        return (head, body)
    }

    static func openSplit(_ cipher: AESGCMCipher, _ sealed: [UInt8], nonce: AESGCM.Nonce, aad: [UInt8],
                          head: inout [UInt8], body: inout [UInt8]) throws {
        try sealed.withUnsafeBytes { s in
            try aad.withUnsafeBytes { a in
                try head.withUnsafeMutableBytes { h in
                    try body.withUnsafeMutableBytes { b in
                        try cipher.open(s, nonce: nonce, authenticating: a, head: h, body: b)
                    }
                }
            }
        }
    }

    /// Any other group: the API must refuse the parameters.
    static func assertRefused(_ tc: AEADCase, id: String, run: inout VectorRun) throws {
        var reasons = 0
        if tc.iv.count != AESGCM.nonceByteCount {
            #expect(throws: CryptoError.invalidNonceSize, "\(id): a \(tc.iv.count)-byte IV was accepted") {
                _ = try AESGCM.Nonce(tc.iv.bytes)
            }
            run.count("refusedNonce")
            reasons += 1
        }
        if tc.key.count != AESGCM.keyByteCount {
            let key = SecretBytes(copying: tc.key.bytes)
            // Use a well-formed nonce so that only the key can be the reason.
            let nonce = try AESGCM.Nonce([UInt8](repeating: 0, count: AESGCM.nonceByteCount))
            #expect(throws: CryptoError.invalidKeySize, "\(id): a \(tc.key.count)-byte key was accepted") {
                _ = try AESGCMCipher(key: key)
            }
            #expect(throws: CryptoError.invalidKeySize, "\(id): seal accepted a \(tc.key.count)-byte key") {
                _ = try AESGCM.seal(tc.msg.bytes, key: key, nonce: nonce, authenticating: tc.aad.bytes)
            }
            #expect(throws: CryptoError.invalidKeySize, "\(id): open accepted a \(tc.key.count)-byte key") {
                _ = try AESGCM.open(tc.ct.bytes + tc.tag.bytes, key: key, nonce: nonce, authenticating: tc.aad.bytes)
            }
            run.count("refusedKey")
            reasons += 1
        }
        if tc.tag.count != AESGCM.tagByteCount {
            // Not expressible: the sealed form always ends in a 16-byte tag.
            run.count("refusedTag")
            reasons += 1
        }
        #expect(reasons > 0, "\(id): group is outside 256/96/128 but no parameter was refused")
        run.count(tc.result == .valid ? "refusedValid" : "refusedInvalid")
    }

    @Test("nonces that are not 96 bits are refused", arguments: [0, 1, 8, 11, 13, 16])
    func nonceLengthsRefused(length: Int) {
        #expect(throws: CryptoError.invalidNonceSize, "a \(length)-byte nonce was accepted") {
            _ = try AESGCM.Nonce([UInt8](repeating: 0xa5, count: length))
        }
    }

    @Test("a 96-bit nonce is accepted and round-trips")
    func twelveByteNonce() throws {
        let bytes = (0..<12).map { UInt8($0 * 17) }
        let nonce = try AESGCM.Nonce(bytes)
        #expect(nonce.rawBytes == bytes)
        #expect(try AESGCM.Nonce(bytes) == nonce)
        #expect(try AESGCM.Nonce.random().rawBytes.count == 12)
    }
}
