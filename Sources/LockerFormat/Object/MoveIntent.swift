internal import LockerCrypto

/// The intent of a move in progress, of an object or a directory, written
/// before the move's first change and removed after its last
/// (`move.intent` in the store directory; docs/format.md, "Move intent").
///
/// An object move writes the object's new header before it removes the old
/// one, so a crash between leaves two names on one data file. The intent
/// says which name is the old one: the next change to the store (or
/// `verify --repair`) removes it, so that no later `rm` of one name deletes
/// the data the other still names.
///
/// A directory move leaves the directory's record naming both places until
/// its last step. The intent names the directory (its ID) and both paths,
/// so that the next change drops the place the directory is not at.
public struct MoveIntent: Sendable, Equatable {
    public static let magic: [UInt8] = Array("LKMV".utf8)
    /// The longest relative path accepted.
    public static let maxPathLength = 4096

    /// The old header's (or directory's) path, relative to the store
    /// directory.
    public var source: String
    /// The new header's (or directory's) path, relative to the store
    /// directory.
    public var target: String
    /// The object both headers name, or the ID of the directory moved.
    public var objectID: [UInt8]

    public init(source: String, target: String, objectID: [UInt8]) {
        self.source = source
        self.target = target
        self.objectID = objectID
    }

    public func sealed(with keys: MetadataKeys) throws -> [UInt8] {
        try Self.validate(source)
        try Self.validate(target)
        guard objectID.count == ObjectHeader.objectIDByteCount else { throw FormatError.invalidField("object ID") }
        var w = ByteWriter(capacity: source.utf8.count + target.utf8.count + 32)
        w.writeString(source)
        w.writeString(target)
        w.write(objectID)
        return try SealedRecord.seal(magic: Self.magic, body: w.bytes, key: keys.recordKey)
    }

    /// Opens a sealed intent. Nothing is parsed before it authenticates;
    /// the paths are then held to the namespace's shape (relative, below
    /// `ns/`, no `.` or `..` component).
    public static func open(_ bytes: [UInt8], with keys: MetadataKeys) throws -> MoveIntent {
        let body = try SealedRecord.open(bytes, magic: magic, key: keys.recordKey)
        var r = ByteReader(body)
        let source = try r.readString(max: maxPathLength)
        let target = try r.readString(max: maxPathLength)
        let objectID = try r.read(ObjectHeader.objectIDByteCount)
        try r.expectEnd()
        try validate(source)
        try validate(target)
        return MoveIntent(source: source, target: target, objectID: objectID)
    }

    private static func validate(_ path: String) throws {
        let components = path.split(separator: "/", omittingEmptySubsequences: false)
        guard path.utf8.count <= maxPathLength, components.count >= 2, components.first == "ns",
              components.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." })
        else { throw FormatError.invalidField("move intent path") }
    }
}
