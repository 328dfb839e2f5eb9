internal import LockerCrypto
internal import LockerDevice
public import LockerFormat
internal import LockerIO
internal import FoundationEssentials
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
    /// How many bytes the source is expected to give, if known (a file's
    /// size when it was looked at). A batch reads small sources ahead,
    /// many at once; the object stored is what the source gives, whatever
    /// this says.
    public var expectedLength: UInt64?
    /// Starts the source's reads from storage without waiting for them
    /// (say, opens a file and asks the kernel for its pages), if it can.
    /// A batch calls it at most once, before ``source`` is first called,
    /// never at the same time as it, maybe from another thread: for the
    /// sources ahead of the writers once some were found waiting for
    /// storage (see ``ReadAheadWindow``). Failures are left for
    /// ``source`` to report.
    public var prepare: (() -> Void)?

    public init(path: StorePath, protection: ProtectionClass? = nil, expectedLength: UInt64? = nil,
                source: @escaping (UnsafeMutableRawBufferPointer) throws -> Int, prepare: (() -> Void)? = nil) {
        self.path = path
        self.protection = protection
        self.expectedLength = expectedLength
        self.source = source
        self.prepare = prepare
    }
}

/// The first element of each part, then the second of each, and so on;
/// a part that runs out is passed over. Every element once.
package func takingTurns<Element>(_ parts: [[Element]]) -> [Element] {
    var taken: [Element] = []
    taken.reserveCapacity(parts.reduce(0) { $0 + $1.count })
    for offset in 0..<(parts.map(\.count).max() ?? 0) {
        for part in parts where offset < part.count { taken.append(part[offset]) }
    }
    return taken
}

extension Store {
    /// Runs `body` for each of `count` objects: on `threadsPerWorker` times
    /// as many threads as the store has workers when it has more than one,
    /// else in order (which keeps the sequence of system calls fixed, as
    /// fault injection needs).
    func forEachObject(_ count: Int, threadsPerWorker: Int, _ body: (Int) throws -> Void) throws {
        if options.workers > 1 {
            try parallelFor(count, width: threadsPerWorker * options.workers, body)
        } else {
            for i in 0..<count { try body(i) }
        }
    }

    /// `items` in the order a batch of them is best written in: when they
    /// come from several directories, split (between directories) into
    /// at most one part per worker, and the parts interleaved, so that objects
    /// taken one after another, by different threads, are created in
    /// different directories. Two threads creating files in one directory
    /// take turns at its lock, and while ext4 searches long for a free
    /// inode (for minutes after a mass deletion) one spins while the other
    /// creates (`Tools/bench/directory-contention.py`; docs/performance.md,
    /// "After pass 23: writers in different directories"). The same items, each once,
    /// each directory's in their order; all in their own order when they
    /// are in one directory or the store has one worker.
    public func orderedForWriting(_ items: [PutBatchItem]) -> [PutBatchItem] {
        Self.interleavingDirectories(items, ways: options.workers)
    }

    /// ``orderedForWriting(_:)`` with `ways` parts at most.
    static func interleavingDirectories(_ items: [PutBatchItem], ways: Int) -> [PutBatchItem] {
        guard ways > 1, items.count > 1 else { return items }
        // Each directory's items, the directories in the order they first
        // come: a walk puts a subdirectory's files between its parent's.
        var groupOf: [StorePath: Int] = [:]
        var groups: [[Int]] = []
        for (i, item) in items.enumerated() {
            let parent = item.path.parent
            if let g = groupOf[parent] {
                groups[g].append(i)
            } else {
                groupOf[parent] = groups.count
                groups.append([i])
            }
        }
        guard groups.count > 1 else { return items }
        // Parts of whole directories and about equal counts: a part ends
        // before a directory when ending it there is at least as near to
        // its share as ending it after.
        var parts: [[Int]] = [[]]
        var placed = 0
        for group in groups {
            let end = items.count * parts.count / ways
            if !parts[parts.count - 1].isEmpty, parts.count < ways, abs(placed - end) <= abs(placed + group.count - end) {
                parts.append([])
            }
            parts[parts.count - 1] += group
            placed += group.count
        }
        // (With two directories or more, the last always starts a part:
        // ending the first part at the batch's end is never nearer its
        // share.)
        return takingTurns(parts).map { items[$0] }
    }

