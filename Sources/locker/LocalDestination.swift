import FoundationEssentials
import Glibc
import LockerIO

/// Where a fetch (`get -r`, `export`) writes: a local directory opened
/// once (DEST, or the parent of a new tree), following a symbolic link at
/// the path the user gave, and every directory below it reached from the
/// one above by descriptor, through no link (``LocalDirectory``).
///
/// Plaintext is written only into files created (`O_EXCL`, 0600) in
/// directories opened that way, on DEST's own file systems (no mount point
/// below DEST is entered), so another user who can write to DEST cannot
/// send it elsewhere by swapping a directory for a link or a mount during
/// the fetch: what was opened is what is written into, and a directory
/// found moved or replaced when its turn comes fails the fetch.
final class LocalDestination: @unchecked Sendable {
    let root: LocalDirectory

    /// Opens the directory `path`; one error line if it is not one, or if
    /// it is a directory `fence` holds, as is every directory entered
    /// below it.
    init(_ path: String, fence: DirectoryFence) throws {
        let directory: OpenDirectory
        do {
            directory = try OpenDirectory(path)
        } catch {
            throw error.errno == ENOTDIR
                ? CommandFailure(.failure, "cannot write into \(path): it exists and is not a directory")
                : CommandFailure.cannot("write into \(path)", error.errno)
        }
        try fence.check(directory.status, path: path)
        root = LocalDirectory(directory, relative: ".", fence: fence)
    }

    /// Opens the directory at `place` again: below the root, through no
    /// link, and only if it is still the directory first opened there (a
    /// directory moved away and replaced by another fails).
    func open(_ place: LocalPlace) throws -> LocalDirectory {
        if place.relative == "." { return root }
        let directory: OpenDirectory
        do {
            directory = try OpenDirectory(place.relative, beneath: root.directory, path: place.path)
        } catch {
            throw CommandFailure(.failure, "cannot write into \(place.path): \(Self.reason(error))")
        }
        guard directory.status.device == place.device, directory.status.inode == place.inode else {
            throw CommandFailure(.failure, "cannot write into \(place.path): it was moved or replaced while files were written into it")
        }
        return LocalDirectory(directory, relative: place.relative, fence: root.fence)
    }

    /// Why a directory kept by its place could not be opened again.
    private static func reason(_ error: IOError) -> String {
        switch error.errno {
        case ELOOP, EXDEV: "it, or a directory on its way, is now a symbolic link (not followed below the destination)"
        case ENOENT: "it was moved or removed while files were written into it"
        default: String(cString: strerror(error.errno))
        }
    }
}

/// A directory below a ``LocalDestination``'s root, to open again later:
/// its path relative to the root, and which directory it was (device and
/// inode) when first opened.
struct LocalPlace: Equatable, Sendable {
    let relative: String
    /// The path errors give.
    let path: String
    let device: UInt64
    let inode: UInt64
}

/// A directory a fetch writes into, open (``OpenDirectory``), and where it
/// is below the destination's root.
final class LocalDirectory: @unchecked Sendable {
    let directory: OpenDirectory
    let place: LocalPlace
    /// The directories never written into, here or below.
    let fence: DirectoryFence

    init(_ directory: OpenDirectory, relative: String, fence: DirectoryFence) {
        self.directory = directory
        self.fence = fence
        place = LocalPlace(relative: relative, path: directory.path,
                           device: directory.status.device, inode: directory.status.inode)
    }

    var path: String { directory.path }

    func path(of name: String) -> String { directory.path(of: name) }

