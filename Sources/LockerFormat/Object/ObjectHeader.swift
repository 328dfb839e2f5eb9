public import LockerCrypto

/// Where an object's class came from.
public enum ProtectionSource: Sendable, Equatable {
    /// Given explicitly when the object was created or by `setclass`.
    case explicit
    /// Inherited from the default of the directory at this path.
    case inherited(String)
    /// The store's default.
    case storeDefault

    /// As `stat` prints it: `explicit`, `inherited:/dir`, `storeDefault`.
    public var description: String {
        switch self {
        case .explicit: "explicit"
        case .inherited(let path): "inherited:" + path
        case .storeDefault: "storeDefault"
        }
    }
}

/// An object's header: its namespace entry. One small file, sealed under
/// the metadata record key, that carries the wrapped file key and either
/// names the object's data file or, for a small object, holds the data
/// itself after the sealed record. See docs/format.md, "Object header".
public struct ObjectHeader: Sendable, Equatable {
    /// A header whose data is in a data file of its own.
    public static let magic: [UInt8] = Array("LKOH".utf8)
    /// A header followed by its object's data (`inlineData`).
    public static let inlineMagic: [UInt8] = Array("LKOI".utf8)
    public static let objectIDByteCount = 16
    public static let compressionLZ4: UInt8 = 1
    /// The most data a header file holds inline; larger objects get a data
    /// file. A header file is at most ``maxFileLength`` bytes.
    public static let maxInlineDataLength = 56 << 10
    public static let maxFileLength = SealedRecord.maxByteCount + maxInlineDataLength

    /// The directory this entry lives in, and its name there. A header
    /// found under any other name or directory is refused.
    public var parentID: [UInt8]
    public var name: String
    public var protectionSource: ProtectionSource
    public var wrappedKey: WrappedFileKey
    /// Names the data file, and changes with every version.
    public var objectID: [UInt8]
    public var chunkSize: UInt32
    public var plaintextLength: UInt64
    /// The size of the data file: every chunk record, then the index.
    public var dataLength: UInt64
    public var compression: UInt8
    /// Nanoseconds since 1970.
    public var created: Int64
    public var modified: Int64
    /// HMAC-SHA256 under a key derived from the file key, over the fields
    /// that bind the data to the key (see ``macInput``).
    public var headerMAC: [UInt8]
    /// The data (every chunk record, then the index: what a data file
    /// would hold) when it is stored in the header file; nil when the
    /// object has a data file. Ciphertext: it is opened with the file key.
    public var inlineData: [UInt8]?

    public init(parentID: [UInt8], name: String, protectionSource: ProtectionSource, wrappedKey: WrappedFileKey,
                objectID: [UInt8], chunkSize: UInt32, plaintextLength: UInt64, dataLength: UInt64,
                compression: UInt8 = ObjectHeader.compressionLZ4, created: Int64, modified: Int64, headerMAC: [UInt8],
                inlineData: [UInt8]? = nil) {
        self.parentID = parentID
        self.name = name
        self.protectionSource = protectionSource
        self.wrappedKey = wrappedKey
        self.objectID = objectID
        self.chunkSize = chunkSize
        self.plaintextLength = plaintextLength
        self.dataLength = dataLength
        self.compression = compression
        self.created = created
        self.modified = modified
        self.headerMAC = headerMAC
        self.inlineData = inlineData
    }

    public var protectionClass: ProtectionClass { wrappedKey.protectionClass }

    /// Whether the object's data is inline in its header file (whether or
    /// not this value still holds it: see ``droppingInlineData()``).
    public var isInline: Bool { inlineData != nil }

    /// Whether this value is inline but no longer holds the data.
    public var inlineDataDropped: Bool { inlineData?.isEmpty == true }

    /// This header without its inline data in memory, still marked inline:
    /// the data becomes an empty array, which no object's data is (it
    /// holds at least one record and the index). Such a value cannot be
    /// sealed; it is for keeping many headers in memory.
    public func droppingInlineData() -> ObjectHeader {
        guard isInline else { return self }
        var header = self
        header.inlineData = []
        return header
    }

