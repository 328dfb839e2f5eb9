import ArgumentParser
import Dispatch
import FoundationEssentials
import Glibc
import LockerStore
import LockerAgent
import LockerDevice
import LockerFormat
import LockerIO

extension GlobalOptions {
    /// The store, through this device's agent. Only commands that store
    /// something `create` a missing store directory: the others fail on
    /// it, so that a mistyped `--store` reads as one. What it writes under
    /// temporary names is removed should the process end by a signal
    /// before the store does (see ``Interruption``).
    func openStore(create: Bool = false) throws -> Store {
        try requireApart()
        return try Store(path: storePath, keys: client(), options: .init(temporaries: Interruption.cleanups), create: create)
    }
}

func storePath(_ text: String) throws -> StorePath {
    do {
        return try StorePath(text)
    } catch let error as StoreError {
        throw error
    }
}

/// `text` as a path to something that exists in `store`. A trailing "/"
/// means a directory, as it does to rm(1): naming an object that way is an
/// error, not the object (`rm /docs/report/` must not remove the object
/// `report`).
func storePath(_ text: String, in store: Store) throws -> StorePath {
    let path = try storePath(text)
    if text.count > 1, text.hasSuffix("/"), case .object? = try? store.stat(path).kind {
        throw StoreError.notADirectory(path.description)
    }
    return path
}

/// Reads a local file descriptor into the store's buffers.
func readSource(_ fd: Int32, mayBlock: Bool = false) -> (UnsafeMutableRawBufferPointer) throws -> Int {
    { buffer in
        try Interruption.check()
        if mayBlock { try waitUntilReady(fd, for: Int16(POLLIN)) }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            throw CommandFailure(.failure, "reading the input failed: \(String(cString: strerror(errno)))")
        }
    }
}

/// Waits until `fd` (a pipe, a terminal, a device) is ready for `events`,
/// or has an error or a hang-up for the read or write to report, checking
/// for an interruption ten times a second: a blocked read or write would
/// never see one.
func waitUntilReady(_ fd: Int32, for events: Int16) throws {
    var entry = pollfd(fd: fd, events: events, revents: 0)
    while true {
        let n = poll(&entry, 1, 100)
        if n > 0 || (n < 0 && errno != EINTR) { return }
        try Interruption.check()
    }
}

/// A progress line on stderr, for large transfers on a terminal.
/// A progress bar on standard error, drawn at most ten times a second.
/// Safe to update from several threads.
final class Progress: @unchecked Sendable {
    private let total: UInt64?
    private let enabled: Bool
    private let lock = LockerIO.Lock()
    private var lastDraw = Date.distantPast
    private var done: UInt64 = 0

    init(total: UInt64?, threshold: UInt64 = 16 << 20) {
        self.total = total
        enabled = isatty(STDERR_FILENO) == 1 && (total ?? threshold) >= threshold
    }

    /// Counts `count` more bytes done.
    func add(_ count: UInt64) {
        guard enabled else { return }
        let done = lock.withLock {
            self.done += count
            return self.done
        }
        update(done)
    }

    func update(_ done: UInt64) {
        guard enabled else { return }
        let draw = lock.withLock {
            guard Date().timeIntervalSince(lastDraw) > 0.1 else { return false }
            lastDraw = Date()
            return true
        }
        guard draw else { return }
        let mib = Double(done) / 1_048_576
        var line = "\r" + fixedPoint(mib, decimals: 1) + " MiB"
        if let total, total > 0 {
            let fraction = min(1, Double(done) / Double(total))
            let width = 30
            let filled = Int(fraction * Double(width))
            line = "\r[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
                + "] " + rightAligned(fixedPoint(fraction * 100, decimals: 0), width: 3) + "% "
                + fixedPoint(mib, decimals: 1) + "/" + fixedPoint(Double(total) / 1_048_576, decimals: 1) + " MiB"
        }
        writeToStandardError(line)
    }

    func finish() {
        if enabled { writeToStandardError("\r\u{1B}[K") }
    }
}

