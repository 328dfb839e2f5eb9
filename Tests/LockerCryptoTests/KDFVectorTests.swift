import LockerCrypto
import Testing

// HKDF-SHA256 (Wycheproof + RFC 5869), PBKDF2-HMAC-SHA256 (Wycheproof + RFC
// 7914 section 11) and scrypt (RFC 7914 section 12).

struct HkdfGroup: Decodable, Sendable {
    let type: String
    let keySize: Int?
    let tests: [HkdfCase]
}

struct HkdfCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let ikm: HexBytes
    let salt: HexBytes
    let info: HexBytes
    let size: Int
    let okm: HexBytes
    /// RFC 5869 files only: the HKDF-Extract output.
    let prk: HexBytes?
    let result: WycheproofResult
}

struct PbkdfGroup: Decodable, Sendable {
    let type: String
    let tests: [PbkdfCase]
}

struct PbkdfCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let password: HexBytes
    let salt: HexBytes
    let iterationCount: Int
    let dkLen: Int
    let dk: HexBytes
    let result: WycheproofResult
}

struct ScryptGroup: Decodable, Sendable {
    let type: String
    let tests: [ScryptCase]
}

struct ScryptCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let password: HexBytes
    let salt: HexBytes
    let n: UInt64
    let r: UInt64
    let p: UInt64
    let dkLen: Int
    let dk: HexBytes
    let result: WycheproofResult
}

