internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat
internal import Foundation

/// What ``Store/listForFetch(_:)`` found in a directory.
public struct FetchListing {
    public let directories: [StorePath]
    public let objects: [FetchEntry]
}

/// An object whose header was read and checked, listed for fetching.
public struct FetchEntry {
    public let path: StorePath
    let header: ObjectHeader
}

/// An object whose header was read and whose file key was unwrapped by
/// ``Store/prepareReads(_:)``, ready for ``Store/read(_:into:)``.
public struct PreparedRead {
    public let path: StorePath
    /// The plaintext size.
    public var size: UInt64 { header.plaintextLength }
    let header: ObjectHeader
    let fileKey: SecretBytes
}

extension Store {
    /// Reads the headers of `paths` and unwraps their file keys together
    /// (one request to the agent per 256 keys), for fetching many objects.
    /// Throws what ``read(_:range:into:)`` would throw for the first path
    /// that cannot be read now.
    public func prepareReads(_ paths: [StorePath]) throws -> [PreparedRead] {
        var parents: [StorePath: Directory] = [:]
        var headers: [ObjectHeader] = []
        headers.reserveCapacity(paths.count)
        for path in paths {
            guard !path.isRoot else { throw StoreError.isADirectory("/") }
            let parent: Directory
            if let known = parents[path.parent] {
                parent = known
            } else {
                parent = try directory(at: path.parent)
                parents[path.parent] = parent
            }
            let fsPath = try entryPath(path.name, in: parent)
            switch try kind(of: fsPath) {
            case .missing: throw StoreError.notFound(path.description)
            case .directory: throw StoreError.isADirectory(path.description)
            case .object: headers.append(try readHeader(fsPath, name: path.name, in: parent, path: path))
            }
        }
        return try prepare(zip(paths, headers).map { FetchEntry(path: $0, header: $1) })
    }

    /// Unwraps the file keys of entries listed by ``listForFetch(_:)``
    /// together, as ``prepareReads(_:)`` does, without reading their
    /// headers again.
    public func prepareReads(_ entries: [FetchEntry]) throws -> [PreparedRead] {
        try prepare(entries)
    }

    private func prepare(_ entries: [FetchEntry]) throws -> [PreparedRead] {
        let headers = entries.map(\.header)
        let fileKeys: [SecretBytes]
        do {
            fileKeys = try keys.unwrap(headers.map(\.wrappedKey))
        } catch {
            // One at a time: an open object's key comes from the device,
            // and otherwise the first object that cannot be read now
            // throws its own error.
            fileKeys = try headers.map { try fileKey(for: $0) }
        }
        guard fileKeys.count == headers.count else { throw DeviceError.integrity("file key count") }
        return entries.indices.map { PreparedRead(path: entries[$0].path, header: headers[$0], fileKey: fileKeys[$0]) }
    }

    /// A directory's entries for fetching it whole, in one pass: its
    /// subdirectories, and its objects with their headers read and
    /// checked. A damaged entry throws ``StoreError/integrity(path:what:)``.
    public func listForFetch(_ path: StorePath) throws -> FetchListing {
        let directory = try self.directory(at: path)
        var directories: [StorePath] = []
        var objects: [FetchEntry] = []
        for fileName in try fs.contentsOfDirectory(directory.fsPath) where fileName != ".dir" && !Self.isTemporary(fileName) {
            let fsPath = directory.fsPath + "/" + fileName
            let isDirectory = try kind(of: fsPath) == .directory
            guard let name = entryName(fileName, at: fsPath, isDirectory: isDirectory, in: directory) else {
                throw StoreError.integrity(path: path.appending("?" + fileName).description, what: "name does not authenticate")
            }
            let itemPath = path.appending(name)
            if isDirectory {
                directories.append(itemPath)
            } else {
                objects.append(FetchEntry(path: itemPath, header: try readHeader(fsPath, name: name, in: directory, path: itemPath)))
            }
        }
        return FetchListing(directories: directories.sorted { $0.description < $1.description },
                            objects: objects.sorted { $0.path.description < $1.path.description })
    }

    /// Reads a prepared object whole into `sink`, as ``read(_:range:into:)``
    /// does (and through it, should the object have been replaced since
    /// it was prepared).
    public func read(_ prepared: PreparedRead, into sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        if try readData(prepared.path, header: prepared.header, fileKey: prepared.fileKey, range: nil, into: sink) { return }
        try read(prepared.path, into: sink)
    }
}
