import LockerCrypto
import LockerFormat
import Testing

@Suite struct KeybagTests {
    /// A keybag that keeps every rule, at class key generation `generation`.
    static func keybag(classKeyGeneration generation: UInt32) -> Keybag {
        let entries = ProtectionClass.allCases.map { cls in
            Keybag.Entry(protectionClass: cls, wrapType: cls == .none ? .device : .passcode,
                         keyID: [UInt8](repeating: cls.rawValue, count: Keybag.keyIDByteCount),
                         keyGeneration: cls == .none ? 1 : generation,
                         wrappedKey: [UInt8](repeating: 7, count: 40),
                         publicKey: cls == .completeUnlessOpen ? [UInt8](repeating: 9, count: 32) : [])
        }
        return Keybag(uuid: [UInt8](repeating: 1, count: 16), generation: 3, classKeyGeneration: generation, hasPasscode: true,
                      kdf: .init(logN: 12, r: 8, p: 1, salt: [UInt8](repeating: 2, count: 32)), graceSeconds: 10,
                      eraseAfter: 0, defaultClass: .completeUntilFirstUserAuthentication, entries: entries)
    }

    @Test func theLastClassKeyGenerationIsRefusedSoResetCannotOverflowIt() throws {
        let sealKey = try SecretBytes(randomCount: 32)
        for generation: UInt32 in [1, 2, UInt32.max - 1] {
            let opened = try Keybag.open(Self.keybag(classKeyGeneration: generation).sealed(with: sealKey), with: sealKey)
            #expect(opened.classKeyGeneration == generation)
        }
        #expect(throws: FormatError.invalidField("class key generation")) {
            try Self.keybag(classKeyGeneration: .max).sealed(with: sealKey)
        }
    }
}