    /// The number of chunks: at least one (an empty object has one empty,
    /// final chunk).
    public var chunkCount: UInt64 { ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize) }

    /// The bytes the header MAC covers: object ID, chunk size, plaintext
    /// length, data length, compression, created.
    public var macInput: [UInt8] {
        var w = ByteWriter(capacity: 64)
        w.write(Array("locker v1 header".utf8))
        w.write(objectID)
        w.write(chunkSize)
        w.write(plaintextLength)
        w.write(dataLength)
        w.write(compression)
        w.write(UInt64(bitPattern: created))
        return w.bytes
    }

    /// Computes the header MAC with `fileKey`.
    public func computeMAC(fileKey: SecretBytes) throws -> [UInt8] {
        try HMAC.authenticationCode(for: macInput, key: ChunkLayout.headerMACKey(fileKey: fileKey))
    }

    /// Checks the header MAC; throws ``CryptoError/authenticationFailure``.
    public func verifyMAC(fileKey: SecretBytes) throws {
        guard constantTimeEquals(try computeMAC(fileKey: fileKey), headerMAC) else {
            throw CryptoError.authenticationFailure
        }
    }

    /// The header file's bytes: the sealed header, and the inline data if
    /// any, under a nonce drawn here.
    public func sealed(with keys: MetadataKeys) throws -> [UInt8] {
        try sealed(with: keys, nonce: nil)
    }

    /// ``sealed(with:)`` under `nonce` if given: fresh, never used before
    /// with these keys (a batch draws its objects' nonces together). Only
    /// the package's own modules may choose a nonce.
    package func sealed(with keys: MetadataKeys, nonce: AESGCM.Nonce?) throws -> [UInt8] {
        try validate()
        var w = ByteWriter(capacity: 512)
        w.write(parentID)
        w.writeString(name)
        switch protectionSource {
        case .explicit: w.write(UInt8(0)); w.writeString("")
        case .inherited(let path): w.write(UInt8(1)); w.writeString(path)
        case .storeDefault: w.write(UInt8(2)); w.writeString("")
        }
        wrappedKey.encode(into: &w)
        // Every wrapped key takes the room of a class B one, so a header's
        // size does not tell its class.
        w.write([UInt8](repeating: 0, count: WrappedFileKey.asymmetricWrapByteCount - wrappedKey.blob.count))
        w.write(objectID)
        w.write(chunkSize)
        w.write(plaintextLength)
        w.write(dataLength)
        w.write(compression)
        w.write(UInt64(bitPattern: created))
        w.write(UInt64(bitPattern: modified))
        w.write(headerMAC)
        guard let inlineData else { return try SealedRecord.seal(magic: Self.magic, body: w.bytes, key: keys.recordKey, nonce: nonce) }
        // The record's length is in its prefix, authenticated with it, so
        // a reader knows where the data starts.
        let length = SealedRecord.overhead + w.bytes.count
        return try SealedRecord.seal(magic: Self.inlineMagic, body: w.bytes, key: keys.recordKey,
                                     field: UInt16(min(length, Int(UInt16.max))), nonce: nonce) + inlineData
    }

    /// Opens a header file: a sealed header (`LKOH`), or a sealed header
    /// and its object's data (`LKOI`, see ``inlineData``).
    public static func open(_ bytes: [UInt8], with keys: MetadataKeys) throws -> ObjectHeader {
        let body: [UInt8]
        var inlineData: [UInt8]?
        if bytes.count >= 8, Array(bytes[..<4]) == inlineMagic {
            guard bytes.count <= maxFileLength else { throw FormatError.inputTooLarge }
            let length = Int(bytes[6]) << 8 | Int(bytes[7])
            guard length >= SealedRecord.overhead, length <= min(bytes.count, SealedRecord.maxByteCount) else {
                throw FormatError.invalidField("record length")
            }
            body = try SealedRecord.open(Array(bytes[..<length]), magic: inlineMagic, key: keys.recordKey, field: UInt16(length))
            inlineData = Array(bytes[length...])
        } else {
            body = try SealedRecord.open(bytes, magic: magic, key: keys.recordKey)
        }
        var r = ByteReader(body)
        let parentID = try r.read(DirectoryRecord.directoryIDByteCount)
        let name = try r.readString(max: NameCodec.maxNameLength)
        let sourceKind = try r.readUInt8()
        let sourcePath = try r.readString(max: 64 << 10)
        let source: ProtectionSource
        switch sourceKind {
        case 0: source = .explicit
        case 1: source = .inherited(sourcePath)
        case 2: source = .storeDefault
        default: throw FormatError.invalidField("protection source")
        }
        // One encoding per header: only an inherited source has a path.
        guard sourceKind == 1 || sourcePath.isEmpty else { throw FormatError.invalidField("protection source") }
        let wrapped = try WrappedFileKey.decode(from: &r)
        let padding = try r.read(WrappedFileKey.asymmetricWrapByteCount - wrapped.blob.count)
        guard padding.allSatisfy({ $0 == 0 }) else { throw FormatError.invalidField("wrapped key padding") }
        let header = ObjectHeader(
            parentID: parentID, name: name, protectionSource: source, wrappedKey: wrapped,
            objectID: try r.read(objectIDByteCount), chunkSize: try r.readUInt32(), plaintextLength: try r.readUInt64(),
            dataLength: try r.readUInt64(), compression: try r.readUInt8(),
            created: Int64(bitPattern: try r.readUInt64()), modified: Int64(bitPattern: try r.readUInt64()),
            headerMAC: try r.read(32), inlineData: inlineData)
        try r.expectEnd()
        try header.validate()
        return header
    }

    public func validate() throws {
        guard parentID.count == DirectoryRecord.directoryIDByteCount, objectID.count == Self.objectIDByteCount,
              headerMAC.count == 32
        else { throw FormatError.invalidField("header ids") }
        // What open reads back: a key ID and a blob of the class's length
        // (anything else would be read back as another key, or trap on
        // the padding), a name within the limit, a path that fits a record.
        guard wrappedKey.keyID.count == Keybag.keyIDByteCount,
              wrappedKey.blob.count == WrappedFileKey.blobByteCount(for: wrappedKey.protectionClass)
        else { throw FormatError.invalidField("wrapped key") }
        guard name.utf8.count <= NameCodec.maxNameLength else { throw FormatError.invalidField("name") }
        if case .inherited(let path) = protectionSource, path.utf8.count > SealedRecord.maxByteCount {
            throw FormatError.invalidField("source path")
        }
        guard ChunkLayout.allowedChunkSizes.contains(chunkSize) else { throw FormatError.invalidField("chunk size") }
        guard compression == Self.compressionLZ4 else { throw FormatError.invalidField("compression") }
        guard plaintextLength <= ChunkLayout.maxPlaintextLength else { throw FormatError.invalidField("length") }
        // The format's limit on every header, not only on those whose data
        // is read: stat, ls and verify see the same header as get.
        guard chunkCount <= ChunkLayout.maxChunkCount else { throw FormatError.invalidField("chunk count") }
        let expected = try ChunkLayout.dataLengthBounds(plaintextLength: plaintextLength, chunkSize: chunkSize)
        guard expected.contains(dataLength) else { throw FormatError.invalidField("data length") }
        if let inlineData {
            guard inlineData.count <= Self.maxInlineDataLength, UInt64(inlineData.count) == dataLength else {
                throw FormatError.invalidField("inline data length")
            }
        }
    }
}

