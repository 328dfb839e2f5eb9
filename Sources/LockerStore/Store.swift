internal import LockerCrypto
public import LockerDevice
public import LockerFormat
public import LockerIO
internal import FoundationEssentials
#if canImport(Glibc)
internal import Glibc
#endif

/// An encrypted object store. See docs/format.md for its layout on disk
/// and docs/architecture.md for how it uses the device.
///
/// Reads take no lock: a reader sees an object's old version or its new
/// one, never a mix. Changes to the namespace are serialized by a
/// store-wide lock held only while a header is replaced.
public final class Store: @unchecked Sendable {
    /// Tuning that does not change the format's rules.
    public struct Options: Sendable {
        /// The chunk size of new objects (a power of two, 16 KiB–4 MiB).
        public var chunkSize: UInt32
        /// How many chunks are compressed and sealed at once.
        public var workers: Int
        /// Every file system call the store makes goes through this.
        public var fileSystem: FileSystem
        /// The most chunks a new object may have: the format's limit
        /// (``ChunkLayout/maxChunkCount``), or fewer. A larger object is
        /// refused with ``StoreError/objectTooLarge(maxLength:)``.
        public var maxChunkCount: UInt64
        /// Told of every temporary the store writes, so that a process
        /// ending early can remove them.
        public var temporaries: any TemporaryCleanups

        /// `workers` 0 means one per core.
        public init(chunkSize: UInt32 = ChunkLayout.defaultChunkSize, workers: Int = 0, fileSystem: FileSystem = .init(),
                    maxChunkCount: UInt64 = ChunkLayout.maxChunkCount,
                    temporaries: any TemporaryCleanups = NoTemporaryCleanups()) {
            self.chunkSize = chunkSize
            self.maxChunkCount = min(maxChunkCount, ChunkLayout.maxChunkCount)
            self.workers = workers > 0 ? workers : max(1, ProcessInfo.processInfo.activeProcessorCount)
            self.fileSystem = fileSystem
            self.temporaries = temporaries
        }
    }

    public let path: String
    public let keys: any KeyService
    let options: Options
    let metadata: MetadataKeys
    let fs: FileSystem
    var temporaries: any TemporaryCleanups { options.temporaries }
    /// Whether the next batch's small sources are read by readers of their
    /// own or by their writers, learned from the batch before.
    let readAheadPolicy = ReadAheadPolicy()

    var namespaceRoot: String { path + "/ns" }
    var dataDirectory: String { path + "/data" }
    var lockPath: String { path + "/lock" }
    /// Shared by batch writers while they have header temporaries; see
    /// ``FileLock/staging(path:fileSystem:)``.
    var stagingPath: String { path + "/staging" }
    var intentPath: String { path + "/move.intent" }

