import LockerCrypto
import Testing

// X25519 vectors: Wycheproof x25519_test.json and RFC 7748.
//
// "acceptable" (Wycheproof: twist points, non-canonical encodings, low-order
// points, ...): the deliberate choice is that of sharedSecret(with:):
//   - if the expected shared secret is all zero (a low-order / small-order
//     peer key; 31 cases), sharedSecret must throw invalidPublicKey: such a
//     key only ever comes from an attacker (RFC 7748 section 6.1 check);
//   - otherwise (223 cases) the agreement must succeed and match `shared`,
//     exactly as libcrypto computes it (the top bit is masked, non-canonical
//     u-coordinates are reduced, twist points are used as they are).

struct XDHGroup: Decodable, Sendable {
    let type: String
    let curve: String
    let tests: [XDHCase]
}

struct XDHCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let result: WycheproofResult
    // XdhComp and XdhPublicKey
    let privateKey: HexBytes?
    let publicKey: HexBytes?
    let shared: HexBytes?
    // XdhIterate (rfc7748 only)
    let k: HexBytes?
    let u: HexBytes?
    let iterations: Int?
    let expected: HexBytes?

    enum CodingKeys: String, CodingKey {
        case tcId, comment, flags, result, shared, k, u, iterations, expected
        case privateKey = "private"
        case publicKey = "public"
    }
}

