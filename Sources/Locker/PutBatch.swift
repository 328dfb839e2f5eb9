internal import LockerCrypto
internal import LockerDevice
public import LockerFormat
internal import LockerIO
internal import Foundation
#if canImport(Glibc)
internal import Glibc
#endif

/// One object of ``Store/putBatch(_:)``.
public struct PutBatchItem {
    public var path: StorePath
    /// The class; nil inherits, as ``Store/put(_:protection:from:progress:)``.
    public var protection: ProtectionClass?
    /// Fills the buffer it is given and returns the count, 0 at the end.
    /// The sources of one batch may be read at the same time, each from
    /// one thread at a time.
    public var source: (UnsafeMutableRawBufferPointer) throws -> Int

    public init(path: StorePath, protection: ProtectionClass? = nil,
                source: @escaping (UnsafeMutableRawBufferPointer) throws -> Int) {
        self.path = path
        self.protection = protection
        self.source = source
    }
}

extension Store {
    /// Runs `body` for each of `count` objects: on twice as many threads as
    /// the store has workers when it has more than one, else in order
    /// (which keeps the sequence of system calls fixed, as fault injection
    /// needs).
    func forEachObject(_ count: Int, _ body: (Int) throws -> Void) throws {
        if options.workers > 1 {
            // Twice the cores: each object waits on the file system too.
            try parallelFor(count, width: 2 * options.workers, body)
        } else {
            for i in 0..<count { try body(i) }
        }
    }

    /// The most objects one batch holds: each holds its data file open
    /// and locked until its header commits, so a batch needs that many
    /// descriptors beside the caller's.
    public static let maxBatchCount = 512