    /// Opens the store at `path`, creating its layout on first use. Throws
    /// ``StoreError/foreignStore`` if it was made under another device.
    ///
    /// A missing directory is created (with its parents) only when
    /// `create` is set; otherwise it throws ``StoreError/noStore(_:)``, so
    /// that reading from a mistyped path fails instead of showing an empty
    /// store. An existing directory that holds anything but a store's own
    /// files throws ``StoreError/notAStore(_:)``, with or without `create`:
    /// nothing is written into it.
    public init(path: String, keys: any KeyService, options: Options = Options(), create: Bool = true) throws {
        precondition(ChunkLayout.allowedChunkSizes.contains(options.chunkSize), "chunk size not allowed")
        self.path = path
        self.keys = keys
        self.options = options
        fs = options.fileSystem
        try Self.checkDirectory(path, create: create, fileSystem: fs)
        metadata = try MetadataKeys(metadataKey: keys.metadataKey())
        try fs.createDirectory(path, mode: 0o700, durable: true)
        try fs.createDirectory(dataDirectory, mode: 0o700, durable: true)
        try Self.checkLayout(path, fileSystem: fs)
        // Only a root record that is certainly missing is created: one that
        // could not be looked at is not replaced.
        if try fs.status(namespaceRoot + "/.dir") == nil {
            let lock = try lockStore()
            if try fs.status(namespaceRoot + "/.dir") == nil {
                // A new store has nothing else. Entries or data without a
                // root record mean the record was lost: making a new one
                // would orphan every name for good.
                let entries = (try? fs.contentsOfDirectory(namespaceRoot))?.filter { !Self.isTemporary($0) } ?? []
                let data = try fs.contentsOfDirectory(dataDirectory).filter { !Self.isTemporary($0) }
                guard entries.isEmpty, data.isEmpty else { throw StoreError.foreignStore }
                try fs.createDirectory(namespaceRoot, mode: 0o700, durable: true)
                let root = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: DirectoryRecord.rootParentID,
                                           name: "", defaultClass: nil, created: Self.now())
                try writeAtomically(namespaceRoot + "/.dir", root.sealed(with: metadata))
            }
            withExtendedLifetime(lock) {}
        }
        do {
            _ = try rootDirectory()
        } catch is StoreError {
            throw StoreError.foreignStore
        }
    }

    /// The names a store directory holds besides temporaries.
    static let layoutNames: Set<String> = ["ns", "data", "lock", "staging", "move.intent"]

    /// Checks that the store's own entries are what a store makes: `ns`
    /// and `data` directories, and `lock`, `staging` and `move.intent`
    /// regular files, where present, none of them a symbolic link. Every
    /// read, write and removal of the store goes through these names, so
    /// a link planted at `data` would send them, `verify --repair`'s
    /// removals included, wherever it leads. Throws
    /// ``StoreError/damagedLayout(path:what:)``, having followed nothing.
    static func checkLayout(_ path: String, fileSystem fs: FileSystem) throws {
        for (name, isDirectory) in [("ns", true), ("data", true), ("lock", false), ("staging", false), ("move.intent", false)] {
            let entry = path + "/" + name
            guard let status = try fs.status(entry) else { continue }
            if status.mode & UInt32(S_IFMT) == UInt32(S_IFLNK) {
                throw StoreError.damagedLayout(path: entry, what: "is a symbolic link")
            }
            if isDirectory, !status.isDirectory { throw StoreError.damagedLayout(path: entry, what: "is not a directory") }
            if !isDirectory, !status.isRegularFile { throw StoreError.damagedLayout(path: entry, what: "is not a regular file") }
        }
    }

    /// Whether `name` is one a data file is given (``dataPath(_:)``):
    /// anything else in `data/` is not the store's to remove.
    static func isDataFileName(_ name: String) -> Bool {
        name.utf8.count == 2 * ObjectHeader.objectIDByteCount
            && name.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// The temporaries of an atomic replace of a layout file.
    static func isLayoutTemporary(_ name: String) -> Bool {
        name.hasPrefix("lock.tmp-") || name.hasPrefix("move.intent.tmp-") || name.hasPrefix("staging.tmp-")
    }

    /// Checks `path` before a store is opened there, reading only;
    /// ``init(path:keys:options:create:)`` runs it first.
    ///
    /// - A directory with a root record passes.
    /// - A directory that holds anything a store would not, or a path that
    ///   is not a directory, throws ``StoreError/notAStore(_:)``.
    /// - Unless `create`, a missing path (or a link to nothing) and a
    ///   directory that holds no store yet (empty, or only the layout with
    ///   no object) throw ``StoreError/noStore(_:)``: reading a mistyped
    ///   path must neither show an empty store nor make one.
    public static func checkDirectory(_ path: String, create: Bool, fileSystem fs: FileSystem = FileSystem()) throws {
        guard try fs.status(path) != nil else {
            guard create else { throw StoreError.noStore(path) }
            return
        }
        if try fs.status(path + "/ns/.dir") != nil { return }
        let names: [String]
        do {
            names = try fs.contentsOfDirectory(path)
        } catch let error as IOError where error.errno == ENOTDIR {
            throw StoreError.notAStore(path)
        } catch let error as IOError where error.errno == ENOENT {
            throw StoreError.noStore(path)
        }
        guard names.allSatisfy({ layoutNames.contains($0) || isLayoutTemporary($0) }) else {
            throw StoreError.notAStore(path)
        }
        // Objects without a root record are a store that lost it: opening
        // it reports that (``StoreError/foreignStore``) and creates nothing.
        if !create {
            let data = (try? fs.contentsOfDirectory(path + "/data"))?.filter { !isTemporary($0) } ?? []
            let entries = (try? fs.contentsOfDirectory(path + "/ns"))?.filter { !isTemporary($0) } ?? []
            if data.isEmpty && entries.isEmpty { throw StoreError.noStore(path) }
        }
    }

    /// Takes the store lock for a change (held until the result is
    /// released), first finishing a move
    /// a crash interrupted (see ``settleInterruptedMove()``).
    func lockStore() throws -> FileLock {
        let lock = try FileLock.store(path: lockPath, fileSystem: fs)
        try settleInterruptedMove()
        return lock
    }

    /// The intent of an interrupted move, if one is left and
    /// authenticates. Nil when there is none, or when what is there is not
    /// a file of at most 8 KiB or does not authenticate (verify reports it
    /// as damage). Any other failure to read it (EIO, EMFILE, ENOMEM) is
    /// thrown: taken for no intent, a change could go ahead unsettled and
    /// remove the one data file that two names of an interrupted move share.
    func pendingMoveIntent() throws -> MoveIntent? {
        guard let bytes = try readIfThere(relative(intentPath), limit: 8 << 10) else { return nil }
        return try? MoveIntent.open(bytes, with: metadata)
    }

    /// The file at `relative` in the store, or nil when nothing readable
    /// as a file is there. Any other error (EIO, EMFILE, ENOMEM) is thrown:
    /// settling a move must not take a transient failure for a name that
    /// is gone, and drop the intent that still matters.
    private func readIfThere(_ relative: String, limit: Int) throws -> [UInt8]? {
        do {
            return try fs.readFile(path + "/" + relative, limit: limit)
        } catch {
            if let io = error as? IOError, io.isNotFound || io.isNotRegularFile || [ENOTDIR, EFBIG, EISDIR].contains(io.errno) {
                return nil
            }
            throw error
        }
    }

    /// True when both names of `intent` are headers of its object: the
    /// move was interrupted after the new name was written and before the
    /// old one was removed. A header that does not authenticate is not
    /// one (verify reports it); a read that fails otherwise is thrown.
    func moveLeftBothNames(_ intent: MoveIntent) throws -> Bool {
        func names(_ relative: String) throws -> Bool {
            guard let bytes = try readIfThere(relative, limit: ObjectHeader.maxFileLength),
                  let header = try? ObjectHeader.open(bytes, with: metadata) else { return false }
            return header.objectID == intent.objectID
        }
        return try names(intent.target) && names(intent.source)
    }

    /// The directory an interrupted directory move left with two places
    /// in its record, and that record with only the place the directory
    /// is at: the new one once it was renamed (checked by ID at the
    /// intent's target), else the old one (at its source). Nil when the
    /// intent is of an object, or its directory's record names one place.
    func halfMovedDirectory(_ intent: MoveIntent) throws -> (fsPath: String, settled: DirectoryRecord, renamed: Bool)? {
        func record(at relative: String) throws -> DirectoryRecord? {
            guard let bytes = try readIfThere(relative + "/.dir", limit: 8 << 10),
                  let record = try? DirectoryRecord.open(bytes, with: metadata),
                  record.directoryID == intent.objectID, record.previous != nil else { return nil }
            return record
        }
        if var moved = try record(at: intent.target) {
            moved.previous = nil
            return (path + "/" + intent.target, moved, true)
        }
        // Its previous place is the one it was reached at when the move
        // began (move() sees to that), so rolling back goes there.
        if var unmoved = try record(at: intent.source), let previous = unmoved.previous {
            unmoved.parentID = previous.parentID
            unmoved.name = previous.name
            unmoved.previous = nil
            return (path + "/" + intent.source, unmoved, false)
        }
        return nil
    }

    /// Settles an interrupted move. An object move rolls forward: if both
    /// names are there, the old one goes. A directory whose record still
    /// names two places keeps only the one it is at: the new place once
    /// the rename is durable (both parents are synced first), the old one
    /// if it was not renamed. Then the intent goes. Called with the store
    /// lock held. An intent that does not authenticate is left for verify
    /// to report.
    func settleInterruptedMove() throws {
        guard let intent = try pendingMoveIntent() else { return }
        if let directory = try halfMovedDirectory(intent) {
            if directory.renamed {
                // Dropping the old place before the rename is durable
                // could leave, after a crash, a directory at its old place
                // whose record vouches only for the new one.
                for parent in Set([intent.source, intent.target].map { LocalPath.parent(of: path + "/" + $0) }) {
                    try fs.syncDirectory(parent)
                }
            }
            try writeAtomically(directory.fsPath + "/.dir", directory.settled.sealed(with: metadata))
        } else if try moveLeftBothNames(intent) {
            try fs.remove(path + "/" + intent.source)
        }
        try fs.remove(intentPath)
    }

    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    // MARK: Namespace

    /// A directory of the namespace, resolved.
    struct Directory {
        let fsPath: String
        let record: DirectoryRecord
        let storePath: StorePath
    }

    func rootDirectory() throws -> Directory {
        Directory(fsPath: namespaceRoot, record: try readDirectoryRecord(namespaceRoot, path: .root, in: DirectoryRecord.rootParentID),
                  storePath: .root)
    }

    /// The record of the directory at `path`, reached from the directory
    /// whose ID is `parentID` (``DirectoryRecord/rootParentID`` for the
    /// root). The record must vouch for that place: `path`'s last name in
    /// that parent. A record authenticates on its own, so one copied or
    /// swapped in from a sibling, or a whole directory moved in from
    /// another parent, would otherwise hand its default class to objects
    /// created here. A nil `parentID` skips the check, for reading a
    /// record only for the names it vouches for.
    func readDirectoryRecord(_ fsPath: String, path: StorePath, in parentID: [UInt8]?) throws -> DirectoryRecord {
        let bytes: [UInt8]
        do {
            bytes = try fs.readFile(fsPath + "/.dir", limit: 8 << 10)
        } catch let error as IOError where error.isNotFound {
            throw StoreError.integrity(path: path.description, what: "directory record missing")
        } catch let error as IOError where error.errno == EFBIG || error.isNotRegularFile {
            throw StoreError.integrity(path: path.description, what: "directory record failed authentication")
        }
        let record: DirectoryRecord
        do {
            record = try DirectoryRecord.open(bytes, with: metadata)
        } catch {
            throw StoreError.integrity(path: path.description, what: "directory record failed authentication")
        }
        guard parentID.map({ record.places.contains(DirectoryRecord.Place(parentID: $0, name: path.name)) }) ?? true else {
            throw StoreError.integrity(path: path.description, what: "directory record belongs to another directory")
        }
        return record
    }

    /// Whether a file in a namespace directory is a write in progress (or
    /// left by a crash): a new directory (`.tmp-dir-…`) or an atomic
    /// replacement (`<name>.tmp-…`, see `FileSystem.writeFileAtomically`).
    /// Encoded names are base64url, so they never contain ".tmp-".
    static func isTemporary(_ fileName: String) -> Bool {
        // On the bytes: with Foundation imported (as apps do), `contains`
        // goes through NSString for every entry a listing checks.
        var name = fileName
        return name.withUTF8 { name in
            guard name.count >= 5 else { return false }
            for i in 0...(name.count - 5) where name[i] == UInt8(ascii: ".") {
                if name[i + 1] == UInt8(ascii: "t"), name[i + 2] == UInt8(ascii: "m"), name[i + 3] == UInt8(ascii: "p"),
                   name[i + 4] == UInt8(ascii: "-") { return true }
            }
            return false
        }
    }

    /// Whether the temporary at `fsPath` may be a header a batch staged
    /// beside its entry (`<name>.tmp-…` in the namespace), rather than a
    /// directory being built, which is locked itself.
    func isHeaderTemporary(_ fsPath: String) -> Bool {
        fsPath.hasPrefix(namespaceRoot + "/") && !(fsPath.split(separator: "/").last?.hasPrefix(".tmp-dir-") ?? false)
    }

    /// The file-system path of `name` inside `directory`.
    /// Throws ``StoreError/invalidPath(_:)`` for a name no entry may have
    /// (``NameCodec/isValidName(_:)``): every command that names an entry
    /// comes through here, so none writes such a name (a path made with
    /// ``StorePath/init(components:)`` is not checked when it is made).
    func entryPath(_ name: String, in directory: Directory) throws -> String {
        guard NameCodec.isValidName(name) else {
            throw StoreError.invalidPath("'\(name)' cannot name an entry: a name is 1 to \(NameCodec.maxNameLength) bytes, with no '/' or NUL byte, and not '.' or '..'")
        }
        let encoded = try NameCodec.encode(name, parentID: directory.record.directoryID, keys: metadata)
        return directory.fsPath + "/" + (try NameCodec.fileName(forEncoded: encoded))
    }

    /// The entry of `directory` that `name` names as `ls` shows an entry
    /// whose name does not authenticate (`?<file name>`), if `name` is
    /// such a name and that entry is there and still fails. A real name
    /// that begins with "?" is looked for first, by the caller: no
    /// encoded name fails to authenticate.
    func damagedEntry(_ name: String, in directory: Directory) throws -> DirectoryEntry? {
        guard name.hasPrefix("?") else { return nil }
        let fileName = String(name.dropFirst())
        guard let listed = try listedEntries(of: directory).first(where: { $0.name == fileName }) else { return nil }
        return try resolveEntry(listed, in: directory).path == nil ? listed : nil
    }

    package enum Kind { case missing, directory, object }

    /// What is at `path`, without reading a header or needing any key but
    /// the metadata key.
    package func itemKind(_ path: StorePath) throws -> Kind {
        if path.isRoot { return .directory }
        return try kind(of: try entryPath(path.name, in: try directory(at: path.parent)))
    }

    /// Throws as ``directory(at:)`` does unless `path` is a directory.
    package func requireDirectory(_ path: StorePath) throws {
        _ = try directory(at: path)
    }

    /// The header of the object at `path`, authenticated, as
    /// ``object(at:)`` reads it.
    package func objectHeader(at path: StorePath) throws -> ObjectHeader {
        try object(at: path).header
    }

    /// What is at `fsPath`. A failure to look throws: taking it for
    /// `.missing` could replace what is there.
    func kind(of fsPath: String) throws -> Kind {
        guard let status = try fs.status(fsPath) else { return .missing }
        return status.isDirectory ? .directory : .object
    }

    /// The error for what is at `fsPath` (`path`), found where a directory
    /// was wanted and not one: an object, whose header is a regular file,
    /// is `otherwise` (``StoreError/notADirectory(_:)`` on the way to a
    /// path, ``StoreError/alreadyExists(_:)`` at a new directory's name);
    /// anything else (a link, a FIFO, a socket planted there) is damage,
    /// as a listing reports it.
    func notADirectory(_ fsPath: String, _ path: StorePath, otherwise: StoreError) -> StoreError {
        guard let status = try? fs.status(fsPath), !status.isRegularFile else { return otherwise }
        return .integrity(path: path.description, what: "header is not a regular file")
    }

    /// Resolves a directory; every component must be a directory.
    func directory(at path: StorePath) throws -> Directory {
        var current = try rootDirectory()
        for (i, name) in path.components.enumerated() {
            let sub = StorePath(components: Array(path.components[...i]))
            let fsPath = try entryPath(name, in: current)
            switch try kind(of: fsPath) {
            case .missing: throw StoreError.notFound(sub.description)
            case .object: throw notADirectory(fsPath, sub, otherwise: .notADirectory(sub.description))
            case .directory:
                current = Directory(fsPath: fsPath, record: try readDirectoryRecord(fsPath, path: sub, in: current.record.directoryID),
                                    storePath: sub)
            }
        }
        return current
    }

    /// Every directory from the root to `path`, for inheritance.
    func directoryChain(to path: StorePath) throws -> [Directory] {
        let (chain, complete) = try existingChain(to: path)
        guard complete else {
            throw StoreError.notFound(StorePath(components: Array(path.components[..<chain.count])).description)
        }
        return chain
    }

    /// The directories from the root towards `path` that exist, and
    /// whether that is all of them (the first one missing ends the chain).
    func existingChain(to path: StorePath) throws -> (chain: [Directory], complete: Bool) {
        var chain = [try rootDirectory()]
        for (i, name) in path.components.enumerated() {
            let sub = StorePath(components: Array(path.components[...i]))
            let fsPath = try entryPath(name, in: chain.last!)
            switch try kind(of: fsPath) {
            case .missing: return (chain, false)
            case .object: throw notADirectory(fsPath, sub, otherwise: .notADirectory(sub.description))
            case .directory:
                chain.append(Directory(fsPath: fsPath, record: try readDirectoryRecord(fsPath, path: sub, in: chain.last!.record.directoryID),
                                       storePath: sub))
            }
        }
        return (chain, true)
    }

    /// ``directoryChain(to:)``, creating the directories that are missing.
    func chainCreatingMissing(to path: StorePath) throws -> [Directory] {
        do {
            return try directoryChain(to: path)
        } catch StoreError.notFound {
            try makeDirectory(path, parents: true)
            return try directoryChain(to: path)
        }
    }

    /// Reads and checks the header of the object `name` in `directory`.
    func readHeader(_ fsPath: String, name: String, in directory: Directory, path: StorePath) throws -> ObjectHeader {
        let bytes: [UInt8]
        do {
            bytes = try fs.readFile(fsPath, limit: ObjectHeader.maxFileLength)
        } catch let error as IOError where error.isNotFound {
            throw StoreError.notFound(path.description)
        } catch let error as IOError where error.isNotRegularFile {
            throw StoreError.integrity(path: path.description, what: "header is not a regular file")
        } catch let error as IOError where error.errno == EFBIG {
            throw StoreError.integrity(path: path.description, what: "header failed authentication")
        }
        let header: ObjectHeader
        do {
            header = try ObjectHeader.open(bytes, with: metadata)
        } catch {
            throw StoreError.integrity(path: path.description, what: "header failed authentication")
        }
        // A header is bound to its directory and name: one moved or
        // swapped on disk is refused.
        guard header.parentID == directory.record.directoryID, header.name.sameBytes(as: name) else {
            throw StoreError.integrity(path: path.description, what: "header belongs to another name or directory")
        }
        return header
    }

    /// The object at `path`, with its header.
    func object(at path: StorePath) throws -> (directory: Directory, fsPath: String, header: ObjectHeader) {
        guard !path.isRoot else { throw StoreError.isADirectory("/") }
        let parent = try directory(at: path.parent)
        let fsPath = try entryPath(path.name, in: parent)
        switch try kind(of: fsPath) {
        case .missing: throw StoreError.notFound(path.description)
        case .directory: throw StoreError.isADirectory(path.description)
        case .object: return (parent, fsPath, try readHeader(fsPath, name: path.name, in: parent, path: path))
        }
    }

    func dataPath(_ objectID: [UInt8]) -> String {
        dataDirectory + "/" + Hex.lowercase(objectID)
    }

    /// The class a new object at `path` gets, and where it came from.
    /// The store default is asked of the device only when no directory in
    /// `chain` has a default, and only once per `storeDefault` cache.
    func inheritedClass(for path: StorePath, chain: [Directory],
                        storeDefault: inout ProtectionClass?) throws -> (ProtectionClass, ProtectionSource) {
        for directory in chain.reversed() {
            if let cls = directory.record.defaultClass { return (cls, .inherited(directory.storePath.description)) }
        }
        if storeDefault == nil {
            storeDefault = ProtectionClass(name: try keys.status().defaultClass) ?? .completeUntilFirstUserAuthentication
        }
        return (storeDefault!, .storeDefault)
    }

    func inheritedClass(for path: StorePath, chain: [Directory]) throws -> (ProtectionClass, ProtectionSource) {
        var storeDefault: ProtectionClass?
        return try inheritedClass(for: path, chain: chain, storeDefault: &storeDefault)
    }

    /// The class of the object at `path` (its entry `fsPath` in `parent`),
    /// if there is one and its class was set explicitly: an object replaced
    /// with no class given keeps it. Writing new content is not choosing
    /// the protection again; without this, a class A object written over
    /// without a class took its directory's default, perhaps D, without a
    /// word. An inherited class is not kept: it follows the directories
    /// now, as a new object's does. A header that cannot be read keeps
    /// nothing.
    func explicitClass(replacing path: StorePath, at fsPath: String, in parent: Directory) -> ProtectionClass? {
        // No look at what is there first: a missing name, a directory or
        // anything planted fails the read as surely, one system call sooner.
        guard let old = try? readHeader(fsPath, name: path.name, in: parent, path: path),
              case .explicit = old.protectionSource
        else { return nil }
        return old.protectionClass
    }

    // MARK: Depth

    /// The longest file-system path a stored entry may have: the kernel's
    /// PATH_MAX (4,096 bytes with its terminating zero) less room for
    /// what is written below or beside the deepest entry (a directory
    /// record's temporary name, `.dir.tmp-PID-RANDOM`) and for the
    /// temporary directory a tree is built in before it is renamed into
    /// place (`.tmp-dir-UUID`, one more level).
    static let fsPathLimit = Int(PATH_MAX) - 1 - 128

    /// Throws ``StoreError/invalidPath(_:)``, before anything is written,
    /// if `path`, with `below` more bytes of file-system path under it,
    /// would need a longer file-system path than ``fsPathLimit``: every
    /// name is stored encrypted (at least 38 bytes), so a few hundred
    /// levels of short names, or fewer long ones, reach the kernel's
    /// limit, and a store must not hold what it cannot open again.
    func checkDepth(_ path: StorePath, below: Int = 0) throws {
        let length = storedLength(path) + below
        guard length > Self.fsPathLimit else { return }
        throw StoreError.invalidPath("""
            \(path) is nested too deeply for this store: stored, it would need a file-system path of \(length) bytes, \
            and the store allows \(Self.fsPathLimit) (Linux allows 4,095 in all, and this store's own path takes \(namespaceRoot.utf8.count))
            """)
    }

    /// The length of the file-system path `path` is stored at.
    func storedLength(_ path: StorePath) -> Int {
        path.components.reduce(namespaceRoot.utf8.count) { $0 + 1 + NameCodec.fileNameLength(nameLength: $1.utf8.count) }
    }

    /// How many bytes of file-system path the deepest entry below the
    /// directory at `fsPath` adds to it (0 for an empty directory), for a
    /// move of the directory. Its own files (the record, temporaries) are
    /// within ``fsPathLimit``'s room.
    func depthBelow(_ fsPath: String) throws -> Int {
        var deepest = 0
        for name in try fs.contentsOfDirectory(fsPath) where !name.hasPrefix(".") && !Self.isTemporary(name) {
            let entry = fsPath + "/" + name
            let below = try fs.status(entry)?.isDirectory == true ? try depthBelow(entry) : 0
            deepest = max(deepest, 1 + name.utf8.count + below)
        }
        return deepest
    }

    // MARK: Directories

    /// Creates a directory. With `parents`, missing parents are created and
    /// an existing directory is not an error. An object at `path` throws
    /// ``StoreError/alreadyExists(_:)``, one on the way to it
    /// ``StoreError/notADirectory(_:)``.
    @discardableResult
    public func makeDirectory(_ path: StorePath, defaultClass: ProtectionClass? = nil, parents: Bool = false) throws -> DirectoryInfo {
        if path.isRoot {
            guard parents else { throw StoreError.alreadyExists("/") }
            return try directoryInfo(path)
        }
        try checkDepth(path)
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        var current = try rootDirectory()
        for (i, name) in path.components.enumerated() {
            let sub = StorePath(components: Array(path.components[...i]))
            let isLast = i == path.components.count - 1
            let fsPath = try entryPath(name, in: current)
            switch try kind(of: fsPath) {
            case .object:
                // As mkdir(1): the name is taken (EEXIST), also with
                // `parents`; an object on the way is ENOTDIR.
                throw notADirectory(fsPath, sub, otherwise: isLast ? .alreadyExists(sub.description) : .notADirectory(sub.description))
            case .directory:
                if isLast && !parents { throw StoreError.alreadyExists(sub.description) }
                current = Directory(fsPath: fsPath, record: try readDirectoryRecord(fsPath, path: sub, in: current.record.directoryID),
                                    storePath: sub)
            case .missing:
                if !isLast && !parents { throw StoreError.notFound(sub.description) }
                let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: current.record.directoryID,
                                             name: name, defaultClass: isLast ? defaultClass : nil, created: Self.now())
                try createDirectoryEntry(fsPath, record: record, in: current)
                current = Directory(fsPath: fsPath, record: record, storePath: sub)
            }
        }
        if parents, let defaultClass, current.record.defaultClass != defaultClass {
            var record = current.record
            record.defaultClass = defaultClass
            try writeAtomically(current.fsPath + "/.dir", record.sealed(with: metadata))
        }
        return try directoryInfo(path)
    }

    /// Creates every directory of `paths` that is missing, with its
    /// missing parents, as ``makeDirectory(_:defaultClass:parents:)`` with
    /// `parents` would each, but with the durability bought at once: each
    /// new subtree is built in a temporary directory beside its place, the
    /// file system is synced, each subtree is renamed into place, and the
    /// file system is synced again. Creating many directories this way
    /// (importing a tree) costs two syncs instead of three per directory.
    ///
    /// Each new subtree appears whole or not at all; what a failure or a
    /// crash leaves is garbage that `verify --repair` removes. An object
    /// in the way throws ``StoreError/notADirectory(_:)`` before anything
    /// is created.
    public func makeDirectories(_ paths: [StorePath]) throws {
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        let build = try buildDirectories(paths)
        var published = 0
        do {
            guard !build.subtrees.isEmpty else { return }
            try fs.syncFileSystem(containing: namespaceRoot)
            for subtree in build.subtrees {
                try fs.rename(subtree.temporary, to: subtree.fsPath)
                published += 1
            }
            try fs.syncFileSystem(containing: namespaceRoot)
        } catch {
            for subtree in build.subtrees.dropFirst(published) { try? fs.removeTree(subtree.temporary) }
            throw error
        }
    }

    /// Directories made by ``buildDirectories(_:)``, not yet in place.
    struct DirectoryBuild {
        /// Each directory asked for and each of its ancestors. A new one's
        /// `fsPath` is where it is being built, inside its subtree's
        /// temporary directory.
        var directories: [StorePath: Directory]
        /// The new directories.
        var newPaths: Set<StorePath> = []
        /// Each new subtree: its temporary directory, where it goes, and
        /// its store path.
        var subtrees: [(temporary: String, fsPath: String, path: StorePath)] = []
    }

    /// Creates every directory of `paths` that is missing, with its missing
    /// parents, each new subtree inside a temporary directory (`.tmp-dir-…`)
    /// beside its place, or numbered inside `container`, records included,
    /// nothing synced. The caller holds the store lock. A failure removes
    /// what was created; an object in the way throws
    /// ``StoreError/notADirectory(_:)`` before anything is.
    func buildDirectories(_ paths: [StorePath], in container: String? = nil) throws -> DirectoryBuild {
        for path in paths { try checkDepth(path) }
        var wanted = Set<StorePath>()
        for path in paths {
            var current = path
            while !current.isRoot, wanted.insert(current).inserted { current = current.parent }
        }
        // Parents before their children.
        let ordered = wanted.sorted { ($0.components.count, $0.description) < ($1.components.count, $1.description) }
        var build = DirectoryBuild(directories: [.root: try rootDirectory()])
        var records: [(fsPath: String, record: DirectoryRecord)] = []
        for path in ordered {
            let parent = build.directories[path.parent]!
            // Inside a new subtree, the parent's path is already the
            // temporary one.
            var fsPath = try entryPath(path.name, in: parent)
            if !build.newPaths.contains(path.parent) {
                switch try kind(of: fsPath) {
                case .object: throw notADirectory(fsPath, path, otherwise: .notADirectory(path.description))
                case .directory:
                    build.directories[path] = Directory(
                        fsPath: fsPath, record: try readDirectoryRecord(fsPath, path: path, in: parent.record.directoryID),
                        storePath: path)
                    continue
                case .missing:
                    let temporary = container.map { $0 + "/\(build.subtrees.count)" } ?? parent.fsPath + "/.tmp-dir-" + UUID().uuidString
                    build.subtrees.append((temporary, fsPath, path))
                    fsPath = temporary
                }
            }
            let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: parent.record.directoryID,
                                         name: path.name, defaultClass: nil, created: Self.now())
            records.append((fsPath, record))
            build.newPaths.insert(path)
            build.directories[path] = Directory(fsPath: fsPath, record: record, storePath: path)
        }
        do {
            for (fsPath, record) in records {
                try fs.createDirectory(fsPath, mode: 0o700)
                try fs.writeNewFile(fsPath + "/.dir", record.sealed(with: metadata))
            }
        } catch {
            for subtree in build.subtrees { try? fs.removeTree(subtree.temporary) }
            throw error
        }
        return build
    }

    /// Creates the directory in a temporary name with its record inside,
    /// then renames it into place, so that no directory is ever seen
    /// without its record.
    private func createDirectoryEntry(_ fsPath: String, record: DirectoryRecord, in parent: Directory) throws {
        let temporary = parent.fsPath + "/.tmp-dir-" + UUID().uuidString
        func removeTemporary() {
            try? fs.remove(temporary + "/.dir", syncDirectory: false)
            try? fs.removeDirectory(temporary)
        }
        // Made whole with its cleanup held off: a cleanup that ran while
        // the record's temporary was being created could leave it behind.
        let (_, token) = try temporaries.creatingTemporary({
            try fs.createDirectory(temporary, mode: 0o700)
            do {
                try fs.writeFileAtomically(temporary + "/.dir", record.sealed(with: metadata))
            } catch {
                removeTemporary()
                throw error
            }
        }, cleanup: removal(of: temporary))
        do {
            try temporaries.finishingTemporaries([token]) { () throws(IOError) in try fs.rename(temporary, to: fsPath) }
        } catch {
            temporaries.finishingTemporaries([token]) { removeTemporary() }
            throw error
        }
        try fs.syncDirectory(parent.fsPath)
    }

    /// Sets (or clears) a directory's default class. Existing objects keep
    /// theirs unless `recursive`, which rewraps every object below to the
    /// new class, or, when clearing it, each object that inherited its
    /// class from this directory to the class the directories then give
    /// it (a new object's there: the nearest default left, else the
    /// store's); an explicit class is kept.
    ///
    /// With `recursive`, every key below is rewrapped before anything is
    /// written: if an object's class is locked now (or its key was reset),
    /// this throws that `DeviceError` and nothing has changed. A lock
    /// that comes in the middle of the writes can still leave part done.
    public func setDefaultClass(_ cls: ProtectionClass?, ofDirectory path: StorePath, recursive: Bool = false) throws {
        let directory = try self.directory(at: path)
        // Each object's key as it is, and rewrapped to its new class: `cls`,
        // or with `inherit` (nil) the class its directories give it once
        // this one has no default (a new object's), with where it came
        // from.
        var rewrapped: [(path: StorePath, from: WrappedFileKey, to: WrappedFileKey, cls: ProtectionClass, source: ProtectionSource)] = []
        if recursive {
            var chains: [StorePath: [Directory]] = [:]
            var storeDefault: ProtectionClass?
            try walk(path) { itemPath, isDirectory in
                guard !isDirectory else { return }
                let header = try object(at: itemPath).header
                let key = header.wrappedKey
                let target: (ProtectionClass, ProtectionSource)
                if let cls {
                    target = (cls, .inherited(path.description))
                } else {
                    // Only what took its class from this default follows
                    // it away: an explicit class stays (as when an object
                    // is written over), and so does one from a nearer
                    // directory, or from the store.
                    guard header.protectionSource == .inherited(path.description) else { return }
                    let parent = itemPath.parent
                    let chain = try chains[parent] ?? directoryChain(to: parent).map { d in
                        guard d.storePath == path else { return d }
                        var record = d.record
                        record.defaultClass = nil
                        return Directory(fsPath: d.fsPath, record: record, storePath: d.storePath)
                    }
                    chains[parent] = chain
                    target = try inheritedClass(for: itemPath, chain: chain, storeDefault: &storeDefault)
                }
                rewrapped.append((itemPath, key, try keys.rewrap(key, to: target.0), target.0, target.1))
            }
        }
        do {
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            // Read again under the lock: the record read before it may be
            // of a directory moved or removed since (a new one at its path
            // would get the old one's ID), or may still name the two places
            // of a move that taking the lock has just settled.
            guard let current = try reread(directory) else { throw Self.directoryGone(path) }
            var record = current.record
            record.defaultClass = cls
            try writeAtomically(current.fsPath + "/.dir", record.sealed(with: metadata))
        }
        for (itemPath, from, to, cls, source) in rewrapped {
            try setClass(itemPath, to: cls, source: source, rewrapped: (from, to))
        }
    }

    // MARK: Objects

    /// Changes an object's class by rewrapping its file key. The data is
    /// not touched, so this takes the same time for any object size.
    public func setClass(_ path: StorePath, to cls: ProtectionClass) throws {
        try setClass(path, to: cls, source: .explicit)
    }

    /// `rewrapped`: a key rewrapped earlier, used if the object still
    /// has the key it was made from.
    func setClass(_ path: StorePath, to cls: ProtectionClass, source: ProtectionSource,
                  rewrapped: (from: WrappedFileKey, to: WrappedFileKey)? = nil) throws {
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        var (_, fsPath, header) = try object(at: path)
        let previous = header.protectionClass
        if let rewrapped, rewrapped.from == header.wrappedKey {
            header.wrappedKey = rewrapped.to
        } else {
            header.wrappedKey = try keys.rewrap(header.wrappedKey, to: cls)
        }
        header.protectionSource = source
        try writeAtomically(fsPath, header.sealed(with: metadata))
        // An open object that changes class is closed: the device kept its
        // key under the old class's rules.
        if previous != cls { forgetOpen([header.objectID]) }
    }

    /// Removes an object, or a directory (which must be empty unless
    /// `recursive`).
    public func remove(_ path: StorePath, recursive: Bool = false) throws {
        var open: OpenObjects?
        try remove(path, recursive: recursive, open: &open)
    }

    /// `open`: the device's open object IDs, asked for once, at the first
    /// object removed, not once per object of a tree.
    private func remove(_ path: StorePath, recursive: Bool, open: inout OpenObjects?) throws {
        guard !path.isRoot else { throw StoreError.invalidPath("the root cannot be removed") }
        let parent = try directory(at: path.parent)
        let fsPath = try entryPath(path.name, in: parent)
        switch try kind(of: fsPath) {
        case .missing:
            // `?<file name>`, as ls shows an entry whose name does not
            // authenticate: no other command can name it.
            guard let damaged = try damagedEntry(path.name, in: parent) else { throw StoreError.notFound(path.description) }
            try removeUnreadable(parent.fsPath + "/" + damaged.name, path: path, in: parent, recursive: recursive) {
                try self.damagedEntry(path.name, in: parent) != nil
            }
        case .object:
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            // Look again under the lock: another process, or the settling
            // of an interrupted move, may have removed it meanwhile.
            guard try kind(of: fsPath) == .object else { throw StoreError.notFound(path.description) }
            let header = try? readHeader(fsPath, name: path.name, in: parent, path: path)
            try fs.remove(fsPath)
            if let header {
                if open == nil { open = openObjectIDs() }
                forgetOpen([header.objectID], open: open!)
                if !header.isInline { try fs.remove(dataPath(header.objectID)) }
            }
        case .directory:
            if try recordIsDamaged(fsPath, path: path, in: parent) {
                return try removeUnreadable(fsPath, path: path, in: parent, recursive: recursive) {
                    try self.recordIsDamaged(fsPath, path: path, in: parent)
                }
            }
            // A tree is emptied without the store lock (each entry takes
            // it), so another command may store into it meanwhile: what it
            // stored is removed too, a few rounds at most.
            var rounds = 0
            var lock: FileLock?
            // Another rm -r or mv of it may win meanwhile.
            func entries() throws -> [String] {
                do {
                    return try fs.contentsOfDirectory(fsPath)
                } catch {
                    if let io = error as? IOError, io.isNotFound { throw Self.directoryGone(path) }
                    throw error
                }
            }
            while true {
                let names = try entries().filter { $0 != ".dir" && !$0.hasPrefix(".tmp-") }
                if !names.isEmpty {
                    guard recursive else { throw StoreError.directoryNotEmpty(path.description) }
                    for item in try list(path) { try remove(item.path, recursive: true, open: &open) }
                }
                // Held only if the directory is empty under it: the next
                // round's removals take it themselves.
                let taken = try lockStore()
                let empty = try withExtendedLifetime(taken) {
                    try entries().allSatisfy { $0 == ".dir" || Self.isTemporary($0) }
                }
                if empty {
                    lock = taken
                    break
                }
                guard recursive else { throw StoreError.directoryNotEmpty(path.description) }
                rounds += 1
                guard rounds < 3 else { throw StoreError.changedMeanwhile(path: path.description, what: "kept storing objects in it") }
            }
            defer { withExtendedLifetime(lock) {} }
            try removeTree(fsPath, in: parent)
        }
    }

    /// Takes the directory at `fsPath` out of the namespace in one step,
    /// then empties it: a failure or a crash from there on leaves a
    /// temporary directory, which verify removes, never a directory
    /// without its record. The caller holds the store lock.
    private func removeTree(_ fsPath: String, in parent: Directory) throws {
        let temporary = parent.fsPath + "/.tmp-dir-" + UUID().uuidString
        try fs.rename(fsPath, to: temporary)
        try fs.syncDirectory(parent.fsPath)
        try? fs.removeTree(temporary)
    }

    /// Removes an entry whose name or record does not authenticate,
    /// without reading what is in it: nothing there can be named or
    /// trusted. A directory must be empty unless `recursive`. The data
    /// files its headers refer to cannot be known, so they are left to
    /// `verify --repair`, which removes them once no damage is left.
    /// `stillUnreadable` is asked again under the store lock.
    private func removeUnreadable(_ fsPath: String, path: StorePath, in parent: Directory, recursive: Bool,
                                  stillUnreadable: () throws -> Bool) throws {
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        let found = try kind(of: fsPath)
        guard found != .missing else { throw StoreError.notFound(path.description) }
        guard try stillUnreadable() else { throw StoreError.changedMeanwhile(path: path.description, what: "replaced it") }
        if found == .object { return try fs.remove(fsPath) }
        let isEmpty = try fs.contentsOfDirectory(fsPath).allSatisfy { $0 == ".dir" || Self.isTemporary($0) }
        guard recursive || isEmpty else {
            throw StoreError.directoryNotEmpty(path.description)
        }
        try removeTree(fsPath, in: parent)
    }

    /// Whether the record of the directory at `fsPath` (`path`, in
    /// `parent`) does not authenticate there. Only that record is read:
    /// the parent is resolved already.
    func recordIsDamaged(_ fsPath: String, path: StorePath, in parent: Directory) throws -> Bool {
        do {
            _ = try readDirectoryRecord(fsPath, path: path, in: parent.record.directoryID)
            return false
        } catch let error as StoreError where error.isIntegrity {
            return true
        }
    }

    /// Moves an object or a directory. The object keeps its class and
    /// where it came from; fscrypt would refuse such a move, Locker keeps
    /// the class. The destination must not exist, unless it is a directory,
    /// into which the source then moves under its own name. Returns the
    /// path the source is at now.
    @discardableResult
    public func move(_ source: StorePath, to destination: StorePath) throws -> StorePath {
        guard !source.isRoot else { throw StoreError.invalidPath("the root cannot be moved") }
        var target = destination
        let destinationParent: Directory
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        if let existing = try? directory(at: destination) {
            target = destination.appending(source.name)
            destinationParent = existing
        } else {
            destinationParent = try directory(at: destination.parent)
        }
        guard target != source else { throw StoreError.invalidPath("\(source) is already at \(target)") }
        guard !target.isWithin(source) else { throw StoreError.invalidPath("cannot move \(source) into itself") }
        let targetFsPath = try entryPath(target.name, in: destinationParent)
        guard try kind(of: targetFsPath) == .missing else { throw StoreError.alreadyExists(target.description) }
        let sourceParent = try directory(at: source.parent)
        let sourceFsPath = try entryPath(source.name, in: sourceParent)
        let sourceKind = try kind(of: sourceFsPath)
        // A directory moved deeper: what is below it must stay reachable.
        try checkDepth(target, below: sourceKind == .directory && storedLength(target) > storedLength(source) ? depthBelow(sourceFsPath) : 0)
        switch sourceKind {
        case .missing:
            throw StoreError.notFound(source.description)
        case .object:
            var header = try readHeader(sourceFsPath, name: source.name, in: sourceParent, path: source)
            header.parentID = destinationParent.record.directoryID
            header.name = target.name
            // The intent first, then the new header, durably, then the old
            // one goes: a crash between leaves two names for one object,
            // never none, and the intent tells the next change which name
            // to drop. A failure between takes the new name away again.
            let intent = MoveIntent(source: relative(sourceFsPath), target: relative(targetFsPath), objectID: header.objectID)
            try writeAtomically(intentPath, intent.sealed(with: metadata))
            do {
                try writeAtomically(targetFsPath, header.sealed(with: metadata), syncDirectory: false)
                do {
                    try fs.syncDirectory(destinationParent.fsPath)
                    try fs.remove(sourceFsPath, syncDirectory: false)
                } catch {
                    try? fs.remove(targetFsPath)
                    throw error
                }
                try fs.syncDirectory(sourceParent.fsPath)
            } catch {
                // Either name may be the one left: only settling decides.
                try? settleInterruptedMove()
                throw error
            }
            // Done: the intent no longer matters, so its removal needs no
            // sync (an intent found later with one name left is dropped).
            try fs.remove(intentPath, syncDirectory: false)
        case .directory:
            // Three durable steps: the record names both the old and the
            // new name, the directory is renamed, the record drops the old
            // name. A directory stored under a hashed (long) name is known
            // by either name in its record, so a crash after any step
            // leaves it readable under its old name or its new one. The
            // intent, written first, lets the next change (or a failure
            // here) drop the place the directory is not at: a record left
            // naming two places would let the directory be swapped back to
            // the other one on disk and still vouched for.
            var old = try readDirectoryRecord(sourceFsPath, path: source, in: sourceParent.record.directoryID)
            if old.previous != nil {
                // A record naming two places with no intent beside it, as a
                // crash under an older build left it: the directory is at
                // the place it was reached at, so that is the one it keeps,
                // durably, before this move may roll back to it.
                old.parentID = sourceParent.record.directoryID
                old.name = source.name
                old.previous = nil
                try fs.syncDirectory(sourceParent.fsPath)
                try writeAtomically(sourceFsPath + "/.dir", old.sealed(with: metadata))
            }
            var moving = old
            moving.parentID = destinationParent.record.directoryID
            moving.name = target.name
            // The place it was reached at, not the record's own: a record
            // a crash left mid-move may name another place already.
            moving.previous = .init(parentID: sourceParent.record.directoryID, name: source.name)
            let parents = [sourceParent.fsPath] + (destinationParent.fsPath == sourceParent.fsPath ? [] : [destinationParent.fsPath])
            let intent = MoveIntent(source: relative(sourceFsPath), target: relative(targetFsPath), objectID: old.directoryID)
            try writeAtomically(intentPath, intent.sealed(with: metadata))
            do {
                try writeAtomically(sourceFsPath + "/.dir", moving.sealed(with: metadata))
                try fs.rename(sourceFsPath, to: targetFsPath)
                for parent in parents { try fs.syncDirectory(parent) }
                var moved = moving
                moved.previous = nil
                try writeAtomically(targetFsPath + "/.dir", moved.sealed(with: metadata))
            } catch {
                // Back to one place: the old one if the rename failed.
                try? settleInterruptedMove()
                throw error
            }
            try fs.remove(intentPath, syncDirectory: false)
        }
        return target
    }

    /// Stores an object from `source`, which fills the buffer it is given
    /// and returns the count, 0 at the end. Missing parent directories are
    /// created. The object replaces any object at `path` atomically.
    ///
    /// With `keepOpen`, the device keeps the new object's file key from
    /// before it is committed, as ``open(_:)`` would, until ``close(_:)``:
    /// a class B object created while the device is locked can then be
    /// read back until it is closed, and not again until unlock (an open
    /// cannot unwrap its key while locked). A put that fails leaves
    /// nothing open.
    @discardableResult
    public func put(_ path: StorePath, protection: ProtectionClass? = nil, keepOpen: Bool = false,
                    from source: (UnsafeMutableRawBufferPointer) throws -> Int,
                    progress: ((UInt64) -> Void)? = nil) throws -> ObjectInfo {
        guard !path.isRoot else { throw StoreError.isADirectory("/") }
        try checkDepth(path)
        // The key is wrapped before a missing parent is made: a put refused
        // because its class is locked leaves the namespace as it was.
        // Missing parents get no default class, so the directories that
        // exist decide the class.
        let (found, complete) = try existingChain(to: path.parent)
        // Where every directory exists, the entry's path is known now: the
        // object it replaces is looked at there, and the header goes there.
        let knownPath = complete ? try entryPath(path.name, in: found.last!) : nil
        let kept = protection == nil ? knownPath.flatMap { explicitClass(replacing: path, at: $0, in: found.last!) } : nil
        var (cls, source0): (ProtectionClass, ProtectionSource) = try (protection ?? kept).map { ($0, .explicit) }
            ?? inheritedClass(for: path, chain: found)
        let fileKey = try SecretBytes(randomCount: 32)
        var wrapped = try keys.wrap(fileKey: fileKey, for: cls)
        var chain = found
        if !complete {
            chain = try chainCreatingMissing(to: path.parent)
            // Another command may have made them meanwhile, with a default.
            if protection == nil {
                let made = try inheritedClass(for: path, chain: chain)
                if made.0 != cls { wrapped = try keys.wrap(fileKey: fileKey, for: made.0) }
                (cls, source0) = made
            }
        }
        let parent = chain.last!
        let fsPath = try knownPath ?? entryPath(path.name, in: parent)
        if try kind(of: fsPath) == .directory { throw StoreError.isADirectory(path.description) }
        let objectID = try SecureRandom.bytes(ObjectHeader.objectIDByteCount)
        let dataPath = dataPath(objectID)
        var file: DataFile?
        var fileToken: Int?
        var header: ObjectHeader
        var replaced: ObjectHeader?
        let status: DeviceStatus
        if keepOpen { try keys.registerOpen(objectID: Hex.lowercase(objectID), fileKey: fileKey, protectionClass: cls) }
        do {
            let writer = try ObjectWriter(chunkKey: ChunkLayout.chunkKey(fileKey: fileKey), chunkSize: options.chunkSize,
                                          maxChunkCount: options.maxChunkCount, workers: options.workers)
            // A small object's data goes into its header file: no data
            // file is created for it.
            let written = try writer.write(from: source, inlineLimit: ObjectHeader.maxInlineDataLength, file: {
                // Until the header commits, the data file is referenced by
                // nothing; the lock tells a verifier it is not garbage yet.
                let (created, token) = try temporaries.creatingTemporary({ try DataFile.createLocked(dataPath, fileSystem: fs) },
                                                                         cleanup: removal(of: dataPath))
                file = created
                fileToken = token
                return created
            }, progress: progress, recheck: KeyRecheck { [keys, cls] in _ = try keys.wrap(fileKey: fileKey, for: cls) })
            if file != nil { try fs.syncDirectory(dataDirectory) }

            let now = Self.now()
            header = ObjectHeader(
                parentID: parent.record.directoryID, name: path.name, protectionSource: source0, wrappedKey: wrapped,
                objectID: objectID, chunkSize: options.chunkSize, plaintextLength: written.result.plaintextLength,
                dataLength: written.result.dataLength, created: now, modified: now, headerMAC: [],
                inlineData: written.inlineData)
            header.headerMAC = try header.computeMAC(fileKey: fileKey)

            // What the report says of the object's availability is asked
            // for before the commit: once it has committed, a put fails
            // only for what leaves the object stored (see below).
            status = try keys.status()
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            // The parent was looked up before the lock. If another command
            // moved or removed it meanwhile, perhaps making a new one at its
            // path, the header (its name sealed under the old directory's
            // ID) must not go where that directory no longer is.
            guard try isStill(parent) else { throw Self.directoryGone(path.parent) }
            switch try kind(of: fsPath) {
            case .directory: throw StoreError.isADirectory(path.description)
            case .object: replaced = try? readHeader(fsPath, name: path.name, in: parent, path: path)
            case .missing: break
            }
            // The commit: if this throws, nothing has changed.
            try writeAtomically(fsPath, header.sealed(with: metadata), finishing: fileToken, syncDirectory: false)
        } catch {
            if let file {
                file.close()
                temporaries.finishingTemporaries([fileToken]) { try? fs.remove(dataPath, syncDirectory: false) }
            }
            if keepOpen { try? keys.close(objectID: Hex.lowercase(objectID)) }
            throw error
        }
        file?.close()
        // The new version is in place. Its name is made durable before the
        // old data goes, so that no crash leaves the old header without
        // its data; if that fails, the old data stays, as garbage, and the
        // error says the object was stored (it stays open if asked to).
        do {
            try fs.syncDirectory(parent.fsPath)
        } catch let error as IOError {
            throw StoreError.storedNotDurable(path: path.description, reason: String(cString: strerror(error.errno)))
        }
        if let replaced, !replaced.isInline { try? fs.remove(self.dataPath(replaced.objectID)) }
        if let replaced { forgetOpen([replaced.objectID]) }
        return try objectInfo(path, header: header, headerPath: fsPath, status: status)
    }

    /// ``FileSystem/writeFileAtomically(_:_:mode:syncDirectory:temporaries:finishing:)``
    /// with the store's ``temporaries``: how the store replaces a header,
    /// a directory record or the move intent. Not for a file inside a
    /// temporary directory being created (see there).
    func writeAtomically(_ fsPath: String, _ bytes: [UInt8], finishing data: Int? = nil, syncDirectory: Bool = true) throws {
        try fs.writeFileAtomically(fsPath, bytes, syncDirectory: syncDirectory, temporaries: temporaries, finishing: data)
    }

    /// The cleanup, for ``TemporaryCleanups``, of the temporary file or
    /// directory at `path`.
    func removal<T>(of path: String) -> (T) -> @Sendable () -> Void {
        { [fs] _ in { try? fs.removeTree(path) } }
    }

    /// The file key of an object: unwrapped now if its class allows, else,
    /// for a class B object only, the one the device keeps for it while it
    /// is open. The class is the authenticated header's, as it is now: an
    /// object opened as class B and then changed to class A is not
    /// readable through that open entry.
    func fileKey(for header: ObjectHeader) throws -> SecretBytes {
        do {
            return try keys.unwrap(header.wrappedKey)
        } catch DeviceError.protectedDataUnavailable(let cls) {
            if header.protectionClass == .completeUnlessOpen,
               let key = try? keys.openFileKey(objectID: Hex.lowercase(header.objectID)) {
                return key
            }
            throw DeviceError.protectedDataUnavailable(cls)
        }
    }

    /// Has the device drop its open entry (and the file key in it) for
    /// each of `objectIDs` that is open: objects removed, replaced, or
    /// changed to another class. "Unless open" belongs to the version
    /// that was opened, in the class it was opened in; a key kept for an
    /// object that is gone is a key kept for nothing. Best effort: the
    /// change itself has already been made.
    func forgetOpen(_ objectIDs: [[UInt8]]) {
        guard !objectIDs.isEmpty else { return }
        forgetOpen(objectIDs, open: openObjectIDs())
    }

    /// ``forgetOpen(_:)`` with the open object IDs already asked for.
    func forgetOpen(_ objectIDs: [[UInt8]], open: OpenObjects) {
        if open.ids?.isEmpty == true { return }
        for id in objectIDs.map(Hex.lowercase) where open.mayHold(id) {
            try? keys.close(objectID: id)
        }
    }

    /// The objects the device holds open, as it says when asked.
    struct OpenObjects {
        /// Nil when the device could not say (a failed `status`).
        let ids: Set<String>?

        /// Whether `id` may be open. When the device could not say, any
        /// may: each is closed (the close of one that is not open is
        /// refused, and ignored) rather than a key kept for a version that
        /// is gone.
        func mayHold(_ id: String) -> Bool { ids?.contains(id) ?? true }
    }

    func openObjectIDs() -> OpenObjects {
        OpenObjects(ids: try? Set(keys.status().openObjects.map(\.id)))
    }

    /// Reads an object, or the bytes of `range` in it, into `sink`.
    /// Decrypts only the chunks the range needs. A damaged object throws
    /// ``StoreError/integrity(path:what:)`` and never yields a byte that was
    /// not authenticated.
    public func read(_ path: StorePath, range: Range<UInt64>? = nil,
                     into sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        try readCurrent(path, range: range) { try $0.read($1, into: sink) }
    }

    /// Reads an object, or the bytes of `range` in it, as
    /// ``read(_:range:into:)`` does, but hands each chunk's bytes to `sink`
    /// with their offset from the start of the range, from one thread per
    /// core at once and in no particular order. For output that can be
    /// written at an offset (a regular file), which is then written from
    /// every core. Each chunk is authenticated before its bytes reach the
    /// sink; if this throws, any subset of the range may have been handed
    /// over, and the caller discards its output.
    public func read(_ path: StorePath, range: Range<UInt64>? = nil,
                     at sink: @Sendable (UInt64, UnsafeRawBufferPointer) throws -> Void) throws {
        let width = options.workers
        try readCurrent(path, range: range) { try $0.read($1, width: width, at: sink) }
    }

    /// Throws what a read of the object at `path` would throw for its
    /// protection now (`DeviceError.protectedDataUnavailable(_:)`,
    /// `DeviceError.keyReset(_:)`, …), reading none of its data.
    public func checkReadable(_ path: StorePath) throws {
        let (_, _, header) = try object(at: path)
        _ = try fileKey(for: header)
    }

    /// Reads the object now at `path` with `body` (see ``readData``).
    private func readCurrent(_ path: StorePath, range: Range<UInt64>?,
                             _ body: (ObjectReader, Range<UInt64>) throws -> Void) throws {
        // A concurrent put may replace the object and delete the old data
        // file between reading the header and opening the data: look again.
        for attempt in 1... {
            let (_, _, header) = try object(at: path)
            let fileKey = try fileKey(for: header)
            if try readData(path, header: header, fileKey: fileKey, range: range, body) { return }
            if attempt == 5 { throw StoreError.integrity(path: path.description, what: "data file missing") }
        }
    }

    /// Reads the data `header` names with its file key: `body` gets a
    /// reader whose index is authenticated, and the range to read. Returns
    /// false, without calling `body`, if the data file is gone (replaced
    /// meanwhile). `shared`: the recheck of keys unwrapped together, in
    /// place of one for this object alone.
    func readData(_ path: StorePath, header: ObjectHeader, fileKey: SecretBytes, range: Range<UInt64>?,
                  recheck shared: KeyRecheck? = nil,
                  _ body: (ObjectReader, Range<UInt64>) throws -> Void) throws -> Bool {
        do {
            try header.verifyMAC(fileKey: fileKey)
        } catch {
            throw StoreError.integrity(path: path.description, what: "header MAC failed authentication")
        }
        let file: any ChunkSource
        if let inline = header.inlineData {
            file = InlineChunks(bytes: inline)
        } else {
            do {
                // An object large enough to be written past the page
                // cache is read past it too, unless it is in the cache.
                file = try DataFile.openForReading(dataPath(header.objectID), fileSystem: fs,
                                                   large: header.dataLength > UInt64(OutputFile.directMinimum))
            } catch let error as IOError where error.isNotFound {
                return false
            } catch let error as IOError where error.isNotRegularFile {
                throw StoreError.integrity(path: path.description, what: "data file is not a regular file")
            }
        }
        let wanted = range ?? 0..<header.plaintextLength
        guard wanted.upperBound <= header.plaintextLength else {
            throw StoreError.invalidPath("range \(wanted.lowerBound)-\(wanted.upperBound) is past the end of \(path) (\(header.plaintextLength) bytes)")
        }
        do {
            // The key is asked for again while the read goes on, so a
            // lock, reboot or wipe stops it (see KeyRecheck): through the
            // caller's, which started when the key was unwrapped, if any.
            let recheck = shared ?? KeyRecheck { [self] in _ = try self.fileKey(for: header) }
            let reader = try ObjectReader(header: header, fileKey: fileKey, file: file, workers: options.workers,
                                          recheck: recheck)
            try body(reader, wanted)
        } catch let failure as SinkFailure {
            // The destination's error, as it was: only the reader's own
            // failures below are the object's damage.
            throw failure.underlying
        } catch is CryptoError {
            throw StoreError.integrity(path: path.description, what: "data failed authentication")
        } catch is FormatError {
            throw StoreError.integrity(path: path.description, what: "data failed authentication")
        } catch let error as IOError where error.errno == ENODATA {
            throw StoreError.integrity(path: path.description, what: "data truncated")
        }
        return true
    }

    /// Opens an object: the device keeps its file key, so a class B object
    /// stays readable across a lock until ``close(_:)``.
    public func open(_ path: StorePath) throws -> ObjectInfo {
        let (_, fsPath, header) = try object(at: path)
        let id = Hex.lowercase(header.objectID)
        let key = try keys.open(objectID: id, wrapped: header.wrappedKey)
        do {
            try header.verifyMAC(fileKey: key)
        } catch {
            try? keys.close(objectID: id)
            throw StoreError.integrity(path: path.description, what: "header MAC failed authentication")
        }
        return try objectInfo(path, header: header, headerPath: fsPath)
    }

    /// Closes an object opened with ``open(_:)``.
    public func close(_ path: StorePath) throws {
        let (_, _, header) = try object(at: path)
        try keys.close(objectID: Hex.lowercase(header.objectID))
    }

    // MARK: Listing and attributes

    /// The plaintext name of the entry stored as `fileName` in
    /// `directory`, or nil if it does not authenticate. A hashed (long)
    /// name is read from the entry's record and must hash back to the file
    /// name; a directory's record may vouch for two names during a move.
    func entryName(_ fileName: String, at fsPath: String, isDirectory: Bool, in directory: Directory) -> String? {
        let parentID = directory.record.directoryID
        guard fileName.hasPrefix(NameCodec.longNamePrefix) else {
            // A name no path could give (one holding a "/" byte, from a
            // store written before paths were split on bytes) is taken as
            // not authenticating: written out by a fetch, it would be a path.
            return (try? NameCodec.decode(fileName, parentID: parentID, keys: metadata)).flatMap { NameCodec.isValidName($0) ? $0 : nil }
        }
        var candidates: [String] = []
        if isDirectory {
            candidates = (try? readDirectoryRecord(fsPath, path: directory.storePath, in: nil))?.names(in: parentID) ?? []
        } else if let bytes = try? fs.readFile(fsPath, limit: ObjectHeader.maxFileLength),
                  let header = try? ObjectHeader.open(bytes, with: metadata) {
            candidates = [header.name]
        }
        return candidates.first {
            NameCodec.isValidName($0)
                && (try? NameCodec.fileName(forEncoded: NameCodec.encode($0, parentID: parentID, keys: metadata))) == fileName
        }
    }

    /// Calls `body` for each entry of the directory at `path` (temporaries
    /// and the record left out) with its store path (nil if its name does
    /// not authenticate), its file path, whether it is a directory, and
    /// the resolved directory it is in.
    func forEachEntry(of path: StorePath,
                      _ body: (StorePath?, _ fsPath: String, _ isDirectory: Bool, Directory) throws -> Void) throws {
        let directory = try self.directory(at: path)
        for listed in try listedEntries(of: directory) {
            let entry = try resolveEntry(listed, in: directory)
            try body(entry.path, entry.fsPath, entry.isDirectory, directory)
        }
    }

    /// The entries of a directory as listed: its record and temporaries
    /// left out.
    func listedEntries(of directory: Directory) throws -> [DirectoryEntry] {
        try fs.entriesOfDirectory(directory.fsPath).filter { $0.name != ".dir" && !Self.isTemporary($0.name) }
    }

    /// The entry `listed` in `directory`: its store path (nil if its name
    /// does not authenticate), its file path, and whether it is a
    /// directory.
    func resolveEntry(_ listed: DirectoryEntry, in directory: Directory) throws -> (path: StorePath?, fsPath: String, isDirectory: Bool) {
        let fileName = listed.name
        let fsPath = directory.fsPath + "/" + fileName
        // An entry the listing says is not a directory is taken as an
        // object without an lstat (a fetch of many small objects made
        // three calls per object to the file system besides its reads):
        // its header read refuses anything but a regular file, so an entry
        // that is a directory after all (replaced since, or its type
        // altered on disk) is damage. What the listing says is a
        // directory, or does not say, is looked at.
        let isDirectory = try listed.isDirectory == false ? false : kind(of: fsPath) == .directory
        let name = entryName(fileName, at: fsPath, isDirectory: isDirectory, in: directory)
        return (name.map { directory.storePath.appending($0) }, fsPath, isDirectory)
    }

    /// The entries of a directory, sorted by name.
    public func list(_ path: StorePath) throws -> [ItemInfo] {
        var items: [ItemInfo] = []
        // One status for the whole listing, not one per object.
        var status: DeviceStatus?
        try forEachEntry(of: path) { itemPath, fsPath, isDirectory, directory in
            guard let itemPath else {
                let fileName = LocalPath.name(of: fsPath)
                items.append(ItemInfo(path: path.appending("?" + fileName), kind: .damaged("name failed authentication")))
                return
            }
            // Only what fails authentication is damaged: a device that
            // cannot answer, or a file that cannot be read, is an error of
            // the listing, not a verdict on the entry.
            if isDirectory {
                do {
                    items.append(ItemInfo(path: itemPath, kind: .directory(try directoryInfo(itemPath))))
                } catch StoreError.integrity(_, let what) {
                    items.append(ItemInfo(path: itemPath, kind: .damaged(what)))
                }
            } else {
                let header: ObjectHeader
                do {
                    header = try readHeader(fsPath, name: itemPath.name, in: directory, path: itemPath)
                } catch StoreError.integrity(_, let what) {
                    return items.append(ItemInfo(path: itemPath, kind: .damaged(what)))
                } catch StoreError.notFound {
                    // Removed since the directory was read.
                    return
                }
                if status == nil { status = try keys.status() }
                items.append(ItemInfo(path: itemPath, kind: .object(try objectInfo(itemPath, header: header, headerPath: fsPath, status: status))))
            }
        }
        // Same parent: the names give the paths' order.
        return items.indices.sorted { items[$0].path.name < items[$1].path.name }.map { items[$0] }
    }

    /// Calls `visit` for every entry below `path`, depth first, parents
    /// before children. A damaged entry, or a directory below `path`
    /// whose record is damaged, throws ``StoreError/integrity(path:what:)``;
    /// with `damaged`, it is handed there instead (a directory before its
    /// damaged record is found, then with nothing below it) and the walk
    /// goes on.
    public func walk(_ path: StorePath, damaged: ((StoreError) throws -> Void)? = nil,
                     _ visit: (StorePath, _ isDirectory: Bool) throws -> Void) throws {
        try walk(entries: list(path), damaged: damaged, visit)
    }

    private func walk(entries: [ItemInfo], damaged: ((StoreError) throws -> Void)?,
                      _ visit: (StorePath, _ isDirectory: Bool) throws -> Void) throws {
        for item in entries {
            switch item.kind {
            case .directory:
                try visit(item.path, true)
                let below: [ItemInfo]
                do {
                    below = try list(item.path)
                } catch let error as StoreError where error.isIntegrity && damaged != nil {
                    // Its record is damaged: nothing below can be named.
                    try damaged!(error)
                    continue
                }
                try walk(entries: below, damaged: damaged, visit)
            case .object:
                try visit(item.path, false)
            case .damaged(let why):
                let error = StoreError.integrity(path: item.path.description, what: why)
                guard let damaged else { throw error }
                try damaged(error)
            }
        }
    }

    /// Attributes of an object or a directory.
    public func stat(_ path: StorePath) throws -> ItemInfo {
        if path.isRoot { return ItemInfo(path: path, kind: .directory(try directoryInfo(path))) }
        let parent = try directory(at: path.parent)
        let fsPath = try entryPath(path.name, in: parent)
        switch try kind(of: fsPath) {
        case .missing:
            guard try damagedEntry(path.name, in: parent) != nil else { throw StoreError.notFound(path.description) }
            throw StoreError.integrity(path: path.description, what: "name failed authentication")
        case .directory: return ItemInfo(path: path, kind: .directory(try directoryInfo(path)))
        case .object:
            let header = try readHeader(fsPath, name: path.name, in: parent, path: path)
            return ItemInfo(path: path, kind: .object(try objectInfo(path, header: header, headerPath: fsPath)))
        }
    }

    func directoryInfo(_ path: StorePath) throws -> DirectoryInfo {
        let chain = try directoryChain(to: path)
        let own = chain.last!.record.defaultClass
        let (effective, source): (ProtectionClass, ProtectionSource) = try own.map { ($0, .explicit) }
            ?? inheritedClass(for: path, chain: chain)
        return DirectoryInfo(path: path, defaultClass: own, effectiveDefault: effective, defaultSource: source,
                             created: chain.last!.record.created)
    }

    /// What `stat` shows of an object. `headerSize` is the header file's
    /// size when the caller has just written it; otherwise it is looked up.
    func objectInfo(_ path: StorePath, header: ObjectHeader, headerPath: String, status known: DeviceStatus? = nil,
                    headerSize writtenSize: UInt64? = nil) throws -> ObjectInfo {
        let status = try known ?? keys.status()
        let cls = header.protectionClass
        let id = Hex.lowercase(header.objectID)
        var accessible = status.readableClasses.contains(cls.canonicalName)
        var reason: String?
        if cls != .none, Int(header.wrappedKey.keyGeneration) < status.keyGeneration {
            accessible = false
            reason = "keyReset"
        } else if status.openObjects.contains(where: { $0.id == id }), accessible || cls == .completeUnlessOpen {
            // Only class B is readable for being open (see fileKey(for:)).
            accessible = true
            reason = "open"
        } else if !accessible {
            reason = status.state == .wiped ? "wiped" : "unavailable while \(status.state.rawValue)"
        }
        // The header file's size from stat: it was just read and
        // authenticated. Inline data is part of it.
        let headerSize = writtenSize ?? (try? fs.status(headerPath))??.size ?? 0
        return ObjectInfo(
            path: path, protectionClass: cls, protectionSource: header.protectionSource, accessible: accessible,
            reason: reason, size: header.plaintextLength,
            storedSize: (header.isInline ? 0 : header.dataLength) + headerSize,
            chunks: header.chunkCount, chunkSize: header.chunkSize, keyGeneration: header.wrappedKey.keyGeneration,
            created: header.created, modified: header.modified, objectID: id)
    }
}

