#if canImport(Glibc)
internal import Glibc
#endif
internal import CLockerSupport

/// The one place Locker's store and device files meet the kernel.
///
/// Each operation steps down to one internal function per system call,
/// which alone calls ``Syscalls``, retries on EINTR, and throws ``IOError``
/// with the errno. Writes that replace a file are atomic: temporary file in
/// the same directory, write, fsync, rename, fsync of the directory.
public struct FileSystem: Sendable {
    /// The calls this file system makes; ``Syscalls/system`` unless a test
    /// gives another table.
    public let syscalls: Syscalls

    public init(syscalls: Syscalls = .system) {
        self.syscalls = syscalls
    }

    /// Reads a whole file of at most `limit` bytes.
    public func readFile(_ path: String, limit: Int = 1 << 20) throws -> [UInt8] {
        let (fd, status) = try openRegularFile(path)
        defer { close(fd) }
        // Sized by the file (one byte more, to see the end in the same
        // read), not the limit: headers are read with a 64 KiB limit and
        // are mostly a few hundred bytes. The file may still grow or
        // shrink while it is read; the limit holds either way.
        let expected = Int(min(UInt64(limit), status.size))
        var out = [UInt8](repeating: 0, count: expected + 1)
        var count = 0
        while true {
            if count == out.count {
                guard count <= limit else { throw IOError("read", path: path, errno: EFBIG) }
                out.append(contentsOf: repeatElement(0, count: min(64 << 10, limit + 1 - count)))
            }
            let done = count
            let n = try out.withUnsafeMutableBytes { try read(fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[done...]), path: path) }
            if n == 0 { break }
            count += n
            guard count <= limit else { throw IOError("read", path: path, errno: EFBIG) }
            // A regular file reads short only at its end; every file read
            // here is replaced whole, never appended to, so no second read
            // is needed to see the end.
            if count < out.count && count == expected { break }
        }
        out.removeLast(out.count - count)
        return out
    }

    /// A new name for a temporary that replaces `path`, beside it:
    /// `PATH.tmp-PID-RANDOM`.
    public static func temporaryPath(beside path: String) -> String {
        path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// Replaces `path` with `bytes` atomically and durably, with `mode`.
    ///
    /// A throw before the rename leaves `path` as it was and removes the
    /// temporary file. A failed fsync of the directory after the rename
    /// throws too, but the new content is then in place (and may not
    /// survive a crash); with `syncDirectory` false the caller syncs the
    /// directory itself, so that a throw from here always means nothing
    /// changed.
    ///
    /// The temporary is told to `temporaries` (created and registered as
    /// one step, renamed and unregistered as one step), and the rename
    /// finishes the temporary `data` too, in the same step: the store
    /// passes an object's data file with its header, whose cleanup must
    /// never run once the header refers to it. Not to be given
    /// `temporaries` inside a hold on them (a temporary directory being
    /// built): the hold is not taken twice.
    public func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: UInt32 = 0o600,
                                    syncDirectory sync: Bool = true,
                                    temporaries: any TemporaryCleanups = NoTemporaryCleanups(),
                                    finishing data: Int? = nil) throws {
        let temporary = Self.temporaryPath(beside: path)
        let (fd, token) = try temporaries.creatingTemporary({ () throws(IOError) in
            try open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        }, cleanup: { _ in { [self] in try? unlink(temporary) } })
        do {
            // Held until the rename is done (the descriptor closes after
            // it): a verifier removes only temporaries no live process
            // holds, and one unlocked before its rename could go first.
            defer { close(fd) }
            try? flock(fd, LOCK_EX, path: temporary)
            try bytes.withUnsafeBytes { try writeAll(fd, $0, path: temporary) }
            try fsync(fd, path: temporary)
            try temporaries.finishingTemporaries([token, data]) { () throws(IOError) in try rename(temporary, to: path) }
        } catch {
            temporaries.finishingTemporaries([token]) { try? unlink(temporary) }
            throw error
        }
        if sync { try syncDirectory(Self.directory(of: path)) }
    }

    /// Overwrites a file's bytes with zeros in place, syncs, then removes
    /// it. Used for the effaceable key and the device's temporaries; on
    /// flash and journaling file systems the overwrite is best effort, so
    /// the key's secrecy must not rest on it alone. Only the first
    /// ``shredLimit`` bytes are overwritten: no device file is larger, and
    /// a planted file may claim any size (a sparse one, terabytes).
    /// With `evenIfLinked`, a regular file with other names (hard links)
    /// is zeroed too: for the effaceable key, whose every copy sharing the
    /// file must go; a temporary's name may have been planted as a hard
    /// link to another file, and is then only removed.
    public func shred(_ path: String, evenIfLinked: Bool = false) throws {
        // Never through a symbolic link, and never into anything but a
        // regular file: the name may have been planted to make this zero
        // another file, or to block on a FIFO. Such a name is only removed.
        let opened: Result<Int32, IOError> = Result { () throws(IOError) in
            try open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        }
        if case .failure(let error) = opened, error.errno == ELOOP || error.errno == ENXIO {
            try remove(path)
            return
        }
        let fd = try opened.get()
        let status = try? fstat(fd, path: path)
        guard let status, status.isRegularFile, evenIfLinked || status.linkCount == 1 else {
            close(fd)
            try remove(path)
            return
        }
        let zeros = [UInt8](repeating: 0, count: Int(min(status.size, UInt64(Self.shredLimit))))
        try? zeros.withUnsafeBytes { try writeAll(fd, $0, path: path) }
        try? fsync(fd, path: path)
        close(fd)
        try remove(path)
    }

    /// The most of a file ``shred(_:)`` overwrites: the most any device
    /// file is read up to.
    public static let shredLimit = 64 << 10

    /// Removes a file and, unless `syncDirectory` is false, syncs its
    /// directory. A missing file is not an error.
    public func remove(_ path: String, syncDirectory sync: Bool = true) throws {
        do {
            try unlink(path)
        } catch {
            if error.errno == ENOENT { return }
            throw error
        }
        if sync { try syncDirectory(Self.directory(of: path)) }
    }

    /// Removes a file, or a directory and everything in it, without
    /// syncing anything. What is missing is not an error.
    public func removeTree(_ path: String) throws {
        if try status(path)?.isDirectory == true {
            for name in try contentsOfDirectory(path) { try removeTree(path + "/" + name) }
            do {
                try removeDirectory(path)
            } catch {
                if error.errno != ENOENT { throw error }
            }
        } else {
            try remove(path, syncDirectory: false)
        }
    }

    /// The names in a directory, without `.` and `..`.
    /// Like every read here, listing leaves the directory's access time
    /// alone where the kernel allows (see ``openDirectoryForReading(_:)``).
    public func contentsOfDirectory(_ path: String) throws -> [String] {
        try entriesOfDirectory(path).map(\.name)
    }

    /// The entries of a directory, without `.` and `..`, each with what
    /// the listing says it is, as ``contentsOfDirectory(_:)`` lists them.
    public func entriesOfDirectory(_ path: String) throws -> [DirectoryEntry] {
        let fd = try openDirectoryForReading(path)
        defer { close(fd) }
        return try retrying("readdir", path) { syscalls.listDirectory(fd) }.filter { $0.name != "." && $0.name != ".." }
    }

    /// Whether something exists at `path`. Any failure to look counts as
    /// "no"; use ``status(_:)`` where that matters.
    public func exists(_ path: String) -> Bool {
        (try? lstat(path)) != nil
    }

    /// What is at `path` (not following a symbolic link), or `nil` if
    /// nothing is. Throws for any other failure to look.
    public func status(_ path: String) throws(IOError) -> FileStatus? {
        do {
            return try lstat(path)
        } catch {
            if error.errno == ENOENT || error.errno == ENOTDIR { return nil }
            throw error
        }
    }

    /// What the open descriptor `fd` refers to; `path` names it in errors.
    public func status(of fd: Int32, path: String) throws(IOError) -> FileStatus {
        try fstat(fd, path: path)
    }

    /// Creates `path` and any missing parents with `mode`. An existing
    /// directory is not an error.
    /// With `durable`, each directory it makes is synced into its parent
    /// (a crash cannot lose a directory that already holds synced files);
    /// without, a later sync of the file system must cover it.
    public func createDirectory(_ path: String, mode: UInt32 = 0o700, durable: Bool = false) throws {
        if exists(path) { return }
        let parent = Self.directory(of: path)
        if parent != path, !exists(parent) { try createDirectory(parent, mode: mode, durable: durable) }
        do {
            try mkdir(path, mode: mode)
        } catch {
            if error.errno == EEXIST { return }
            throw error
        }
        // mkdir's mode went through the umask.
        try? chmod(path, mode: mode)
        if durable { try syncDirectory(parent) }
    }

    /// The permission bits and owner of `path`.
    public func ownerAndMode(_ path: String) throws -> (uid: UInt32, mode: UInt32) {
        let st = try lstat(path, operation: "stat")
        return (st.uid, st.mode & 0o7777)
    }

    /// Sets the permission bits of `path`.
    public func setMode(_ path: String, _ mode: UInt32) throws {
        try chmod(path, mode: mode)
    }

    /// Creates `path` (which must not exist) with `bytes`, without any
    /// sync: for a batch whose durability comes from one
    /// ``syncFileSystem(containing:)``. A throw removes what was created.
    public func writeNewFile(_ path: String, _ bytes: [UInt8], mode: UInt32 = 0o600) throws {
        let fd = try open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        defer { close(fd) }
        do {
            try bytes.withUnsafeBytes { try writeAll(fd, $0, path: path) }
        } catch {
            try? unlink(path)
            throw error
        }
    }

    /// Makes everything written to the file system that holds `path`
    /// durable (syncfs(2)): file data, metadata and directory entries,
    /// with one journal commit however many files changed.
    public func syncFileSystem(containing path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd) }
        _ = try retrying("syncfs", path) { Int(syscalls.syncfs(fd)) }
    }

    /// fsyncs a directory, so that a rename or unlink in it is durable.
    public func syncDirectory(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd) }
        try fsync(fd, path: path)
    }

    // MARK: Syscall steps
    //
    // One function per call. Each retries on EINTR and throws IOError; none
    // syncs anything.

    /// Renames `source` to `destination` (replacing it), without syncing
    /// either directory.
    public func rename(_ source: String, to destination: String) throws(IOError) {
        _ = try retrying("rename", destination) { Int(syscalls.rename(source, destination)) }
    }

    /// Renames `source` to `destination` if nothing is there, without
    /// syncing either directory; returns false, changing nothing, if
    /// something is. Where the file system cannot rename without replacing
    /// (EINVAL, or ENOSYS from an old kernel), it looks first: atomic only
    /// if the caller keeps other writers out of the directory.
    public func renameIfAbsent(_ source: String, to destination: String) throws(IOError) -> Bool {
        do {
            _ = try retrying("rename", destination) { Int(syscalls.renameNoReplace(source, destination)) }
            return true
        } catch where error.errno == EEXIST {
            return false
        } catch where error.errno == EINVAL || error.errno == ENOSYS {
            if try status(destination) != nil { return false }
            try rename(source, to: destination)
            return true
        }
    }

    /// Removes an empty directory, without syncing its parent.
    public func removeDirectory(_ path: String) throws(IOError) {
        _ = try retrying("rmdir", path) { Int(syscalls.rmdir(path)) }
    }

    func open(_ path: String, _ flags: Int32, _ mode: UInt32 = 0) throws(IOError) -> Int32 {
        Int32(try retrying("open", path) { Int(syscalls.open(path, flags, mode)) })
    }

    /// Opens `path` read-only without touching its access time, and
    /// returns the descriptor: a read then dirties no inode (with
    /// relatime, the first read after a write would, one journal update
    /// per file), and the disk keeps no record of which objects were read
    /// when. Where the flag is refused (a file the caller does not own),
    /// opens without it.
    public func openForReading(_ path: String) throws(IOError) -> Int32 {
        try openForReading(path, extraFlags: 0)
    }

    /// Opens a file of the store or the device for reading, as
    /// ``openForReading(_:)`` does, but only a regular file: a link in
    /// the last component is not followed (ELOOP), and a FIFO planted
    /// where a header was is not waited on (the open does not block), nor
    /// is anything else read (a socket, a device): each throws an error whose
    /// ``IOError/isNotRegularFile`` is true. The descriptor is left
    /// `O_NONBLOCK`, which changes nothing for a regular file.
    public func openRegularFileForReading(_ path: String) throws(IOError) -> Int32 {
        try openRegularFile(path).fd
    }

    /// ``openRegularFileForReading(_:)``, with the status it looked at.
    // O_NONBLOCK is not cleared: reads of a regular file never wait for a
    // writer, and clearing it cost two fcntl calls per header read.
    func openRegularFile(_ path: String) throws(IOError) -> (fd: Int32, status: FileStatus) {
        let fd: Int32
        do {
            // O_NOCTTY: a terminal planted there must not become this
            // process's controlling terminal by being opened.
            fd = try openForReading(path, extraFlags: O_NONBLOCK | O_NOFOLLOW | O_NOCTTY)
        } catch where error.errno == ENXIO || error.errno == ENODEV {
            // A socket cannot be opened (ENXIO), nor a device with no
            // driver behind it (ENXIO, ENODEV): neither is a regular file,
            // which is what the caller must hear, not an I/O error.
            throw IOError.notRegularFile(path)
        }
        let status: FileStatus
        do {
            status = try fstat(fd, path: path)
        } catch {
            close(fd)
            throw error
        }
        guard status.isRegularFile else {
            close(fd)
            throw IOError.notRegularFile(path)
        }
        return (fd, status)
    }

    /// Opens `relative` for reading below the directory open as `root`
    /// (`root` itself for `"."`), as ``openForReading(_:)`` opens a path,
    /// but following no symbolic link anywhere in `relative` (ELOOP), never
    /// reaching outside `root` (EXDEV), and without waiting for a writer if
    /// it is a FIFO (`O_NONBLOCK`, which changes nothing for a regular
    /// file): for a file or directory a walk of the tree below `root`
    /// found, when it or anything on its way may have been replaced since.
    /// The caller checks what it opened. `directory`: it must be one
    /// (ENOTDIR). `name` is the path errors give.
    public func openBeneath(_ root: Int32, _ relative: String, directory: Bool = false, name: String) throws(IOError) -> Int32 {
        let flags = O_RDONLY | O_NONBLOCK | (directory ? O_DIRECTORY : 0)
        do {
            return try openBeneath(root, relative, flags | Self.noAccessTime, name: name)
        } catch where error.errno == EPERM {
            return try openBeneath(root, relative, flags, name: name)
        }
    }

    private func openBeneath(_ root: Int32, _ relative: String, _ flags: Int32, name: String) throws(IOError) -> Int32 {
        Int32(try retrying("open", name) { Int(syscalls.openBeneath(root, relative, flags)) })
    }

    /// Opens the directory `path` for listing, as ``openForReading(_:)``
    /// opens a file, and returns the descriptor (ENOTDIR if it is not a
    /// directory): listing it dirties no inode, and the disk keeps no
    /// record of which directories were listed when.
    public func openDirectoryForReading(_ path: String) throws(IOError) -> Int32 {
        try openForReading(path, extraFlags: O_DIRECTORY)
    }

    private func openForReading(_ path: String, extraFlags: Int32) throws(IOError) -> Int32 {
        do {
            return try open(path, O_RDONLY | O_CLOEXEC | extraFlags | Self.noAccessTime)
        } catch where error.errno == EPERM {
            return try open(path, O_RDONLY | O_CLOEXEC | extraFlags)
        }
    }

    static let noAccessTime = locker_o_noatime()

    /// Opens the file `fd` is open on a second time, by its name `path`,
    /// for writes that go from memory to the disk past the page cache
    /// (`O_DIRECT`), and returns the descriptor; nil where the file system
    /// refuses, and nil if `path` is a symbolic link or no longer names
    /// that file (someone who can write to its directory replaced it
    /// between the two opens: the writes would go to their file). A write
    /// through it must be of whole ``directAlignment`` blocks, at an
    /// offset and from memory aligned to it; a file system that needs
    /// more fails it with EINVAL.
    func openForDirectWriting(_ path: String, sameFileAs fd: Int32) -> Int32? {
        guard let direct = try? open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | Self.direct) else { return nil }
        return keepIfSameFile(direct, as: fd, path: path)
    }

    /// ``openForDirectWriting(_:sameFileAs:)`` for the file `name` in the
    /// directory open as `directory`; a link there is not followed. `path`
    /// is the path errors give.
    func openForDirectWriting(_ name: String, in directory: Int32, sameFileAs fd: Int32, path: String) -> Int32? {
        guard let direct = try? openBeneath(directory, name, O_WRONLY | Self.direct, name: path) else { return nil }
        return keepIfSameFile(direct, as: fd, path: path)
    }

    /// Opens the file `fd` is open on a second time, by its name `path`,
    /// for reads that go from the disk to memory past the page cache
    /// (`O_DIRECT`), without touching its access time where the kernel
    /// allows; nil where the file system refuses, and nil if `path` is a
    /// symbolic link or no longer names that file. The alignment rules of
    /// ``openForDirectWriting(_:sameFileAs:)`` hold.
    func openForDirectReading(_ path: String, sameFileAs fd: Int32) -> Int32? {
        guard let direct = try? openForReading(path, extraFlags: Self.direct | O_NOFOLLOW) else { return nil }
        return keepIfSameFile(direct, as: fd, path: path)
    }

    /// `candidate` if it is open on the same file as `fd`; else closes it
    /// and returns nil.
    private func keepIfSameFile(_ candidate: Int32, as fd: Int32, path: String) -> Int32? {
        if let a = try? fstat(candidate, path: path), let b = try? fstat(fd, path: path), a.isSameFile(as: b) {
            return candidate
        }
        close(candidate)
        return nil
    }

    /// The kernel's page size: the unit `cachestat` counts in.
    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// The alignment of reads and writes past the page cache: 4 KiB, which
    /// every block size up to it divides (a file system that needs more
    /// refuses with EINVAL, and the I/O goes through the page cache).
    public static let directAlignment = 4096

    static let direct = locker_o_direct()

    /// Never retried: after close returns, even with EINTR or EIO, the
    /// descriptor is gone and may already name another file.
    func close(_ fd: Int32) {
        _ = syscalls.close(fd)
    }

    func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(IOError) -> Int {
        try retrying("read", path) { syscalls.read(fd, buffer) }
    }

    func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String) throws(IOError) -> Int {
        try retrying("read", path) { syscalls.pread(fd, buffer, offset) }
    }

    func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(IOError) -> Int {
        try retrying("write", path) { syscalls.write(fd, bytes) }
    }

    /// Writes all of `bytes` at `offset`, continuing after short writes.
    func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: UInt64, path: String) throws(IOError) {
        var done = 0
        while done < bytes.count {
            let n = try pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes[done...]), at: offset + UInt64(done), path: path)
            guard n > 0 else { throw IOError("write", path: path, errno: EIO) }
            done += n
        }
    }

    func pwrite(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: UInt64, path: String) throws(IOError) -> Int {
        try retrying("write", path) { syscalls.pwrite(fd, bytes, Int64(offset)) }
    }

    /// Writes all of `bytes`, continuing after short writes and EINTR.
    /// `path` names `fd` in the error.
    public func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(IOError) {
        var offset = 0
        while offset < bytes.count {
            let n = try write(fd, UnsafeRawBufferPointer(rebasing: bytes[offset...]), path: path)
            guard n > 0 else { throw IOError("write", path: path, errno: EIO) }
            offset += n
        }
    }

    func fsync(_ fd: Int32, path: String) throws(IOError) {
        _ = try retrying("fsync", path) { Int(syscalls.fsync(fd)) }
    }

    func flock(_ fd: Int32, _ operation: Int32, path: String) throws(IOError) {
        _ = try retrying("flock", path) { Int(syscalls.flock(fd, operation)) }
    }

    func fstat(_ fd: Int32, path: String) throws(IOError) -> FileStatus {
        try retrying("fstat", path) { syscalls.fstat(fd) }
    }

    func lstat(_ path: String, operation: String = "lstat") throws(IOError) -> FileStatus {
        try retrying(operation, path) { syscalls.lstat(path) }
    }

    func unlink(_ path: String) throws(IOError) {
        _ = try retrying("unlink", path) { Int(syscalls.unlink(path)) }
    }

    func mkdir(_ path: String, mode: UInt32) throws(IOError) {
        _ = try retrying("mkdir", path) { Int(syscalls.mkdir(path, mode)) }
    }

    func chmod(_ path: String, mode: UInt32) throws(IOError) {
        _ = try retrying("chmod", path) { Int(syscalls.chmod(path, mode)) }
    }

    /// Runs a call, retrying while it fails with EINTR.
    func retrying(_ operation: String, _ path: String, _ call: () -> Int) throws(IOError) -> Int {
        while true {
            let result = call()
            if result >= 0 { return result }
            let e = errno
            if e == EINTR { continue }
            throw IOError(operation, path: path, errno: e)
        }
    }

    /// Runs a call that returns `nil` on failure, retrying while it fails
    /// with EINTR.
    func retrying<T>(_ operation: String, _ path: String, _ call: () -> T?) throws(IOError) -> T {
        while true {
            if let result = call() { return result }
            let e = errno
            if e == EINTR { continue }
            throw IOError(operation, path: path, errno: e)
        }
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let dir = String(path[..<slash])
        return dir.isEmpty ? "/" : dir
    }
}