    /// Stores several objects, each exactly as ``put(_:protection:from:progress:)``
    /// would, but with the durability of the whole batch bought at once:
    /// the data files and the new headers are written, the file system is
    /// synced once, the headers are renamed into place under the store
    /// lock, and the file system is synced again. Storing many small files
    /// this way costs two syncs per batch instead of four per object.
    ///
    /// When this returns, every object is durable at its new version. If
    /// it throws, or a crash interrupts it, each object is at its old
    /// version or its new one, and what was written for the others is
    /// garbage that `verify --repair` removes. At most
    /// ``maxBatchCount`` items; a path may appear once.
    @discardableResult
    public func putBatch(_ items: [PutBatchItem]) throws -> [ObjectInfo] {
        guard !items.isEmpty else { return [] }
        guard items.count <= Self.maxBatchCount else { throw StoreError.invalidPath("more than \(Self.maxBatchCount) objects in one batch") }
        guard Set(items.map(\.path)).count == items.count else { throw StoreError.invalidPath("the same path twice in one batch") }

        // Where each object goes, and its class.
        struct Target {
            var parent: Directory
            var fsPath: String
            var protection: ProtectionClass
            var source: ProtectionSource
        }
        var chains: [StorePath: [Directory]] = [:]
        var storeDefault: ProtectionClass?
        var targets: [Target] = []
        targets.reserveCapacity(items.count)
        for item in items {
            guard !item.path.isRoot else { throw StoreError.isADirectory("/") }
            let parentPath = item.path.parent
            let chain = try chains[parentPath] ?? chainCreatingMissing(to: parentPath)
            chains[parentPath] = chain
            let parent = chain.last!
            let fsPath = try entryPath(item.path.name, in: parent)
            if try kind(of: fsPath) == .directory { throw StoreError.isADirectory(item.path.description) }
            let (cls, source): (ProtectionClass, ProtectionSource) = try item.protection.map { ($0, .explicit) }
                ?? inheritedClass(for: item.path, chain: chain, storeDefault: &storeDefault)
            targets.append(Target(parent: parent, fsPath: fsPath, protection: cls, source: source))
        }

        // Keys: one wrap request per class.
        let fileKeys = try items.map { _ in try SecretBytes(randomCount: 32) }
        var wrapped = [WrappedFileKey?](repeating: nil, count: items.count)
        for cls in Set(targets.map(\.protection)) {
            let indices = targets.indices.filter { targets[$0].protection == cls }
            let keysForClass = try keys.wrap(fileKeys: indices.map { fileKeys[$0] }, for: cls)
            guard keysForClass.count == indices.count else { throw DeviceError.integrity("wrapped key count") }
            for (i, key) in zip(indices, keysForClass) { wrapped[i] = key }
        }

        // Data files and new headers, none synced yet, several objects at
        // once: a small object is one chunk, sealed on one core, so the
        // cores share the objects instead. Each slot holds what its object
        // has written, for the commit or for cleaning up after a failure.
        struct Written {
            var data: (path: String, file: DataFile)?
            var temporary: String?
            var header: ObjectHeader?
        }
        var written = [Written](repeating: Written(), count: items.count)
        func discard(from first: Int) {
            for slot in written.dropFirst(first) {
                if let temporary = slot.temporary { try? fs.remove(temporary, syncDirectory: false) }
                if let (path, file) = slot.data {
                    file.close()
                    try? fs.remove(path, syncDirectory: false)
                }
            }
        }
        do {
            try written.withUnsafeMutableBufferPointer { buffer in
                // Each iteration writes only its own slot.
                let slots = Unchecked(buffer)
                try forEachObject(items.count) { i in
                    let objectID = try SecureRandom.bytes(ObjectHeader.objectIDByteCount)
                    let dataPath = dataPath(objectID)
                    // One core per object: the batch already spreads its
                    // objects over the cores, and a writer's buffers grow
                    // with its workers.
                    let writer = try ObjectWriter(chunkKey: ChunkLayout.chunkKey(fileKey: fileKeys[i]),
                                                  chunkSize: options.chunkSize, workers: 1)
                    // A small object's data goes into its header file, and
                    // no data file is created.
                    let result = try writer.write(from: items[i].source, inlineLimit: ObjectHeader.maxInlineDataLength, file: {
                        let file = try DataFile.create(dataPath, fileSystem: fs)
                        slots.value[i].data = (dataPath, file)
                        // Until its header commits, the data file is
                        // referenced by nothing; the lock tells a verifier
                        // it is not garbage yet.
                        try file.holdWriteLock()
                        return file
                    }, progress: nil, sync: false)
                    let now = Self.now()
                    var header = ObjectHeader(
                        parentID: targets[i].parent.record.directoryID, name: items[i].path.name,
                        protectionSource: targets[i].source, wrappedKey: wrapped[i]!, objectID: objectID,
                        chunkSize: options.chunkSize, plaintextLength: result.result.plaintextLength,
                        dataLength: result.result.dataLength, created: now, modified: now, headerMAC: [],
                        inlineData: result.inlineData)
                    header.headerMAC = try header.computeMAC(fileKey: fileKeys[i])
                    let temporary = targets[i].fsPath + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
                    try fs.writeNewFile(temporary, header.sealed(with: metadata))
                    slots.value[i].temporary = temporary
                    // Written: the inline data need not stay in memory for
                    // the rest of the batch.
                    slots.value[i].header = header.droppingInlineData()
                }
            }
            try fs.syncFileSystem(containing: dataDirectory)
        } catch {
            discard(from: 0)
            throw error
        }

        // The commit: each rename puts one new version in place.
        var replaced: [[UInt8]] = []
        var committed = 0
        do {
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            for (i, item) in items.enumerated() {
                let target = targets[i]
                switch try kind(of: target.fsPath) {
                case .directory: throw StoreError.isADirectory(item.path.description)
                case .object:
                    // Only a replaced data file needs removing afterwards.
                    if let old = try? readHeader(target.fsPath, name: item.path.name, in: target.parent, path: item.path),
                       !old.isInline {
                        replaced.append(old.objectID)
                    }
                case .missing: break
                }
                try fs.rename(written[i].temporary!, to: target.fsPath)
                committed += 1
            }
            try fs.syncFileSystem(containing: dataDirectory)
        } catch {
            discard(from: committed)
            for (_, file) in written.prefix(committed).compactMap(\.data) { file.close() }
            // What was committed stays; make it durable if the disk lets.
            try? fs.syncFileSystem(containing: dataDirectory)
            throw error
        }
        for (_, file) in written.compactMap(\.data) { file.close() }
        // The new names are durable: the replaced data can go.
        for objectID in replaced { try? fs.remove(dataPath(objectID), syncDirectory: false) }

        let status = try keys.status()
        return try items.indices.map { i in
            try objectInfo(items[i].path, header: written[i].header!, headerPath: targets[i].fsPath, status: status)
        }
    }
}
