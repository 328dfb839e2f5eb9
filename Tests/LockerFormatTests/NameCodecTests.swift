import Foundation
import LockerCrypto
import LockerFormat
import Testing

// NameCodec (deterministic encrypted names) and Base64URL.

let base64URLAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

func isBase64URL(_ s: String) -> Bool {
    s.unicodeScalars.allSatisfy { c in
        ("A"..."Z").contains(c) || ("a"..."z").contains(c) || ("0"..."9").contains(c) || c == "-" || c == "_"
    }
}

/// Unpadded base64url by way of Foundation's base64: an independent oracle.
func foundationBase64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

struct NameCase: Sendable, CustomTestStringConvertible {
    var label: String
    var name: String
    var testDescription: String { label }

    static let all: [NameCase] = [
        NameCase(label: "1 byte", name: "a"),
        NameCase(label: "2 bytes", name: "ab"),
        NameCase(label: "3 bytes", name: "abc"),
        NameCase(label: "ASCII", name: "Quarterly report (final) v2.pdf"),
        NameCase(label: "UTF-8 multibyte", name: "Ünïcødé 日本語 🙂 ğ"),
        NameCase(label: "1024 bytes ASCII", name: String(repeating: "x", count: 1024)),
        NameCase(label: "1024 bytes multibyte", name: String(repeating: "€", count: 341) + "a"),
        NameCase(label: "dots and slashes", name: "..."),
    ]
}

