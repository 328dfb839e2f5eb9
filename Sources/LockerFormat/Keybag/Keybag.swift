public import LockerCrypto

/// The keybag: one wrapped class key per protection class, and the policy
/// that goes with them. See docs/format.md, "Keybag".
///
/// This type is bytes only. Unwrapping the class keys is the device's job.
public struct Keybag: Sendable, Equatable {
    /// The cost of the passcode KDF (scrypt), and its salt.
    public struct PasscodeKDF: Sendable, Equatable {
        public var logN: UInt8
        public var r: UInt32
        public var p: UInt32
        public var salt: [UInt8]

        public init(logN: UInt8, r: UInt32, p: UInt32, salt: [UInt8]) {
            self.logN = logN
            self.r = r
            self.p = p
            self.salt = salt
        }

        /// The log2 N a keybag holds; memory limits the top further
        /// (`PasswordKDF.scryptMemoryLimit`).
        public static let logNRange: ClosedRange<UInt8> = 10...22

        public var scryptParameters: PasswordKDF.ScryptParameters {
            .init(n: 1 << UInt64(logN), r: UInt64(r), p: UInt64(p))
        }
    }

    /// How an entry's class key is wrapped.
    public enum WrapType: UInt8, Sendable {
        /// RFC 3394 under a key derived from the device secret alone.
        case device = 1
        /// RFC 3394 under a key derived from the passcode and the device
        /// secret.
        case passcode = 2
    }

    /// One class key.
    public struct Entry: Sendable, Equatable {
        public var protectionClass: ProtectionClass
        public var wrapType: WrapType
        /// A random identifier of this class key.
        public var keyID: [UInt8]
        /// The key generation; `reset` starts a new one for A, B and C.
        public var keyGeneration: UInt32
        /// The wrapped 32-byte class key (for B, the wrapped X25519 private
        /// scalar): 40 bytes.
        public var wrappedKey: [UInt8]
        /// Class B's X25519 public key; empty for the others.
        public var publicKey: [UInt8]

        public init(
            protectionClass: ProtectionClass, wrapType: WrapType, keyID: [UInt8], keyGeneration: UInt32,
            wrappedKey: [UInt8], publicKey: [UInt8] = []
        ) {
            self.protectionClass = protectionClass
            self.wrapType = wrapType
            self.keyID = keyID
            self.keyGeneration = keyGeneration
            self.wrappedKey = wrappedKey
            self.publicKey = publicKey
        }
    }

    public static let magic: [UInt8] = Array("LKKB".utf8)
    public static let version: UInt16 = 1
    public static let keyIDByteCount = 16
    /// The longest grace period a keybag holds: a day.
    public static let maxGraceSeconds: UInt32 = 86_400
    /// The largest erase-after limit a keybag holds.
    public static let maxEraseAfter: UInt8 = 100

    /// Identifies this device's keybag across rewrites.
    public var uuid: [UInt8]
    /// Incremented on every rewrite; mirrored in the device record so that
    /// an older copy of the keybag is detected.
    public var generation: UInt64
    /// The current generation of the A, B and C keys.
    public var classKeyGeneration: UInt32
    /// Whether a passcode protects A, B and C.
    public var hasPasscode: Bool
    public var kdf: PasscodeKDF
    /// Seconds that class A and B keys stay after a lock.
    public var graceSeconds: UInt32
    /// Erase the device after this many failed passcode attempts; 0 means
    /// never.
    public var eraseAfter: UInt8
    /// The class new objects get when nothing else decides.
    public var defaultClass: ProtectionClass
    /// Exactly one entry per class, in class order.
    public var entries: [Entry]

    public init(
        uuid: [UInt8], generation: UInt64, classKeyGeneration: UInt32, hasPasscode: Bool, kdf: PasscodeKDF,
        graceSeconds: UInt32, eraseAfter: UInt8, defaultClass: ProtectionClass, entries: [Entry]
    ) {
        self.uuid = uuid
        self.generation = generation
        self.classKeyGeneration = classKeyGeneration
        self.hasPasscode = hasPasscode
        self.kdf = kdf
        self.graceSeconds = graceSeconds
        self.eraseAfter = eraseAfter
        self.defaultClass = defaultClass
        self.entries = entries
    }

    /// The entry for `protectionClass`.
    public func entry(for protectionClass: ProtectionClass) -> Entry {
        // `validate` guarantees exactly one entry per class.
        entries.first { $0.protectionClass == protectionClass }!
    }

    // MARK: Encoding

    static let header: [UInt8] = magic + [UInt8(version >> 8), UInt8(version & 0xff), 0, 0]

    /// Seals the keybag under `sealKey` (AES-256-GCM, random nonce, the
    /// 8-byte header as associated data) and returns the file's bytes.
    public func sealed(with sealKey: SecretBytes) throws -> [UInt8] {
        try validate()
        let nonce = try AESGCM.Nonce.random()
        let body = encodeBody()
        return Self.header + nonce.rawBytes + (try AESGCM.seal(body, key: sealKey, nonce: nonce, authenticating: Self.header))
    }

