import Foundation
import LockerCrypto
import Synchronization
import Testing

// Wycheproof hmac_sha256_test.json against HMAC.
//
// Groups with tagSize 256 use HMAC.isValid (and authenticationCode must equal
// the tag for valid cases). Groups with tagSize 128 are truncated tags: the
// full MAC is computed and its 16-byte prefix is compared in constant time
// with constantTimeEquals; valid must match, invalid must not.

struct MacGroup: Decodable, Sendable {
    let type: String
    let keySize: Int
    let tagSize: Int
    let tests: [MacCase]
}

struct MacCase: Decodable, Sendable {
    let tcId: Int
    let comment: String
    let flags: [String]
    let key: HexBytes
    let msg: HexBytes
    let tag: HexBytes
    let result: WycheproofResult
}

@Suite("HMAC vectors")
struct HMACVectorTests {
    @Test("wycheproof hmac_sha256_test.json")
    func wycheproofHMAC() throws {
        let file = "hmac_sha256_test.json"
        let vectors: WycheproofFile<MacGroup> = try Vectors.load(file)
        var run = VectorRun(file, vectors)
        for group in vectors.testGroups {
            #expect(group.type == "MacTest", "\(file): unexpected group type \(group.type)")
            #expect(group.tagSize == 128 || group.tagSize == 256, "\(file): unexpected tagSize \(group.tagSize)")
            run.each(group.tests, tcId: \.tcId, result: \.result) { tc, run in
                let id = run.id(tc.tcId)
                #expect(tc.key.count * 8 == group.keySize, "\(id): key length disagrees with keySize")
                #expect(tc.tag.count * 8 == group.tagSize, "\(id): tag length disagrees with tagSize")
                let key = SecretBytes(copying: tc.key.bytes)
                let full = try HMAC.authenticationCode(.sha256, for: tc.msg.bytes, key: key)
                #expect(full.count == 32, "\(id): MAC is not 32 bytes")
                let matches: Bool
                if group.tagSize == 256 {
                    run.count("fullTag")
                    matches = try HMAC.isValid(tc.tag.bytes, .sha256, for: tc.msg.bytes, key: key)
                    #expect(matches == constantTimeEquals(full, tc.tag.bytes), "\(id): isValid disagrees with the MAC")
                } else {
                    run.count("truncatedTag")
                    matches = constantTimeEquals(Array(full.prefix(tc.tag.count)), tc.tag.bytes)
                    // A truncated tag is never a valid full-length tag.
                    #expect(try !HMAC.isValid(tc.tag.bytes, .sha256, for: tc.msg.bytes, key: key),
                            "\(id): isValid accepted a truncated tag")
                }
                switch tc.result {
                case .valid:
                    #expect(matches, "\(id): MAC \(full.hex) does not match tag \(tc.tag.bytes.hex)")
                    return .valid
                case .invalid:
                    #expect(!matches, "\(id): modified tag \(tc.tag.bytes.hex) was accepted")
                    return .invalid
                case .acceptable:
                    Issue.record("\(id): no acceptable HMAC cases are expected; decide how to treat this one")
                    return .acceptable
                }
            }
        }
        run.finish(expecting: VectorCounts(valid: 66, invalid: 108), details: ["fullTag": 87, "truncatedTag": 87])
    }

    @Test("RFC 4231 test case 2 and the empty key")
    func knownAnswers() throws {
        // RFC 4231 section 4.3: key "Jefe", data "what do ya want for nothing?".
        let mac = try HMAC.authenticationCode(for: Array("what do ya want for nothing?".utf8),
                                              key: SecretBytes(copying: Array("Jefe".utf8)))
        #expect(mac.hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // An empty key is legal HMAC (RFC 2104 pads it with zeros).
        let empty = try HMAC.authenticationCode(for: [], key: SecretBytes(copying: []))
        #expect(empty.hex == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test("RFC 4231 test cases 1 and 2, HMAC-SHA-512")
    func sha512KnownAnswers() throws {
        // RFC 4231 section 4.2: key 0x0b x 20, data "Hi There".
        let first = try HMAC.authenticationCode(.sha512, for: Array("Hi There".utf8),
                                                key: SecretBytes(copying: [UInt8](repeating: 0x0b, count: 20)))
        #expect(first.hex == "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cde"
            + "daa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854")
        // Section 4.3.
        let second = try HMAC.authenticationCode(.sha512, for: Array("what do ya want for nothing?".utf8),
                                                 key: SecretBytes(copying: Array("Jefe".utf8)))
        #expect(second.hex == "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554"
            + "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737")
    }

    @Test("MACs on many threads at once, and on threads that end, match the same MACs on one")
    func concurrentMACs() throws {
        // Each thread keeps its own scratch for the padded key: threads
        // that run MACs together must not see each other's. These threads
        // end, so the scratch's destructor runs for each (a release too
        // many would crash here; one too few, a leak, would not show).
        let keys = (0..<16).map { i in SecretBytes(copying: [UInt8](repeating: UInt8(i), count: 20 + 9 * i)) }
        let messages = (0..<16).map { i in [UInt8](repeating: UInt8(0x80 + i), count: 3 * i) }
        let expected = try (0..<16).map { i in
            try HMAC.authenticationCode(i % 2 == 0 ? .sha256 : .sha512, for: messages[i], key: keys[i])
        }
        let mismatches = Mutex(0)
        let done = DispatchGroup()
        for t in 0..<32 {
            done.enter()
            let thread = Thread {
                defer { done.leave() }
                for round in 0..<50 {
                    let i = (t + round) % 16
                    let mac = try? HMAC.authenticationCode(i % 2 == 0 ? .sha256 : .sha512, for: messages[i], key: keys[i])
                    if mac != expected[i] { mismatches.withLock { $0 += 1 } }
                }
            }
            thread.start()
        }
        done.wait()
        #expect(mismatches.withLock { $0 } == 0)
    }

    @Test("keys of exactly a block are used as they are, longer ones hashed", arguments: [
        (HashFunction.sha256, 64, "9d7511a811179048a4676d7062b657e6a85e0a987220bc130cc070306521ca6e"),
        (.sha512, 65, "b7ecd25577db125c05b6bf5190c818db5507abce3f568b96c4d9059497870a7c"
            + "590ed8640d53e6463d974150d82a324e94356a7f85aad33829631bac256132d2"),
        (.sha512, 100, "f156ce26de1d2c769af2ba0967d11c6590d6738e498f6ad4f34d822ee4f820a5"
            + "6b71612649749cabf13f002cc9984b24468cf17d298cfefc53706ef03e0c39cb"),
        (.sha512, 128, "a8af5812f81c709a54d8169371a2fa39c1b65f021ab4f43e1efa704a9ce682c6"
            + "d3249592d361e3db6afa03e5125c2c8bcdde373c4463802dad45fdfc0a18ddda"),
        (.sha512, 129, "5dd8d9c91ad7ae43fae1aa8379e7f22d2cba49533170b3ece959b442bd854558"
            + "46c5c3576e084451b20c4297823224eda6bd257e9bc02e87b30dd2286f2803d0"),
    ])
    func blockLengthKeys(hash: HashFunction, keyLength: Int, expected: String) throws {
        // Key bytes 0, 1, 2, ...; the values come from Python's hmac module
        // (CPython over OpenSSL's own HMAC), not from this implementation.
        // SHA-256's block is 64 bytes and SHA-512's 128: a key of exactly a
        // block is padded, not hashed, and one byte more is hashed.
        let key = SecretBytes(copying: (0..<keyLength).map { UInt8($0) })
        let mac = try HMAC.authenticationCode(hash, for: Array("Locker block-length key".utf8), key: key)
        #expect(mac.hex == expected)
    }

    @Test("RFC 4231 test cases 6 and 7: a key longer than the block is hashed first")
    func longKeyKnownAnswers() throws {
        // RFC 4231 sections 4.7 and 4.8: key 0xaa x 131, longer than
        // SHA-256's 64-byte block and SHA-512's 128-byte block.
        let key = SecretBytes(copying: [UInt8](repeating: 0xaa, count: 131))
        let six = Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8)
        #expect(try HMAC.authenticationCode(.sha256, for: six, key: key).hex
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        #expect(try HMAC.authenticationCode(.sha512, for: six, key: key).hex
            == "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f352"
            + "6b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598")
        let seven = Array(("This is a test using a larger than block-size key and a larger than block-size data. "
            + "The key needs to be hashed before being used by the HMAC algorithm.").utf8)
        #expect(try HMAC.authenticationCode(.sha512, for: seven, key: key).hex
            == "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944"
            + "b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58")
    }
}