    /// The most objects one batch holds. Each object with a data file
    /// holds it open and locked until its header commits, so a batch
    /// needs a descriptor per such object beside the caller's (see
    /// ``isAlwaysInline(length:)``).
    public static let maxBatchCount = 1024

    /// Whether an object of `length` bytes is stored inline in its header
    /// file whatever its content: storing it never creates a data file,
    /// nor holds a descriptor in a batch.
    public func isAlwaysInline(length: UInt64) -> Bool {
        guard let bounds = try? ChunkLayout.dataLengthBounds(plaintextLength: length, chunkSize: options.chunkSize) else { return false }
        return bounds.upperBound <= UInt64(ObjectHeader.maxInlineDataLength)
    }

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
    ///
    /// The same as ``commit(_:)`` of ``stageBatch(_:)``.
    @discardableResult
    public func putBatch(_ items: [PutBatchItem]) throws -> [ObjectInfo] {
        try commit(stageBatch(items))
    }

    /// The first half of ``putBatch(_:)``: writes the batch's data files
    /// and new headers beside their targets, none of them synced or in
    /// place. Nothing a reader sees changes. The batch is then committed
    /// with ``commit(_:)``, which may run on another thread while the next
    /// batch is staged; a batch released uncommitted removes what it wrote.
    /// A staged batch holds one descriptor per data file until it is
    /// committed or released.
    ///
    /// With a `tree` (see ``stageTree(_:)``), an object whose directory
    /// the tree creates is written there at its final name instead, and
    /// its commit renames nothing: it appears when the tree is published,
    /// and its data file, if it has one, waits in the tree's temporary
    /// directory until then.
    ///
    /// Sources with an ``PutBatchItem/expectedLength`` of at most the
    /// inline limit are read ahead of the objects being written, several
    /// at once (see ``ReadAheadWindow``), from `readAhead` if given: the
    /// window ``readAhead(_:)`` started for these same items (say, while
    /// the previous batch was staged). The batch stops it.
    public func stageBatch(_ items: [PutBatchItem], into tree: StagedTree? = nil,
                           readAhead window: ReadAheadWindow? = nil) throws -> StagedBatch {
        // Reading starts now at the latest, while the targets are found
        // and the keys wrapped; stopped however this ends.
        let early = window ?? readAhead(items)
        defer { early.stop() }
        guard !items.isEmpty else { return StagedBatch(fileSystem: fs, temporaries: temporaries, tree: nil, objects: []) }
        guard items.count <= Self.maxBatchCount else { throw StoreError.invalidPath("more than \(Self.maxBatchCount) objects in one batch") }
        guard Set(items.map(\.path)).count == items.count else { throw StoreError.invalidPath("the same path twice in one batch") }
        if let tree, tree.isFinished { throw StoreError.invalidPath("the staged tree is already published") }
        guard early.isStarted(for: items) else { throw StoreError.invalidPath("a read-ahead window started for another batch, or stopped") }
        for item in items { try checkDepth(item.path) }

        // Where each object goes, and its class. Its file name there is
        // left to its writer: encrypting the names took 0.06 s of a
        // 20,000-file `put -r`, on this one thread while the other core
        // waited for the batch.
        struct Target {
            var parent: Directory
            var protection: ProtectionClass
            var source: ProtectionSource
            /// In a directory of the staged tree: written in place.
            var inTree: Bool
            /// Its entry's path, where it was found already (an object that
            /// may replace one); else its writer finds it.
            var fsPath: String?
        }
        var chains: [StorePath: [Directory]] = [:]
        var storeDefault: ProtectionClass?
        var targets: [Target] = []
        targets.reserveCapacity(items.count)
        for item in items {
            guard !item.path.isRoot else { throw StoreError.isADirectory("/") }
            let parentPath = item.path.parent
            let inTree = tree?.isNew(parentPath) ?? false
            if inTree, tree!.isNew(item.path) { throw StoreError.isADirectory(item.path.description) }
            let chain = try chains[parentPath] ?? (inTree ? tree!.chain(to: parentPath) : chainCreatingMissing(to: parentPath))
            chains[parentPath] = chain
            let parent = chain.last!
            let (cls, source): (ProtectionClass, ProtectionSource) = try item.protection.map { ($0, .explicit) }
                ?? inheritedClass(for: item.path, chain: chain, storeDefault: &storeDefault)
            targets.append(Target(parent: parent, protection: cls, source: source, inTree: inTree, fsPath: nil))
        }
        // An object replaced with no class given keeps an explicit class
        // (``explicitClass(replacing:in:)``). Only an existing directory
        // can hold one; its headers are looked at on every core.
        let replacing = items.indices.filter { items[$0].protection == nil && !targets[$0].inTree }
        if !replacing.isEmpty {
            var found = [(fsPath: String, kept: ProtectionClass?)?](repeating: nil, count: replacing.count)
            try found.withUnsafeMutableBufferPointer { buffer in
                // Each iteration writes only its own slot.
                let slots = Unchecked(buffer)
                try forEachObject(replacing.count, threadsPerWorker: 1) { k in
                    let i = replacing[k]
                    let fsPath = try entryPath(items[i].path.name, in: targets[i].parent)
                    slots.value[k] = (fsPath, explicitClass(replacing: items[i].path, at: fsPath, in: targets[i].parent))
                }
            }
            for (k, i) in replacing.enumerated() {
                targets[i].fsPath = found[k]!.fsPath
                if let cls = found[k]!.kept { (targets[i].protection, targets[i].source) = (cls, .explicit) }
            }
        }

        // Keys: one wrap request per class.
        let fileKeys = try SecretBytes.random(items.count, count: 32)
        // Object IDs and header nonces, drawn for the whole batch at once
        // as the keys are: a call to the generator each, not one per object.
        let objectIDs = try SecureRandom.bytes(ObjectHeader.objectIDByteCount * items.count)
        let nonces = try SecureRandom.bytes(AESGCM.nonceByteCount * items.count)
        var wrapped = [WrappedFileKey?](repeating: nil, count: items.count)
        for cls in Set(targets.map(\.protection)) {
            let indices = targets.indices.filter { targets[$0].protection == cls }
            let keysForClass = try keys.wrap(fileKeys: indices.map { fileKeys[$0] }, for: cls)
            guard keysForClass.count == indices.count else { throw DeviceError.integrity("the agent gave the wrong number of wrapped keys") }
            for (i, key) in zip(indices, keysForClass) { wrapped[i] = key }
        }
        // The batch is written for as long as it takes with keys wrapped
        // now: each of its classes must still take new objects, asked at
        // most every interval from now on, whatever the objects' sizes.
        let probe = fileKeys[0]
        let classes = Array(Set(targets.map(\.protection)))
        let recheck = KeyRecheck { [keys] in
            for cls in classes { _ = try keys.wrap(fileKey: probe, for: cls) }
        }

        // Data files and new headers, none synced yet, several objects at
        // once: a small object is one chunk, sealed on one core, so the
        // cores share the objects instead. Each slot holds what its object
        // has written, for the commit or for cleaning up after a failure
        // (the batch's deinit).
        let batch = StagedBatch(fileSystem: fs, temporaries: temporaries, tree: tree, objects: items.indices.map {
            StagedBatch.Object(path: items[$0].path, parent: targets[$0].parent, inPlace: targets[$0].inTree)
        })
        // Header temporaries are not locked one by one (a batch would need
        // a descriptor each); the staging lock, shared until they are
        // renamed or removed, tells a verifier that they are not garbage.
        if !targets.allSatisfy(\.inTree) {
            batch.staging = try FileLock.staging(path: stagingPath, fileSystem: fs)
        }
        try batch.objects.withUnsafeMutableBufferPointer { buffer in
            // Each iteration writes only its own slot.
            let slots = Unchecked(buffer)
            // One thread per core: more only contend for the directory
            // locks that file creation takes (measured: `put -r` of 20,000
            // files 1.31 s with 2 threads, 1.40 s with 4, 1.42 s with 6).
            try forEachObject(items.count, threadsPerWorker: 1) { i in
                // Whatever happens to this object, its read-ahead space
                // goes back: the readers wait for it.
                defer { early.release(i) }
                // A directory in the way is found by the commit, which
                // looks under the store lock anyway.
                let fsPath = try targets[i].fsPath ?? entryPath(items[i].path.name, in: targets[i].parent)
                let idLength = ObjectHeader.objectIDByteCount
                let objectID = Array(objectIDs[(i * idLength)..<((i + 1) * idLength)])
                // In a staged tree, the data file waits inside its
                // temporary directory, whose lock covers it.
                let dataPath = targets[i].inTree ? tree!.dataPath(Hex.lowercase(objectID)) : dataPath(objectID)
                let taken = try early.take(i)
                let chunkKey = try ChunkLayout.chunkKey(fileKey: fileKeys[i])
                let result: (result: ObjectWriter.Result, inlineData: [UInt8]?)
                if let whole = taken.whole,
                   Self.sealsWhole(length: whole.count, chunkSize: options.chunkSize, maxChunkCount: options.maxChunkCount) {
                    // Read ahead whole, one chunk, and inline: sealed from
                    // the window where it was read, without a writer's
                    // buffers (docs/performance.md, "After pass 29: one
                    // chunk sealed where it was read").
                    try recheck.pass()
                    // The compressed chunk is plaintext too: it passes
                    // through a buffer kept as plaintext is, not the
                    // array that becomes the header file.
                    let scratch = BufferPool.shared.take(ChunkLayout.maxRecordLength(chunkSize: options.chunkSize))
                    defer { BufferPool.shared.give(scratch, used: whole.count + ChunkLayout.recordOverhead) }
                    let data = try ChunkSealer(chunkKey: chunkKey).sealWhole(whole, scratch: scratch.bytes)
                    result = (ObjectWriter.Result(plaintextLength: UInt64(whole.count), dataLength: UInt64(data.count)), data)
                } else {
                    // One core per object: the batch already spreads its
                    // objects over the cores, and a writer's buffers grow
                    // with its workers.
                    let writer = try ObjectWriter(chunkKey: chunkKey,
                                                  chunkSize: options.chunkSize, maxChunkCount: options.maxChunkCount, workers: 1)
                    // A small object's data goes into its header file, and
                    // no data file is created.
                    let written = try writer.write(from: taken.source, inlineLimit: ObjectHeader.maxInlineDataLength, file: {
                        // Until its header commits, the data file is
                        // referenced by nothing; the lock tells a verifier
                        // it is not garbage yet. (A new directory's data
                        // files are under the lock of the tree being built,
                        // and go with its temporary directory.)
                        let file: DataFile
                        if targets[i].inTree {
                            file = try tree!.creatingInside { try DataFile.create(dataPath, fileSystem: fs) }
                        } else {
                            let created = try temporaries.creatingTemporary({ try DataFile.createLocked(dataPath, fileSystem: fs) },
                                                                            cleanup: removal(of: dataPath))
                            file = created.made
                            slots.value[i].dataToken = created.token
                        }
                        slots.value[i].data = (dataPath, file)
                        return file
                    }, progress: nil, sync: false, recheck: recheck)
                    result = (written.result, written.inlineData)
                }
                let now = Self.now()
                var header = ObjectHeader(
                    parentID: targets[i].parent.record.directoryID, name: items[i].path.name,
                    protectionSource: targets[i].source, wrappedKey: wrapped[i]!, objectID: objectID,
                    chunkSize: options.chunkSize, plaintextLength: result.result.plaintextLength,
                    dataLength: result.result.dataLength, created: now, modified: now, headerMAC: [],
                    inlineData: result.inlineData)
                header.headerMAC = try header.computeMAC(fileKey: fileKeys[i])
                // In a staged tree nothing reads the directory before it is
                // published, and its publication commits every header in it.
                let temporary = targets[i].inTree ? fsPath : FileSystem.temporaryPath(beside: fsPath)
                let nonce = try AESGCM.Nonce(Array(nonces[(i * AESGCM.nonceByteCount)..<((i + 1) * AESGCM.nonceByteCount)]))
                let sealed = try header.sealed(with: metadata, nonce: nonce)
                do {
                    if targets[i].inTree {
                        try tree!.creatingInside { try fs.writeNewFile(temporary, sealed) }
                    } else {
                        slots.value[i].temporaryToken = try temporaries.creatingTemporary({ try fs.writeNewFile(temporary, sealed) },
                                                                                          cleanup: removal(of: temporary)).token
                    }
                } catch let error as IOError where error.isNotFound && !targets[i].inTree {
                    throw Self.directoryGone(items[i].path.parent)
                }
                slots.value[i].fsPath = fsPath
                slots.value[i].temporary = temporary
                slots.value[i].headerSize = UInt64(sealed.count)
                // Written: the inline data need not stay in memory for
                // the rest of the batch.
                slots.value[i].header = header.droppingInlineData()
            }
        }
        return batch
    }

