import LockerCrypto
import Testing

// AES key wrap vectors: Wycheproof aes_wrap_test.json (KW, RFC 3394) and
// aes_kwp_test.json (KWP, RFC 5649), plus the RFC 3394 / RFC 5649 examples.
//
// Rules checked (AESKeyWrap's length rules):
//   KW  unwrap input: a multiple of 8 and at least 24 bytes, else invalidInputSize
//   KW  wrap input:   a multiple of 8 and at least 16 bytes, else invalidInputSize
//   KWP unwrap input: a multiple of 8 and at least 16 bytes, else invalidInputSize
//   KWP wrap input:   at least 1 byte, else invalidInputSize
// A ciphertext of a valid length that fails the integrity check gives
// authenticationFailure.
//
// "acceptable" (KW only): the three ShortKey cases wrap an 8-byte key (RFC
// 3394 allows it as a single AES block, SP 800-38F does not). Our length
// rules reject them deliberately: wrap of the 8-byte key and unwrap of its
// 16-byte ciphertext must both throw invalidInputSize.

struct KeywrapGroup: Decodable, Sendable {
    let type: String
    let keySize: Int
    let tests: [KeywrapCase]
}

struct KeywrapCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let key: HexBytes
    let msg: HexBytes
    let ct: HexBytes
    let result: WycheproofResult
}

enum WrapMode: Sendable {
    case kw, kwp

    func wrap(_ key: SecretBytes, kek: SecretBytes) throws -> [UInt8] {
        switch self {
        case .kw: try AESKeyWrap.wrap(key, kek: kek)
        case .kwp: try AESKeyWrap.wrapWithPadding(key, kek: kek)
        }
    }

    func unwrap(_ wrapped: [UInt8], kek: SecretBytes) throws -> SecretBytes {
        switch self {
        case .kw: try AESKeyWrap.unwrap(wrapped, kek: kek)
        case .kwp: try AESKeyWrap.unwrapWithPadding(wrapped, kek: kek)
        }
    }

    /// Whether the length rules let `count` bytes be unwrapped.
    func unwrapLengthAllowed(_ count: Int) -> Bool {
        count % 8 == 0 && count >= (self == .kw ? 24 : 16)
    }

    /// Whether the length rules let a `count`-byte key be wrapped.
    func wrapLengthAllowed(_ count: Int) -> Bool {
        switch self {
        case .kw: count % 8 == 0 && count >= 16
        case .kwp: count >= 1
        }
    }
}