struct Put: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Store a file, standard input (-) or, with -r, a directory tree.",
        discussion: "Without --class, the object takes the default of its nearest ancestor directory that has one, else the store default. Missing parent directories are created. An existing object at PATH is replaced atomically.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "A local file, '-' for standard input, or with -r a local directory (a file is stored as without -r).")
    var source: String

    @Argument(help: "The path in the store. An existing store directory (or a path ending in /) receives the source under its own name.")
    var path: String

    @Option(help: ArgumentHelp("The protection class: \(ClassArgument.spellings).", valueName: "CLASS"),
            completion: .list(ClassArgument.allValueStrings), transform: ClassArgument.parse)
    var `class`: ClassArgument?

    @Flag(name: [.customShort("r"), .customLong("recursive")], help: "Import a local directory tree.")
    var r = false

    @Flag(help: "Keep the new object open, as 'locker open' does, until 'locker close': a completeUnlessOpen object stored while the device is locked stays readable until then.")
    var open = false

    func run() throws {
        try Interruption.cooperating { try transfer() }
    }

    private func transfer() throws {
        // As `cp -r`: with -r, a SOURCE that is not a directory is stored
        // as one object (a missing one fails as it does without -r).
        var isDirectory = false
        let tree = r && source != "-" && FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory) && isDirectory
        // PATH is checked, and a single SOURCE opened, before the store is
        // opened: a put refused for either makes no store.
        var target = try storePath(path)
        var pending = tree || source == "-" ? nil : try openSource(source)
        defer { if let pending { Glibc.close(pending.fd) } }
        if let opened = pending, opened.status?.isDirectory == true {
            throw CommandFailure(.usage, "\(source) is a directory", hint: "use -r to import a directory tree")
        }
        if tree && open {
            throw CommandFailure(.usage, "--open keeps one object open, not a tree", hint: "store the tree, then 'locker open' each object")
        }
        if tree { try global.refuseSourceInside(source) }
        let store = try global.openStore(create: true)
        if tree {
            let changes = ChangedSources()
            let imported = Result { try importTree(store, from: source, to: target, fence: global.fence(), changes: changes) }
            // Said even when the import stopped part way: what was stored
            // stays stored.
            changes.warnEach()
            let (count, skipped, unreadable) = try imported.get()
            if output.json {
                try printJSON(["imported": count, "skipped": skipped, "unreadable": unreadable, "changed": changes.count])
            } else {
                var notes: [String] = []
                if skipped > 0 { notes.append("\(skipped) skipped") }
                if unreadable > 0 { notes.append("\(unreadable) unreadable") }
                if changes.count > 0 { notes.append("\(changes.count) changed while read") }
                let also = notes.isEmpty ? "" : " (" + notes.joined(separator: "; ") + "; see the warnings)"
                print("Stored \(count) object\(count == 1 ? "" : "s") under \(shown(target.description))\(also).")
            }
            try UnreadableSource.fail(count: unreadable)
            return
        }
        if path.hasSuffix("/") || ((try? store.stat(target)).map { if case .directory = $0.kind { true } else { false } } ?? false) {
            guard source != "-" else { throw CommandFailure(.usage, "a name is needed when storing standard input", hint: "give PATH as /dir/name") }
            // The name as it is, not through URL, which expands a leading
            // "~" or "~user" to a home directory's path.
            target = target.appending(LocalPath.split(source).name)
        }
        let opened = pending
        pending = nil
        let (info, changed) = try putFile(store, source: source, to: target, opened: opened)
        if changed { warn(ChangedSources.warning(source)) }
        if output.json && r {
            // The shape -r promises, whatever SOURCE turned out to be.
            try printJSON(["imported": 1, "skipped": 0, "unreadable": 0, "changed": changed ? 1 : 0])
        } else if output.json {
            try printJSON(ObjectReport(info))
        } else {
            let kept = open ? " It is open until 'locker close \(shown(info.path.description))'." : ""
            print("Stored \(shown(info.path.description)) (\(info.size) bytes, \(info.protectionClass.canonicalName), \(info.protectionSource.description)).\(kept)")
        }
    }

    /// Stores the local file `source` (`-`: standard input). `tree`: the
    /// tree `put -r` walks, in which it found `source` (see
    /// ``openSource(_:in:)``).
    /// `changed`: whether the file changed while it was read (see
    /// ``SourceWatch``; never for standard input). `opened`: `source`
    /// already opened by ``openSource(_:in:)``, closed here.
    func putFile(_ store: Store, source: String, to target: StorePath, in tree: LocalTree? = nil,
                 opened: (fd: Int32, status: FileStatus?)? = nil) throws -> (info: ObjectInfo, changed: Bool) {
        let (fd, status) = source == "-"
            ? (STDIN_FILENO, try? FileSystem().status(of: STDIN_FILENO, path: "standard input"))
            : try opened ?? openSource(source, in: tree)
        defer { if fd != STDIN_FILENO { Glibc.close(fd) } }
        let progress = Progress(total: status?.isRegularFile == true ? status?.size : nil)
        defer { progress.finish() }
        // Standard input may have been read from before, so its size says
        // nothing about what is left of it.
        let watch = fd == STDIN_FILENO ? nil : SourceWatch(fd, opened: status)
        let read = readSource(fd, mayBlock: status?.isRegularFile != true)
        var changed = false
        // Only a single put keeps its object open (a tree is refused above).
        let info = try store.put(target, protection: self.class?.value, keepOpen: open && tree == nil, from: { buffer in
            let n = try read(buffer)
            if n == 0, let watch { changed = watch.changed() }
            return n
        }, progress: progress.update)
        return (info, changed)
    }

    /// Files up to this size are stored in batches (one durability
    /// barrier per batch); larger ones one at a time, with progress.
    static let batchFileLimit: UInt64 = 4 << 20
    /// Input bytes per batch, at most.
    static let batchByteLimit: UInt64 = 64 << 20

    /// The most objects with a data file in one batch.
    static let maxDataFilesPerBatch = 512

    /// How `put -r` shares the descriptors it may hold: objects with a
    /// data file per batch, up to ``maxDataFilesPerBatch``, as far as the
    /// descriptor limit allows two batches at once (a staged batch holds
    /// one per data file); and whether small files are prepared ahead of
    /// their writers (``PutBatchItem/prepare``), which two batches do with
    /// ``ReadAheadWindow/preparedAhead`` descriptors each, where the limit
    /// leaves room for that and 64 data files a batch. The soft limit is
    /// raised towards the hard one first, as many tools do.
    static func descriptorBudget() -> (dataFilesPerBatch: Int, preparesSources: Bool) {
        descriptorBudget(limit: raiseDescriptorLimit(to: descriptorsWanted))
    }

    /// Descriptors kept for what is not a batch's: the walk of the tree,
    /// the agent's socket, the source file being read and the process's
    /// own.
    static let descriptorsKept = 128

    /// Descriptors of the files prepared ahead, for two batches at once.
    static let descriptorsPrepared = 2 * ReadAheadWindow.preparedAhead

    /// The descriptor limit under which ``descriptorBudget()`` gives
    /// everything: ``maxDataFilesPerBatch`` and preparing, with
    /// ``descriptorsKept`` to spare.
    static let descriptorsWanted = 2 * maxDataFilesPerBatch + descriptorsPrepared + 2 * descriptorsKept

    /// ``descriptorBudget()`` under a descriptor limit of `limit`.
    static func descriptorBudget(limit: Int) -> (dataFilesPerBatch: Int, preparesSources: Bool) {
        let room = limit - descriptorsKept
        let prepares = room >= descriptorsPrepared + 2 * 64
        return (max(1, min(maxDataFilesPerBatch, (room - (prepares ? descriptorsPrepared : 0)) / 2)), prepares)
    }

    /// Stores a local tree. Small files go in batches, and batches are
    /// pipelined: while one is committed on another thread (a sync, the
    /// renames under the store lock, a sync: mostly waiting on the disk or
    /// in one thread), the next is read, sealed and staged on every core.
    /// The directories the tree adds to the store are built out of sight
    /// with the files that are always stored inline, which are written at
    /// their final names (no rename each), and appear together once those
    /// are written; the other files in them are stored after that. A
    /// failure stops the import after the batch being committed ends.
    ///
    /// Below `local`, only directories and regular files are taken:
    /// symbolic links are not followed (a link could lead out of the tree,
    /// or back into it without end), and FIFOs, sockets and devices are
    /// not read (a FIFO would block, a device need not end). Each is
    /// skipped with a warning line. So is each file or directory below
    /// `local` that this user may not read or list (see
    /// ``UnreadableSource``), with everything below it, and the import goes
    /// on; `local` itself must be readable. Returns how many objects were
    /// stored, how many entries were skipped, and how many could not be
    /// read; the files that changed while they were read go into `changes`.
    /// Directories of the tree that are in `fence` (the store and the
    /// device directory) are skipped, with what is below them.
    func importTree(_ store: Store, from local: String, to target: StorePath, fence: DirectoryFence,
                    changes: ChangedSources) throws -> (stored: Int, skipped: Int, unreadable: Int) {
        // "SRC/" names the same tree; warnings name SRC/NAME with one slash.
        let local = LocalPath.split(local).trimmed
        let (dataFileLimit, preparesSources) = Self.descriptorBudget()
        var count = 0
        var skipped = 0
        var unreadable = 0
        func skip(_ entry: UnreadableSource) {
            unreadable += 1
            warn("not stored: \(entry.path): \(String(cString: strerror(entry.errno)))")
        }
        func skip(_ path: String, _ st: stat) {
            skipped += 1
            warn("skipped \(path): \(describeFileType(st.st_mode)), not stored")
        }
        /// The store or the device directory, if the directory `st` is.
        func fenced(_ st: stat) -> String? {
            fence.fencedName(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
        }
        /// `path`: already escaped (``escapedBytes(_:)``).
        func skip(unnamed path: String) {
            skipped += 1
            writeToStandardError("locker: warning: skipped \(path): its name is not UTF-8, which store names must be; not stored (rename it to store it)\n")
        }
        var pending: [PutBatchItem] = []
        var pendingBytes: UInt64 = 0
        var pendingDataFiles = 0
        // Commits, one batch at a time, on a thread of their own.
        let commits = BackgroundJob()
        defer { _ = try? commits.wait() }
        // Everything below `local` is opened relative to it, through no
        // symbolic link: a directory of the tree replaced by a link during
        // the import cannot make it read files outside.
        let localTree = try LocalTree(local)
        // The tree's directories first: the new ones staged with one sync.
        var directories: [StorePath] = []
        // Those this user may not list: none is made in the store, and
        // each is warned of when the walk comes to it, in walk order.
        var unlistable: [String: UnreadableSource] = [:]
        func collect(_ local: String, _ target: StorePath) throws {
            do {
                let names = try localSubdirectories(of: local, in: localTree)
                directories.append(target)
                for name in names {
                    // No directory is made in the store for the store or
                    // the device directory; the walk warns of each.
                    var st = stat()
                    if lstat(local + "/" + name, &st) == 0, fenced(st) != nil { continue }
                    try collect(local + "/" + name, target.appending(name))
                }
            } catch let entry as UnreadableSource where entry.path == local && local != localTree.path {
                unlistable[local] = entry
            }
        }
        try collect(local, target)
        let collected = Set(directories)
        var tree: StagedTree? = try store.stageTree(directories)
        // On a failure before it is published, nothing staged is left
        // behind: the commit under way ends first, then the tree goes with
        // what was staged in it (run before the defers above).
        defer {
            if let tree {
                _ = try? commits.wait()
                tree.discard()
            }
        }
        // What goes into a new directory only once it is published: files
        // that may need a data file, and directories that appeared since
        // the walk began.
        var later: [(local: String, target: StorePath)] = []

        // The batch collected last, its small files being read ahead while
        // the one before it is staged: no batch starts with its reads.
        var reading: (items: [PutBatchItem], window: ReadAheadWindow)?
        defer { reading?.window.stop() }
        func stage(_ batch: (items: [PutBatchItem], window: ReadAheadWindow)) throws {
            let staged = try store.stageBatch(batch.items, into: tree, readAhead: batch.window)
            count += try commits.wait()
            commits.start { try store.commitCounting(staged) }
        }
        /// Starts reading the pending batch ahead and stages the one read
        /// before it; `drain` stages the pending batch too.
        func flush(drain: Bool = false) throws {
            if !pending.isEmpty {
                let previous = reading
                let items = store.orderedForWriting(pending)
                reading = (items, store.readAhead(items))
                pending.removeAll(keepingCapacity: true)
                pendingBytes = 0
                pendingDataFiles = 0
                if let previous { try stage(previous) }
            }
            if drain, let last = reading {
                reading = nil
                try stage(last)
            }
        }
        func visit(_ local: String, _ target: StorePath) throws {
            if !collected.contains(target), let tree, tree.isNew(target.parent) {
                later.append((local, target))
                return
            }
            // Listed before a directory is made for it in the store: one
            // that vanished since the walk began is skipped, as a vanished
            // file is, and one this user may not list is skipped aloud;
            // neither leaves an empty directory behind.
            let listing: (entries: [(name: String, status: stat)], unnamed: [String], unreadable: [UnreadableSource])
            do {
                guard let found = try localEntriesIfPresent(of: local, in: localTree) else { return }
                listing = found
            } catch let entry as UnreadableSource where entry.path == local && local != localTree.path {
                skip(entry)
                return
            }
            if !collected.contains(target) { try store.makeDirectory(target, parents: true) }
            for path in listing.unnamed { skip(unnamed: path) }
            for entry in listing.unreadable { skip(entry) }
            let isNew = tree?.isNew(target) ?? false
            for (name, st) in listing.entries.sorted(by: { $0.name < $1.name }) {
                let localPath = local + "/" + name
                if st.st_mode & S_IFMT == S_IFDIR {
                    if let what = fenced(st) {
                        skipped += 1
                        warn("skipped \(localPath): \(what), not stored")
                    } else if let entry = unlistable[localPath] {
                        skip(entry)
                    } else {
                        try visit(localPath, target.appending(name))
                    }
                } else if st.st_mode & S_IFMT != S_IFREG {
                    skip(localPath, st)
                } else if collected.contains(target.appending(name)) {
                    // A directory when the walk began, replaced since: a
                    // directory is made there, so the file is skipped,
                    // as what vanished is.
                    continue
                } else if isNew && !store.isAlwaysInline(length: UInt64(st.st_size)) {
                    later.append((localPath, target.appending(name)))
                } else {
                    try storeFile(localPath, st, at: target.appending(name))
                }
            }
        }
        /// `localPath` opened to be stored; nil if it is not to be: this
        /// user may not read it (warned of), or it vanished since the walk
        /// looked at it (left out, as one that vanished before the look).
        func openToStore(_ localPath: String) throws -> (fd: Int32, status: FileStatus?)? {
            do {
                return try openSource(localPath, in: localTree)
            } catch let entry as UnreadableSource {
                skip(entry)
                return nil
            } catch let failure as CommandFailure where failure.status == .notFound {
                return nil
            }
        }
        func storeFile(_ localPath: String, _ st: stat, at path: StorePath) throws {
            try Interruption.check()
            if UInt64(st.st_size) > Self.batchFileLimit {
                try flush(drain: true)
                guard let opened = try openToStore(localPath) else { return }
                if try putFile(store, source: localPath, to: path, in: localTree, opened: opened).changed { changes.add(localPath) }
                count += 1
            } else {
                // A batch stops at a source that fails, so a file this user
                // may not read, or one gone since the walk looked, must be
                // found before it joins one. access(2) asks the kernel
                // itself (access control lists, root's capabilities, an NFS
                // server's answer), in one call and with no descriptor; the
                // file is opened only when its batch reads it.
                if faccessat(AT_FDCWD, localPath, R_OK, AT_EACCESS) != 0 {
                    let error = errno
                    if error == ENOENT { return }
                    if let entry = UnreadableSource(localPath, errno: error) {
                        skip(entry)
                        return
                    }
                    // Anything else is the batch's read to report.
                }
                let file = LocalFileSource(localPath, in: localTree, changes: changes)
                pending.append(PutBatchItem(path: path, protection: self.class?.value, expectedLength: UInt64(st.st_size), source: file.read,
                                            prepare: preparesSources ? file.prepare : nil))
                pendingBytes += UInt64(st.st_size)
                if !store.isAlwaysInline(length: UInt64(st.st_size)) { pendingDataFiles += 1 }
                if pending.count == Store.maxBatchCount || pendingDataFiles == dataFileLimit || pendingBytes >= Self.batchByteLimit {
                    try flush()
                }
            }
        }
        try visit(local, target)
        try flush(drain: true)
        count += try commits.wait()
        do {
            try store.publish(tree!)
        } catch StoreError.alreadyExists(let path) {
            throw CommandFailure(.alreadyExists, "the import stopped: another command created \(path) meanwhile, and nothing was stored under it",
                                 hint: "run the command again to store the rest")
        } catch StoreError.notFound(let path) {
            throw CommandFailure(.notFound, "the import stopped: another command removed or replaced \(path) meanwhile, and nothing was stored below it",
                                 hint: "run the command again to store the rest")
        }
        tree = nil
        for (localPath, path) in later {
            // Looked at again: it may have changed or vanished since.
            guard let st = try localTree.status(localPath) else { continue }
            switch st.st_mode & S_IFMT {
            case S_IFDIR: try visit(localPath, path)
            case S_IFREG: try storeFile(localPath, st, at: path)
            default: skip(localPath, st)
            }
        }
        try flush(drain: true)
        count += try commits.wait()
        return (count, skipped, unreadable)
    }
}

