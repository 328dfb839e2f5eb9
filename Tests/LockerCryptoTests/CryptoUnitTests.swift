import Foundation
import LockerCrypto
import Testing
import Synchronization

// Serialized: two of these tests fill the secure heap, which sends the
// others' secrets to pages of their own for as long as they run.
@Suite("SecretBytes", .serialized)
struct SecretBytesTests {
    @Test("== compares contents: equal, unequal at the same length, different lengths")
    func equality() {
        let bytes: [UInt8] = (0..<32).map { UInt8($0) }
        let a = SecretBytes(copying: bytes)
        let b = SecretBytes(copying: bytes)
        #expect(a == b)
        #expect(a == a)
        for index in [0, 15, 31] {
            var changed = bytes
            changed[index] ^= 0x80
            #expect(a != SecretBytes(copying: changed), "differs at byte \(index)")
        }
        #expect(a != SecretBytes(copying: bytes.dropLast()))
        #expect(a != SecretBytes(copying: bytes + [0]))
        #expect(SecretBytes(copying: []) == SecretBytes(copying: []))
        #expect(SecretBytes(copying: []) != SecretBytes(copying: [0]))
    }

    @Test("copying takes exactly the bytes of an array, a slice, Data, and a sequence with no storage of its own")
    func copyingEveryKindOfSequence() {
        let bytes: [UInt8] = (0..<40).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        func contents(_ secret: SecretBytes) -> [UInt8] { secret.withUnsafeBytes { Array($0) } }
        #expect(contents(SecretBytes(copying: bytes)) == bytes)
        #expect(contents(SecretBytes(copying: bytes[3..<17])) == Array(bytes[3..<17]))
        #expect(contents(SecretBytes(copying: bytes[5..<5])) == [])
        #expect(contents(SecretBytes(copying: Data(bytes).dropFirst(9))) == Array(bytes.dropFirst(9)))
        #expect(contents(SecretBytes(copying: bytes.lazy.map { $0 ^ 0xFF })) == bytes.map { $0 ^ 0xFF })
        #expect(contents(SecretBytes(copying: stride(from: 0, to: 200, by: 50).lazy.map { UInt8($0) })) == [0, 50, 100, 150])
        // The source is left as it was.
        #expect(bytes == (0..<40).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    }

    @Test("secrets beyond what the secure heap holds keep their bytes, and the heap is usable again after release")
    func manySecrets() throws {
        // 12,000 × 32 bytes and 4 × 100 KiB outgrow the 256 KiB arena, so
        // both placements are exercised, interleaved.
        for _ in 0..<2 {
            var secrets: [(SecretBytes, [UInt8])] = []
            for i in 0..<12_004 {
                let size = i % 3_000 == 2_999 ? 100 << 10 : 32
                let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ i) }
                secrets.append((SecretBytes(copying: bytes), bytes))
            }
            for (secret, bytes) in secrets {
                #expect(secret.count == bytes.count)
                #expect(secret.withUnsafeBytes { Array($0) } == bytes)
            }
        }
    }

    @Test("with the secure heap full of secrets, a new thread still draws random bytes and seals")
    func secretsLeaveRoomForLibcrypto() throws {
        // More than the 256 KiB arena holds.
        let secrets = (0..<12_000).map { _ in SecretBytes(copying: [UInt8](repeating: 0x5A, count: 32)) }
        // A thread that has never drawn random bytes: libcrypto makes its
        // generators for it now, in the arena.
        let outcome = Mutex<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            do {
                let key = try SecretBytes(randomCount: 32)
                let cipher = try AESGCMCipher(key: key)
                var sealed = [UInt8](repeating: 0, count: 16 + 4)
                let message: [UInt8] = [1, 2, 3, 4]
                try message.withUnsafeBytes { m in
                    try sealed.withUnsafeMutableBytes { out in
                        try cipher.seal(m, nonce: try .random(), authenticating: UnsafeRawBufferPointer(start: nil, count: 0), into: out)
                    }
                }
                outcome.withLock { $0 = "ok" }
            } catch {
                outcome.withLock { $0 = "\(error)" }
            }
            done.signal()
        }
        done.wait()
        withExtendedLifetime(secrets) {}
        #expect(outcome.withLock { $0 } == "ok")
    }

    @Test("a key-size block released on a thread comes back to that thread's next secret wiped", arguments: [32, 16, 1])
    func sparesComeBackWiped(size: Int) {
        let outcome = Mutex<(reused: Int, dirty: Int)?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var seen: Set<UInt> = []
            var reused = 0
            var dirty = 0
            do {
                for round in 0..<40 {
                    // Filled whole, then released at once: its block goes
                    // to this thread's spares.
                    let secret = try SecretBytes(count: size) { buffer in
                        let address = UInt(bitPattern: buffer.baseAddress)
                        if round > 0, seen.contains(address) { reused += 1 }
                        seen.insert(address)
                        if buffer.contains(where: { $0 != 0 }) { dirty += 1 }
                        buffer.initializeMemory(as: UInt8.self, repeating: 0xA5)
                    }
                    withExtendedLifetime(secret) {}
                }
                outcome.withLock { $0 = (reused, dirty) }
            } catch {
                outcome.withLock { $0 = (-1, -1) }
            }
            done.signal()
        }
        done.wait()
        let result = outcome.withLock { $0 }
        #expect(result?.dirty == 0, "a secret began with another's bytes")
        // Blocks were reused (from the spares, or from the arena's own free
        // list, which zeroes them), or the check above proves nothing.
        #expect((result?.reused ?? 0) >= 1)
    }

    @Test("description and debugDescription are redacted")
    func redacted() {
        let bytes: [UInt8] = [0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        let secret = SecretBytes(copying: bytes)
        for text in [secret.description, secret.debugDescription, String(describing: secret), "\(secret)",
                     String(reflecting: secret)] {
            #expect(!text.lowercased().contains(bytes.hex), "\(text) shows the bytes")
            #expect(!text.lowercased().contains("deadbeef"), "\(text) shows the bytes")
            #expect(!text.contains("222"), "\(text) shows a decimal byte")
        }
        #expect(secret.description.contains("12 bytes"))
    }

    @Test("random secrets have the requested size and differ")
    func random() throws {
        let a = try SecretBytes(randomCount: 32)
        let b = try SecretBytes(randomCount: 32)
        #expect(a.count == 32)
        #expect(a != b)
    }

    @Test("secrets drawn together: the number asked for, each of its length, all different", arguments: [0, 1, 31, 32, 33, 100])
    func randomTogether(number: Int) throws {
        // 32 secrets of 32 bytes are drawn per call to the generator: these
        // numbers end before, at and past a draw's end, and span several.
        let secrets = try SecretBytes.random(number, count: 32)
        #expect(secrets.count == number)
        #expect(secrets.allSatisfy { $0.count == 32 })
        let contents = Set(secrets.map { $0.withUnsafeBytes { Array($0) } })
        #expect(contents.count == number)
        #expect(!contents.contains([UInt8](repeating: 0, count: 32)))
        // A length that does not divide the draw.
        let odd = try SecretBytes.random(50, count: 48)
        #expect(odd.map(\.count) == [Int](repeating: 48, count: 50))
        #expect(Set(odd.map { $0.withUnsafeBytes { Array($0) } }).count == 50)
    }

    @Test("wipe zeroes a transient copy in place, whatever its length")
    func wipeTransientCopy() throws {
        for count in [0, 1, 32, 4097] {
            var bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 * 7 + 1) }
            let before = bytes.count
            SecretBytes.wipe(&bytes)
            #expect(bytes.count == before)
            #expect(bytes.allSatisfy { $0 == 0 })
        }
        // Through a pointer to the same storage: the wipe wrote there, not
        // to a copy.
        var key = [UInt8](repeating: 0xA5, count: 32)
        let address = key.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
        SecretBytes.wipe(&key)
        #expect(key.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) } == address)
        #expect(key == [UInt8](repeating: 0, count: 32))
    }

    @Test("constantTimeEquals")
    func constantTime() {
        #expect(constantTimeEquals([], []))
        #expect(constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(!constantTimeEquals([], [0]))
    }
}