    /// Whether an object of `length` bytes, all in memory, is sealed whole
    /// (``ChunkSealer/sealWhole(_:scratch:)``): one chunk, whose record and
    /// index fit inline whatever the chunk compresses to, in a store that
    /// takes objects of one chunk (`maxChunkCount`, at least 1 but in
    /// tests of the limit).
    static func sealsWhole(length: Int, chunkSize: UInt32, maxChunkCount: UInt64) -> Bool {
        maxChunkCount >= 1 && length <= Int(chunkSize)
            && length + ChunkLayout.recordOverhead + Int(ChunkLayout.indexLength(chunkCount: 1)) <= ObjectHeader.maxInlineDataLength
    }

    /// What a batch reports when the directory it writes into left its
    /// place while the batch ran (the store lock is taken only for the
    /// commit): `rm -r` took it out of the namespace, or `mv` moved it,
    /// with the batch's header temporaries inside.
    static func directoryGone(_ directory: StorePath) -> StoreError {
        .changedMeanwhile(path: directory.description, what: "moved or removed it")
    }

    /// Starts reading the small sources of `items` ahead (see
    /// ``ReadAheadWindow``), for ``stageBatch(_:into:readAhead:)`` of the
    /// same items; a window not handed to a batch must be stopped. Reads
    /// nothing with one worker: that keeps the sequence of system calls
    /// fixed, as fault injection needs.
    public func readAhead(_ items: [PutBatchItem]) -> ReadAheadWindow {
        ReadAheadWindow(items, enabled: options.workers > 1, policy: readAheadPolicy)
    }