/// The local directory `put -r` stores, open for the whole import (SRC
/// itself may be a symbolic link to a directory). Every file and
/// directory below it is opened relative to it, following no symbolic
/// link on the way (``FileSystem/openBeneath(_:_:directory:name:)``):
/// checking each entry with lstat(2) and then opening it by path would
/// follow a directory above it that was replaced by a link in between.
final class LocalTree: @unchecked Sendable {
    /// SRC as given: every path below it starts with `path + "/"`.
    let path: String
    private let fd: Int32

    init(_ path: String) throws {
        self.path = path
        do {
            fd = try FileSystem().openDirectoryForReading(path)
        } catch {
            throw openFailure(path, error, inTree: false)
        }
    }

    deinit { Glibc.close(fd) }

    /// Opens `local`, which is `path` or a path below it, for reading: a
    /// directory (ENOTDIR otherwise) or, without `directory`, whatever is
    /// there (the caller checks what it opened). A symbolic link on the
    /// way fails with ELOOP.
    func open(_ local: String, directory: Bool) throws(IOError) -> Int32 {
        let relative: String
        if local == path {
            relative = "."
        } else {
            precondition(local.hasPrefix(path + "/"), "\(local) is not below \(path)")
            relative = String(local.dropFirst(path.count + 1))
        }
        return try FileSystem().openBeneath(fd, relative, directory: directory, name: local)
    }

    /// What is at `local`, below `path`, now (a link there is not
    /// followed, nor one on the way: that is an error); nil if nothing is.
    func status(_ local: String) throws -> stat? {
        let slash = local.lastIndex(of: "/")!
        let parent = String(local[..<slash])
        let name = String(local[local.index(after: slash)...])
        let directory: Int32
        do {
            directory = try open(parent, directory: true)
        } catch {
            if error.errno == ENOENT { return nil }
            throw openFailure(parent, error)
        }
        defer { Glibc.close(directory) }
        return try localStatus(name, in: directory, path: local)
    }
}

/// A file or directory in the tree `put -r` walks that its user may not
/// read, list or look at: opening it (or, for an entry of a directory that
/// may be listed but not searched, looking at it) failed with EACCES or
/// EPERM. That is about the entry alone, so the walk skips it with a
/// warning and stores the rest; any other failure (a fault of the disk, a
/// link put in the way, a file that is no longer a regular one) still
/// stops the import. Where it is not caught it is the error line it has
/// always been, `cannot read PATH: REASON` (exit 1).
struct UnreadableSource: Error {
    let path: String
    let errno: Int32

    /// `errno` from opening or looking at `path` as an unreadable entry,
    /// if it is one.
    init?(_ path: String, errno: Int32) {
        guard errno == EACCES || errno == EPERM else { return nil }
        self.path = path
        self.errno = errno
    }

    /// Fails a `put -r` that skipped `count` such entries, after its
    /// summary: they were named as they were found.
    static func fail(count: Int) throws {
        guard count > 0 else { return }
        throw CommandFailure(.failure, "\(count) file\(count == 1 ? " or directory" : "s or directories") could not be read and "
                                 + (count == 1 ? "was" : "were") + " not stored",
                             hint: "the warnings name them; once this user may read them, run the command again to store them")
    }
}

/// What `name` in the open directory `directory` is, not following a link;
/// nil if it does not exist. If its user may not look at it, throws
/// ``UnreadableSource``; any other failure is one error line.
private func localStatus(_ name: String, in directory: Int32, path: String) throws -> stat? {
    var st = stat()
    if fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return st }
    if errno == ENOENT { return nil }
    if let entry = UnreadableSource(path, errno: errno) { throw entry }
    throw CommandFailure.cannot("read \(path)", errno)
}

/// Why the local file or directory `path` could not be opened: one error
/// line (66 if it does not exist). `inTree`: `path` is below the tree
/// `put -r` walks, opened through no symbolic link; there, one its user
/// may not read is an ``UnreadableSource``.
private func openFailure(_ path: String, _ error: IOError, inTree: Bool = true) -> any Error {
    if inTree, let entry = UnreadableSource(path, errno: error.errno) { return entry }
    let reason = inTree && (error.errno == ELOOP || error.errno == EXDEV)
        ? "it, or a directory on its way, is now a symbolic link (not followed)"
        : String(cString: strerror(error.errno))
    return CommandFailure(error.errno == ENOENT ? .notFound : .failure, "cannot read \(path): \(reason)")
}

/// The names of the directories in `local` (not symbolic links to
/// directories: `put -r` does not follow links), from the entry types
/// readdir(3) gives: no stat for each file. An entry of unknown type that
/// its user may not look at is not known to be a directory, and is left
/// out: ``localEntriesIfPresent(of:in:)`` reports it. `local` itself may
/// be an ``UnreadableSource``.
func localSubdirectories(of local: String, in tree: LocalTree) throws -> [String] {
    var names: [String] = []
    try readLocalDirectory(local, in: tree) { name, type, directory in
        switch Int32(type) {
        case Int32(DT_DIR): names.append(name)
        case Int32(DT_UNKNOWN):
            do {
                if let st = try localStatus(name, in: directory, path: local + "/" + name), st.st_mode & S_IFMT == S_IFDIR {
                    names.append(name)
                }
            } catch is UnreadableSource {
                // Left out here; the walk names it when it lists `local`.
            }
        default: break
        }
    }
    return names
}

/// What a file that is neither a regular file nor a directory is, for a
/// warning.
func describeFileType(_ mode: mode_t) -> String {
    switch mode & S_IFMT {
    case S_IFLNK: "a symbolic link (not followed)"
    case S_IFIFO: "a FIFO"
    case S_IFSOCK: "a socket"
    case S_IFCHR, S_IFBLK: "a device"
    default: "not a regular file"
    }
}

/// One `locker: warning: …` line on stderr: something the command did
/// not do, which did not stop it.
func warn(_ message: String) {
    writeToStandardError("locker: warning: \(shown(message))\n")
}

/// The entries of `local`, "." and ".." left out, each with what it is
/// (lstat(2) relative to the directory listed, so a link on the way is
/// never followed), in readdir(3) order; nil if `local` does not exist.
/// An entry that vanished before its look is left out. `unnamed` lists,
/// for a warning, the entries whose names are not UTF-8 (shown with their
/// bytes escaped): a store name is a string, so they cannot be stored.
/// `unreadable` lists, in name order, the entries its user may not look
/// at (`local` may be listed but not searched). If `local` cannot be
/// listed by its user, throws ``UnreadableSource``.
func localEntriesIfPresent(of local: String, in tree: LocalTree)
    throws -> (entries: [(name: String, status: stat)], unnamed: [String], unreadable: [UnreadableSource])? {
    var entries: [(name: String, status: stat)] = []
    var unnamed: [String] = []
    var unreadable: [UnreadableSource] = []
    do {
        try readLocalDirectory(local, in: tree, unnamed: { unnamed.append(shown(local) + "/" + $0) }) { name, _, directory in
            do {
                if let st = try localStatus(name, in: directory, path: local + "/" + name) { entries.append((name, st)) }
            } catch let entry as UnreadableSource {
                unreadable.append(entry)
            }
        }
    } catch let failure as CommandFailure where failure.status == .notFound {
        // Only the open of `local` says "not found": an entry that vanished
        // is left out instead.
        return nil
    }
    return (entries, unnamed, unreadable.sorted { $0.path < $1.path })
}