    /// Opens the directory `name` in this one, creating it first (`mode`,
    /// less the umask) if it is missing. A symbolic link there is in the
    /// way, whatever it leads to, as is anything else but a directory, and
    /// a directory on another file system than this one (a mount point, a
    /// btrfs subvolume) is not entered;
    /// one error line names it. With `new`, it must not exist yet; with
    /// `seen`, it must be the directory (device and inode) seen there
    /// earlier, if it is still there. `shownAs` is its path in errors, its
    /// own and those of everything below it (``path(of:)`` if nil): a
    /// directory built under a temporary name goes by the path the user
    /// will find it at, not by one that is gone once the fetch ends.
    func subdirectory(_ name: String, creating mode: UInt32 = 0o777, new: Bool = false, seen: FileStatus? = nil,
                      shownAs shown: String? = nil) throws -> LocalDirectory {
        let path = shown ?? path(of: name)
        let created: Bool
        do {
            created = try directory.makeDirectory(name, mode: mode)
        } catch {
            throw CommandFailure.cannot("create directory \(path)", error.errno)
        }
        guard created || !new else {
            throw CommandFailure.cannot("create directory \(path)", EEXIST)
        }
        let opened: OpenDirectory
        do {
            opened = try directory.subdirectory(name, path: path)
        } catch where error.errno == ELOOP {
            throw CommandFailure(.failure, "cannot write into \(path): it exists and is not a directory (a symbolic link, not followed below the destination)")
        } catch where error.errno == ENOTDIR {
            throw CommandFailure(.failure, "cannot write into \(path): it exists and is not a directory")
        } catch where error.errno == EXDEV {
            throw CommandFailure(.failure, "cannot write into \(path): it is on another file system than its parent (a mount point or a subvolume, not entered below the destination)",
                                 hint: "fetch into it as the destination itself")
        } catch {
            throw CommandFailure.cannot("write into \(path)", error.errno)
        }
        if let seen, !created, !opened.status.isSameFile(as: seen) {
            throw CommandFailure(.failure, "cannot write into \(path): it was moved or replaced while files were written into it")
        }
        try fence.check(opened.status, path: path)
        let relative = place.relative == "." ? name : place.relative + "/" + name
        return LocalDirectory(opened, relative: relative, fence: fence)
    }

    /// What is at `name` (a link is not followed); nil if nothing is.
    func status(of name: String) throws -> FileStatus? {
        do {
            return try directory.status(of: name)
        } catch {
            throw CommandFailure.cannot("write into \(path(of: name))", error.errno)
        }
    }

    /// Writes the file `name` atomically, as ``writeLocalFile(_:mode:_:)``
    /// does, in this directory.
    func writeFile(_ name: String, mode: UInt32 = 0o600, _ body: (NewLocalFile) throws -> Void) throws {
        try writeLocalFile(name, in: directory, path: path(of: name), mode: mode, body)
    }

    /// Writes the new file `name` in this directory, which is being built
    /// out of sight (``buildNewDirectory(_:mode:fence:_:)``): created at its name
    /// (`O_EXCL`), with no sync or rename of its own, since the whole tree
    /// is made durable by one sync and appears by one rename, or not at
    /// all. The file is removed if `body` throws.
    func writeFileOutOfSight(_ name: String, mode: UInt32 = 0o600, _ body: (NewLocalFile) throws -> Void) throws {
        let fd: Int32
        do {
            fd = try directory.createFile(name, mode: mode)
        } catch {
            throw CommandFailure.cannot("write \(path(of: name))", error.errno)
        }
        defer { Glibc.close(fd) }
        do {
            try body(NewLocalFile(fd: fd, name: name, directory: directory))
        } catch {
            try? directory.remove(name)
            throw error
        }
    }
}

/// The directories a fetch never writes into, whatever DEST holds: the
/// store and the device directory (``GlobalOptions/fence()``). Every
/// existing directory a fetch enters is opened from its parent through no
/// link and on the same file system, so none inside a fenced directory is
/// reached without entering the fenced one itself: checking each one
/// entered by device and inode keeps the whole subtree out.
struct DirectoryFence: Sendable {
    /// Each fenced directory by device and inode, with what errors call
    /// it ("the store /path").
    let fenced: [(device: UInt64, inode: UInt64, what: String)]

