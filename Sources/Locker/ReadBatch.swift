internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat
internal import Foundation

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
        return paths.indices.map { PreparedRead(path: paths[$0], header: headers[$0], fileKey: fileKeys[$0]) }
    }

    /// Reads a prepared object whole into `sink`, as ``read(_:range:into:)``
    /// does (and through it, should the object have been replaced since
    /// it was prepared).
    public func read(_ prepared: PreparedRead, into sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        if try readData(prepared.path, header: prepared.header, fileKey: prepared.fileKey, range: nil, into: sink) { return }
        try read(prepared.path, into: sink)
    }
}