/// A directory's record, in the file `.dir` inside it.
///
/// It names the directory's place: its name and its parent's directory ID
/// (``rootParentID`` for the root). During a move it names the place it
/// moves from as well, so that a crash at any step leaves it readable
/// under its old place or its new one.
public struct DirectoryRecord: Sendable, Equatable {
    public static let magic: [UInt8] = Array("LKDI".utf8)
    public static let directoryIDByteCount = 16
    /// The parent ID of the root directory.
    public static let rootParentID = [UInt8](repeating: 0, count: 16)

    /// A place in the namespace: a name in the directory of `parentID`.
    /// Two places are equal when their parent IDs and the bytes of their
    /// names are (``Swift/String/sameBytes(as:)``).
    public struct Place: Sendable, Equatable {
        public var parentID: [UInt8]
        public var name: String

        public init(parentID: [UInt8], name: String) {
            self.parentID = parentID
            self.name = name
        }

        public static func == (a: Place, b: Place) -> Bool {
            a.parentID == b.parentID && a.name.sameBytes(as: b.name)
        }
    }

    public var directoryID: [UInt8]
    /// The directory's parent's ID (``rootParentID`` for the root).
    public var parentID: [UInt8]
    /// The directory's name in its parent ("" for the root).
    public var name: String
    /// The class new objects below inherit, if set.
    public var defaultClass: ProtectionClass?
    public var created: Int64
    /// While a move is in progress, the place the directory is moving
    /// from; nil otherwise.
    public var previous: Place?