    /// Throws a usage error (exit 64) if `status` is a fenced directory;
    /// `path` is how the fetch names it.
    func check(_ status: FileStatus, path: String) throws {
        guard let what = fencedName(device: status.device, inode: status.inode) else { return }
        throw CommandFailure(.usage, "cannot write into \(path): it is \(what), and fetched plaintext must not be written there",
                             hint: "fetch into a directory that does not hold the store or the device directory")
    }

    /// What errors call the fenced directory that is this file (device
    /// and inode), if it is one.
    func fencedName(device: UInt64, inode: UInt64) -> String? {
        fenced.first(where: { $0.device == device && $0.inode == inode })?.what
    }
}

/// Renames the directory `name` in `from`, built out of sight, to `target`
/// in `to`, never over anything there; one error line naming `path` (the
/// target's) otherwise.
func publishBuiltDirectory(_ name: String, from: OpenDirectory, to target: String, in to: OpenDirectory, path: String) throws {
    let renamed: Bool
    do {
        renamed = try from.renameIfAbsent(name, to: target, in: to)
    } catch {
        throw CommandFailure.cannot("write \(path)", error.errno)
    }
    guard renamed else {
        throw CommandFailure(.failure, "cannot write \(path): something else was created there while it was being built")
    }
}

/// Builds the new local directory `path` out of sight: `build` fills a
/// temporary directory made beside it (`.locker-….tmp`), which is then
/// made durable with one sync of its file system and renamed to `path`,
/// never over anything there. `path` appears whole or not at all: if
/// `build` or a later step throws, or a signal ends the process, the
/// temporary directory is removed (a crash can leave it). Missing parents
/// are made first; they and the new directory get `mode`, less the umask.
///
/// `build` is given the destination (the parent, opened once) and the
/// directory to fill, which errors name as `path`, as they do everything
/// below it. Returns what `build` returns.
func buildNewDirectory<Built>(_ path: String, mode: UInt32 = 0o777, fence: DirectoryFence,
                              _ build: (LocalDestination, LocalDirectory) throws -> Built) throws -> Built {
    let (trimmed, parent, name) = LocalPath.split(path)
    guard !name.isEmpty && name != "." && name != ".." else {
        throw CommandFailure(.failure, "cannot create directory \(path): the name of a new directory cannot be \(name)")
    }
    try makeLocalDirectory(parent, mode: mode)
    let destination = try LocalDestination(parent, fence: fence)
    let base = destination.root
    let stagingName = ".locker-" + UUID().uuidString + ".tmp"
    // Removed by the signal handling too, should the process have to end
    // before this function does; until the rename, after which the tree
    // is `path`.
    let (staging, registration) = try Interruption.creatingTemporary({
        try base.subdirectory(stagingName, creating: mode, new: true, shownAs: trimmed)
    }, cleanup: { staging in
        let (built, into) = (staging.directory, base.directory)
        return { removeBuiltDirectory(built, named: stagingName, in: into) }
    })
    defer { Interruption.unregisterCleanup(registration) }
    do {
        let built = try build(destination, staging)
        do {
            try staging.directory.syncFileSystem()
        } catch {
            throw CommandFailure(.failure, "cannot write into \(parent): \(error)")
        }
        try Interruption.finishingTemporary(registration) {
            try publishBuiltDirectory(stagingName, from: base.directory, to: name, in: base.directory, path: trimmed)
        }
        // What was renamed is what was at the temporary name: the tree
        // built, unless that was moved away and something else put there
        // meanwhile.
        guard let placed = try? base.directory.status(of: name), placed.isSameFile(as: staging.directory.status) else {
            // Put back what was renamed: `path` is left as it was.
            _ = try? base.directory.renameIfAbsent(name, to: stagingName, in: base.directory)
            throw CommandFailure(.failure, "cannot write \(trimmed): the directory it was built in was moved or replaced while it was being built")
        }
        // The files are durable already; this makes the name durable (best
        // effort, as after a group commit); a drop box through the tree
        // built.
        try? base.directory.sync(through: staging.directory.fd)
        return built
    } catch {
        removeBuiltDirectory(staging.directory, named: stagingName, in: base.directory)
        throw error
    }
}