/// What `ls` and `stat` report.
public struct ItemInfo: Sendable {
    public enum Kind: Sendable {
        case object(ObjectInfo)
        case directory(DirectoryInfo)
        /// An entry whose name or record does not authenticate; the string
        /// says what is wrong, as a clause ("header failed
        /// authentication").
        case damaged(String)
    }

    public var path: StorePath
    public var kind: Kind
}

public struct ObjectInfo: Sendable {
    public var path: StorePath
    public var protectionClass: ProtectionClass
    public var protectionSource: ProtectionSource
    /// Whether it can be read now, and if not, why.
    public var accessible: Bool
    public var reason: String?
    public var size: UInt64
    /// Bytes on disk: the data file (if any) and the header file.
    public var storedSize: UInt64
    public var chunks: UInt64
    public var chunkSize: UInt32
    public var keyGeneration: UInt32
    /// Nanoseconds since 1970.
    public var created: Int64
    public var modified: Int64
    /// The version's identifier (names its data file).
    public var objectID: String
}

public struct DirectoryInfo: Sendable {
    public var path: StorePath
    /// The directory's own default, if set.
    public var defaultClass: ProtectionClass?
    /// The class a new object created here gets.
    public var effectiveDefault: ProtectionClass
    /// Where `effectiveDefault` comes from.
    public var defaultSource: ProtectionSource
    public var created: Int64
}