@Suite("Digest")
struct DigestTests {
    @Test("SHA-256 and SHA-512 of \"abc\" (FIPS 180-2 examples)")
    func knownAnswers() throws {
        #expect(try Digest.hash(.sha256, Array("abc".utf8)).hex
            == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(try Digest.hash(.sha512, Array("abc".utf8)).hex
            == "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
            + "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")
        #expect(try Digest.hash(.sha256, []).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test("oneStepKDF is SHA-256(00000001 || z || otherInfo)", arguments: [0, 1, 47, 200])
    func oneStepKDF(otherInfoLength: Int) throws {
        let z: [UInt8] = (0..<32).map { UInt8(($0 * 7 + 3) & 0xff) }
        let otherInfo: [UInt8] = (0..<otherInfoLength).map { UInt8(($0 * 13 + 1) & 0xff) }
        let derived = try Digest.oneStepKDF(sharedSecret: SecretBytes(copying: z), otherInfo: otherInfo)
        let expected = try Digest.hash(.sha256, [0, 0, 0, 1] + z + otherInfo)
        #expect(derived == SecretBytes(copying: expected), "got \(exposed(derived).hex), expected \(expected.hex)")
        #expect(derived.count == 32)
    }
}

@Suite("AES-GCM behaviour")
struct AESGCMBehaviourTests {
    static let key = SecretBytes(copying: (0..<32).map { UInt8($0 ^ 0x5c) })
    static let aad: [UInt8] = Array("header".utf8)
    static let plaintext: [UInt8] = Array("attack at dawn, bring the keys".utf8)