    /// The second half of ``putBatch(_:)``: syncs the file system, renames
    /// each staged header into place under the store lock, and syncs
    /// again. A batch is committed once. Objects staged into a tree are
    /// left to its publication: a batch of only those is synced and takes
    /// no lock.
    @discardableResult
    public func commit(_ batch: StagedBatch) throws -> [ObjectInfo] {
        try commitCounting(batch)
        return batch.objects.isEmpty ? [] : try objectInfos(batch)
    }

    /// ``commit(_:)`` for a caller that needs no ``ObjectInfo`` of what it
    /// stored (`put -r` counts them): the same commit, without the
    /// device's state asked for, nor a report made for each object.
    /// Returns how many objects were committed.
    @discardableResult
    public func commitCounting(_ batch: StagedBatch) throws -> Int {
        guard !batch.objects.isEmpty else { return 0 }
        guard !batch.isFinished else { throw StoreError.invalidPath("a staged batch is committed once") }
        batch.isFinished = true
        // Every way out has renamed or removed the header temporaries.
        defer { batch.staging = nil }
        // For objects in a staged tree this sync is not needed for
        // durability (the tree's publication syncs), but writing them out
        // now, while the next batch is staged, leaves the publication little
        // to wait for (measured: 0.25 s at the end of a `put -r` of 20,000
        // small files without it).
        do {
            try fs.syncFileSystem(containing: dataDirectory)
        } catch {
            batch.discard(from: 0)
            throw error
        }
        if batch.objects.allSatisfy(\.inPlace) {
            // Nothing to rename.
            batch.release(batch.objects[...])
            return batch.objects.count
        }

        // The commit: each rename puts one new version in place.
        var replaced: [[UInt8]] = []
        var replacedInline: [[UInt8]] = []
        var committed = 0
        do {
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            for object in batch.objects {
                if object.inPlace {
                    committed += 1
                    continue
                }
                // The rename ends the cleanups of the object's temporaries,
                // in the same step: its data file is then referred to.
                try temporaries.finishingTemporaries([object.temporaryToken, object.dataToken]) {
                    // A new name: one call. Under the lock, what is there
                    // can only be what an earlier commit or command put
                    // there.
                    let renamed: Bool
                    do throws(IOError) {
                        renamed = try fs.renameIfAbsent(object.temporary!, to: object.fsPath!)
                    } catch {
                        if error.isNotFound, try fs.status(object.temporary!) == nil { throw Self.directoryGone(object.path.parent) }
                        throw error
                    }
                    if renamed { return }
                    switch try kind(of: object.fsPath!) {
                    case .directory: throw StoreError.isADirectory(object.path.description)
                    case .object:
                        // A replaced data file is removed afterwards, and
                        // any replaced object's open entry dropped.
                        if let old = try? readHeader(object.fsPath!, name: object.path.name, in: object.parent, path: object.path) {
                            if old.isInline { replacedInline.append(old.objectID) } else { replaced.append(old.objectID) }
                        }
                    case .missing: break
                    }
                    try fs.rename(object.temporary!, to: object.fsPath!)
                }
                committed += 1
            }
            try fs.syncFileSystem(containing: dataDirectory)
        } catch {
            batch.discard(from: committed)
            batch.release(batch.objects.prefix(committed))
            // What was committed stays; make it durable if the disk lets.
            try? fs.syncFileSystem(containing: dataDirectory)
            throw error
        }
        batch.release(batch.objects[...])
        // The new names are durable: the replaced data can go.
        for objectID in replaced { try? fs.remove(dataPath(objectID), syncDirectory: false) }
        forgetOpen(replaced + replacedInline)
        return batch.objects.count
    }