    /// Opens a keybag file. Structure errors are ``FormatError``; a failed
    /// authentication is ``CryptoError/authenticationFailure``. Nothing is
    /// decoded from the body before it is authenticated.
    public static func open(_ file: [UInt8], with sealKey: SecretBytes) throws -> Keybag {
        var reader = ByteReader(file)
        guard try reader.read(4) == magic else { throw FormatError.badMagic }
        let version = try reader.readUInt16()
        guard version == Self.version else { throw FormatError.unsupportedVersion(version) }
        guard try reader.readUInt16() == 0 else { throw FormatError.invalidField("reserved") }
        let nonce = try AESGCM.Nonce(try reader.read(AESGCM.nonceByteCount))
        guard reader.remaining >= AESGCM.tagByteCount, reader.remaining <= 4096 else { throw FormatError.truncated }
        let body = try AESGCM.open(try reader.read(reader.remaining), key: sealKey, nonce: nonce, authenticating: header)
        let keybag = try decodeBody(body)
        try keybag.validate()
        return keybag
    }

    func encodeBody() -> [UInt8] {
        var w = ByteWriter(capacity: 512)
        w.write(uuid)
        w.write(generation)
        w.write(classKeyGeneration)
        w.write(UInt8(hasPasscode ? 1 : 0))
        w.write(UInt8(1))  // KDF id: scrypt
        w.write(kdf.logN)
        w.write(kdf.r)
        w.write(kdf.p)
        w.write(UInt8(kdf.salt.count))
        w.write(kdf.salt)
        w.write(graceSeconds)
        w.write(eraseAfter)
        w.write(defaultClass.rawValue)
        w.write(UInt8(entries.count))
        for e in entries {
            w.write(e.protectionClass.rawValue)
            w.write(e.wrapType.rawValue)
            w.write(e.keyID)
            w.write(e.keyGeneration)
            w.write(UInt8(e.wrappedKey.count))
            w.write(e.wrappedKey)
            w.write(UInt8(e.publicKey.count))
            w.write(e.publicKey)
        }
        return w.bytes
    }

    static func decodeBody(_ body: [UInt8]) throws -> Keybag {
        var r = ByteReader(body)
        let uuid = try r.read(16)
        let generation = try r.readUInt64()
        let classKeyGeneration = try r.readUInt32()
        let passcodeFlag = try r.readUInt8()
        guard passcodeFlag <= 1 else { throw FormatError.invalidField("passcode flag") }
        guard try r.readUInt8() == 1 else { throw FormatError.invalidField("kdf") }
        let logN = try r.readUInt8()
        let kr = try r.readUInt32()
        let kp = try r.readUInt32()
        let salt = try r.read(Int(try r.readUInt8()))
        let grace = try r.readUInt32()
        let eraseAfter = try r.readUInt8()
        guard let defaultClass = ProtectionClass(rawValue: try r.readUInt8()) else {
            throw FormatError.invalidField("default class")
        }
        let count = try r.readUInt8()
        var entries: [Entry] = []
        for _ in 0..<count {
            guard let cls = ProtectionClass(rawValue: try r.readUInt8()) else { throw FormatError.invalidField("class") }
            guard let wrap = WrapType(rawValue: try r.readUInt8()) else { throw FormatError.invalidField("wrap type") }
            let keyID = try r.read(keyIDByteCount)
            let keyGeneration = try r.readUInt32()
            let wrapped = try r.read(Int(try r.readUInt8()))
            let publicKey = try r.read(Int(try r.readUInt8()))
            entries.append(Entry(protectionClass: cls, wrapType: wrap, keyID: keyID, keyGeneration: keyGeneration,
                                 wrappedKey: wrapped, publicKey: publicKey))
        }
        try r.expectEnd()
        return Keybag(uuid: uuid, generation: generation, classKeyGeneration: classKeyGeneration,
                      hasPasscode: passcodeFlag == 1,
                      kdf: PasscodeKDF(logN: logN, r: kr, p: kp, salt: salt), graceSeconds: grace,
                      eraseAfter: eraseAfter, defaultClass: defaultClass, entries: entries)
    }

    /// Checks every rule of the format. Sealing refuses, and opening
    /// rejects, a keybag that breaks one.
    public func validate() throws {
        guard uuid.count == 16 else { throw FormatError.invalidField("uuid") }
        guard PasscodeKDF.logNRange.contains(kdf.logN), (1...32).contains(kdf.r), (1...16).contains(kdf.p),
              kdf.scryptParameters.memoryByteCount <= PasswordKDF.scryptMemoryLimit
        else { throw FormatError.invalidField("kdf parameters") }
        guard kdf.salt.count == 32 else { throw FormatError.invalidField("salt") }
        guard graceSeconds <= Self.maxGraceSeconds else { throw FormatError.invalidField("grace") }
        guard eraseAfter <= Self.maxEraseAfter else { throw FormatError.invalidField("erase after") }
        // The top of the range is damage: `reset` counts up from here, and
        // no device resets four billion times.
        guard classKeyGeneration < UInt32.max else { throw FormatError.invalidField("class key generation") }
        guard entries.map(\.protectionClass) == ProtectionClass.allCases else {
            throw FormatError.invalidField("entries")
        }
        for e in entries {
            guard e.keyID.count == Self.keyIDByteCount, e.wrappedKey.count == AESKeyWrap.wrappedKeyByteCount else {
                throw FormatError.invalidField("entry")
            }
            let expectedWrap: WrapType = e.protectionClass == .none ? .device : .passcode
            guard e.wrapType == expectedWrap else { throw FormatError.invalidField("wrap type") }
            let expectedPublic = e.protectionClass == .completeUnlessOpen ? X25519.byteCount : 0
            guard e.publicKey.count == expectedPublic else { throw FormatError.invalidField("public key") }
            if e.protectionClass != .none {
                guard e.keyGeneration == classKeyGeneration else { throw FormatError.invalidField("key generation") }
            }
        }
    }
}
