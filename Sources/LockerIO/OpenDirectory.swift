#if canImport(Glibc)
internal import Glibc
#endif
internal import CLockerSupport

/// A local directory open by descriptor, for writing into: every name in
/// it is created, opened, renamed, removed and looked at relative to the
/// descriptor, and a name that is a symbolic link is never followed.
///
/// Writes that went by path would resolve the path again at each call, so
/// a directory on the way replaced by a link in between (by another user
/// who can write to a directory above) would send them where the link
/// leads. Through a descriptor they land in the directory that was opened,
/// wherever it has been moved since.
///
/// Each name given is one component: no "/", not "." or "..". The
/// descriptor is closed when the value is released.
public final class OpenDirectory: @unchecked Sendable {
    /// The descriptor; the caller must not close it.
    public let fd: Int32
    /// The path errors give.
    public let path: String
    /// What the directory was when opened: its device and inode say which
    /// directory it is, its uid who owns it.
    public let status: FileStatus
    /// Whether it is open with `O_PATH` (a drop box, see
    /// ``init(_:fileSystem:)``): it cannot be listed, nor synced through.
    public let isPathOnly: Bool
    /// The calls it makes.
    let fileSystem: FileSystem

    private init(fd: Int32, path: String, fileSystem: FileSystem, isPathOnly: Bool = false) throws(IOError) {
        self.fd = fd
        self.path = path
        self.fileSystem = fileSystem
        self.isPathOnly = isPathOnly
        do {
            status = try fileSystem.fstat(fd, path: path)
        } catch {
            fileSystem.close(fd)
            throw error
        }
    }

    deinit { fileSystem.close(fd) }

