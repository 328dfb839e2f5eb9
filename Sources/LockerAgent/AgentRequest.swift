internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat

/// One request, as the client sends it and the agent decodes it.
enum AgentRequest {
    case ping
    case status
    case initialize(passcode: SecretBytes?, options: Device.Options)
    case unlock(passcode: SecretBytes)
    case lock(immediately: Bool)
    case changePasscode(old: SecretBytes, new: SecretBytes)
    case reset(newPasscode: SecretBytes?)
    case wipe
    case metadataKey
    case classBPublicKey
    case wrap(fileKey: SecretBytes, protectionClass: ProtectionClass)
    case unwrap(WrappedFileKey)
    case wrapMany(fileKeys: [SecretBytes], protectionClass: ProtectionClass)
    case unwrapMany([WrappedFileKey])
    case rewrap(WrappedFileKey, newClass: ProtectionClass)
    case open(objectID: String, wrapped: WrappedFileKey)
    case registerOpen(objectID: String, fileKey: SecretBytes, protectionClass: ProtectionClass)
    case openFileKey(objectID: String)
    case close(objectID: String)
    case watch
    case reboot

    var opcode: WireFormat.Opcode {
        switch self {
        case .ping: .ping
        case .status: .status
        case .initialize: .initialize
        case .unlock: .unlock
        case .lock: .lock
        case .changePasscode: .changePasscode
        case .reset: .reset
        case .wipe: .wipe
        case .metadataKey: .metadataKey
        case .classBPublicKey: .classBPublicKey
        case .wrap: .wrap
        case .unwrap: .unwrap
        case .wrapMany: .wrapMany
        case .unwrapMany: .unwrapMany
        case .rewrap: .rewrap
        case .open: .open
        case .registerOpen: .registerOpen
        case .openFileKey: .openFileKey
        case .close: .close
        case .watch: .watch
        case .reboot: .reboot
        }
    }

    /// The payload. The caller wipes it after sending: it may hold a
    /// passcode or a file key. The writer's buffer is sized up front so
    /// that no secret is left behind in a reallocated buffer.
    func encoded() -> [UInt8] {
        // Room for the largest request, so that no secret is left behind
        // in a reallocated buffer.
        var w = ByteWriter(capacity: WireFormat.maxPayloadBytes)
        w.write(opcode.rawValue)
        switch self {
        case .ping, .status, .wipe, .metadataKey, .classBPublicKey, .watch, .reboot:
            break
        case .initialize(let passcode, let options):
            WireFormat.writeOptionalPasscode(&w, passcode)
            WireFormat.writeOptions(&w, options)
        case .unlock(let passcode):
            WireFormat.writeSecret(&w, passcode, lengthPrefixed: true)
        case .lock(let immediately):
            w.write(UInt8(immediately ? 1 : 0))
        case .changePasscode(let old, let new):
            WireFormat.writeSecret(&w, old, lengthPrefixed: true)
            WireFormat.writeSecret(&w, new, lengthPrefixed: true)
        case .reset(let passcode):
            WireFormat.writeOptionalPasscode(&w, passcode)
        case .wrap(let fileKey, let cls):
            w.write(cls.rawValue)
            WireFormat.writeSecret(&w, fileKey, lengthPrefixed: false)
        case .unwrap(let wrapped):
            wrapped.encode(into: &w)
        case .wrapMany(let fileKeys, let cls):
            w.write(cls.rawValue)
            w.write(UInt16(fileKeys.count))
            for key in fileKeys { WireFormat.writeSecret(&w, key, lengthPrefixed: false) }
        case .unwrapMany(let wrapped):
            w.write(UInt16(wrapped.count))
            for key in wrapped { key.encode(into: &w) }
        case .rewrap(let wrapped, let newClass):
            wrapped.encode(into: &w)
            w.write(newClass.rawValue)
        case .open(let objectID, let wrapped):
            WireFormat.writeString(&w, objectID)
            wrapped.encode(into: &w)
        case .registerOpen(let objectID, let fileKey, let cls):
            WireFormat.writeString(&w, objectID)
            w.write(cls.rawValue)
            WireFormat.writeSecret(&w, fileKey, lengthPrefixed: false)
        case .openFileKey(let objectID), .close(let objectID):
            WireFormat.writeString(&w, objectID)
        }
        return w.bytes
    }