@Suite("KDF vectors")
struct KDFVectorTests {
    static func runHKDF(_ file: String) throws -> VectorRun {
        let vectors: WycheproofFile<HkdfGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "HkdfTest", "\(file): unexpected group type \(group.type)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                if let keySize = group.keySize {
                    #expect(tc.ikm.count * 8 == keySize, "\(id): ikm length disagrees with keySize")
                }
                let ikm = SecretBytes(copying: tc.ikm.bytes)
                switch tc.result {
                case .valid:
                    #expect(tc.okm.count == tc.size, "\(id): okm length disagrees with size")
                    let okm = try HKDF.deriveKey(.sha256, inputKeyMaterial: ikm, salt: tc.salt.bytes, info: tc.info.bytes,
                                                 outputByteCount: tc.size)
                    #expect(okm == SecretBytes(copying: tc.okm.bytes),
                            "\(id): okm \(exposed(okm).hex), expected \(tc.okm.bytes.hex)")
                    // The same with the salt held as a secret.
                    let withSecretSalt = try HKDF.deriveKey(.sha256, inputKeyMaterial: ikm, secretSalt: SecretBytes(copying: tc.salt.bytes),
                                                            info: tc.info.bytes, outputByteCount: tc.size)
                    #expect(withSecretSalt == SecretBytes(copying: tc.okm.bytes),
                            "\(id): okm with a secret salt \(exposed(withSecretSalt).hex), expected \(tc.okm.bytes.hex)")
                    if let prk = tc.prk {
                        // HKDF-Extract is HMAC(salt, IKM); an empty salt is
                        // HashLen zero bytes. Checked through HMAC, since
                        // the HKDF API only does extract-then-expand.
                        run.count("prkChecked")
                        let salt = tc.salt.bytes.isEmpty ? [UInt8](repeating: 0, count: 32) : tc.salt.bytes
                        let computed = try HMAC.authenticationCode(.sha256, for: tc.ikm.bytes, key: SecretBytes(copying: salt))
                        #expect(computed == prk.bytes, "\(id): prk \(computed.hex), expected \(prk.bytes.hex)")
                    }
                    return .valid
                case .invalid:
                    // SizeTooLarge: more than 255 * 32 bytes.
                    #expect(throws: CryptoError.invalidParameter, "\(id): an output of \(tc.size) bytes was derived") {
                        _ = try HKDF.deriveKey(.sha256, inputKeyMaterial: ikm, salt: tc.salt.bytes, info: tc.info.bytes,
                                               outputByteCount: tc.size)
                    }
                    return .invalid
                case .acceptable:
                    Issue.record("\(id): no acceptable HKDF cases are expected; decide how to treat this one")
                    return .acceptable
                }
            }
        }
        return run
    }

    @Test("wycheproof hkdf_sha256_test.json")
    func wycheproofHKDF() throws {
        try Self.runHKDF("hkdf_sha256_test.json").finish(expecting: VectorCounts(valid: 83, invalid: 3))
    }

    @Test("RFC 5869 appendix A.1-A.3")
    func rfc5869() throws {
        try Self.runHKDF("rfc5869_hkdf_sha256_test.json")
            .finish(expecting: VectorCounts(valid: 3), details: ["prkChecked": 3])
    }

    @Test("HKDF output length limits")
    func hkdfLimits() throws {
        let ikm = SecretBytes(copying: [UInt8](repeating: 0x0b, count: 22))
        for size in [0, -1, 255 * 32 + 1] {
            #expect(throws: CryptoError.invalidParameter, "output size \(size)") {
                _ = try HKDF.deriveKey(inputKeyMaterial: ikm, outputByteCount: size)
            }
        }
        #expect(try HKDF.deriveKey(inputKeyMaterial: ikm, outputByteCount: 255 * 32).count == 255 * 32)
        #expect(throws: CryptoError.invalidParameter) {
            _ = try HKDF.deriveKey(.sha512, inputKeyMaterial: ikm, outputByteCount: 255 * 64 + 1)
        }
        #expect(try HKDF.deriveKey(.sha512, inputKeyMaterial: ikm, outputByteCount: 255 * 64).count == 255 * 64)
    }

    @Test("HKDF-SHA512 known answers")
    func hkdfSHA512() throws {
        // Neither RFC 5869 nor the Wycheproof set here has SHA-512 cases.
        // These outputs come from another implementation, pyca/cryptography's
        // HKDF(SHA512), on RFC 5869 A.1's inputs: 100 bytes (a partial last
        // block), and 64 bytes with no salt and no info.
        let ikm = SecretBytes(copying: [UInt8](repeating: 0x0b, count: 22))
        let long = try HKDF.deriveKey(.sha512, inputKeyMaterial: ikm, salt: Array(0x00...0x0c),
                                      info: Array(0xf0...0xf9), outputByteCount: 100)
        let expectedLong = "832390086cda71fb47625bb5ceb168e4c8e26a1a16ed34d9fc7fe92c14815793"
            + "38da362cb8d9f925d7cbcce0dff7098769cf15959867d571c1715450cb530137"
            + "be3fb62f3cf32b84feba8f1eb1b563e20d9749b8640b8264c4b69b14ad519911"
            + "5e1d609c"
        #expect(long == SecretBytes(copying: [UInt8](hex: expectedLong)!))
        let bare = try HKDF.deriveKey(.sha512, inputKeyMaterial: ikm, outputByteCount: 64)
        let expectedBare = "f5fa02b18298a72a8c23898a8703472c6eb179dc204c03425c970e3b164bf90f"
            + "ff22d04836d0e2343bacc4e7cb6045faaa698e0e3b3eb91331306def1db8319e"
        #expect(bare == SecretBytes(copying: [UInt8](hex: expectedBare)!))
    }

    static func runPBKDF2(_ file: String) throws -> VectorRun {
        let vectors: WycheproofFile<PbkdfGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "PbkdfTest", "\(file): unexpected group type \(group.type)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                // Passwords are raw bytes (some are not UTF-8); they never
                // pass through String.
                if String(validating: tc.password.bytes, as: UTF8.self) == nil { run.count("nonUTF8Password") }
                let derive = {
                    try PasswordKDF.pbkdf2SHA256(password: SecretBytes(copying: tc.password.bytes), salt: tc.salt.bytes,
                                                 iterations: tc.iterationCount, outputByteCount: tc.dkLen)
                }
                switch tc.result {
                case .valid:
                    #expect(tc.dk.count == tc.dkLen, "\(id): dk length disagrees with dkLen")
                    let dk = try derive()
                    #expect(dk == SecretBytes(copying: tc.dk.bytes), "\(id): dk \(exposed(dk).hex), expected \(tc.dk.bytes.hex)")
                    return .valid
                case .invalid:
                    #expect(throws: (any Error).self, "\(id): invalid parameters were accepted") { _ = try derive() }
                    return .invalid
                case .acceptable:
                    Issue.record("\(id): no acceptable PBKDF2 cases are expected; decide how to treat this one")
                    return .acceptable
                }
            }
        }
        return run
    }

    @Test("wycheproof pbkdf2_hmacsha256_test.json")
    func wycheproofPBKDF2() throws {
        try Self.runPBKDF2("pbkdf2_hmacsha256_test.json")
            .finish(expecting: VectorCounts(valid: 60), details: ["nonUTF8Password": 17])
    }

    @Test("RFC 7914 section 11 (PBKDF2-HMAC-SHA256, c=1 and c=80000)")
    func rfc7914PBKDF2() throws {
        try Self.runPBKDF2("rfc7914_pbkdf2_hmacsha256_test.json").finish(expecting: VectorCounts(valid: 2))
    }

    @Test("RFC 7914 section 12 (scrypt, N <= 16384)")
    func rfc7914Scrypt() throws {
        let file = "rfc7914_scrypt_test.json"
        let vectors: WycheproofFile<ScryptGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "ScryptTest", "\(file): unexpected group type \(group.type)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                #expect(tc.result == .valid, "\(id): RFC cases are all valid")
                let dk = try PasswordKDF.scrypt(
                    password: SecretBytes(copying: tc.password.bytes), salt: tc.salt.bytes,
                    parameters: .init(n: tc.n, r: tc.r, p: tc.p), outputByteCount: tc.dkLen)
                #expect(dk == SecretBytes(copying: tc.dk.bytes), "\(id): dk \(exposed(dk).hex), expected \(tc.dk.bytes.hex)")
                return .valid
            }
        }
        run.note("RFC case 4 (N=1048576, 1 GiB) is not in the file by design")
        run.finish(expecting: VectorCounts(valid: 3))
    }

    @Test("scrypt refuses bad parameters")
    func scryptParameters() {
        let password = SecretBytes(copying: Array("pw".utf8))
        let bad: [PasswordKDF.ScryptParameters] = [
            .init(n: 0, r: 1, p: 1), .init(n: 1, r: 1, p: 1), .init(n: 1000, r: 1, p: 1),
            .init(n: 16, r: 0, p: 1), .init(n: 16, r: 1, p: 0), .init(n: 1 << 20, r: 16, p: 1),
        ]
        for parameters in bad {
            #expect(throws: CryptoError.invalidParameter, "scrypt \(parameters)") {
                _ = try PasswordKDF.scrypt(password: password, salt: [], parameters: parameters, outputByteCount: 32)
            }
        }
    }
}