@Suite("Name codec")
struct NameCodecTests {
    @Test("encode then decode gives the name back", arguments: NameCase.all)
    func roundTrip(nameCase: NameCase) throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let name = nameCase.name
        let encoded = try NameCodec.encode(name, parentID: parent, keys: keys)
        #expect(isBase64URL(encoded))
        let rawCount = 12 + name.utf8.count + 16
        #expect(encoded.utf8.count == (rawCount * 4 + 2) / 3)
        #expect(try NameCodec.decode(encoded, parentID: parent, keys: keys) == name)
        // Under the root parent too.
        let atRoot = try NameCodec.encode(name, parentID: DirectoryRecord.rootParentID, keys: keys)
        #expect(try NameCodec.decode(atRoot, parentID: DirectoryRecord.rootParentID, keys: keys) == name)
    }

    @Test("the 1024-byte cases are the maximum name length")
    func maxLength() {
        #expect(NameCase.all.filter { $0.label.hasPrefix("1024") }.allSatisfy { $0.name.utf8.count == NameCodec.maxNameLength })
    }

    @Test("fileNameLength is the length of the file name each name length is stored under")
    func fileNameLengths() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        var hashed = 0
        for length in [0, 1, 2, 3, 100, 120, 121, 122, 123, 124, 125, 200, 255, 1024] + Array(115...130) {
            let name = String(repeating: "n", count: length)
            let stored = try NameCodec.fileName(forEncoded: try NameCodec.encode(name, parentID: parent, keys: keys))
            #expect(NameCodec.fileNameLength(nameLength: length) == stored.utf8.count, "\(length)-byte name")
            if stored.hasPrefix(NameCodec.longNamePrefix) { hashed += 1 }
        }
        // Both sides of the switch to hashed names were checked.
        #expect(hashed > 0 && hashed < 30)
    }

    @Test("a name is checked on its bytes: a slash before a combining mark is still a slash")
    func validNames() {
        for name in ["a", "caf\u{E9}", "\u{301}x", String(repeating: "n", count: 1024), "?q", ". ", "..."] {
            #expect(NameCodec.isValidName(name), "\(name)")
        }
        for name in ["", ".", "..", "a/b", "/\u{301}x", "d/\u{301}", "a\u{0}b", String(repeating: "n", count: 1025)] {
            #expect(!NameCodec.isValidName(name), "\(name.debugDescription)")
        }
        #expect("/\u{301}x".count == 2 && !"/\u{301}x".contains("/"), "the Character check this replaces would miss it")
    }

    @Test("names are the same only byte for byte, not when canonically equivalent")
    func sameBytes() {
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        #expect(composed == decomposed, "Swift's == takes them for one string")
        #expect(!composed.sameBytes(as: decomposed) && !decomposed.sameBytes(as: composed))
        // Equal bytes however each string was made: a literal, decoded
        // bytes, a slice made a String, one built by appending.
        let built = "ca" + "f" + "\u{E9}"
        let decoded = String(decoding: Array(composed.utf8), as: UTF8.self)
        let sliced = String("xcaf\u{E9}".dropFirst())
        for same in [composed, built, decoded, sliced] {
            #expect(composed.sameBytes(as: same) && same.sameBytes(as: composed))
        }
        // Differing in the last byte, in the first, or by one byte more.
        for other in ["caf\u{E8}", "daf\u{E9}", "caf\u{E9}x", "caf", ""] {
            #expect(!composed.sameBytes(as: other) && !other.sameBytes(as: composed), "\(other.debugDescription)")
        }
        #expect("".sameBytes(as: ""))
        let long = String(repeating: "n", count: 1024)
        #expect(long.sameBytes(as: String(repeating: "n", count: 1024)))
        #expect(!long.sameBytes(as: String(repeating: "n", count: 1023) + "m"))
    }

    @Test("the empty name round trips")
    func emptyName() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let encoded = try NameCodec.encode("", parentID: parent, keys: keys)
        #expect(try NameCodec.decode(encoded, parentID: parent, keys: keys) == "")
    }

    @Test("encoding is deterministic and depends on name, parent and keys")
    func determinism() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let other = try SecureRandom.bytes(16)
        let name = "notes.txt"
        let encoded = try NameCodec.encode(name, parentID: parent, keys: keys)
        #expect(try NameCodec.encode(name, parentID: parent, keys: keys) == encoded)
        #expect(try NameCodec.encode(name, parentID: other, keys: keys) != encoded)
        #expect(try NameCodec.encode(name, parentID: DirectoryRecord.rootParentID, keys: keys) != encoded)
        #expect(try NameCodec.encode("notes.txT", parentID: parent, keys: keys) != encoded)
        #expect(try NameCodec.encode(name, parentID: parent, keys: newMetadataKeys()) != encoded)
        // Parents that differ in one bit give unrelated nonces.
        var nearby = parent
        nearby[15] ^= 1
        let a = Array(encoded.utf8.prefix(16))
        let b = Array(try NameCodec.encode(name, parentID: nearby, keys: keys).utf8.prefix(16))
        #expect(a != b)
        // Many names in one directory: all distinct.
        let names = (0..<200).map { "file-\($0)" }
        let encodings = try Set(names.map { try NameCodec.encode($0, parentID: parent, keys: keys) })
        #expect(encodings.count == names.count)
    }

    @Test("a name decodes only under its own parent and keys")
    func wrongParentOrKeys() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let encoded = try NameCodec.encode("budget.xlsx", parentID: parent, keys: keys)
        var nearby = parent
        nearby[0] ^= 0x80
        for other in [try SecureRandom.bytes(16), nearby, DirectoryRecord.rootParentID, [], Array(parent.prefix(15)),
                      parent + [0]] {
            #expect(throws: CryptoError.authenticationFailure) { _ = try NameCodec.decode(encoded, parentID: other, keys: keys) }
        }
        #expect(throws: CryptoError.authenticationFailure) { _ = try NameCodec.decode(encoded, parentID: parent, keys: newMetadataKeys()) }
    }

    @Test("every single-character substitution is refused", arguments: [
        NameCase(label: "1 byte", name: "a"), NameCase(label: "2 bytes", name: "ab"),
        NameCase(label: "3 bytes", name: "abc"), NameCase(label: "ASCII", name: "secret.txt"),
    ])
    func substitutions(nameCase: NameCase) throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let encoded = Array(try NameCodec.encode(nameCase.name, parentID: parent, keys: keys))
        let replacements = base64URLAlphabet + ["+", "/", "=", ".", " ", "é", "\0"]
        var accepted: [String] = []
        for position in encoded.indices {
            for replacement in replacements where replacement != encoded[position] {
                var changed = encoded
                changed[position] = replacement
                let candidate = String(changed)
                if let decoded = try? NameCodec.decode(candidate, parentID: parent, keys: keys) {
                    accepted.append("\(candidate) -> \(decoded)")
                }
            }
        }
        #expect(accepted.isEmpty, "accepted: \(accepted.prefix(5))")
    }

    @Test("deleted, inserted or appended characters are refused")
    func insertionsAndDeletions() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let encoded = Array(try NameCodec.encode("secret.txt", parentID: parent, keys: keys))
        var candidates: [String] = []
        for position in encoded.indices {
            var deleted = encoded
            deleted.remove(at: position)
            candidates.append(String(deleted))
            var inserted = encoded
            inserted.insert("A", at: position)
            candidates.append(String(inserted))
        }
        candidates += [String(encoded) + "A", String(encoded) + "AA", String(encoded) + "AAAA", String(encoded.dropLast(4)),
                       "", "A", "AAAA", String(repeating: "A", count: 37), String(repeating: "A", count: 38)]
        let accepted = candidates.filter { (try? NameCodec.decode($0, parentID: parent, keys: keys)) != nil }
        #expect(accepted.isEmpty, "accepted: \(accepted.prefix(5))")
    }

    @Test("a validly sealed name under the wrong synthetic nonce is refused")
    func syntheticNonceCheck() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        let name = Array("forged.txt".utf8)
        // Control: sealing by hand with the documented nonce gives the
        // same encoding.
        let nonce = Array(try HMAC.authenticationCode(for: parent + name, key: keys.nameNonceKey).prefix(12))
        let proper = nonce + (try AESGCM.seal(name, key: keys.nameKey, nonce: AESGCM.Nonce(nonce), authenticating: parent))
        #expect(Base64URL.encode(proper) == (try NameCodec.encode("forged.txt", parentID: parent, keys: keys)))
        // A random nonce, or the nonce of another name: the tag verifies
        // but the nonce is not the one the name implies.
        let otherNonce = Array(try HMAC.authenticationCode(for: parent + Array("other".utf8), key: keys.nameNonceKey).prefix(12))
        for forgedNonce in [try SecureRandom.bytes(12), otherNonce] {
            let forged = forgedNonce + (try AESGCM.seal(name, key: keys.nameKey, nonce: AESGCM.Nonce(forgedNonce),
                                                       authenticating: parent))
            #expect(throws: CryptoError.authenticationFailure) {
                _ = try NameCodec.decode(Base64URL.encode(forged), parentID: parent, keys: keys)
            }
        }
        // Properly sealed bytes that are not UTF-8.
        let binary: [UInt8] = [0x66, 0xff, 0xfe]
        let binaryNonce = Array(try HMAC.authenticationCode(for: parent + binary, key: keys.nameNonceKey).prefix(12))
        let sealedBinary = binaryNonce + (try AESGCM.seal(binary, key: keys.nameKey, nonce: AESGCM.Nonce(binaryNonce),
                                                          authenticating: parent))
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try NameCodec.decode(Base64URL.encode(sealedBinary), parentID: parent, keys: keys)
        }
    }

    @Test("file names: short encodings as is, long ones hashed")
    func fileNames() throws {
        let keys = try newMetadataKeys()
        let parent = try SecureRandom.bytes(16)
        // 122 name bytes -> 150 raw bytes -> exactly 200 characters.
        let atLimit = try NameCodec.encode(String(repeating: "a", count: 122), parentID: parent, keys: keys)
        #expect(atLimit.utf8.count == NameCodec.maxEncodedLength)
        #expect(try NameCodec.fileName(forEncoded: atLimit) == atLimit)
        let over = try NameCodec.encode(String(repeating: "a", count: 123), parentID: parent, keys: keys)
        #expect(over.utf8.count == 202)
        for encoded in [over, try NameCodec.encode(String(repeating: "z", count: 1024), parentID: parent, keys: keys)] {
            let fileName = try NameCodec.fileName(forEncoded: encoded)
            #expect(fileName.hasPrefix(NameCodec.longNamePrefix))
            #expect(fileName.utf8.count == 45)
            #expect(isBase64URL(String(fileName.dropFirst(2))))
            #expect(fileName == "L." + Base64URL.encode(try Digest.hash(.sha256, Array(encoded.utf8))))
            #expect(try NameCodec.fileName(forEncoded: encoded) == fileName)
        }
        #expect(try NameCodec.fileName(forEncoded: over) != (try NameCodec.fileName(forEncoded: over + "A")))
        // The rule is on the encoded length alone.
        for length in [0, 1, 199, 200] {
            let s = String(repeating: "Q", count: length)
            #expect(try NameCodec.fileName(forEncoded: s) == s)
        }
        for length in [201, 202, 1000] {
            let fileName = try NameCodec.fileName(forEncoded: String(repeating: "Q", count: length))
            #expect(fileName.hasPrefix("L.") && fileName.utf8.count == 45)
        }
        // Short encoded names never start with "L.", so the two kinds
        // cannot collide.
        #expect(!isBase64URL(NameCodec.longNamePrefix))
    }
}

