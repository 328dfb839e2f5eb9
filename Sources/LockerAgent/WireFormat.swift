internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat
internal import LockerIO

/// The agent protocol's constants and field codecs. docs/agent-protocol.md
/// is the specification; this file follows it.
enum WireFormat {
    static let version: UInt16 = 1
    /// The largest payload of one frame.
    static let maxPayloadBytes = 64 << 10
    /// The largest status document (split over continuation frames).
    /// Room for the largest open-object table: `Device.maxOpenObjects`
    /// entries whose IDs are ``maxObjectIDBytes`` of control characters,
    /// which JSON escapes to six bytes each (`\u0001`), come to about
    /// 4096 × (6 × 1024 + 62) bytes, 24.3 MiB.
    static let maxStatusBytes = 32 << 20
    static let maxPasscodeBytes = 1024
    static let maxObjectIDBytes = 1024
    static let maxErrorStringBytes = 4096
    static let fileKeyBytes = 32
    static let publicKeyBytes = 32

    /// The first byte of a response frame.
    enum ResponseKind: UInt8 {
        case ok = 0x00
        case error = 0x01
        case continuation = 0x02
        case event = 0x03
    }

    enum Opcode: UInt8 {
        case ping = 0x01
        case status = 0x02
        case initialize = 0x03
        case unlock = 0x04
        case lock = 0x05
        case changePasscode = 0x06
        case reset = 0x07
        case wipe = 0x08
        case metadataKey = 0x09
        case classBPublicKey = 0x0A
        case wrap = 0x0B
        case unwrap = 0x0C
        case rewrap = 0x0D
        case open = 0x0E
        case registerOpen = 0x0F
        case openFileKey = 0x10
        case close = 0x11
        case watch = 0x12
        case reboot = 0x13
        case wrapMany = 0x14
        case unwrapMany = 0x15
    }

    /// The most keys one wrapMany or unwrapMany request carries.
    static let maxKeysPerRequest = 256

    /// Thrown by every decoder on bytes that break the protocol.
    struct Malformed: Error {}

    // MARK: Field codecs

    static func readBool(_ r: inout ByteReader) throws -> Bool {
        switch try r.readUInt8() {
        case 0: return false
        case 1: return true
        default: throw Malformed()
        }
    }

    static func readClass(_ r: inout ByteReader) throws -> ProtectionClass {
        guard let cls = ProtectionClass(rawValue: try r.readUInt8()) else { throw Malformed() }
        return cls
    }

    /// A UTF-8 string with a u16 length, `minBytes...maxBytes` long.
    static func readString(_ r: inout ByteReader, minBytes: Int = 0, maxBytes: Int) throws -> String {
        let count = Int(try r.readUInt16())
        guard count >= minBytes, count <= maxBytes else { throw Malformed() }
        let bytes = try r.read(count)
        guard let string = String(validating: bytes, as: UTF8.self) else { throw Malformed() }
        return string
    }

    static func writeString(_ w: inout ByteWriter, _ string: String) {
        let bytes = Array(string.utf8)
        w.write(UInt16(bytes.count))
        w.write(bytes)
    }

    /// `string` cut to at most `maxBytes` of UTF-8, on a scalar boundary.
    static func clipped(_ string: String, maxBytes: Int = maxErrorStringBytes) -> String {
        guard string.utf8.count > maxBytes else { return string }
        var out = String.UnicodeScalarView()
        var used = 0
        for scalar in string.unicodeScalars {
            let n = String(scalar).utf8.count
            guard used + n <= maxBytes else { break }
            out.append(scalar)
            used += n
        }
        return String(out)
    }

    static func readObjectID(_ r: inout ByteReader) throws -> String {
        try readString(&r, minBytes: 1, maxBytes: maxObjectIDBytes)
    }

    /// A secret with a u16 length, copied into wiping storage; the
    /// temporary copy is zeroed.
    static func readSecret(_ r: inout ByteReader, maxBytes: Int) throws -> SecretBytes {
        let count = Int(try r.readUInt16())
        guard count <= maxBytes else { throw Malformed() }
        return try readFixedSecret(&r, count: count)
    }

    static func readFixedSecret(_ r: inout ByteReader, count: Int) throws -> SecretBytes {
        var bytes = try r.read(count)
        defer { SecretBytes.wipe(&bytes) }
        return SecretBytes(copying: bytes)
    }

    static func writeSecret(_ w: inout ByteWriter, _ secret: SecretBytes, lengthPrefixed: Bool) {
        if lengthPrefixed { w.write(UInt16(secret.count)) }
        var bytes = secret.withUnsafeBytes { Array($0) }
        defer { SecretBytes.wipe(&bytes) }
        w.write(bytes)
    }

    static func readOptionalPasscode(_ r: inout ByteReader) throws -> SecretBytes? {
        try readBool(&r) ? try readSecret(&r, maxBytes: maxPasscodeBytes) : nil
    }

