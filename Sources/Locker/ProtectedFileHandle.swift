public import FoundationEssentials
public import LockerFormat
internal import LockerDevice
internal import Synchronization

extension Store {
    /// Opens the object at `path` for reading, as
    /// `FileHandle(forReadingAtPath:)`.
    ///
    /// Opening needs the object's class readable now
    /// (`DeviceError.protectedDataUnavailable(_:)` otherwise). The device
    /// then keeps the object's file key until the handle is closed, as
    /// Data Protection does for an open file: a class B
    /// (`completeUnlessOpen`) object stays readable through the handle
    /// across a lock; a class A (`complete`) one stops being readable when
    /// the grace period ends.
    public func fileHandle(forReadingAtPath path: String) throws -> ProtectedFileHandle {
        try ProtectedFileHandle(store: self, path: try StorePath(path))
    }

    /// Creates the object at `path` with `data`, as ``write(_:to:options:)``
    /// does (the class from `options`, else the directory's default;
    /// `.withoutOverwriting` refused the same way), and
    /// returns a handle open on it, as Data Protection gives the creator
    /// of a file: the device keeps the new object's file key from its
    /// creation. So a class B (`completeUnlessOpen`) object created while
    /// the device is locked can be read through the handle until it is
    /// closed, and then not opened again until unlock. The other classes
    /// behave as with ``fileHandle(forReadingAtPath:)`` afterwards.
    public func fileHandle(creatingAtPath path: String, contents data: Data,
                           options: Data.WritingOptions = []) throws -> ProtectedFileHandle {
        let info = try OpenRegistry.counting(in: self) { try put(data, at: path, options: options, keepOpen: true) }
        return ProtectedFileHandle(store: self, info: info)
    }
}

/// A read handle on one version of a stored object, as `FileHandle`.
///
/// - The handle reads the version it opened. If the object is replaced,
///   moved or removed, the next read fails with
///   ``ProtectedFileError/itemChanged(_:)``; it never returns bytes of
///   another version.
/// - Errors are sticky: after the first failed read or seek, every read,
///   seek and ``offset()`` throws that same error (for example
///   `DeviceError.protectedDataUnavailable(.complete)` once a lock's grace
///   ends), even if the device is unlocked again. Open a new handle then.
/// - ``close()`` releases the file key; `deinit` closes a handle that is
///   still open. Several handles on the same object in one process share
///   the device's open entry, which is released when the last one closes.
///
/// It is safe to use from several threads; calls are serialized.
public final class ProtectedFileHandle: Sendable {
    /// The store path the handle was opened at.
    public let path: StorePath
    /// The object's plaintext size in bytes.
    public let size: UInt64
    /// The object's class when it was opened.
    public let protectionClass: ProtectionClass

    private let store: Store
    private let objectID: String

    private struct State {
        var offset: UInt64 = 0
        var failure: (any Error)?
        var closed = false
    }

    private let state = Mutex(State())

    convenience init(store: Store, path: StorePath) throws {
        self.init(store: store, info: try OpenRegistry.open(path, in: store))
    }

    /// On an object ``OpenRegistry`` has counted open.
    init(store: Store, info: ObjectInfo) {
        self.store = store
        self.path = info.path
        self.objectID = info.objectID
        self.size = info.size
        self.protectionClass = info.protectionClass
    }

    deinit {
        if !state.withLock({ $0.closed }) {
            try? OpenRegistry.close(objectID, in: store)
        }
    }

    /// Foundation's name for the object's class.
    public var fileProtection: FileProtectionType { protectionClass.fileProtectionType }

    /// The offset of the next read, as `FileHandle.offsetInFile`.
    public var offsetInFile: UInt64 { state.withLock { $0.offset } }

    /// The offset of the next read, as `FileHandle.offset()`: throws if the
    /// handle is closed or has failed.
    public func offset() throws -> UInt64 {
        try state.withLock { state in
            try Self.check(state)
            return state.offset
        }
    }

    /// Reads up to `count` bytes from the current offset, as
    /// `FileHandle.read(upToCount:)`. Returns `nil` at the end of the
    /// object.
    public func read(upToCount count: Int) throws -> Data? {
        try state.withLock { state in
            try Self.check(state)
            guard count > 0 else { return Data() }
            guard state.offset < size else { return nil }
            let end = state.offset + min(UInt64(count), size - state.offset)
            let data: Data
            do {
                data = try readVersion(state.offset..<end)
            } catch {
                state.failure = error
                throw error
            }
            state.offset = end
            return data
        }
    }

