internal import LockerIO
internal import Foundation

extension Store {
    /// Creates the directories of `paths` that are missing, as
    /// ``makeDirectories(_:)`` does, but leaves the new subtrees out of
    /// sight, in one temporary directory (`ns/.tmp-dir-…`): objects staged
    /// into them with ``stageBatch(_:into:)`` are written at their final
    /// names there, with no rename each, and each whole subtree appears
    /// with ``publish(_:)``. While they are built, the temporary directory
    /// holds an exclusive `flock`, so a verifier does not take it for
    /// garbage.
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
        try fs.createDirectory(container, mode: 0o700)
        let build: DirectoryBuild
        let writeLock: FileLock
        do {
            writeLock = try FileLock.building(directory: container, fileSystem: fs)
            build = try buildDirectories(paths, in: container)
        } catch {
            try? fs.removeTree(container)
            throw error
        }
        guard !build.subtrees.isEmpty else {
            try? fs.removeTree(container)
            return StagedTree(fileSystem: fs, build: build, container: nil, lock: nil)
        }
        return StagedTree(fileSystem: fs, build: build, container: container, lock: writeLock)
    }

    /// Puts each new subtree of `tree` in place, with everything committed
    /// into it: the file system is synced, each subtree is renamed into
    /// place under the store lock (never over anything), and the file
    /// system is synced again. When this returns, the subtrees and their
    /// objects are durable. A tree is published once.
    ///
    /// A subtree whose place was taken meanwhile (another command created
    /// that directory) is removed with what was written into it, the
    /// others are published, and this throws
    /// ``StoreError/alreadyExists(_:)`` naming the first one. After any
    /// other failure each subtree is in place whole or not at all.
    public func publish(_ tree: StagedTree) throws {
        guard !tree.isFinished else { throw StoreError.invalidPath("a staged tree is published once") }
        tree.isFinished = true
        guard !tree.subtrees.isEmpty else { return }
        // Emptied by the renames; what a failure leaves in it goes too.
        defer { tree.removeContainer() }
        var done = 0
        var taken: [Int] = []
        do {
            try fs.syncFileSystem(containing: path)
            let lock = try lockStore()
            defer { withExtendedLifetime(lock) {} }
            for (i, subtree) in tree.subtrees.enumerated() {
                if try !fs.renameIfAbsent(subtree.temporary, to: subtree.fsPath) { taken.append(i) }
                done += 1
            }
            try fs.syncFileSystem(containing: namespaceRoot)
        } catch {
            tree.discard(from: done)
            tree.release(subtrees: Set(0..<done))
            throw error
        }
        for i in taken { tree.discard(subtree: i) }
        tree.release(subtrees: Set(tree.subtrees.indices).subtracting(taken))
        if let first = taken.first { throw StoreError.alreadyExists(tree.subtrees[first].path.description) }
    }
}

/// New directories built out of sight by ``Store/stageTree(_:)``, with the
/// objects committed into them, until ``Store/publish(_:)`` puts them in
/// place. Released unpublished, it removes them.
public final class StagedTree: @unchecked Sendable {
    private let fileSystem: FileSystem
    /// Each directory asked for and its ancestors; a new one at the path
    /// where it is being built.
    let directories: [StorePath: Store.Directory]
    /// Each new directory, and the subtree (an index into `subtrees`) that
    /// holds it.
    private let subtreeOf: [StorePath: Int]
    let subtrees: [(temporary: String, fsPath: String, path: StorePath)]
    /// The temporary directory that holds the subtrees, and its lock.
    private let container: String?
    private var lock: FileLock?
    /// Published, or given up.
    var isFinished = false
    // Data files of objects committed into the tree, held open and locked
    // until it is published (a verifier would otherwise take them for
    // garbage: no published header names them). Commits may run on
    // another thread than the one staging the next batch.
    private let dataLock = NSLock()
    private var dataFiles: [(subtree: Int, path: String, file: DataFile)] = []

    init(fileSystem: FileSystem, build: Store.DirectoryBuild, container: String?, lock: FileLock?) {
        self.fileSystem = fileSystem
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
        if !isFinished {
            discard(from: 0)
            removeContainer()
        }
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

    /// Holds the data file of an object committed into the directory
    /// `parent` until the tree is published.
    func keep(_ data: (path: String, file: DataFile), in parent: StorePath) {
        dataLock.withLock { dataFiles.append((subtreeOf[parent]!, data.path, data.file)) }
    }

    /// Removes the subtrees from `first` on, with their data files.
    func discard(from first: Int) {
        for i in subtrees.indices.dropFirst(first) { discard(subtree: i) }
    }

    /// Removes subtree `i` and the data files of its objects.
    func discard(subtree i: Int) {
        let files = dataLock.withLock {
            let files = dataFiles.filter { $0.subtree == i }
            dataFiles.removeAll { $0.subtree == i }
            return files
        }
        try? fileSystem.removeTree(subtrees[i].temporary)
        for entry in files {
            entry.file.close()
            try? fileSystem.remove(entry.path, syncDirectory: false)
        }
    }

    /// Closes the data files of the given subtrees: they are published.
    func release(subtrees published: Set<Int>) {
        dataLock.withLock {
            for entry in dataFiles where published.contains(entry.subtree) { entry.file.close() }
            dataFiles.removeAll { published.contains($0.subtree) }
        }
    }

    /// Removes the temporary directory, then lets go of its lock.
    func removeContainer() {
        if let container { try? fileSystem.removeTree(container) }
        lock = nil
    }

}