@Suite("Base64URL")
struct Base64URLTests {
    @Test("RFC 4648 test vectors")
    func rfcVectors() {
        let vectors: [(String, String)] = [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
        // The two characters that differ from standard base64.
        #expect(Base64URL.encode([0xfb, 0xff]) == "-_8")
        #expect(Base64URL.decode("-_8") == [0xfb, 0xff])
        #expect(Base64URL.encode([0xff, 0xff, 0xff]) == "____")
        #expect(Base64URL.encode([0xf8, 0x00, 0x00]) == "-AAA")
    }

    @Test("round trips of random bytes, lengths 0 to 40", arguments: 0...40)
    func roundTrip(length: Int) throws {
        for _ in 0..<8 {
            let bytes = try SecureRandom.bytes(length)
            let encoded = Base64URL.encode(bytes)
            #expect(encoded == foundationBase64URL(bytes))
            #expect(isBase64URL(encoded))
            #expect(Base64URL.decode(encoded) == bytes)
        }
    }

    @Test("every one- and two-byte value round trips")
    func exhaustiveShort() {
        var failures: [[UInt8]] = []
        for a in 0...255 {
            let one = [UInt8(a)]
            if Base64URL.decode(Base64URL.encode(one)) != one || Base64URL.encode(one) != foundationBase64URL(one) {
                failures.append(one)
            }
            for b in stride(from: 0, through: 255, by: 3) {
                let two = [UInt8(a), UInt8(b)]
                if Base64URL.decode(Base64URL.encode(two)) != two { failures.append(two) }
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(5))")
    }

    @Test("non-canonical trailing bits are refused")
    func nonCanonical() {
        #expect(Base64URL.decode("Zh") == nil)
        #expect(Base64URL.decode("Zm9") == nil)
        #expect(Base64URL.decode("Zm9vYh") == nil)
        // With one trailing byte, the second character's low 4 bits must be
        // zero; with two, the third character's low 2 bits.
        for (value, c) in base64URLAlphabet.enumerated() {
            #expect((Base64URL.decode("Z\(c)") != nil) == (value & 15 == 0), "Z\(c)")
            #expect((Base64URL.decode("Zm\(c)") != nil) == (value & 3 == 0), "Zm\(c)")
            #expect((Base64URL.decode("Zm9vZ\(c)") != nil) == (value & 15 == 0), "Zm9vZ\(c)")
        }
        // So every byte string has exactly one spelling.
        for s in ["Zg", "Zm8", "AA", "AAA", "__8", "_w"] {
            if let bytes = Base64URL.decode(s) { #expect(Base64URL.encode(bytes) == s) }
        }
    }

    @Test("invalid characters are refused")
    func invalidCharacters() {
        for s in ["Zm9v+", "Zm9v/", "Zm9v=", "Zg==", "Zg=", " Zm9v", "Zm9v ", "Zm9v\n", "Zm 9v", "Zé", "Zm9v.", "Z\0",
                  "Zm+v", "Zm/v", "Z\u{ff}"] {
            #expect(Base64URL.decode(s) == nil, "\(s.debugDescription)")
        }
    }

    @Test("lengths of 1 mod 4 are refused")
    func lengthOneModFour() {
        for s in ["A", "Z", "Zm9vY", "Zm9vYmFyZ", "AAAAA", String(repeating: "A", count: 41)] {
            #expect(Base64URL.decode(s) == nil, "\(s)")
        }
    }
}