    @Test("flipping any bit of ciphertext, tag or aad gives authenticationFailure")
    func tamper() throws {
        let nonce = try AESGCM.Nonce.random()
        let sealed = try AESGCM.seal(Self.plaintext, key: Self.key, nonce: nonce, authenticating: Self.aad)
        #expect(sealed.count == Self.plaintext.count + AESGCM.tagByteCount)
        #expect(try AESGCM.open(sealed, key: Self.key, nonce: nonce, authenticating: Self.aad) == Self.plaintext)

        // Ciphertext bytes, then tag bytes.
        for index in sealed.indices {
            for bit in [0, 7] {
                var tampered = sealed
                tampered[index] ^= 1 << bit
                let part = index < Self.plaintext.count ? "ciphertext" : "tag"
                #expect(throws: CryptoError.authenticationFailure, "\(part) byte \(index) bit \(bit)") {
                    _ = try AESGCM.open(tampered, key: Self.key, nonce: nonce, authenticating: Self.aad)
                }
            }
        }
        for index in Self.aad.indices {
            var aad = Self.aad
            aad[index] ^= 0x01
            #expect(throws: CryptoError.authenticationFailure, "aad byte \(index)") {
                _ = try AESGCM.open(sealed, key: Self.key, nonce: nonce, authenticating: aad)
            }
        }
        #expect(throws: CryptoError.authenticationFailure, "aad dropped") {
            _ = try AESGCM.open(sealed, key: Self.key, nonce: nonce)
        }
        #expect(throws: CryptoError.authenticationFailure, "truncated") {
            _ = try AESGCM.open(Array(sealed.dropLast()), key: Self.key, nonce: nonce, authenticating: Self.aad)
        }
        #expect(throws: CryptoError.authenticationFailure, "shorter than a tag") {
            _ = try AESGCM.open(Array(sealed.prefix(15)), key: Self.key, nonce: nonce, authenticating: Self.aad)
        }
        var otherNonce = nonce.rawBytes
        otherNonce[0] ^= 1
        #expect(throws: CryptoError.authenticationFailure, "wrong nonce") {
            _ = try AESGCM.open(sealed, key: Self.key, nonce: AESGCM.Nonce(otherNonce), authenticating: Self.aad)
        }
    }

    @Test("AESGCMCipher seals and opens in place on one buffer")
    func inPlace() throws {
        let cipher = try AESGCMCipher(key: Self.key)
        let nonce = try AESGCM.Nonce((0..<12).map { UInt8($0) })
        let count = Self.plaintext.count
        let expected = try AESGCM.seal(Self.plaintext, key: Self.key, nonce: nonce, authenticating: Self.aad)

        var buffer = Self.plaintext + [UInt8](repeating: 0, count: AESGCM.tagByteCount)
        try buffer.withUnsafeMutableBytes { raw in
            try Self.aad.withUnsafeBytes { aad in
                try cipher.seal(UnsafeRawBufferPointer(rebasing: raw[..<count]), nonce: nonce, authenticating: aad, into: raw)
            }
        }
        #expect(buffer == expected, "in-place seal differs from out-of-place seal")

        let opened = try buffer.withUnsafeMutableBytes { raw in
            try Self.aad.withUnsafeBytes { aad in
                try cipher.open(UnsafeRawBufferPointer(raw), nonce: nonce, authenticating: aad, into: raw)
            }
        }
        #expect(opened == count)
        #expect(Array(buffer[..<count]) == Self.plaintext, "in-place open did not restore the plaintext")

        // In-place open of a tampered buffer fails and leaves no plaintext.
        var tampered = expected
        tampered[3] ^= 0x10
        #expect(throws: CryptoError.authenticationFailure) {
            try tampered.withUnsafeMutableBytes { raw in
                try Self.aad.withUnsafeBytes { aad in
                    _ = try cipher.open(UnsafeRawBufferPointer(raw), nonce: nonce, authenticating: aad, into: raw)
                }
            }
        }
        #expect(tampered[..<count].allSatisfy { $0 == 0 }, "unverified plaintext survived a failed open")
    }

    @Test("one cipher seals many messages, including empty ones")
    func reuse() throws {
        let cipher = try AESGCMCipher(key: Self.key)
        for length in [0, 1, 15, 16, 17, 1000] {
            let message = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let nonce = try AESGCM.Nonce.random()
            var sealed = [UInt8](repeating: 0, count: length + 16)
            try message.withUnsafeBytes { m in
                try sealed.withUnsafeMutableBytes { out in
                    try cipher.seal(m, nonce: nonce, authenticating: UnsafeRawBufferPointer(start: nil, count: 0), into: out)
                }
            }
            #expect(sealed == (try AESGCM.seal(message, key: Self.key, nonce: nonce)), "length \(length)")
            #expect(try AESGCM.open(sealed, key: Self.key, nonce: nonce) == message, "length \(length)")
        }
    }
}

@Suite("SecretBytes initializer failure")
struct SecretBytesInitFailureTests {
    struct Refused: Error, Equatable {}

    @Test("a throwing initializer propagates its error and releases the storage once")
    func throwingInitializer() {
        // Regression: the storage used to be released both in the catch path
        // and again by deinit (a class init that throws after full
        // initialization still runs deinit), corrupting the heap on the
        // first all-zero X25519 secret or failed KDF.
        for count in [0, 1, 32, 5000] {
            for _ in 0..<64 {
                #expect(throws: Refused(), "count \(count)") {
                    _ = try SecretBytes(count: count) { buffer in
                        if !buffer.isEmpty { buffer[0] = 0xaa }
                        throw Refused()
                    }
                }
            }
        }
        // The allocator is still healthy.
        let after = (0..<64).map { SecretBytes(copying: [UInt8](repeating: UInt8($0), count: 48)) }
        #expect(after.allSatisfy { $0.count == 48 })
    }
}