    /// Decodes a request payload. Throws ``WireFormat/Malformed`` on an
    /// unknown opcode, a field out of range, or bytes left over.
    static func decode(_ payload: [UInt8]) throws -> AgentRequest {
        var r = ByteReader(payload)
        guard let opcode = WireFormat.Opcode(rawValue: try r.readUInt8()) else { throw WireFormat.Malformed() }
        let request: AgentRequest
        switch opcode {
        case .ping: request = .ping
        case .status: request = .status
        case .initialize:
            let passcode = try WireFormat.readOptionalPasscode(&r)
            request = .initialize(passcode: passcode, options: try WireFormat.readOptions(&r))
        case .unlock:
            request = .unlock(passcode: try WireFormat.readSecret(&r, maxBytes: WireFormat.maxPasscodeBytes))
        case .lock:
            request = .lock(immediately: try WireFormat.readBool(&r))
        case .changePasscode:
            let old = try WireFormat.readSecret(&r, maxBytes: WireFormat.maxPasscodeBytes)
            request = .changePasscode(old: old, new: try WireFormat.readSecret(&r, maxBytes: WireFormat.maxPasscodeBytes))
        case .reset:
            request = .reset(newPasscode: try WireFormat.readOptionalPasscode(&r))
        case .wipe: request = .wipe
        case .metadataKey: request = .metadataKey
        case .classBPublicKey: request = .classBPublicKey
        case .wrap:
            let cls = try WireFormat.readClass(&r)
            request = .wrap(fileKey: try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes), protectionClass: cls)
        case .unwrap:
            request = .unwrap(try WireFormat.readWrapped(&r))
        case .wrapMany:
            let cls = try WireFormat.readClass(&r)
            let count = try WireFormat.readKeyCount(&r)
            request = .wrapMany(fileKeys: try (0..<count).map { _ in
                try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes)
            }, protectionClass: cls)
        case .unwrapMany:
            let count = try WireFormat.readKeyCount(&r)
            request = .unwrapMany(try (0..<count).map { _ in try WireFormat.readWrapped(&r) })
        case .rewrap:
            let wrapped = try WireFormat.readWrapped(&r)
            request = .rewrap(wrapped, newClass: try WireFormat.readClass(&r))
        case .open:
            let objectID = try WireFormat.readObjectID(&r)
            request = .open(objectID: objectID, wrapped: try WireFormat.readWrapped(&r))
        case .registerOpen:
            let objectID = try WireFormat.readObjectID(&r)
            let cls = try WireFormat.readClass(&r)
            let key = try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes)
            request = .registerOpen(objectID: objectID, fileKey: key, protectionClass: cls)
        case .openFileKey:
            request = .openFileKey(objectID: try WireFormat.readObjectID(&r))
        case .close:
            request = .close(objectID: try WireFormat.readObjectID(&r))
        case .watch: request = .watch
        case .reboot: request = .reboot
        }
        try r.expectEnd()
        return request
    }
}

extension AgentRequest {
    /// Whether asking again, after the agent may have acted on the request
    /// and went away without answering, can change nothing twice: reads of
    /// state, wrapping or unwrapping a key, and a lock (locking a locked or
    /// locking device changes nothing). Passcode attempts, other state
    /// changes and opens are never repeated.
    var isSafeToRepeat: Bool {
        switch self {
        case .ping, .status, .metadataKey, .classBPublicKey, .wrap, .unwrap, .wrapMany, .unwrapMany, .rewrap, .openFileKey, .lock: true
        default: false
        }
    }
}