    public init(directoryID: [UInt8], parentID: [UInt8], name: String, defaultClass: ProtectionClass?, created: Int64,
                previous: Place? = nil) {
        self.directoryID = directoryID
        self.parentID = parentID
        self.name = name
        self.defaultClass = defaultClass
        self.created = created
        self.previous = previous
    }

    public var place: Place { Place(parentID: parentID, name: name) }

    /// The places this record vouches for: its own, and the one it is
    /// moving from, if any.
    public var places: [Place] { [place] + (previous.map { [$0] } ?? []) }

    /// The names this record vouches for in the directory `parentID`.
    public func names(in parentID: [UInt8]) -> [String] {
        places.filter { $0.parentID == parentID }.map(\.name)
    }

    public func sealed(with keys: MetadataKeys) throws -> [UInt8] {
        precondition(directoryID.count == Self.directoryIDByteCount, "directory ID must be 16 bytes")
        precondition(places.allSatisfy { $0.parentID.count == Self.directoryIDByteCount }, "parent ID must be 16 bytes")
        guard places.allSatisfy({ $0.name.utf8.count <= NameCodec.maxNameLength }) else {
            throw FormatError.invalidField("name")
        }
        var w = ByteWriter(capacity: 160)
        w.write(directoryID)
        w.write(parentID)
        w.writeString(name)
        w.write(defaultClass?.rawValue ?? 0)
        w.write(UInt64(bitPattern: created))
        // Present only during a move, so a record has one encoding.
        if let previous {
            precondition(!previous.name.isEmpty, "a previous place has a name")
            w.write(previous.parentID)
            w.writeString(previous.name)
        }
        return try SealedRecord.seal(magic: Self.magic, body: w.bytes, key: keys.recordKey)
    }

    public static func open(_ bytes: [UInt8], with keys: MetadataKeys) throws -> DirectoryRecord {
        let body = try SealedRecord.open(bytes, magic: magic, key: keys.recordKey)
        var r = ByteReader(body)
        let id = try r.read(directoryIDByteCount)
        let parent = try r.read(directoryIDByteCount)
        let name = try r.readString(max: NameCodec.maxNameLength)
        let raw = try r.readUInt8()
        let cls: ProtectionClass?
        if raw == 0 { cls = nil } else {
            guard let c = ProtectionClass(rawValue: raw) else { throw FormatError.invalidField("default class") }
            cls = c
        }
        let created = Int64(bitPattern: try r.readUInt64())
        var previous: Place?
        if r.remaining > 0 {
            let previousParent = try r.read(directoryIDByteCount)
            let previousName = try r.readString(max: NameCodec.maxNameLength)
            guard !previousName.isEmpty else { throw FormatError.invalidField("previous name") }
            previous = Place(parentID: previousParent, name: previousName)
        }
        try r.expectEnd()
        return DirectoryRecord(directoryID: id, parentID: parent, name: name, defaultClass: cls, created: created,
                               previous: previous)
    }
}
