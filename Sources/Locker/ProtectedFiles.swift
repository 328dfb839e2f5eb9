@_exported public import LockerStore
public import Foundation
public import LockerDevice
internal import LockerFormat

/// The face apps use: `FileManager` and `Data` calls, with Foundation's
/// Data Protection vocabulary, on a ``Store``.
///
/// Paths are store paths (`/`-separated, absolute within the store; see
/// ``StorePath``). Refusals throw the store's and the device's own errors,
/// not `CocoaError`: a class key that is not held now is
/// `DeviceError.protectedDataUnavailable(_:)` (try again after unlock),
/// never a generic I/O error and never wrong data; a missing item is
/// ``StoreError/notFound(_:)``.
///
/// Operations on names (``fileExists(atPath:)``,
/// ``contentsOfDirectory(atPath:)``, ``attributesOfItem(atPath:)``,
/// ``removeItem(atPath:)``, ``moveItem(atPath:toPath:)``,
/// ``createDirectory(atPath:withIntermediateDirectories:attributes:)``)
/// need no class key and work in every device state but wiped.
extension Store {
    // MARK: Data

    /// Stores `data` at `path`, as `Data.write(to:options:)` does.
    ///
    /// The protection option in `options` gives the object's class
    /// (`.completeFileProtection` → complete, …, `.noFileProtection` →
    /// none). Without one, an object written over keeps its class if that
    /// was set explicitly; otherwise the object inherits the default of
    /// its nearest ancestor directory, else the store's default. `.atomic` is accepted
    /// and changes nothing: every write replaces the object atomically.
    /// `.withoutOverwriting` is refused with
    /// ``ProtectedFileError/unsupportedWritingOptions(_:)`` (the store
    /// cannot yet create-if-absent atomically).
    ///
    /// As with `Data.write`, the parent directory must exist
    /// (``StoreError/notFound(_:)`` otherwise). Creating an object whose
    /// class key is not held now throws
    /// `DeviceError.protectedDataUnavailable(_:)`; class B can be created in
    /// every state but wiped.
    public func write(_ data: Data, to path: String, options: Data.WritingOptions = []) throws {
        try put(data, at: path, options: options)
    }