    /// Reads from the current offset to the end, as
    /// `FileHandle.readToEnd()`. Returns `nil` at the end of the object.
    public func readToEnd() throws -> Data? {
        let remaining = try state.withLock { state in
            try Self.check(state)
            return state.offset < size ? size - state.offset : 0
        }
        guard remaining > 0 else { return nil }
        return try read(upToCount: Int(clamping: remaining))
    }

    /// Moves the offset of the next read, as `FileHandle.seek(toOffset:)`.
    /// An offset past the end is allowed; reads there return `nil`.
    public func seek(toOffset offset: UInt64) throws {
        try state.withLock { state in
            try Self.check(state)
            state.offset = offset
        }
    }

    /// Moves to the end, as `FileHandle.seekToEnd()`, and returns the
    /// offset.
    @discardableResult
    public func seekToEnd() throws -> UInt64 {
        try state.withLock { state in
            try Self.check(state)
            state.offset = size
            return size
        }
    }

    /// Closes the handle, as `FileHandle.close()`: the device drops the
    /// file key (when no other handle in this process has the object
    /// open). A class B object that is closed while the device is locked
    /// cannot be opened again until unlock. Closing twice does nothing.
    public func close() throws {
        let wasClosed = state.withLock { state in
            defer { state.closed = true }
            return state.closed
        }
        if !wasClosed { try OpenRegistry.close(objectID, in: store) }
    }

    private static func check(_ state: State) throws {
        if state.closed { throw ProtectedFileError.handleClosed }
        if let failure = state.failure { throw failure }
    }

    /// Reads `range` of the version this handle opened, through
    /// ``Store/read(_:range:into:)``. That call resolves the path again, so
    /// the version at the path is checked before and after: object IDs
    /// are random per version, so a match on both sides means the bytes
    /// came from this version.
    private func readVersion(_ range: Range<UInt64>) throws -> Data {
        try checkVersion()
        var data = Data(capacity: Int(clamping: range.count))
        try store.read(path, range: range) { data.append(contentsOf: $0) }
        try checkVersion()
        return data
    }

    private func checkVersion() throws {
        let header: ObjectHeader
        do {
            header = try store.objectHeader(at: path)
        } catch StoreError.notFound, StoreError.isADirectory, StoreError.notADirectory {
            throw ProtectedFileError.itemChanged(path.description)
        }
        guard Hex.lowercase(header.objectID) == objectID else { throw ProtectedFileError.itemChanged(path.description) }
    }
}

/// Counts the read handles of this process per device and object, so that
/// closing one of two handles on an object does not drop the file key the
/// other still needs: the device keeps one open entry per object.
enum OpenRegistry {
    private struct Key: Hashable {
        let keys: ObjectIdentifier
        let objectID: String
    }

    /// Held across the device calls, so an open and a close of the same
    /// object cannot interleave between the count and the device.
    private static let counts = Mutex<[Key: Int]>([:])

    static func open(_ path: StorePath, in store: Store) throws -> ObjectInfo {
        try counting(in: store) { try store.open(path) }
    }

    /// Counts the object `open` opens, or makes open, in the device.
    static func counting(in store: Store, _ open: () throws -> ObjectInfo) throws -> ObjectInfo {
        try counts.withLock { counts in
            let info = try open()
            counts[Key(keys: ObjectIdentifier(store.keys), objectID: info.objectID), default: 0] += 1
            return info
        }
    }

    static func close(_ objectID: String, in store: Store) throws {
        try counts.withLock { counts in
            let key = Key(keys: ObjectIdentifier(store.keys), objectID: objectID)
            let remaining = (counts[key] ?? 1) - 1
            if remaining > 0 {
                counts[key] = remaining
                return
            }
            counts[key] = nil
            // By object ID, not by path: the object may have been moved or
            // replaced since it was opened. One the device no longer holds
            // open (closed by another process, or a reboot) is closed.
            do {
                try store.keys.close(objectID: objectID)
            } catch DeviceError.notOpen {}
        }
    }
}