@Suite("X25519 vectors")
struct X25519VectorTests {
    /// One XdhComp case: shared = X25519(private, public).
    static func comp(_ tc: XDHCase, id: String, run: inout VectorRun) throws -> VectorOutcome {
        let privateBytes = try #require(tc.privateKey, "\(id): missing private").bytes
        let peer = try #require(tc.publicKey, "\(id): missing public").bytes
        let shared = try #require(tc.shared, "\(id): missing shared").bytes
        let key = try X25519.PrivateKey(rawRepresentation: SecretBytes(copying: privateBytes))
        let allZero = shared.allSatisfy { $0 == 0 }
        switch tc.result {
        case .valid:
            #expect(!allZero, "\(id): a valid case with an all-zero secret needs a decision")
            let secret = try key.sharedSecret(with: peer)
            #expect(secret == SecretBytes(copying: shared),
                    "\(id): shared \(exposed(secret).hex), expected \(shared.hex)")
            return .valid
        case .acceptable:
            if allZero {
                run.count("acceptableRejectedAllZero")
                #expect(throws: CryptoError.invalidPublicKey, "\(id): all-zero shared secret was not refused") {
                    _ = try key.sharedSecret(with: peer)
                }
            } else {
                run.count("acceptableAccepted")
                let secret = try key.sharedSecret(with: peer)
                #expect(secret == SecretBytes(copying: shared),
                        "\(id): shared \(exposed(secret).hex), expected \(shared.hex)")
            }
            return .acceptable
        case .invalid:
            #expect(throws: (any Error).self, "\(id): invalid peer key was accepted") {
                _ = try key.sharedSecret(with: peer)
            }
            return .invalid
        }
    }

    @Test("wycheproof x25519_test.json")
    func wycheproofX25519() throws {
        let file = "x25519_test.json"
        let vectors: WycheproofFile<XDHGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "XdhComp" && group.curve == "curve25519", "\(file): unexpected group \(group.type)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                try Self.comp(tc, id: run.id(tc.tcId), run: &run)
            }
        }
        run.finish(
            expecting: VectorCounts(valid: 264, invalid: 0, acceptable: 254),
            details: ["acceptableRejectedAllZero": 31, "acceptableAccepted": 223])
    }

    @Test("RFC 7748 sections 5.2 and 6.1")
    func rfc7748() throws {
        let file = "rfc7748_x25519_test.json"
        let vectors: WycheproofFile<XDHGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        var skippedSlow: [Int] = []
        for group in vectors.testGroups {
            #expect(group.curve == "curve25519", "\(file): unexpected curve \(group.curve)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                #expect(tc.result == .valid, "\(id): RFC cases are all valid")
                switch group.type {
                case "XdhComp":
                    run.count("comp")
                    return try Self.comp(tc, id: id, run: &run)
                case "XdhPublicKey":
                    run.count("publicKey")
                    let privateBytes = try #require(tc.privateKey, "\(id): missing private").bytes
                    let expected = try #require(tc.publicKey, "\(id): missing public").bytes
                    let key = try X25519.PrivateKey(rawRepresentation: SecretBytes(copying: privateBytes))
                    #expect(key.publicKey == expected, "\(id): public \(key.publicKey.hex), expected \(expected.hex)")
                    return .valid
                case "XdhIterate":
                    let iterations = try #require(tc.iterations, "\(id): missing iterations")
                    if iterations > 1000 {
                        // 1,000,000 X25519 operations take minutes here; the
                        // case is flagged Slow and left to a nightly job.
                        #expect(tc.flags.contains("Slow"), "\(id): only the Slow case may be skipped")
                        skippedSlow.append(tc.tcId)
                        return .skipped
                    }
                    run.count("iterate")
                    var k = try #require(tc.k, "\(id): missing k").bytes
                    var u = try #require(tc.u, "\(id): missing u").bytes
                    for _ in 0..<iterations {
                        let result = try X25519.PrivateKey(rawRepresentation: SecretBytes(copying: k)).sharedSecret(with: u)
                        (k, u) = (exposed(result), k)
                    }
                    let expected = try #require(tc.expected, "\(id): missing expected").bytes
                    #expect(k == expected, "\(id): after \(iterations) iterations k = \(k.hex), expected \(expected.hex)")
                    return .valid
                default:
                    Issue.record("\(id): unknown group type \(group.type)")
                    return .notApplicable
                }
            }
        }
        #expect(skippedSlow == [9], "\(file): expected to skip exactly tcId 9 (1,000,000 iterations)")
        run.note("skipped tcId 9: XdhIterate 1,000,000 iterations (Slow), not run; the 1 and 1000 iteration cases ran")
        run.finish(expecting: VectorCounts(valid: 8, skipped: 1),
                   details: ["comp": 4, "publicKey": 2, "iterate": 2])
    }

    @Test("agreement both ways gives the same secret")
    func agreementBothWays() throws {
        let alice = try X25519.PrivateKey()
        let bob = try X25519.PrivateKey()
        let ab = try alice.sharedSecret(with: bob.publicKey)
        let ba = try bob.sharedSecret(with: alice.publicKey)
        #expect(ab == ba)
        #expect(ab.count == X25519.byteCount)
        let carol = try X25519.PrivateKey()
        #expect(try carol.sharedSecret(with: bob.publicKey) != ab)
        // A rebuilt key has the same public half.
        let rebuilt = try X25519.PrivateKey(rawRepresentation: alice.rawRepresentation)
        #expect(rebuilt.publicKey == alice.publicKey)
    }

    @Test("malformed keys are refused")
    func malformedKeys() throws {
        let key = try X25519.PrivateKey()
        for count in [0, 31, 33] {
            #expect(throws: CryptoError.invalidPublicKey, "\(count)-byte peer key") {
                _ = try key.sharedSecret(with: [UInt8](repeating: 9, count: count))
            }
            #expect(throws: CryptoError.invalidKeySize, "\(count)-byte private key") {
                _ = try X25519.PrivateKey(rawRepresentation: SecretBytes(copying: [UInt8](repeating: 9, count: count)))
            }
        }
        // u = 0 and u = 1 are low-order points: the secret is all zero.
        for u: UInt8 in [0, 1] {
            #expect(throws: CryptoError.invalidPublicKey, "low-order peer u=\(u)") {
                _ = try key.sharedSecret(with: [u] + [UInt8](repeating: 0, count: 31))
            }
        }
    }
}