    /// Stores `data` at `path` as `Data.write` would, `options` and all:
    /// the parent must exist.
    @discardableResult
    func put(_ data: Data, at path: String, options: Data.WritingOptions, keepOpen: Bool = false) throws -> ObjectInfo {
        let unsupported = options.intersection(.withoutOverwriting)
        guard unsupported.isEmpty else { throw ProtectedFileError.unsupportedWritingOptions(unsupported) }
        let cls = try ProtectionClass(writingOptions: options)
        let path = try StorePath(path)
        guard !path.isRoot else { throw StoreError.isADirectory("/") }
        // Data.write does not create directories: check the parent first.
        try requireDirectory(path.parent)
        return try data.withUnsafeBytes { bytes in
            var offset = 0
            return try put(path, protection: cls, keepOpen: keepOpen) { buffer in
                let n = min(buffer.count, bytes.count - offset)
                if n > 0 {
                    buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + n)]))
                    offset += n
                }
                return n
            }
        }
    }

    /// The contents of the object at `path`, or `nil` if it cannot be read
    /// for any reason, as `FileManager.contents(atPath:)`. Use
    /// ``contentsOfItem(atPath:)`` to learn why.
    public func contents(atPath path: String) -> Data? {
        try? contentsOfItem(atPath: path)
    }

    /// The contents of the object at `path`. Throws
    /// `DeviceError.protectedDataUnavailable(_:)` when its class is not
    /// readable now and it is not open, ``StoreError/integrity(path:what:)``
    /// when it is damaged (no unauthenticated byte is ever returned).
    public func contentsOfItem(atPath path: String) throws -> Data {
        var data = Data()
        try read(try StorePath(path)) { data.append(contentsOf: $0) }
        return data
    }

    // MARK: Attributes

    /// The attributes of an object or directory, as
    /// `FileManager.attributesOfItem(atPath:)`:
    /// - `.type`: `FileAttributeType.typeRegular` or `.typeDirectory`;
    /// - `.protectionKey`: the object's `FileProtectionType`; for a
    ///   directory, its own default class, present only if one is set;
    /// - `.size`: an `NSNumber` with the plaintext size in bytes (0 for a
    ///   directory); `as? UInt64` works too;
    /// - `.creationDate`, `.modificationDate`: `Date`s (a directory records
    ///   only its creation, which is given for both).
    ///
    /// Needs no class key: works in every state but wiped.
    public func attributesOfItem(atPath path: String) throws -> [FileAttributeKey: Any] {
        let info = try stat(try StorePath(path))
        switch info.kind {
        case .object(let object):
            return [
                .type: FileAttributeType.typeRegular,
                .protectionKey: object.protectionClass.fileProtectionType,
                .size: NSNumber(value: object.size),
                .creationDate: Self.date(object.created),
                .modificationDate: Self.date(object.modified),
            ]
        case .directory(let directory):
            var attributes: [FileAttributeKey: Any] = [
                .type: FileAttributeType.typeDirectory,
                .size: NSNumber(value: UInt64(0)),
                .creationDate: Self.date(directory.created),
                .modificationDate: Self.date(directory.created),
            ]
            if let own = directory.defaultClass { attributes[.protectionKey] = own.fileProtectionType }
            return attributes
        case .damaged(let why):
            throw StoreError.integrity(path: info.path.description, what: why)
        }
    }

    /// Sets attributes, as `FileManager.setAttributes(_:ofItemAtPath:)`.
    /// Only `.protectionKey` is supported (a `FileProtectionType`, its raw
    /// string, or a ``ProtectionClass``); any other key throws
    /// ``ProtectedFileError/unsupportedAttribute(_:)`` before anything
    /// changes.
    ///
    /// On an object, this changes its class by rewrapping its file key:
    /// the data is not rewritten and the content is unchanged. It needs
    /// the current class readable now and the new class creatable now
    /// (`DeviceError.protectedDataUnavailable(_:)` otherwise). On a
    /// directory, it sets the directory's default class, which only
    /// objects created afterwards inherit; this needs no class key.
    public func setAttributes(_ attributes: [FileAttributeKey: Any], ofItemAtPath path: String) throws {
        let cls = try Self.protectionClass(in: attributes)
        let storePath = try StorePath(path)
        guard let cls else {
            // Nothing to change; still report a missing item.
            _ = try stat(storePath)
            return
        }
        if try itemKind(storePath) == .directory {
            try setDefaultClass(cls, ofDirectory: storePath)
        } else {
            try setClass(storePath, to: cls)
        }
    }

    // MARK: Directories

    /// Creates a directory, as
    /// `FileManager.createDirectory(atPath:withIntermediateDirectories:attributes:)`.
    /// A `.protectionKey` attribute becomes the new directory's default
    /// class, which objects created below it inherit (intermediate
    /// directories get none). With `createIntermediates`, an existing
    /// directory is not an error, and a `.protectionKey` given sets its
    /// default. Other attribute keys throw
    /// ``ProtectedFileError/unsupportedAttribute(_:)``.
    public func createDirectory(atPath path: String, withIntermediateDirectories createIntermediates: Bool,
                                attributes: [FileAttributeKey: Any]? = nil) throws {
        let cls = try Self.protectionClass(in: attributes ?? [:])
        try makeDirectory(try StorePath(path), defaultClass: cls, parents: createIntermediates)
    }

    /// The names of the entries of a directory, sorted, as
    /// `FileManager.contentsOfDirectory(atPath:)`. An entry whose name or
    /// record does not authenticate throws
    /// ``StoreError/integrity(path:what:)``: names are never guessed.
    public func contentsOfDirectory(atPath path: String) throws -> [String] {
        try list(try StorePath(path)).map { item in
            if case .damaged(let why) = item.kind { throw StoreError.integrity(path: item.path.description, what: why) }
            return item.path.name
        }
    }

    /// Removes an object, or a directory with everything below it, as
    /// `FileManager.removeItem(atPath:)`. Needs no class key.
    public func removeItem(atPath path: String) throws {
        try remove(try StorePath(path), recursive: true)
    }

    /// Moves an object or directory to exactly `dstPath`, as
    /// `FileManager.moveItem(atPath:toPath:)`: an existing destination,
    /// even a directory, is ``StoreError/alreadyExists(_:)`` (unlike
    /// ``Store/move(_:to:)``, which moves into a directory). The object
    /// keeps its class and where it came from. Needs no class key.
    public func moveItem(atPath srcPath: String, toPath dstPath: String) throws {
        let source = try StorePath(srcPath)
        let destination = try StorePath(dstPath)
        let existing = (try? itemKind(destination)) ?? .missing
        guard existing == .missing, !destination.isRoot else {
            throw StoreError.alreadyExists(destination.description)
        }
        try move(source, to: destination)
    }

    /// Whether an object or directory exists at `path`, as
    /// `FileManager.fileExists(atPath:)`. `false` for a path the store does
    /// not accept.
    public func fileExists(atPath path: String) -> Bool {
        fileExists(atPath: path, isDirectory: nil)
    }

    /// Whether an object or directory exists at `path`, and which, as
    /// `FileManager.fileExists(atPath:isDirectory:)`.
    public func fileExists(atPath path: String, isDirectory: UnsafeMutablePointer<ObjCBool>?) -> Bool {
        guard let storePath = try? StorePath(path), let kind = try? itemKind(storePath), kind != .missing else {
            return false
        }
        isDirectory?.pointee = ObjCBool(kind == .directory)
        return true
    }

    // MARK: Protected data

    /// True while class A data is available, as iOS's
    /// `UIApplication.isProtectedDataAvailable`: unlocked, or locking
    /// within the grace period (always, for a device without a passcode).
    /// `false` if the device cannot be asked.
    public var isProtectedDataAvailable: Bool {
        (try? keys.status().isProtectedDataAvailable) ?? false
    }

    /// The device's protection events from now on, named as iOS's
    /// notifications (`protectedDataWillBecomeUnavailable` when a lock
    /// begins, `protectedDataDidBecomeAvailable` on unlock), until the
    /// device shuts down. Each call is a new subscription; it ends when
    /// the stream is dropped. `nil` when the store does not run on an
    /// in-process ``Device`` (behind the agent, `AgentClient.watch(_:)`
    /// delivers the same events).
    public func protectedDataEvents() -> AsyncStream<ProtectionEvent>? {
        device?.events()
    }

    // MARK: Helpers

    /// The class the `.protectionKey` of `attributes` names, if any.
    /// Refuses every other key, before anything is changed.
    static func protectionClass(in attributes: [FileAttributeKey: Any]) throws -> ProtectionClass? {
        for key in attributes.keys where key != .protectionKey {
            throw ProtectedFileError.unsupportedAttribute(key)
        }
        return try attributes[.protectionKey].map(ProtectionClass.fromAttribute)
    }

    static func date(_ nanoseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(nanoseconds) / 1e9)
    }
}