/// Calls `body` with each entry's name and readdir(3) type, and the
/// directory's descriptor. A directory that cannot be read is one error
/// line (66 if it does not exist). A name that is not UTF-8 goes to
/// `unnamed` instead, its bytes escaped: decoded with replacement
/// characters it would name another file, or none.
private func readLocalDirectory(_ local: String, in tree: LocalTree, unnamed: (String) -> Void = { _ in },
                                _ body: (String, UInt8, Int32) throws -> Void) throws {
    // Opened as store directories are: `put -r` does not mark the user's
    // directories as read.
    let fd: Int32
    do {
        fd = try tree.open(local, directory: true)
    } catch {
        throw openFailure(local, error)
    }
    guard let stream = fdopendir(fd) else {
        let message = String(cString: strerror(errno))
        close(fd)
        throw CommandFailure(.failure, "cannot read \(local): \(message)")
    }
    // closedir closes `fd` too.
    defer { closedir(stream) }
    while true {
        // readdir's NULL is the end, or an error if it set errno; `body`
        // may have left errno set, so it is cleared before each call.
        errno = 0
        guard let entry = readdir(stream) else {
            let error = errno
            guard error == 0 else {
                throw CommandFailure(.failure, "cannot read \(local): \(String(cString: strerror(error)))")
            }
            return
        }
        let bytes = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
        guard let name = String(validating: bytes, as: UTF8.self) else {
            unnamed(escapedBytes(bytes))
            continue
        }
        if name == "." || name == ".." { continue }
        try body(name, entry.pointee.d_type, fd)
    }
}

/// Runs one job at a time on a thread of its own, and hands its result to
/// whoever waits for it.
final class BackgroundJob: @unchecked Sendable {
    // Set and cleared by the caller's thread only.
    private var running: Prefetch<Int>?

    /// Starts `job`; the previous one must have been waited for.
    func start(_ job: @escaping @Sendable () throws -> Int) {
        precondition(running == nil, "a background job is already running")
        running = Prefetch(job)
    }

    /// Waits for the job under way, if any, and returns its result (0 if
    /// there was none), or throws its error.
    @discardableResult
    func wait() throws -> Int {
        guard let job = running else { return 0 }
        running = nil
        return try job.wait()
    }
}

/// A value computed on a thread of its own, waited for once.
final class Prefetch<Value>: @unchecked Sendable {
    private let done = DispatchGroup()
    // Written by the thread before it leaves `done`, read after waiting.
    private var result: Result<Value, any Error>?

    init(_ job: @escaping @Sendable () throws -> Value) {
        done.enter()
        let compute: @Sendable () -> Void = { [self] in
            result = Result { try job() }
            done.leave()
        }
        // No thread to spare (the process's limit): computed here.
        if !DetachedThread.start(compute) { compute() }
    }

    /// Waits for the value, and returns it or throws its error.
    func wait() throws -> Value {
        done.wait()
        return try result!.get()
    }
}

/// Opens a local file to store, leaving its access time alone where the
/// kernel allows (as backup tools do: reading a file to store it is not
/// the user reading it). `tree`: the tree `put -r` walks, in which it
/// found `path`, which may have been replaced since the walk looked at
/// it: opened relative to the tree through no symbolic link, never waited
/// on if it is now a FIFO, and anything but a regular file is one error
/// line. Returns the descriptor and what it is open on (nil if fstat(2)
/// failed, which is an error for a file in the tree).
func openSource(_ path: String, in tree: LocalTree? = nil) throws -> (fd: Int32, status: FileStatus?) {
    let fd: Int32
    do throws(IOError) {
        if let tree {
            fd = try tree.open(path, directory: false)
        } else {
            fd = try FileSystem().openForReading(path)
        }
    } catch {
        throw openFailure(path, error, inTree: tree != nil)
    }
    let status = try? FileSystem().status(of: fd, path: path)
    if tree != nil, status?.isRegularFile != true {
        Glibc.close(fd)
        throw CommandFailure(.failure, "cannot read \(path): it is no longer a regular file")
    }
    return (fd, status)
}

/// A local file read for a batch: opened on the first read, closed at its
/// end, so that a batch does not hold every file open at once. At its end
/// it is added to `changes` if it changed while it was read.
final class LocalFileSource {
    private let path: String
    private let tree: LocalTree
    private let changes: ChangedSources
    private var fd: Int32 = -1
    private var watch: SourceWatch?
    private var finished = false

    init(_ path: String, in tree: LocalTree, changes: ChangedSources) {
        self.path = path
        self.tree = tree
        self.changes = changes
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    /// Opens the file and starts watching it for changes, unless it is
    /// open already.
    private func open() throws {
        guard fd < 0 else { return }
        let status: FileStatus?
        (fd, status) = try openSource(path, in: tree)
        watch = SourceWatch(fd, opened: status)
    }

    /// Opens the file, if it was not, and asks the kernel to read its
    /// pages, without waiting for them. A file that cannot be opened is
    /// left to ``read(_:)`` to report.
    func prepare() {
        guard !finished, (try? open()) != nil else { return }
        // Only a hint: a kernel that ignores it leaves the read to wait.
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED)
    }

    func read(_ buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        if finished { return 0 }
        try open()
        let n = try readSource(fd)(buffer)
        if n == 0 {
            if watch?.changed() == true { changes.add(path) }
            Glibc.close(fd)
            fd = -1
            finished = true
        }
        return n
    }
}

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fetch an object to a file or standard output; with -r, a tree to a local directory.",
        discussion: "--range START-END fetches bytes START through END inclusive (END may be left out for the rest). Only the chunks the range needs are decrypted. Writing to DEST is atomic.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The path in the store.")
    var path: String

    @Argument(help: "A local file, '-' for standard output (the default), or with -r a local directory.")
    var destination: String?

    // Taken as given even when it starts with "-", so that "-3" gets the
    // range's own error rather than "missing value".
    @Option(parsing: .unconditional, help: ArgumentHelp("Bytes START through END, inclusive.", valueName: "START-END"))
    var range: String?

    @Flag(name: [.customShort("r"), .customLong("recursive")], help: "Fetch a directory tree.")
    var r = false

    func validate() throws {
        // A tree has no one byte range; fetching the whole tree instead
        // would write what was not asked for.
        if r && range != nil { throw ValidationError("--range applies to one object, not to a tree (-r)") }
        // Taken unconditionally, so a forgotten value swallows the next
        // argument: only "-DIGITS" is a range (without START).
        if let range, range.hasPrefix("-") {
            if range.count > 1, range.dropFirst().allSatisfy({ $0.isASCII && $0.isNumber }) {
                throw ValidationError("--range \(range): START is missing; a range is START-END or START- (bytes from START to the end)")
            }
            throw ValidationError("--range needs a value: START-END or START-, for example 0-1023")
        }
        if !r, destination?.isEmpty == true { throw ValidationError("DEST cannot be empty; give a local path, or '-' for standard output") }
    }

    func parseRange(size: UInt64) throws -> Range<UInt64>? {
        guard let range else { return nil }
        let parts = range.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        // Digits only: `UInt64("+1")` is 1, and `+1-2` is no range a user
        // meant. More digits than a UInt64 holds are past any object's
        // end, and reported so.
        func offset(_ text: Substring) -> UInt64? {
            guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return UInt64(text) ?? .max
        }
        guard parts.count == 2, let start = offset(parts[0]) else {
            throw CommandFailure(.usage, "--range takes START-END, for example 0-1023")
        }
        // What the object holds, for a range that reaches past it.
        let extent = size == 0 ? "the object is empty" : "the object has \(size) byte\(size == 1 ? "" : "s"), 0 to \(size - 1)"
        let end: UInt64
        if parts[1].isEmpty {
            guard start < size else { throw RangePastTheEnd(CommandFailure(.usage, "--range \(range) starts past the end (\(extent))")) }
            end = size - 1
        } else {
            guard let e = offset(parts[1]) else { throw CommandFailure(.usage, "--range takes START-END, for example 0-1023") }
            end = e
        }
        guard start <= end else { throw CommandFailure(.usage, "--range \(range): START is after END") }
        guard end < size else { throw RangePastTheEnd(CommandFailure(.usage, "--range \(range) is past the end (\(extent))")) }
        return start..<(end + 1)
    }

    /// A well-formed range that reaches past the object: the usage error
    /// `failure`, once the object's protection has had its say.
    struct RangePastTheEnd: Error {
        let failure: CommandFailure
        init(_ failure: CommandFailure) { self.failure = failure }
    }

    func run() throws {
        try Interruption.cooperating { try transfer() }
    }

    private func transfer() throws {
        let store = try global.openStore()
        let source = try storePath(path, in: store)
        if let destination, destination != "-", !destination.isEmpty { try global.refuseDestinationInside(destination) }
        if r {
            guard let destination, destination != "-", !destination.isEmpty else {
                throw CommandFailure(.usage, "-r needs a local directory as DEST")
            }
            let damaged = DamagedObjects()
            let count = try TreeFetch(store, fence: global.fence(), damaged: damaged).fetch(from: source, to: destination)
            print("Fetched \(count) object\(count == 1 ? "" : "s") into \(shownDirectory(destination))."
                  + (damaged.count > 0 ? " \(damaged.count) damaged not fetched; see the warnings." : ""))
            try damaged.fail()
            return
        }
        guard case .object(let info) = try store.stat(source).kind else {
            throw StoreError.isADirectory(source.description)
        }
        let wanted: Range<UInt64>?
        do {
            wanted = try parseRange(size: info.size)
        } catch let past as RangePastTheEnd {
            // Protection first: an object that cannot be read now is
            // refused as such (75, 69), whatever range is asked of it. A
            // range within it needs no check here: the read refuses it
            // before any byte, with the one unwrap it makes anyway.
            try store.checkReadable(source)
            throw past.failure
        }
        if destination == nil || destination == "-" {
            // write(2) directly: no copy per chunk, and a closed pipe is an
            // error (EPIPE, SIGPIPE is ignored) rather than a crash.
            let mayBlock = (try? FileSystem().status(of: STDOUT_FILENO, path: "standard output"))?.isRegularFile != true
            try store.read(source, range: wanted) { try writeAll(STDOUT_FILENO, $0, path: "standard output", mayBlock: mayBlock) }
            return
        }
        var target = destination!
        var isDirectory = false
        if FileManager.default.fileExists(atPath: target, isDirectory: &isDirectory), isDirectory {
            // "DIR/" and "DIR//" name the same directory; messages name
            // DIR/NAME with one slash.
            target = LocalPath.split(target).trimmed
            target += (target.hasSuffix("/") ? "" : "/") + source.name
        } else if target.count > 1, target.hasSuffix("/") {
            // "DIR/" names a directory that must exist, as it does to cp(1).
            var named = target
            while named.count > 1, named.hasSuffix("/") { named.removeLast() }
            throw CommandFailure.cannot("write into \(target)", FileManager.default.fileExists(atPath: named) ? ENOTDIR : ENOENT)
        }
        // A device or a FIFO at DEST (/dev/null, a named pipe, a terminal)
        // is written into, as cp(1) would: replacing it with a file by a
        // rename would put the plaintext where the user did not ask.
        if let fd = try openUnlessFile(target) {
            defer { close(fd) }
            try store.read(source, range: wanted) { try writeAll(fd, $0, path: target, mayBlock: true) }
            return
        }
        let progress = Progress(total: wanted.map { $0.upperBound - $0.lowerBound } ?? info.size)
        defer { progress.finish() }
        let output = target
        let size = wanted.map { $0.upperBound - $0.lowerBound } ?? info.size
        try writeLocalFile(output) { file in
            // Chunks are written where they belong, from every core: one
            // thread writing fresh page-cache pages is what limits a fetch
            // (and a large one's go past the page cache).
            let out = file.output(size: size)
            try store.read(source, range: wanted) { offset, bytes in
                try out.write(bytes, at: offset, name: output)
                progress.add(UInt64(bytes.count))
            }
        }
    }

}

