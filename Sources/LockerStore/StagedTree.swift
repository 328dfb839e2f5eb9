internal import LockerIO
internal import FoundationEssentials

extension Store {
    /// Creates the directories of `paths` that are missing, as
    /// ``makeDirectories(_:)`` does, but leaves the new subtrees out of
    /// sight, in one temporary directory (`ns/.tmp-dir-…`): objects staged
    /// into them with ``stageBatch(_:into:)`` are written at their final
    /// names there, with no rename each, and each whole subtree appears
    /// with ``publish(_:)``. While they are built, the temporary directory
    /// holds an exclusive `flock`, so a verifier does not take it for
    /// garbage; the data files of objects written into them wait inside it
    /// too (`data/`), so that nothing outside refers to them or holds them
    /// open.
    ///
    /// A tree released unpublished removes what was written into it; a
    /// crash leaves garbage that `verify --repair` removes. An object in
    /// the way throws ``StoreError/notADirectory(_:)`` before anything is
    /// created.
    public func stageTree(_ paths: [StorePath]) throws -> StagedTree {
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        // One directory holds every new subtree, so one descriptor holds
        // the lock however many there are. It is made and locked under the
        // store lock, which a verifier takes too: a verifier never sees it
        // unlocked while this process lives.
        let container = namespaceRoot + "/.tmp-dir-" + UUID().uuidString
        // Built whole with its cleanup held off: a cleanup that ran while
        // the directories were being made could leave some behind.
        let ((build, writeLock), token) = try temporaries.creatingTemporary({ () throws -> (DirectoryBuild, FileLock) in
            try fs.createDirectory(container, mode: 0o700)
            do {
                let writeLock = try FileLock.building(directory: container, fileSystem: fs)
                let build = try buildDirectories(paths, in: container)
                // Data files of objects written into the subtrees wait here,
                // under the same lock, until their subtree is published.
                try fs.createDirectory(container + "/data", mode: 0o700)
                return (build, writeLock)
            } catch {
                try? fs.removeTree(container)
                throw error
            }
        }, cleanup: removal(of: container))
        guard !build.subtrees.isEmpty else {
            temporaries.finishingTemporaries([token]) { try? fs.removeTree(container) }
            return StagedTree(fileSystem: fs, temporaries: temporaries, build: build, container: nil, lock: nil)
        }
        return StagedTree(fileSystem: fs, temporaries: temporaries, build: build, container: (container, token), lock: writeLock)
    }

    /// Puts each new subtree of `tree` in place, with everything committed
    /// into it: the file system is synced; then, under the store lock, each
    /// subtree whose parent is still the directory it was built in (its
    /// name is sealed with that directory's ID) and whose place is free has
    /// its objects' data files moved into the store's `data/` and is
    /// renamed into place (never over anything); then the file system is
    /// synced again. When this returns, the subtrees and their objects are
    /// durable. A tree is published once.
    ///
    /// A subtree whose place was taken meanwhile (another command created
    /// that directory), or whose parent was removed or replaced, is removed
    /// with what was written into it; the others are published; and this
    /// throws ``StoreError/alreadyExists(_:)`` naming the taken directory,
    /// or ``StoreError/notFound(_:)`` naming the parent, for the first such
    /// subtree. After any other failure each subtree is in place whole or
    /// not at all.
    public func publish(_ tree: StagedTree) throws {
        guard !tree.isFinished else { throw StoreError.invalidPath("a staged tree is published once") }
        tree.isFinished = true
        guard !tree.subtrees.isEmpty else { return }
        // What is left in it (refused subtrees, their data) goes, then the
        // lock.
        defer { tree.removeContainer() }
        var refused: [StoreError] = []
        try fs.syncFileSystem(containing: path)
        let lock = try lockStore()
        defer { withExtendedLifetime(lock) {} }
        var parents: [StorePath: Bool] = [:]
        for (i, subtree) in tree.subtrees.enumerated() {
            let parentPath = subtree.path.parent
            let parentIsSame = try parents[parentPath] ?? isStill(tree.directories[parentPath]!)
            parents[parentPath] = parentIsSame
            guard parentIsSame else {
                refused.append(.notFound(parentPath.description))
                continue
            }
            guard try fs.status(subtree.fsPath) == nil else {
                refused.append(.alreadyExists(subtree.path.description))
                continue
            }
            // The data files and the subtree go with no cleanup running
            // in between: the temporary directory's cleanup would leave
            // data files moved out of it for a subtree it then removed.
            let placed = try temporaries.holdingOffCleanups(placing: [tree.containerToken]) { () throws -> Bool in
                // Moved out of the temporary directory, to remove if
                // the subtree never gets in place.
                var moved: [String] = []
                do {
                    for temporary in tree.dataFiles(of: i) {
                        // Named by object ID, as in `data/`. IDs are
                        // random: a name in use there means damage.
                        let final = dataDirectory + "/" + LocalPath.name(of: temporary)
                        guard try fs.renameIfAbsent(temporary, to: final) else {
                            throw StoreError.integrity(path: subtree.path.description, what: "object ID already in use")
                        }
                        moved.append(final)
                    }
                    if try fs.renameIfAbsent(subtree.temporary, to: subtree.fsPath) { return true }
                } catch {
                    for final in moved { try? fs.remove(final, syncDirectory: false) }
                    throw error
                }
                for final in moved { try? fs.remove(final, syncDirectory: false) }
                return false
            }
            if !placed { refused.append(.alreadyExists(subtree.path.description)) }
        }
        try fs.syncFileSystem(containing: namespaceRoot)
        if let first = refused.first { throw first }
    }
}