    private func objectInfos(_ batch: StagedBatch) throws -> [ObjectInfo] {
        let status = try keys.status()
        return try batch.objects.map { object in
            try objectInfo(object.path, header: object.header!, headerPath: object.fsPath!, status: status, headerSize: object.headerSize)
        }
    }
}

/// A batch of objects written by ``Store/stageBatch(_:)`` and not yet
/// committed: data files and headers beside their targets, not synced and
/// not in place. Released uncommitted, it removes them.
public final class StagedBatch: @unchecked Sendable {
    /// What one object has written.
    struct Object {
        let path: StorePath
        let parent: Store.Directory
        /// Where its header goes; set once the header is written (a batch
        /// is committed only once every object's is).
        var fsPath: String?
        /// Written at `fsPath` in a staged tree, which commits it.
        let inPlace: Bool
        var data: (path: String, file: DataFile)?
        var temporary: String?
        /// The tokens of the cleanups of `data` and `temporary` (see
        /// ``TemporaryCleanups``), outside a staged tree.
        var dataToken: Int?
        var temporaryToken: Int?
        var header: ObjectHeader?
        /// The header file's size, as written.
        var headerSize: UInt64?
    }

    private let fileSystem: FileSystem
    private let temporaries: any TemporaryCleanups
    /// The tree its in-place objects were written into.
    private let tree: StagedTree?
    var objects: [Object]
    /// Committed, or the commit failed and cleaned up.
    var isFinished = false
    /// A share of the store's staging lock while the batch has header
    /// temporaries (released after deinit's cleanup, as a property).
    var staging: FileLock?

    init(fileSystem: FileSystem, temporaries: any TemporaryCleanups, tree: StagedTree?, objects: [Object]) {
        self.fileSystem = fileSystem
        self.temporaries = temporaries
        self.tree = tree
        self.objects = objects
    }

    /// How many objects the batch holds.
    public var count: Int { objects.count }

    deinit {
        if !isFinished { discard(from: 0) }
    }

    /// Closes the data files of committed objects; the tree notes those of
    /// its objects, to move them on publication.
    func release(_ committed: ArraySlice<Object>) {
        for object in committed {
            guard let data = object.data else { continue }
            data.file.close()
            if object.inPlace {
                tree!.keep(data.path, in: object.path.parent)
            }
        }
    }

    /// Removes what the objects from `first` on have written.
    func discard(from first: Int) {
        for object in objects.dropFirst(first) {
            temporaries.finishingTemporaries([object.temporaryToken, object.dataToken]) {
                if let temporary = object.temporary { try? fileSystem.remove(temporary, syncDirectory: false) }
                if let (path, file) = object.data {
                    file.close()
                    try? fileSystem.remove(path, syncDirectory: false)
                }
            }
        }
    }
}