/// The entries a `get -r`, `export` or `purge` left out because they are
/// damaged (an object, or a directory whose record is damaged, with
/// everything below it): each is warned of as it is found (`locker:
/// warning: not fetched: …`, `not exported`, `not checked`), the rest is
/// done, and the command then fails (exit 65).
final class DamagedObjects {
    /// Each one noted, by its store path, with what failed to
    /// authenticate.
    private(set) var found: [(path: String, what: String)] = []
    var count: Int { found.count }
    /// What the warnings and the error say of an entry left out.
    private let leftOut: String

    /// `leftOut`: what was not done to them, as the messages say it.
    init(leftOut: String = "not fetched") {
        self.leftOut = leftOut
    }

    /// Notes an integrity failure (``StoreError/integrity(path:what:)``);
    /// any other error is not damage, and is not noted.
    func note(_ error: StoreError) {
        guard case .integrity(let path, let what) = error else { return }
        found.append((path, what))
        warn("\(leftOut): \(ErrorPresenter.describe(error).1)")
    }

    /// The reason a report (the manifest, `--json`) gives for a damaged
    /// entry.
    static func reason(_ what: String) -> String {
        "damaged: \(what)"
    }

    /// Throws if any entry was left out.
    func fail() throws {
        guard count > 0 else { return }
        throw CommandFailure(.integrity, "\(count) damaged object\(count == 1 ? " was" : "s were") \(leftOut)",
                             hint: "'locker verify' lists the damage; restore those objects from a copy, or remove them with 'locker rm'")
    }
}

/// The files of a `get -r` written but not yet renamed into place, the
/// directories built out of sight, and the file systems written to.
/// Waiting files are committed (a sync of each file system, then the
/// renames) on a thread of its own, one group at a time, while the caller
/// writes the next ones; the directories are published at the end.
///
/// A waiting file keeps its directory open, and is renamed and removed
/// through it: the group is also committed once its files are in as many
/// directories as the descriptor limit leaves room for
/// (``directoriesPerCommit``).
final class TreeExport: @unchecked Sendable {
    private let destination: LocalDestination
    private let directoriesPerCommit = TreeExport.directoriesPerCommit()
    private var waiting: [(directory: LocalDirectory, file: WrittenFile)] = []
    private var waitingDirectories = 0
    /// For each existing directory that gets new subdirectories (by its
    /// place), the temporary directory they are built in, by name.
    private var containers: [(parent: LocalPlace, name: String, container: LocalPlace, token: Int)] = []
    /// Where each parent's is in `containers`, by the parent's place.
    private var containerIndex: [String: Int] = [:]
    /// The directories built out of sight (in a container, by name), and
    /// where each goes.
    private var staged: [(container: LocalPlace, name: String, parent: LocalPlace, target: String)] = []
    /// Whether a directory built out of sight was renamed into place.
    private var published = false
    /// One directory per file system written to (by device number), that
    /// the file system is synced through: never one open with `O_PATH`.
    private var fileSystems: [UInt64: LocalDirectory] = [:]
    private let commits = BackgroundJob()
    // The group being committed: the committing job's until it ends, the
    // caller's after waiting on it.
    private var committing: [(directory: LocalDirectory, file: WrittenFile)] = []

    /// Files renamed into place by the commits waited for.
    private(set) var count = 0

    init(_ destination: LocalDestination) {
        self.destination = destination
    }

    /// Whether the waiting files should be committed now.
    var isFull: Bool { waiting.count >= 4096 || waitingDirectories >= directoriesPerCommit }

    /// Directories whose files one commit may hold: up to 1,024, as far as
    /// the descriptor limit allows two groups at once (the one committed
    /// and the next), with room to spare for the rest of the fetch (a few
    /// descriptors per core). The soft limit is raised towards the hard
    /// one first, as ``Put/descriptorBudget()`` does.
    static func directoriesPerCommit() -> Int {
        let wanted = 1024
        let spare = 128 + 4 * ProcessInfo.processInfo.activeProcessorCount
        return max(1, min(wanted, (raiseDescriptorLimit(to: 2 * wanted + spare) - spare) / 2))
    }

    /// Notes files written in `directory`, each under its temporary name.
    func add(_ files: [WrittenFile], in directory: LocalDirectory) {
        guard !files.isEmpty else { return }
        if waiting.last?.directory !== directory { waitingDirectories += 1 }
        waiting += files.map { (directory, $0) }
    }

    /// Notes a directory files are written into. One open with `O_PATH`
    /// (a drop box: written into, not listed) cannot be synced through, so
    /// for a file system with only such directories so far, the fetch makes
    /// an empty temporary directory of its own in it, removed at the end,
    /// and syncs through that.
    func noteDirectory(_ directory: LocalDirectory) throws {
        guard fileSystems[directory.place.device] == nil else { return }
        if directory.directory.isPathOnly {
            _ = try container(in: directory)
        } else {
            fileSystems[directory.place.device] = directory
        }
    }

    /// Starts committing the waiting files, once the commit under way
    /// has ended (whose error it throws).
    func commitWaiting() throws {
        try finishCommit()
        guard !waiting.isEmpty else { return }
        committing = waiting
        waiting.removeAll()
        waitingDirectories = 0
        let directories = Array(fileSystems.values)
        commits.start { [self] in try commit(syncing: directories) }
    }

    /// Waits for the commit under way, if any; throws its error.
    func finishCommit() throws {
        count += try commits.wait()
    }

    /// Syncs, then renames each file being committed into place, and
    /// returns how many; on a failure, what is left in `committing` is what
    /// was not renamed.
    private func commit(syncing directories: [LocalDirectory]) throws -> Int {
        try sync(directories)
        for (i, (directory, file)) in committing.enumerated() {
            do throws(IOError) {
                try Interruption.finishingTemporary(file.token) { () throws(IOError) in
                    try directory.directory.rename(file.temporary, to: file.target)
                }
            } catch {
                committing.removeFirst(i)
                throw CommandFailure.cannot("write \(directory.path(of: file.target))", error.errno)
            }
        }
        defer { committing.removeAll() }
        return committing.count
    }

    private func sync(_ directories: [LocalDirectory]) throws {
        for directory in directories {
            do {
                try directory.directory.syncFileSystem()
            } catch {
                throw CommandFailure(.failure, "cannot write into \(directory.path): \(error)")
            }
        }
    }

    /// Where to build the missing directory `target` of `parent`: in a
    /// temporary directory in `parent` (one for all its new
    /// subdirectories), so that it appears whole, with its files, or not
    /// at all, and without a rename per file. Returns the temporary
    /// directory's place and the name to build it under there.
    func stage(_ target: String, in parent: LocalDirectory) throws -> (container: LocalPlace, name: String) {
        let container = try self.container(in: parent, for: target)
        let name = String(staged.count)
        staged.append((container, name, parent.place, target))
        return (container, name)
    }

    /// Drops the directory staged as `name` in `container`, if one is:
    /// it is not published (its store directory turned out damaged, so it
    /// was never built).
    func unstage(_ name: String, in container: LocalPlace) {
        staged.removeAll { $0.container == container && $0.name == name }
    }