    /// Opens the directory at `path`, following a symbolic link at `path`
    /// itself or on the way to it, as the user's own path to it
    /// (ENOTDIR if it is not a directory). A directory the caller may
    /// write to but not list (a drop box, mode 0733) is opened with
    /// `O_PATH` (``isPathOnly``): names in it can be created, renamed and
    /// removed, but ``sync()``, ``syncFileSystem()`` and
    /// ``removeContents()`` fail (EBADF), as they would by path (see
    /// ``sync(through:)``).
    public convenience init(_ path: String, fileSystem: FileSystem = FileSystem()) throws(IOError) {
        let fd: Int32
        var isPathOnly = false
        do {
            fd = try fileSystem.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch where error.errno == EACCES {
            fd = try fileSystem.open(path, locker_o_path() | O_DIRECTORY | O_CLOEXEC)
            isPathOnly = true
        }
        try self.init(fd: fd, path: path, fileSystem: fileSystem, isPathOnly: isPathOnly)
    }

    /// Opens the directory `relative` below `root` (`root` again for
    /// "."), following no symbolic link anywhere in `relative` (ELOOP) and
    /// never leaving `root` (EXDEV), as
    /// ``FileSystem/openBeneath(_:_:directory:name:)`` does. `path` is
    /// the path errors give.
    public convenience init(_ relative: String, beneath root: OpenDirectory, path: String) throws(IOError) {
        let fd = try root.fileSystem.openBeneath(root.fd, relative, directory: true, name: path)
        try self.init(fd: fd, path: path, fileSystem: root.fileSystem)
    }

    /// The path errors give for `name` in this directory.
    public func path(of name: String) -> String {
        path == "/" ? "/" + name : path + "/" + name
    }

    /// Opens the directory `name` in this one. A symbolic link there fails
    /// with ELOOP, whatever it leads to; anything else that is not a
    /// directory with ENOTDIR; a directory on another file system (a mount
    /// point) with EXDEV: whoever mounted it decides what its files are,
    /// and where what is written to them goes (a FUSE file system of
    /// another user's, say), and its owner and mode are only what it
    /// reports, but its device number is the kernel's. `path` is the path
    /// errors give for it (``path(of:)`` if nil): a directory built under
    /// a temporary name goes by the one it is built for.
    public func subdirectory(_ name: String, path: String? = nil) throws(IOError) -> OpenDirectory {
        let opened = try OpenDirectory(Self.checked(name), beneath: self, path: path ?? self.path(of: name))
        guard opened.status.device == status.device else { throw IOError("open", path: opened.path, errno: EXDEV) }
        return opened
    }

    /// Creates the directory `name` (`mode`, less the umask); returns
    /// false, changing nothing, if something is already there.
    public func makeDirectory(_ name: String, mode: UInt32) throws(IOError) -> Bool {
        do {
            _ = try fileSystem.retrying("mkdir", path(of: name)) { Int(fileSystem.syscalls.mkdirAt(fd, Self.checked(name), mode)) }
            return true
        } catch where error.errno == EEXIST {
            return false
        }
    }

    /// What `name` is, not following a link; nil if nothing is there.
    public func status(of name: String) throws(IOError) -> FileStatus? {
        do {
            return try fileSystem.retrying("stat", path(of: name)) { fileSystem.syscalls.statAt(fd, Self.checked(name)) }
        } catch where error.errno == ENOENT {
            return nil
        }
    }

    /// Creates the file `name`, which must not exist (EEXIST, also for a
    /// link there), for writing; returns the descriptor, the caller's to
    /// close.
    public func createFile(_ name: String, mode: UInt32 = 0o600) throws(IOError) -> Int32 {
        Int32(try fileSystem.retrying("open", path(of: name)) {
            Int(fileSystem.syscalls.createAt(fd, Self.checked(name), mode))
        })
    }

    /// Renames `name` to `target`, both in this directory, replacing what
    /// is at `target` (a link there is replaced, not followed), without
    /// syncing.
    public func rename(_ name: String, to target: String) throws(IOError) {
        _ = try fileSystem.retrying("rename", path(of: target)) {
            Int(fileSystem.syscalls.renameAt(fd, Self.checked(name), fd, Self.checked(target)))
        }
    }

    /// Renames `name` in this directory to `target` in `directory` if
    /// nothing is there, without syncing; returns false, changing nothing,
    /// if something is. Where the file system cannot rename without
    /// replacing, it looks first, as ``FileSystem/renameIfAbsent(_:to:)``
    /// does.
    public func renameIfAbsent(_ name: String, to target: String, in directory: OpenDirectory) throws(IOError) -> Bool {
        do {
            _ = try fileSystem.retrying("rename", directory.path(of: target)) {
                Int(fileSystem.syscalls.renameAtNoReplace(fd, Self.checked(name), directory.fd, Self.checked(target)))
            }
            return true
        } catch where error.errno == EEXIST {
            return false
        } catch where error.errno == EINVAL || error.errno == ENOSYS {
            if try directory.status(of: target) != nil { return false }
            _ = try fileSystem.retrying("rename", directory.path(of: target)) {
                Int(fileSystem.syscalls.renameAt(fd, Self.checked(name), directory.fd, Self.checked(target)))
            }
            return true
        }
    }

    /// Removes the file (or link) `name`; what is missing is not an error.
    public func remove(_ name: String) throws(IOError) {
        do {
            _ = try fileSystem.retrying("unlink", path(of: name)) { Int(fileSystem.syscalls.unlinkAt(fd, Self.checked(name), 0)) }
        } catch where error.errno == ENOENT {
        }
    }

    /// Removes `name`, and if it is a directory everything in it, each
    /// directory opened below this one through no link; what is missing is
    /// not an error. Nothing is synced.
    public func removeTree(_ name: String) throws(IOError) {
        guard let found = try status(of: name) else { return }
        if found.isDirectory {
            let directory: OpenDirectory
            do {
                directory = try subdirectory(name)
            } catch where error.errno == ENOENT {
                // Removed meanwhile (by another cleanup of the same tree).
                return
            }
            try directory.removeContents()
            try removeDirectory(name)
        } else {
            try remove(name)
        }
    }

    /// Removes everything in this directory, as ``removeTree(_:)`` does.
    /// An entry that cannot be removed does not stop the others: the first
    /// error is thrown once every entry has been tried, so that two
    /// cleanups of one tree at once (a command's own and a signal's) both
    /// make progress.
    public func removeContents() throws(IOError) {
        let entries = try fileSystem.retrying("readdir", path) { fileSystem.syscalls.listDirectory(fd) }
        var first: IOError?
        for entry in entries where entry.name != "." && entry.name != ".." {
            do {
                try removeTree(entry.name)
            } catch {
                first = first ?? error
            }
        }
        if let first { throw first }
    }

    /// Removes the empty directory `name`; what is missing is not an error.
    public func removeDirectory(_ name: String) throws(IOError) {
        do {
            _ = try fileSystem.retrying("rmdir", path(of: name)) { Int(fileSystem.syscalls.unlinkAt(fd, Self.checked(name), AT_REMOVEDIR)) }
        } catch where error.errno == ENOENT {
        }
    }

    /// fsync(2) of the directory: its new names and renames are durable.
    public func sync() throws(IOError) {
        try fileSystem.fsync(fd, path: path)
    }

    /// Makes the new names and renames in this directory durable, as
    /// ``sync()`` does. One open with `O_PATH` (``isPathOnly``) cannot be
    /// synced itself; its whole file system is then synced (syncfs(2))
    /// through `file`, a descriptor the caller holds of something it made
    /// in it, used as held: never reopened by a name another user could
    /// change.
    public func sync(through file: Int32) throws(IOError) {
        guard isPathOnly else { return try sync() }
        _ = try fileSystem.retrying("syncfs", path) { Int(fileSystem.syscalls.syncfs(file)) }
    }

    /// syncfs(2): everything written to the file system holding this
    /// directory is durable. A directory open with `O_PATH`
    /// (``isPathOnly``) cannot be synced through (EBADF).
    public func syncFileSystem() throws(IOError) {
        _ = try fileSystem.retrying("syncfs", path) { Int(fileSystem.syscalls.syncfs(fd)) }
    }

    /// Opens the new file `name` a second time for writes past the page
    /// cache, if it is still the file `fd` is open on (see
    /// ``FileSystem/openForDirectWriting(_:sameFileAs:)``); nil otherwise.
    func openForDirectWriting(_ name: String, sameFileAs file: Int32) -> Int32? {
        fileSystem.openForDirectWriting(Self.checked(name), in: fd, sameFileAs: file, path: path(of: name))
    }

    private static func checked(_ name: String) -> String {
        // On the bytes: "/" and a combining mark after it are one Character.
        precondition(!name.utf8.isEmpty && !name.utf8.contains(UInt8(ascii: "/"))
                     && !name.utf8.elementsEqual(".".utf8) && !name.utf8.elementsEqual("..".utf8), "not one name: \(name)")
        return name
    }
}