    static func writeOptionalPasscode(_ w: inout ByteWriter, _ passcode: SecretBytes?) {
        if let passcode {
            w.write(UInt8(1))
            writeSecret(&w, passcode, lengthPrefixed: true)
        } else {
            w.write(UInt8(0))
        }
    }

    /// A key count of a wrapMany or unwrapMany request: 1 through
    /// ``maxKeysPerRequest``.
    static func readKeyCount(_ r: inout ByteReader) throws -> Int {
        let count = Int(try r.readUInt16())
        guard (1...maxKeysPerRequest).contains(count) else { throw Malformed() }
        return count
    }

    static func readWrapped(_ r: inout ByteReader) throws -> WrappedFileKey {
        do {
            return try WrappedFileKey.decode(from: &r)
        } catch {
            throw Malformed()
        }
    }

    /// Whether `wrapped` has the shape the wire format carries.
    static func isEncodable(_ wrapped: WrappedFileKey) -> Bool {
        wrapped.keyID.count == Keybag.keyIDByteCount
            && wrapped.blob.count == WrappedFileKey.blobByteCount(for: wrapped.protectionClass)
    }

    static func readDouble(_ r: inout ByteReader) throws -> Double {
        let value = Double(bitPattern: try r.readUInt64())
        guard value.isFinite else { throw Malformed() }
        return value
    }

    static func readCount(_ r: inout ByteReader) throws -> Int {
        let value = try r.readUInt32()
        guard value <= UInt32(Int32.max) else { throw Malformed() }
        return Int(value)
    }

    static func writeCount(_ w: inout ByteWriter, _ value: Int) {
        w.write(UInt32(clamping: max(0, min(value, Int(Int32.max)))))
    }

    // MARK: Options

    static func writeOptions(_ w: inout ByteWriter, _ options: Device.Options) {
        w.write(options.graceSeconds)
        w.write(options.eraseAfter)
        w.write(options.defaultClass.rawValue)
        switch options.passcodeCost {
        case .calibrated(let milliseconds):
            w.write(UInt8(1))
            w.write(UInt32(clamping: max(0, milliseconds)))
        case .fixed(let logN):
            w.write(UInt8(2))
            w.write(UInt32(logN))
        }
    }

    /// Decodes the options of an initialize request. Refuses, as
    /// malformed, any option a device cannot be made with
    /// (`Device.Options.validate()`), so that the device never sees one.
    static func readOptions(_ r: inout ByteReader) throws -> Device.Options {
        let grace = try r.readUInt32()
        let eraseAfter = try r.readUInt8()
        let defaultClass = try readClass(&r)
        let kind = try r.readUInt8()
        let value = try r.readUInt32()
        let cost: PasscodeCost
        switch kind {
        case 1:
            cost = .calibrated(milliseconds: Int(value))
        case 2:
            guard let logN = UInt8(exactly: value) else { throw Malformed() }
            cost = .fixed(logN: logN)
        default:
            throw Malformed()
        }
        let options = Device.Options(graceSeconds: grace, eraseAfter: eraseAfter, defaultClass: defaultClass, passcodeCost: cost)
        do {
            try options.validate()
        } catch {
            throw Malformed()
        }
        return options
    }

    // MARK: Errors

    /// Encodes an error a device operation threw. Device, crypto and
    /// format errors keep their identity, and so do the agent's own
    /// refusals (a reboot under way, too many watchers); anything else is
    /// reduced to its type's name.
    static func encodeError(_ error: any Error) -> [UInt8] {
        var w = ByteWriter()
        w.write(ResponseKind.error.rawValue)
        switch error {
        case let e as DeviceError:
            switch e {
            case .notInitialized: w.write(UInt8(0x01))
            case .alreadyInitialized: w.write(UInt8(0x02))
            case .wiped: w.write(UInt8(0x03))
            case .protectedDataUnavailable(let cls):
                w.write(UInt8(0x04))
                w.write(cls.rawValue)
            case .keyReset(let cls):
                w.write(UInt8(0x05))
                w.write(cls.rawValue)
            case .wrongPasscode(let failed, let next):
                w.write(UInt8(0x06))
                writeCount(&w, failed)
                if let next, next.isFinite {
                    w.write(UInt8(1))
                    w.write(next.bitPattern)
                } else {
                    w.write(UInt8(0))
                }
            case .lockedOut(let failed, let until):
                w.write(UInt8(0x07))
                writeCount(&w, failed)
                w.write((until.isFinite ? until : 0).bitPattern)
            case .noPasscode: w.write(UInt8(0x08))
            case .integrity(let what):
                w.write(UInt8(0x09))
                writeString(&w, clipped(what))
            case .rollback: w.write(UInt8(0x0A))
            case .notOpen: w.write(UInt8(0x0B))
            case .tooManyOpenObjects(let limit):
                w.write(UInt8(0x0E))
                writeCount(&w, limit)
            case .wipedAfterFailedAttempts(let failed):
                w.write(UInt8(0x0D))
                writeCount(&w, failed)
            case .io(let io):
                w.write(UInt8(0x0C))
                writeString(&w, clipped(io.operation))
                writeString(&w, clipped(io.path))
                w.write(UInt32(bitPattern: io.errno))
            }
        case let e as CryptoError:
            w.write(UInt8(0x20) + cryptoCode(e))
        case let e as FormatError:
            switch e {
            case .corruptCompressedData: w.write(UInt8(0x30))
            case .inputTooLarge: w.write(UInt8(0x31))
            case .truncated: w.write(UInt8(0x32))
            case .badMagic: w.write(UInt8(0x33))
            case .unsupportedVersion(let v):
                w.write(UInt8(0x34))
                w.write(v)
            case .invalidField(let name):
                w.write(UInt8(0x35))
                writeString(&w, clipped(name))
            case .trailingBytes: w.write(UInt8(0x36))
            }
        case is AgentRestarting:
            w.write(UInt8(0x40))
        case AgentError.tooManyWatchers(let limit):
            w.write(UInt8(0x41))
            writeCount(&w, limit)
        default:
            w.write(UInt8(0xFF))
            writeString(&w, clipped(String(describing: type(of: error)), maxBytes: 256))
        }
        return w.bytes
    }