    /// The temporary directory in `parent` (mode 0700) that its new
    /// subdirectories are built in, made on first use and removed at the
    /// end. Being the fetch's own, it is noted as a directory its file
    /// system can be synced through, even in a drop box. Errors name it as
    /// the directory `target` of `parent` it is first made for (as
    /// `parent` when made only to sync through): a path the user knows, not
    /// one that is gone once the fetch ends.
    private func container(in parent: LocalDirectory, for target: String? = nil) throws -> LocalPlace {
        if let existing = containerIndex[parent.place.relative] { return containers[existing].container }
        let name = ".locker-" + UUID().uuidString + ".tmp"
        // Removed by the signal handling too, should the process have to
        // end before the fetch removes it: opened again by its place, as
        // ``removeContainers(alreadyEmpty:)`` does.
        let (made, token) = try Interruption.creatingTemporary({
            try parent.subdirectory(name, creating: 0o700, new: true, shownAs: target.map(parent.path(of:)) ?? parent.path)
        }, cleanup: { [destination, parentPlace = parent.place] made in
            let place = made.place
            return {
                guard let container = try? destination.open(place), let parent = try? destination.open(parentPlace) else { return }
                removeBuiltDirectory(container.directory, named: name, in: parent.directory)
            }
        })
        containerIndex[parent.place.relative] = containers.count
        containers.append((parent.place, name, made.place, token))
        try noteDirectory(made)
        return made.place
    }

    /// Makes the directories built out of sight durable with one sync of
    /// each file system, then renames each into place, refusing to
    /// replace what appeared there meanwhile, and removes the temporary
    /// directories. Called once the commits have ended.
    func publishStaged() throws {
        // A container made only to sync through goes too.
        guard !staged.isEmpty else { return removeContainers(alreadyEmpty: true) }
        try sync(Array(fileSystems.values))
        var recent: [LocalDirectory] = []
        func open(_ place: LocalPlace) throws -> LocalDirectory {
            if let found = recent.first(where: { $0.place == place }) { return found }
            let opened = try destination.open(place)
            recent = [opened] + recent.prefix(1)
            return opened
        }
        while let (container, name, parent, target) = staged.first {
            let from = try open(container)
            let to = try open(parent)
            // Not while its container's cleanup runs: that would empty it
            // if it had opened it before the rename.
            try Interruption.holdingOffCleanups {
                try publishBuiltDirectory(name, from: from.directory, to: target, in: to.directory, path: to.path(of: target))
            }
            staged.removeFirst()
            published = true
        }
        removeContainers(alreadyEmpty: true)
    }

    /// Removes each temporary directory, emptied first unless
    /// `alreadyEmpty`. Each is opened by its place (so only if it is still
    /// the directory made) and removed as ``removeBuiltDirectory(_:named:in:isEmpty:)``
    /// does.
    private func removeContainers(alreadyEmpty: Bool) {
        for (parent, name, place, token) in containers {
            defer { Interruption.unregisterCleanup(token) }
            guard let container = try? destination.open(place), let parent = try? destination.open(parent) else { continue }
            removeBuiltDirectory(container.directory, named: name, in: parent.directory, isEmpty: alreadyEmpty)
        }
        containers.removeAll()
        containerIndex.removeAll()
    }

    /// Removes the files not renamed into place, after the commit under
    /// way ends, and the directories not published.
    func discard() {
        _ = try? commits.wait()
        for (directory, file) in committing + waiting { file.remove(in: directory) }
        committing.removeAll()
        waiting.removeAll()
        removeContainers(alreadyEmpty: false)
        staged.removeAll()
    }

    /// Makes the renames durable (best effort: each file is already whole).
    func syncRenames() {
        guard count > 0 || published else { return }
        for directory in fileSystems.values { try? directory.directory.syncFileSystem() }
    }
}

/// A file a `get -r` wrote: under `temporary` until it is renamed to
/// `target` (the same name if it was written straight to its target), and
/// the token of its cleanup (``Interruption/creatingTemporary(_:in:_:)``)
/// while it has a temporary name.
struct WrittenFile: Sendable {
    let temporary: String
    let target: String
    let token: Int?

    /// Removes it from `directory`, where it was written, and its cleanup.
    func remove(in directory: LocalDirectory) {
        try? directory.directory.remove(temporary)
        if let token { Interruption.unregisterCleanup(token) }
    }
}

/// Creates the local directory `path` and any missing parents (`mode`
/// for those it creates, less the umask), like `mkdir -p`; an existing
/// directory is fine, and links on the way are followed: this is for the
/// paths the user gives (DEST, the store). Fails with one line naming the
/// path: something that is not a directory in the way, or the error of the
/// `mkdir` that failed. Below a destination, directories are made with
/// ``LocalDirectory/subdirectory(_:creating:new:seen:shownAs:)`` instead.
func makeLocalDirectory(_ path: String, mode: mode_t = 0o777) throws {
    func inTheWay(_ path: String) -> CommandFailure {
        CommandFailure(.failure, "cannot write into \(path): it exists and is not a directory")
    }
    var st = stat()
    if stat(path, &st) == 0 {
        guard st.st_mode & S_IFMT == S_IFDIR else { throw inTheWay(path) }
        return
    }
    let (trimmed, parent, _) = LocalPath.split(path)
    if parent != trimmed { try makeLocalDirectory(parent, mode: mode) }
    guard mkdir(trimmed, mode) == 0 || errno == EEXIST else {
        throw CommandFailure.cannot("create directory \(trimmed)", errno)
    }
    // Another process may have made something else there meanwhile.
    guard stat(trimmed, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { throw inTheWay(trimmed) }
}

/// Raises the soft limit on open descriptors towards `wanted`, as far as
/// the hard limit allows, and returns the soft limit then in force (192 if
/// it cannot be read).
func raiseDescriptorLimit(to wanted: Int) -> Int {
    var limit = rlimit()
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    guard getrlimit(resource, &limit) == 0 else { return 192 }
    if limit.rlim_cur < rlim_t(wanted) {
        var raised = limit
        raised.rlim_cur = min(limit.rlim_max, rlim_t(wanted))
        if setrlimit(resource, &raised) == 0 { limit = raised }
    }
    return Int(min(limit.rlim_cur, rlim_t(Int32.max)))
}

extension OutputFile {
    /// ``write(_:at:)``, failing with a message that names `name`.
    /// Throws ``Interruption/Interrupted`` instead once a signal came.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64, name: String) throws {
        try Interruption.check()
        do {
            try write(bytes, at: offset)
        } catch {
            throw CommandFailure.cannot("write \(name)", error.errno)
        }
    }

    /// Writes the bytes `read` hands over, one after another from the
    /// file's start; a failed write names `name`.
    func writeInOrder(name: String, _ read: (_ sink: (UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws {
        var offset: UInt64 = 0
        try read { bytes in
            try write(bytes, at: offset, name: name)
            offset += UInt64(bytes.count)
        }
    }
}

/// Opens `path` for writing in order when it is (following symbolic
/// links) a device, a FIFO or a socket; nil when it does not exist or is
/// anything else. The descriptor is checked too: a regular file renamed
/// there between the look and the open is not written into in place.
func openUnlessFile(_ path: String) throws -> Int32? {
    func kind(_ st: stat) -> String? {
        switch st.st_mode & S_IFMT {
        case S_IFCHR, S_IFBLK: "a device"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        default: nil
        }
    }
    var st = stat()
    guard stat(path, &st) == 0, let expected = kind(st) else { return nil }
    let fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC)
    guard fd >= 0 else { throw CommandFailure.cannot("write \(path) (\(expected))", errno) }
    guard fstat(fd, &st) == 0, kind(st) != nil else {
        close(fd)
        throw CommandFailure(.failure, "cannot write \(path): it was replaced during the fetch")
    }
    return fd
}

func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String, mayBlock: Bool = false) throws {
    var offset = 0
    while offset < bytes.count {
        try Interruption.check()
        if mayBlock { try waitUntilReady(fd, for: Int16(POLLOUT)) }
        let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
        if n < 0 {
            if errno == EINTR { continue }
            throw CommandFailure.cannot("write \(path)", errno, inOrder: true)
        }
        offset += n
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List a directory.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "The directory (default: /).")
    var path: String = "/"

    @Flag(name: .short, help: "Long format: class, size, modified time.")
    var l = false

    func run() throws {
        let store = try global.openStore()
        let target = try storePath(path, in: store)
        let items: [ItemInfo]
        if case .object = try store.stat(target).kind {
            items = [try store.stat(target)]
        } else {
            items = try store.list(target)
        }
        if output.json {
            try printJSON(items.map(ItemReport.init))
            return
        }
        for item in items {
            switch item.kind {
            case .directory(let dir):
                if l {
                    let own = dir.defaultClass.map { "default " + $0.letter } ?? "-"
                    print("d \(leftAligned(own, width: 9)) \(String(repeating: " ", count: 12)) \(time(dir.created))  \(shown(item.path.name))/")
                } else {
                    print(shown(item.path.name) + "/")
                }
            case .object(let obj):
                if l {
                    let size = String(obj.size)
                    print("\(obj.protectionClass.letter) \(obj.accessible ? "readable " : obj.reason == "keyReset" ? "key-reset" : "locked   ") \(String(repeating: " ", count: max(0, 12 - size.count)))\(size) \(time(obj.modified))  \(shown(item.path.name))")
                } else {
                    print(shown(item.path.name))
                }
            case .damaged(let why):
                print("\(shown(item.path.name))  (damaged: \(shown(why)))")
            }
        }
    }
}

func time(_ nanoseconds: Int64) -> String { timestamp(Double(nanoseconds) / 1e9) }

struct Stat: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show an object's protection attributes, or a directory's default class.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "The path in the store.")
    var path: String

    func run() throws {
        let store = try global.openStore()
        let item = try store.stat(try storePath(path, in: store))
        if output.json {
            try printJSON(ItemReport(item))
            return
        }
        switch item.kind {
        case .object(let o):
            print("Path:              \(shown(o.path.description))")
            print("Type:              object")
            print("Protection:        \(o.protectionClass.canonicalName) (\(o.protectionClass.letter))")
            print("Protection source: \(shown(o.protectionSource.description))")
            print("Accessible:        \(o.accessible ? "yes" : "no")\(o.reason.map { " (\($0))" } ?? "")")
            print("Size:              \(o.size)")
            print("Stored size:       \(o.storedSize)")
            print("Chunks:            \(o.chunks) of \(o.chunkSize) bytes, LZ4 then AES-256-GCM")
            print("Key generation:    \(o.keyGeneration)")
            print("Object ID:         \(o.objectID)")
            print("Created:           \(time(o.created))")
            print("Modified:          \(time(o.modified))")
        case .directory(let d):
            print("Path:              \(shown(d.path.description))")
            print("Type:              directory")
            print("Default class:     \(d.defaultClass?.canonicalName ?? "(none set)")")
            print("New objects get:   \(d.effectiveDefault.canonicalName) (\(shown(d.defaultSource.description)))")
            print("Created:           \(time(d.created))")
        case .damaged(let why):
            throw StoreError.integrity(path: item.path.description, what: why)
        }
    }
}