extension Store {
    /// Whether `directory` is still at its path: a directory with the same
    /// ID. A failure to look throws; only its absence answers no.
    func isStill(_ directory: Directory) throws -> Bool {
        try reread(directory) != nil
    }

    /// `directory` as it is now (its record read again), if it is still at
    /// its path; nil if another directory is there, or none.
    func reread(_ directory: Directory) throws -> Directory? {
        do {
            let now = try self.directory(at: directory.storePath)
            return now.record.directoryID == directory.record.directoryID ? now : nil
        } catch StoreError.notFound {
            return nil
        } catch StoreError.notADirectory {
            return nil
        }
    }
}

/// New directories built out of sight by ``Store/stageTree(_:)``, with the
/// objects committed into them, until ``Store/publish(_:)`` puts them in
/// place. Released unpublished, it removes them.
public final class StagedTree: @unchecked Sendable {
    private let fileSystem: FileSystem
    private let temporaries: any TemporaryCleanups
    /// Each directory asked for and its ancestors; a new one at the path
    /// where it is being built.
    let directories: [StorePath: Store.Directory]
    /// Each new directory, and the subtree (an index into `subtrees`) that
    /// holds it.
    private let subtreeOf: [StorePath: Int]
    let subtrees: [(temporary: String, fsPath: String, path: StorePath)]
    /// The temporary directory that holds the subtrees, with the token of
    /// its cleanup (see ``TemporaryCleanups``), and its lock.
    private let container: (path: String, token: Int)?

    /// The token of the temporary directory's cleanup, if there is one.
    var containerToken: Int? { container?.token }
    private var lock: FileLock?
    /// Published, or given up.
    var isFinished = false
    // The data files of objects committed into the tree, waiting inside
    // the temporary directory. Commits may run on another thread than the
    // one staging the next batch.
    private let dataLock = Lock()
    private var dataFiles: [(subtree: Int, path: String)] = []

    init(fileSystem: FileSystem, temporaries: any TemporaryCleanups, build: Store.DirectoryBuild,
         container: (path: String, token: Int)?, lock: FileLock?) {
        self.fileSystem = fileSystem
        self.temporaries = temporaries
        self.container = container
        self.lock = lock
        directories = build.directories
        subtrees = build.subtrees
        var subtreeOf: [StorePath: Int] = [:]
        for (i, subtree) in build.subtrees.enumerated() { subtreeOf[subtree.path] = i }
        // Parents first, so each new directory finds its subtree's top.
        for path in build.newPaths.sorted(by: { $0.components.count < $1.components.count }) where subtreeOf[path] == nil {
            subtreeOf[path] = subtreeOf[path.parent]
        }
        self.subtreeOf = subtreeOf
    }

    deinit {
        if !isFinished { removeContainer() }
    }

    /// Gives the tree up: removes its temporary directory with every
    /// directory and object staged in it. Call it when no batch is being
    /// staged or committed into the tree; it cannot be published after.
    /// What a `deinit` would do, at a moment the caller chooses (a process
    /// about to end does not wait for the last reference to go).
    public func discard() {
        guard !isFinished else { return }
        isFinished = true
        removeContainer()
    }

    /// Whether `path` is a directory this tree creates.
    public func isNew(_ path: StorePath) -> Bool { subtreeOf[path] != nil }

    /// The directories from the root to `path`, a new directory of the
    /// tree, as they will be once it is published.
    func chain(to path: StorePath) -> [Store.Directory] {
        var chain = [directories[.root]!]
        for i in path.components.indices {
            chain.append(directories[StorePath(components: Array(path.components[...i]))]!)
        }
        return chain
    }

    /// Where the data file `name` of an object written into the tree waits
    /// until its subtree is published.
    func dataPath(_ name: String) -> String { container!.path + "/data/" + name }

    /// Notes the data file at `path` (see ``dataPath(_:)``) of an object
    /// committed into the directory `parent`, to move on publication.
    func keep(_ path: String, in parent: StorePath) {
        dataLock.withLock { dataFiles.append((subtreeOf[parent]!, path)) }
    }

    /// The data files of subtree `i`'s objects, where they wait.
    func dataFiles(of i: Int) -> [String] {
        dataLock.withLock { dataFiles.filter { $0.subtree == i }.map(\.path) }
    }

    /// Removes the temporary directory with whatever is left in it, and
    /// its cleanup with it, then lets go of its lock.
    func removeContainer() {
        if let container {
            temporaries.finishingTemporaries([container.token]) { try? fileSystem.removeTree(container.path) }
        }
        lock = nil
    }

    /// Runs `create`, which creates a file inside the temporary directory,
    /// with no cleanup running meanwhile: the directory's cleanup, run
    /// while the file was being created, would leave both behind.
    func creatingInside<T>(_ create: () throws -> T) throws -> T {
        try temporaries.holdingOffCleanups(create)
    }
}