@Suite("AES key wrap vectors")
struct AESKeyWrapVectorTests {
    /// Runs one KW/KWP file and returns the run for the caller's totals.
    static func runKeywrap(_ file: String, mode: WrapMode) throws -> VectorRun {
        let vectors: WycheproofFile<KeywrapGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "KeywrapTest", "\(file): unexpected group type \(group.type)")
            #expect([128, 192, 256].contains(group.keySize), "\(file): unexpected KEK size \(group.keySize)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                #expect(tc.key.count * 8 == group.keySize, "\(id): KEK length disagrees with keySize")
                let kek = SecretBytes(copying: tc.key.bytes)
                switch tc.result {
                case .valid:
                    let wrapped = try mode.wrap(SecretBytes(copying: tc.msg.bytes), kek: kek)
                    #expect(wrapped == tc.ct.bytes, "\(id): wrap gave \(wrapped.hex), expected \(tc.ct.bytes.hex)")
                    let unwrapped = try mode.unwrap(tc.ct.bytes, kek: kek)
                    #expect(unwrapped == SecretBytes(copying: tc.msg.bytes),
                            "\(id): unwrap gave \(exposed(unwrapped).hex), expected \(tc.msg.bytes.hex)")
                    return .valid
                case .invalid:
                    if mode.unwrapLengthAllowed(tc.ct.count) {
                        run.count("rejectedByIntegrity")
                        #expect(throws: CryptoError.authenticationFailure, "\(id): invalid wrapped key was accepted") {
                            _ = try mode.unwrap(tc.ct.bytes, kek: kek)
                        }
                    } else {
                        run.count("rejectedByLength")
                        #expect(throws: CryptoError.invalidInputSize,
                                "\(id): a \(tc.ct.count)-byte wrapped key was not refused by length") {
                            _ = try mode.unwrap(tc.ct.bytes, kek: kek)
                        }
                    }
                    if !mode.wrapLengthAllowed(tc.msg.count) {
                        run.count("wrapRefused")
                        #expect(throws: CryptoError.invalidInputSize, "\(id): a \(tc.msg.count)-byte key was wrapped") {
                            _ = try mode.wrap(SecretBytes(copying: tc.msg.bytes), kek: kek)
                        }
                    }
                    return .invalid
                case .acceptable:
                    // Deliberate choice: 8-byte keys are outside our KW length
                    // rules, so both directions must be refused.
                    #expect(mode == .kw && tc.flags == ["ShortKey"] && tc.msg.count == 8,
                            "\(id): unexpected acceptable case; decide how to treat it")
                    #expect(throws: CryptoError.invalidInputSize, "\(id): an 8-byte key was wrapped") {
                        _ = try mode.wrap(SecretBytes(copying: tc.msg.bytes), kek: kek)
                    }
                    #expect(throws: CryptoError.invalidInputSize, "\(id): a \(tc.ct.count)-byte wrap was unwrapped") {
                        _ = try mode.unwrap(tc.ct.bytes, kek: kek)
                    }
                    run.count("shortKeyRefused")
                    return .acceptable
                }
            }
        }
        return run
    }

    @Test("wycheproof aes_wrap_test.json (KW)")
    func wycheproofKW() throws {
        let run = try Self.runKeywrap("aes_wrap_test.json", mode: .kw)
        run.finish(
            expecting: VectorCounts(valid: 36, invalid: 126, acceptable: 3),
            details: ["rejectedByLength": 54, "rejectedByIntegrity": 72, "shortKeyRefused": 3])
    }

    @Test("KW of many keys at once: each Wycheproof vector from the middle of a batch under its KEK; one bad wrap fails the batch")
    func wycheproofKWBatched() throws {
        let vectors: WycheproofFile<KeywrapGroup> = try Vectors.load("aes_wrap_test.json")
        var valid = 0
        var invalid = 0
        for group in vectors.testGroups {
            for tc in group.tests {
                let kek = SecretBytes(copying: tc.key.bytes)
                if tc.result == .valid {
                    let others = try (0..<2).map { _ in try SecretBytes(randomCount: tc.msg.count) }
                    let keys = [others[0], SecretBytes(copying: tc.msg.bytes), others[1]]
                    let wrapped = try AESKeyWrap.wrap(keys, kek: kek)
                    #expect(wrapped.count == 3 && wrapped[1] == tc.ct.bytes, "tcId \(tc.tcId): wrapped in a batch")
                    #expect(try wrapped[0] == AESKeyWrap.wrap(others[0], kek: kek) && wrapped[2] == AESKeyWrap.wrap(others[1], kek: kek))
                    #expect(try AESKeyWrap.unwrap(wrapped, kek: kek) == keys, "tcId \(tc.tcId): unwrapped in a batch")
                    valid += 1
                } else if tc.result == .invalid, tc.ct.count >= 24, tc.ct.count % 8 == 0 {
                    // Wherever the bad wrap is: alone, first, in the middle, last.
                    let good = try AESKeyWrap.wrap(SecretBytes(randomCount: tc.ct.count - 8), kek: kek)
                    let bad = tc.ct.bytes
                    for batch in [[bad], [bad, good], [good, bad, good], [good, good, bad]] {
                        #expect(throws: CryptoError.authenticationFailure, "tcId \(tc.tcId): a bad wrap in a batch was accepted") {
                            _ = try AESKeyWrap.unwrap(batch, kek: kek)
                        }
                    }
                    invalid += 1
                }
            }
        }
        #expect(valid == 36 && invalid == 72)
    }

    @Test("KW of many keys: one length for all of them, and none gives none")
    func batchLengths() throws {
        let kek = try SecretBytes(randomCount: 32)
        #expect(try AESKeyWrap.wrap([SecretBytes](), kek: kek).isEmpty)
        #expect(try AESKeyWrap.unwrap([[UInt8]](), kek: kek).isEmpty)
        let k16 = try SecretBytes(randomCount: 16)
        let k32 = try SecretBytes(randomCount: 32)
        #expect(throws: CryptoError.invalidInputSize) { _ = try AESKeyWrap.wrap([k32, k16], kek: kek) }
        let w16 = try AESKeyWrap.wrap(k16, kek: kek)
        let w32 = try AESKeyWrap.wrap(k32, kek: kek)
        #expect(throws: CryptoError.invalidInputSize) { _ = try AESKeyWrap.unwrap([w32, w16], kek: kek) }
        #expect(try AESKeyWrap.unwrap([w32, w32], kek: kek) == [k32, k32])
        #expect(try AESKeyWrap.unwrap([w16], kek: kek) == [k16])
    }

    @Test("wycheproof aes_kwp_test.json (KWP)")
    func wycheproofKWP() throws {
        let run = try Self.runKeywrap("aes_kwp_test.json", mode: .kwp)
        run.finish(
            expecting: VectorCounts(valid: 77, invalid: 177),
            details: ["rejectedByLength": 3, "rejectedByIntegrity": 174])
    }

    @Test("RFC 3394 section 4 (KW)")
    func rfc3394() throws {
        let run = try Self.runKeywrap("rfc3394_aes_wrap_test.json", mode: .kw)
        run.finish(expecting: VectorCounts(valid: 6, invalid: 12), details: ["rejectedByIntegrity": 12])
    }

    @Test("RFC 5649 section 6 (KWP)")
    func rfc5649() throws {
        let run = try Self.runKeywrap("rfc5649_aes_kwp_test.json", mode: .kwp)
        run.finish(expecting: VectorCounts(valid: 2))
    }

    @Test("empty wrapped keys (tcId 22, 64, 119) are refused by length")
    func emptyWrappedKeys() throws {
        let file = "aes_wrap_test.json"
        let vectors: WycheproofFile<KeywrapGroup> = try Vectors.load(file)
        let cases = vectors.testGroups.flatMap(\.tests).filter { [22, 64, 119].contains($0.tcId) }
        #expect(cases.map(\.tcId) == [22, 64, 119], "\(file): tcIds 22, 64, 119 not found")
        for tc in cases {
            #expect(tc.ct.bytes.isEmpty && tc.result == .invalid, "\(file) tcId \(tc.tcId): expected an empty invalid ct")
            #expect(throws: CryptoError.invalidInputSize, "\(file) tcId \(tc.tcId): empty input was unwrapped") {
                _ = try AESKeyWrap.unwrap(tc.ct.bytes, kek: SecretBytes(copying: tc.key.bytes))
            }
            #expect(throws: CryptoError.invalidInputSize, "\(file) tcId \(tc.tcId): empty input was unwrapped (KWP)") {
                _ = try AESKeyWrap.unwrapWithPadding(tc.ct.bytes, kek: SecretBytes(copying: tc.key.bytes))
            }
        }
    }

    @Test("unwrap refuses empty, short and ragged input",
          arguments: [0, 1, 7, 8, 15, 16, 17, 23, 25, 31, 33, 39])
    func unwrapLengths(count: Int) throws {
        for kekSize in [16, 24, 32] {
            let kek = SecretBytes(copying: [UInt8](repeating: 0x42, count: kekSize))
            let input = [UInt8](repeating: 0x5a, count: count)
            if !WrapMode.kw.unwrapLengthAllowed(count) {
                #expect(throws: CryptoError.invalidInputSize, "KW unwrap of \(count) bytes, KEK \(kekSize)") {
                    _ = try AESKeyWrap.unwrap(input, kek: kek)
                }
            }
            if !WrapMode.kwp.unwrapLengthAllowed(count) {
                #expect(throws: CryptoError.invalidInputSize, "KWP unwrap of \(count) bytes, KEK \(kekSize)") {
                    _ = try AESKeyWrap.unwrapWithPadding(input, kek: kek)
                }
            } else {
                // 16 or 24 bytes of junk: right length, wrong integrity value.
                #expect(throws: CryptoError.authenticationFailure, "KWP unwrap of \(count) junk bytes, KEK \(kekSize)") {
                    _ = try AESKeyWrap.unwrapWithPadding(input, kek: kek)
                }
            }
        }
    }

    @Test("wrap refuses keys outside the length rules")
    func wrapLengths() {
        let kek = SecretBytes(copying: [UInt8](repeating: 1, count: 32))
        for count in [0, 1, 8, 12, 15, 17, 20, 31] {
            #expect(throws: CryptoError.invalidInputSize, "KW wrap of a \(count)-byte key") {
                _ = try AESKeyWrap.wrap(SecretBytes(copying: [UInt8](repeating: 3, count: count)), kek: kek)
            }
        }
        #expect(throws: CryptoError.invalidInputSize, "KWP wrap of an empty key") {
            _ = try AESKeyWrap.wrapWithPadding(SecretBytes(copying: []), kek: kek)
        }
    }

    @Test("KEKs of 16, 24 and 32 bytes work; other sizes are refused")
    func kekSizes() throws {
        let key = SecretBytes(copying: (0..<32).map { UInt8($0) })
        for kekSize in [16, 24, 32] {
            let kek = SecretBytes(copying: (0..<kekSize).map { UInt8(0x80 | $0) })
            let wrapped = try AESKeyWrap.wrap(key, kek: kek)
            #expect(wrapped.count == AESKeyWrap.wrappedKeyByteCount)
            let unwrapped: SecretBytes = try AESKeyWrap.unwrap(wrapped, kek: kek)
            #expect(unwrapped == key, "KW round trip with a \(kekSize)-byte KEK")
            let padded = try AESKeyWrap.wrapWithPadding(key, kek: kek)
            #expect(try AESKeyWrap.unwrapWithPadding(padded, kek: kek) == key, "KWP round trip, \(kekSize)-byte KEK")
        }
        for kekSize in [0, 8, 15, 20, 31, 33, 64] {
            let kek = SecretBytes(copying: [UInt8](repeating: 7, count: kekSize))
            #expect(throws: CryptoError.invalidKeySize, "KW wrap with a \(kekSize)-byte KEK") {
                _ = try AESKeyWrap.wrap(key, kek: kek)
            }
            #expect(throws: CryptoError.invalidKeySize, "KW unwrap with a \(kekSize)-byte KEK") {
                _ = try AESKeyWrap.unwrap([UInt8](repeating: 0, count: 40), kek: kek)
            }
            #expect(throws: CryptoError.invalidKeySize, "KWP wrap with a \(kekSize)-byte KEK") {
                _ = try AESKeyWrap.wrapWithPadding(key, kek: kek)
            }
        }
    }

    @Test("an unwrapped key is a SecretBytes equal to the expected bytes (RFC 3394 4.6)")
    func unwrappedIsSecretBytes() throws {
        let kek = SecretBytes(copying: [UInt8](hex: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")!)
        let wrapped = [UInt8](hex: "28c9f404c4b810f4cbccb35cfb87f8263f5786e2d80ed326cbc7f0e71a99f43bfb988b9b7a02dd21")!
        let expected = [UInt8](hex: "00112233445566778899aabbccddeeff000102030405060708090a0b0c0d0e0f")!
        let unwrapped: SecretBytes = try AESKeyWrap.unwrap(wrapped, kek: kek)
        #expect(unwrapped == SecretBytes(copying: expected))
        #expect(unwrapped.count == 32)
        #expect(exposed(unwrapped) == expected)
        var other = expected
        other[31] ^= 1
        #expect(unwrapped != SecretBytes(copying: other))
    }
}