    private static let cryptoErrors: [CryptoError] = [
        .authenticationFailure, .invalidKeySize, .invalidNonceSize, .invalidInputSize,
        .invalidPublicKey, .invalidParameter, .internalFailure,
    ]

    private static func cryptoCode(_ e: CryptoError) -> UInt8 {
        UInt8(cryptoErrors.firstIndex(of: e)!)
    }

    /// Decodes an error body (after the kind byte) back into the error the
    /// agent's device threw.
    static func decodeError(_ r: inout ByteReader) throws -> any Error {
        let code = try r.readUInt8()
        let error: any Error
        switch code {
        case 0x01: error = DeviceError.notInitialized
        case 0x02: error = DeviceError.alreadyInitialized
        case 0x03: error = DeviceError.wiped
        case 0x04: error = DeviceError.protectedDataUnavailable(try readClass(&r))
        case 0x05: error = DeviceError.keyReset(try readClass(&r))
        case 0x06:
            let failed = try readCount(&r)
            let next = try readBool(&r) ? try readDouble(&r) : nil
            error = DeviceError.wrongPasscode(failedAttempts: failed, nextAttemptAt: next)
        case 0x07:
            let failed = try readCount(&r)
            error = DeviceError.lockedOut(failedAttempts: failed, until: try readDouble(&r))
        case 0x08: error = DeviceError.noPasscode
        case 0x09: error = DeviceError.integrity(try readString(&r, maxBytes: maxErrorStringBytes))
        case 0x0A: error = DeviceError.rollback
        case 0x0B: error = DeviceError.notOpen
        case 0x0D: error = DeviceError.wipedAfterFailedAttempts(try readCount(&r))
        case 0x0E: error = DeviceError.tooManyOpenObjects(limit: try readCount(&r))
        case 0x0C:
            let operation = try readString(&r, maxBytes: maxErrorStringBytes)
            let path = try readString(&r, maxBytes: maxErrorStringBytes)
            let number = Int32(bitPattern: try r.readUInt32())
            error = DeviceError.io(IOError(operation, path: path, errno: number))
        case 0x20..<0x20 + UInt8(cryptoErrors.count):
            error = cryptoErrors[Int(code - 0x20)]
        case 0x30: error = FormatError.corruptCompressedData
        case 0x31: error = FormatError.inputTooLarge
        case 0x32: error = FormatError.truncated
        case 0x33: error = FormatError.badMagic
        case 0x34: error = FormatError.unsupportedVersion(try r.readUInt16())
        case 0x35: error = FormatError.invalidField(try readString(&r, maxBytes: maxErrorStringBytes))
        case 0x36: error = FormatError.trailingBytes
        case 0x40: error = AgentRestarting()
        case 0x41: error = AgentError.tooManyWatchers(limit: try readCount(&r))
        case 0xFF: error = AgentError.remote(try readString(&r, maxBytes: 256))
        default: throw Malformed()
        }
        try r.expectEnd()
        return error
    }

    // MARK: Events

    static func eventCode(_ event: ProtectionEvent) -> UInt8 {
        switch event {
        case .protectedDataWillBecomeUnavailable: 1
        case .protectedDataDidBecomeAvailable: 2
        }
    }

    static func event(code: UInt8) throws -> ProtectionEvent {
        switch code {
        case 1: return .protectedDataWillBecomeUnavailable
        case 2: return .protectedDataDidBecomeAvailable
        default: throw Malformed()
        }
    }
}