/// Removes `built`, the directory this fetch made as `name` in `parent`
/// (best effort): emptied through its own descriptor, wherever it is now,
/// unless `isEmpty`, and its name removed only while it still holds it, so
/// that a directory renamed there meanwhile is left alone, contents and all.
func removeBuiltDirectory(_ built: OpenDirectory, named name: String, in parent: OpenDirectory, isEmpty: Bool = false) {
    // A few times: on a second signal the process ends without waiting
    // for the fetch's writer threads, which may create a file in it after
    // its contents went and before it is removed.
    for attempt in 0..<50 {
        if !isEmpty { try? built.removeContents() }
        guard let there = try? parent.status(of: name), there.isSameFile(as: built.status) else { return }
        if (try? parent.removeDirectory(name)) != nil { return }
        if attempt > 0 { usleep(5_000) }
    }
}

/// A file being written by ``writeLocalFile(_:mode:_:)``.
struct NewLocalFile {
    let fd: Int32
    /// Its temporary name, in `directory`.
    let name: String
    let directory: OpenDirectory

    /// An ``OutputFile`` for writing `size` bytes into it at offsets.
    func output(size: UInt64) -> OutputFile {
        OutputFile(fd: fd, name: name, in: directory, size: size)
    }
}

/// Writes the local file `path` atomically: a temporary file beside it,
/// fsync, rename, fsync of the directory. The directory is opened once
/// (following a link on the way, as the user's own path), and the file
/// is created and renamed relative to it. `body` writes into the file.
/// Nothing is left if `body` throws.
func writeLocalFile(_ path: String, mode: UInt32 = 0o600, _ body: (NewLocalFile) throws -> Void) throws {
    let (_, parent, name) = LocalPath.split(path)
    guard !path.hasSuffix("/"), !name.isEmpty, name != ".", name != ".." else {
        throw CommandFailure.cannot("write \(path)", EISDIR)
    }
    let directory: OpenDirectory
    do {
        directory = try OpenDirectory(parent)
    } catch {
        throw CommandFailure.cannot("write \(path)", error.errno)
    }
    try writeLocalFile(name, in: directory, path: path, mode: mode, body)
}

private func writeLocalFile(_ name: String, in directory: OpenDirectory, path: String, mode: UInt32,
                            _ body: (NewLocalFile) throws -> Void) throws {
    func failure(_ error: IOError) -> CommandFailure {
        CommandFailure.cannot("write \(path)", error.errno)
    }
    let temporary = ".locker-" + UUID().uuidString + ".tmp"
    // Removed by the signal handling too, should the process have to end
    // before this function does.
    let (fd, registration): (Int32, Int)
    do throws(IOError) {
        (fd, registration) = try Interruption.creatingTemporary(temporary, in: directory.fd) { () throws(IOError) -> Int32 in
            try directory.createFile(temporary, mode: mode)
        }
    } catch {
        throw failure(error)
    }
    defer { Glibc.close(fd) }
    defer { Interruption.unregisterCleanup(registration) }
    do {
        try body(NewLocalFile(fd: fd, name: temporary, directory: directory))
        guard fsync(fd) == 0 else { throw CommandFailure.cannot("write \(path)", errno) }
        do {
            try directory.rename(temporary, to: name)
        } catch {
            throw failure(error)
        }
    } catch {
        try? directory.remove(temporary)
        throw error
    }
    // The rename made durable; a drop box through the file. The file is
    // whole either way, but a fetch that cannot say it will survive a
    // crash does not report success.
    do {
        try directory.sync(through: fd)
    } catch {
        throw CommandFailure.cannot("make \(path) durable (it was written, but a crash may lose it)", error.errno)
    }
}