/// What `stat --json` and `ls --json` print for one entry.
struct ItemReport: Encodable {
    var path: String
    var type: String
    var object: ObjectReport?
    var defaultClass: String?
    var effectiveDefault: String?
    var defaultSource: String?
    var created: String?
    var damaged: String?

    init(_ item: ItemInfo) {
        path = item.path.description
        switch item.kind {
        case .object(let o):
            type = "object"
            object = ObjectReport(o)
        case .directory(let d):
            type = "directory"
            defaultClass = d.defaultClass?.canonicalName
            effectiveDefault = d.effectiveDefault.canonicalName
            defaultSource = d.defaultSource.description
            created = time(d.created)
        case .damaged(let why):
            type = "damaged"
            damaged = why
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(path, forKey: .path)
        try c.encode(type, forKey: .type)
        if let object {
            try object.encodeFields(into: &c)
        } else if type == "directory" {
            try c.encode(defaultClass, forKey: .defaultClass)
            try c.encode(effectiveDefault, forKey: .effectiveDefault)
            try c.encode(defaultSource, forKey: .defaultSource)
            try c.encode(created, forKey: .created)
        } else {
            try c.encode(damaged, forKey: .damaged)
        }
    }

    enum CodingKeys: String, CodingKey {
        case path, type, defaultClass, effectiveDefault, defaultSource, damaged
        case protection, protectionSource, accessible, reason, size, storedSize, chunks, chunkSize, compression
        case keyGeneration, id, created, modified
    }
}

struct ObjectReport: Encodable {
    var info: ObjectInfo
    init(_ info: ObjectInfo) { self.info = info }

    func encodeFields(into c: inout KeyedEncodingContainer<ItemReport.CodingKeys>) throws {
        try c.encode(info.protectionClass.canonicalName, forKey: .protection)
        try c.encode(info.protectionSource.description, forKey: .protectionSource)
        try c.encode(info.accessible, forKey: .accessible)
        try c.encode(info.reason, forKey: .reason)
        try c.encode(info.size, forKey: .size)
        try c.encode(info.storedSize, forKey: .storedSize)
        try c.encode(info.chunks, forKey: .chunks)
        try c.encode(info.chunkSize, forKey: .chunkSize)
        try c.encode("lz4", forKey: .compression)
        try c.encode(info.keyGeneration, forKey: .keyGeneration)
        try c.encode(info.objectID, forKey: .id)
        try c.encode(time(info.created), forKey: .created)
        try c.encode(time(info.modified), forKey: .modified)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: ItemReport.CodingKeys.self)
        try c.encode(info.path.description, forKey: .path)
        try c.encode("object", forKey: .type)
        try encodeFields(into: &c)
    }
}

struct MakeDirectory: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mkdir", abstract: "Create a directory, optionally with a default class.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "The directory to create.")
    var path: String

    @Option(help: ArgumentHelp("The default class new objects below inherit: \(ClassArgument.spellings).", valueName: "CLASS"),
            completion: .list(ClassArgument.allValueStrings), transform: ClassArgument.parse)
    var `class`: ClassArgument?

    @Flag(name: .short, help: "Create missing parents; an existing directory is not an error, unless its default class differs from --class.")
    var p = false

    func run() throws {
        // PATH first: a mkdir refused for it makes no store.
        let target = try storePath(path)
        let store = try global.openStore(create: true)
        func described(_ info: DirectoryInfo) -> String {
            "\(shown(info.path.description))\(info.defaultClass.map { " (default class \($0.canonicalName))" } ?? "")"
        }
        // `mkdir -p` makes sure a directory exists; it never changes the
        // protection of one that does (that is `setclass`'s, said out loud).
        if p, case .directory(let existing)? = try? store.stat(target).kind {
            if let wanted = self.class?.value, existing.defaultClass != wanted {
                let has = existing.defaultClass.map { "default class \($0.canonicalName)" } ?? "no default class of its own"
                throw CommandFailure(.alreadyExists, "\(target) already exists, with \(has)",
                                     hint: "'locker setclass \(target) \(wanted.canonicalName)' changes a directory's default class")
            }
            if output.json { try printJSON(ItemReport(try store.stat(target))) } else { print("\(described(existing)) already exists.") }
            return
        }
        let info: DirectoryInfo
        do {
            info = try store.makeDirectory(target, defaultClass: self.class?.value, parents: p)
        } catch StoreError.notFound(let missing) where !p && missing != target.description {
            throw CommandFailure(.notFound, "\(shown(missing)): no such directory",
                                 hint: "'locker mkdir -p \(shown(target.description))' makes it with its parents")
        }
        if output.json { try printJSON(ItemReport(try store.stat(target))) } else { print("Created \(described(info)).") }
    }
}

struct SetClass: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "setclass",
        abstract: "Change an object's class (rewraps its key only), or a directory's default class.",
        discussion: "For a directory, the new default applies to objects created afterwards; --recursive also rewraps every object below it. Use 'inherit' as CLASS to clear a directory's default.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "An object or a directory.")
    var path: String

    @Argument(help: "A canonical name, A–D, untilFirstAuth, or (directories) inherit.")
    var `class`: String

    @Flag(name: [.short, .long], help: "For a directory: also rewrap every object below it.")
    var recursive = false

    func run() throws {
        let store = try global.openStore()
        let target = try storePath(path, in: store)
        let item = try store.stat(target)
        let cls = ProtectionClass(name: self.class)
        if cls == nil && self.class != "inherit" {
            throw CommandFailure(.usage, "unknown class '\(self.class)'", hint: "use \(ClassArgument.spellings)")
        }
        switch item.kind {
        case .object:
            guard let cls else { throw CommandFailure(.usage, "'inherit' applies to directories only") }
            if recursive { throw CommandFailure(.usage, "--recursive applies to directories only") }
            try store.setClass(target, to: cls)
            if output.json { try printJSON(ItemReport(try store.stat(target))) } else { print("\(shown(target.description)) is now \(cls.canonicalName).") }
        case .directory(let directory):
            // Every key below is rewrapped before the default is written
            // (Store.setDefaultClass): a failure that left the default as
            // it was changed nothing, unless the default was already the
            // new one.
            let before = directory.defaultClass
            func unchanged() -> String {
                guard before != cls, case .directory(let now)? = try? store.stat(target).kind, now.defaultClass == before else {
                    return ""
                }
                return "; nothing was changed"
            }
            do {
                try store.setDefaultClass(cls, ofDirectory: target, recursive: recursive)
            } catch DeviceError.protectedDataUnavailable(let locked) where recursive {
                throw CommandFailure(.protectedDataUnavailable,
                                     "protected data unavailable: class \(locked.canonicalName) is locked, and rewrapping the objects below \(target) needs it\(unchanged())",
                                     hint: "run 'locker unlock', then try again")
            } catch DeviceError.keyReset(let reset) where recursive {
                throw CommandFailure(.keyReset,
                                     "an object below \(target) has a \(reset.canonicalName) key that was reset and cannot be rewrapped\(unchanged())",
                                     hint: "remove such objects with 'locker purge --key-reset', then try again")
            }
            if output.json {
                try printJSON(ItemReport(try store.stat(target)))
            } else if let cls {
                print("\(shown(target.description)): new objects get \(cls.canonicalName)\(recursive ? "; existing objects below were rewrapped" : "").")
            } else {
                print("\(shown(target.description)): default class cleared.")
            }
        case .damaged(let why):
            throw StoreError.integrity(path: target.description, what: why)
        }
    }
}

struct Remove: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove an object, or with -r a directory tree.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The path to remove.")
    var path: String

    @OptionGroup var output: JSONOption

    @Flag(name: [.customShort("r"), .customLong("recursive")], help: "Remove a directory and everything below it.")
    var r = false

    func run() throws {
        let store = try global.openStore()
        let target = try storePath(path, in: store)
        try store.remove(target, recursive: r)
        if output.json { try printJSON(["removed": target.description]) }
    }
}

struct Move: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mv", abstract: "Move an object or a directory. Objects keep their class.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The source path.")
    var source: String

    @Argument(help: "The destination: a new path, or an existing directory to move into.")
    var destination: String

    @OptionGroup var output: JSONOption

    func run() throws {
        let store = try global.openStore()
        let to = try storePath(destination)
        // "DIR/" moves into the directory DIR, which must exist, as mv(1)
        // has it; it never renames to DIR.
        if destination.count > 1, destination.hasSuffix("/") {
            switch try store.stat(to).kind {
            case .directory: break
            case .object: throw StoreError.notADirectory(to.description)
            case .damaged(let why): throw StoreError.integrity(path: to.description, what: why)
            }
        }
        let moved = try store.move(try storePath(source, in: store), to: to)
        if output.json { try printJSON(ItemReport(try store.stat(moved))) }
    }
}

struct Open: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Open an object: its key is kept so a completeUnlessOpen object stays readable across a lock.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The object to open.")
    var path: String

    @OptionGroup var output: JSONOption

    func run() throws {
        let store = try global.openStore()
        let info = try objectsOnly { try store.open(try storePath(path, in: store)) }
        if output.json {
            try printJSON(ItemReport(try store.stat(info.path)))
        } else {
            print("Opened \(shown(info.path.description)) (\(info.protectionClass.canonicalName)).")
        }
    }
}

struct Close: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Close an object opened with 'locker open'.")

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The object to close.")
    var path: String

    @OptionGroup var output: JSONOption

    func run() throws {
        let store = try global.openStore()
        let target = try storePath(path, in: store)
        do {
            try objectsOnly { try store.close(target) }
        } catch DeviceError.notOpen {
            // A complete object's open ends with its key when the grace
            // period after a lock ends: say so, or "not open" reads as
            // never opened.
            var isComplete = false
            if case .object(let object)? = (try? store.stat(target))?.kind { isComplete = object.protectionClass == .complete }
            throw CommandFailure(.notFound, "\(shown(target.description)) is not open",
                                 hint: isComplete ? "a complete object's open ends when the grace period after a lock ends; open it again once unlocked"
                                                  : "open it with 'locker open'")
        }
        if output.json {
            try printJSON(ItemReport(try store.stat(target)))
        } else {
            // As `open` says what it did: a silent success reads as nothing done.
            print("Closed \(shown(target.description)).")
        }
    }
}

/// `body`, for `open` and `close`, which take one object: a directory is
/// an error without the usual hint (they have no -r).
private func objectsOnly<T>(_ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch StoreError.isADirectory(let path) {
        throw CommandFailure(.failure, "\(path) is a directory; only an object can be opened or closed")
    }
}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write every readable object as a plain file, with manifest.json listing each object's attributes.",
        discussion: "Objects that cannot be read now (locked, key reset) are listed with the reason. The command then exits 75 unless --skip-unavailable is given. Damaged objects are left out and listed too, and the command then exits 65 whatever the flags. A new DEST is built out of sight: it appears with the manifest, or not at all if the export fails.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Argument(help: "A local directory to write into (created if missing).")
    var destination: String

    @Flag(help: "Exit 0 even if some objects could not be exported.")
    var skipUnavailable = false

    func validate() throws {
        if destination.isEmpty { throw ValidationError("DEST cannot be empty; give a local directory") }
    }

    /// A manifest entry. A damaged header leaves only the path known: the
    /// other attributes are then null.
    struct Entry: Encodable {
        var path: String
        var protection: String?
        var protectionSource: String?
        var size: UInt64?
        var exported: Bool
        var skipped: String?
        var created: String?
        var modified: String?

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(path, forKey: .path)
            try c.encode(protection, forKey: .protection)
            try c.encode(protectionSource, forKey: .protectionSource)
            try c.encode(size, forKey: .size)
            try c.encode(exported, forKey: .exported)
            try c.encode(skipped, forKey: .skipped)
            try c.encode(created, forKey: .created)
            try c.encode(modified, forKey: .modified)
        }

        enum CodingKeys: String, CodingKey { case path, protection, protectionSource, size, exported, skipped, created, modified }
    }

    func run() throws {
        try Interruption.cooperating { try transfer() }
    }

    private func transfer() throws {
        let store = try global.openStore()
        // The manifest would overwrite an exported /manifest.json (or fail
        // on a directory of that name): refuse before writing anything.
        if (try? store.stat(StorePath(components: ["manifest.json"]))) != nil {
            throw CommandFailure(.alreadyExists, "/manifest.json in the store collides with the export's manifest",
                                 hint: "move it first, for example 'locker mv /manifest.json /manifest.json.orig'")
        }
        try global.refuseDestinationInside(destination)
        let damaged = DamagedObjects(leftOut: "not exported")
        // Every object, with what became of it, for the manifest; and how
        // many were left out because their class key was reset (unlocking
        // helps a locked object, never one of those).
        var entries: [Entry] = []
        var resetCount = 0
        let fetch = TreeFetch(store, fence: global.fence(), damaged: damaged) { path, listed, outcome in
            // A damaged header leaves only the path known.
            var entry = Entry(path: path, exported: false)
            if let listed {
                entry = Entry(path: path, protection: listed.protectionClass.canonicalName,
                              protectionSource: listed.protectionSource.description, size: listed.size, exported: false,
                              skipped: nil, created: time(listed.created), modified: time(listed.modified))
            }
            switch outcome {
            case .written:
                entry.exported = true
            case .keyReset:
                entry.skipped = "keyReset: its class key was reset"
                resetCount += 1
            case .locked(let cls):
                entry.skipped = "locked: \(cls.canonicalName) is unavailable in this state"
            case .damaged(let what):
                entry.skipped = DamagedObjects.reason(what)
            }
            entries.append(entry)
        }
        // A new DEST is built out of sight: it appears with every object
        // that could be exported and the manifest, or not at all. Into an
        // existing one, the files are written as `get -r` writes them, and
        // the manifest last, atomically.
        _ = try fetch.fetch(from: .root, to: destination, mode: 0o700) { top, outOfSight in
            // In the store's order: each directory's entries by name, a
            // directory's contents right after it.
            entries.sort { $0.path.split(separator: "/").lexicographicallyPrecedes($1.path.split(separator: "/")) }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let manifest = try encoder.encode(["objects": entries])
            let write = { (file: NewLocalFile) in
                try manifest.withUnsafeBytes { try writeAll(file.fd, $0, path: top.path(of: "manifest.json")) }
            }
            try outOfSight ? top.writeFileOutOfSight("manifest.json", write) : top.writeFile("manifest.json", write)
        }
        let skipped = entries.filter { !$0.exported }
        if output.json {
            struct Summary: Encodable {
                var objects: Int
                var exported: Int
                var skipped: [[String: String]]
                var manifest: String
            }
            try printJSON(Summary(objects: entries.count, exported: entries.count - skipped.count,
                                  skipped: skipped.map { ["path": $0.path, "reason": $0.skipped ?? ""] },
                                  manifest: destination + "/manifest.json"))
        } else {
            print("Exported \(entries.count - skipped.count) of \(entries.count) objects to \(shownDirectory(destination)).")
            for entry in skipped { print("  skipped \(shown(entry.path)): \(entry.skipped ?? "")") }
        }
        // Damage is not unavailability: no unlock or flag makes it readable.
        try damaged.fail()
        if !skipped.isEmpty && !skipUnavailable {
            let notExported = "\(skipped.count) object\(skipped.count == 1 ? " was" : "s were") not exported"
            if resetCount == skipped.count {
                throw CommandFailure(.keyReset, "\(notExported): \(resetCount == 1 ? "its class key was" : "their class keys were") reset",
                                     hint: "they can never be read: remove them with 'locker purge --key-reset', or pass --skip-unavailable")
            }
            throw CommandFailure(.protectedDataUnavailable, notExported + (resetCount > 0 ? " (\(resetCount) of them for good: their class key was reset)" : ""),
                                 hint: "unlock and export again, or pass --skip-unavailable")
        }
    }
}

struct Purge: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delete the objects whose class key was reset by 'locker reset'. Nothing readable is touched.")

    @OptionGroup var global: GlobalOptions
    @OptionGroup var output: JSONOption

    @Flag(help: "Required: purge objects of an older key generation.")
    var keyReset = false

    func validate() throws {
        guard keyReset else { throw ValidationError("purge needs --key-reset") }
    }

    func run() throws {
        let store = try global.openStore()
        var doomed: [StorePath] = []
        // A damaged entry cannot be told to be of an older generation, so it
        // is left as it is and named; the rest of the store is still purged,
        // as `get -r` still fetches the rest.
        let damaged = DamagedObjects(leftOut: "not checked")
        try store.walk(.root, damaged: damaged.note) { path, isDirectory in
            guard !isDirectory else { return }
            let kind: ItemInfo.Kind
            do {
                kind = try store.stat(path).kind
            } catch let error as StoreError where error.isIntegrity {
                damaged.note(error)
                return
            }
            guard case .object(let info) = kind, info.reason == "keyReset" else { return }
            doomed.append(path)
        }
        for path in doomed { try store.remove(path) }
        if output.json {
            try printJSON(PurgeReport(purged: doomed.map(\.description),
                                      damaged: damaged.found.map { .init(path: $0.path, reason: DamagedObjects.reason($0.what)) }))
        } else {
            print("Purged \(doomed.count) object\(doomed.count == 1 ? "" : "s") of an older key generation.")
            for path in doomed { print("  \(shown(path.description))") }
        }
        try damaged.fail()
    }

    /// What `purge --json` prints: the paths removed, and the damaged
    /// entries left unchecked (each `{"path", "reason"}`).
    struct PurgeReport: Encodable {
        struct Damaged: Encodable {
            var path: String
            var reason: String
        }
        var purged: [String]
        var damaged: [Damaged]
    }
}
