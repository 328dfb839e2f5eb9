#if canImport(Glibc)
internal import Glibc
#endif

/// An open file for streaming an object's data: written once, front to
/// back, or read at offsets. Closes itself on deinit.
public final class DataFile {
    public let path: String
    private let fileSystem: FileSystem
    private var fd: Int32
    /// For reads past the page cache.
    private let direct: DirectDescriptor

    private init(path: String, fileSystem: FileSystem, fd: Int32, directFD: Int32? = nil) {
        self.path = path
        self.fileSystem = fileSystem
        self.fd = fd
        direct = DirectDescriptor(directFD, fileSystem: fileSystem)
    }

    deinit { close() }

    /// Creates a new file that must not exist yet, mode 0600.
    public static func create(_ path: String, fileSystem: FileSystem) throws -> DataFile {
        let fd = try fileSystem.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        return DataFile(path: path, fileSystem: fileSystem, fd: fd)
    }

    /// Takes an exclusive `flock` on the file for as long as it is open, to
    /// tell ``isInUse(_:fileSystem:)`` that a live process is still writing
    /// it.
    public func holdWriteLock() throws {
        try fileSystem.flock(fd, LOCK_EX, path: path)
    }

    /// Creates a new file, as ``create(_:fileSystem:)``, and takes its
    /// write lock. A verifier can find the file between the two unlocked,
    /// and so garbage; it removes it only while it holds the lock
    /// (``removeIfUnused(_:fileSystem:)``), so a file still at `path` once
    /// the lock is ours stays ours. One that was removed is made again.
    public static func createLocked(_ path: String, fileSystem: FileSystem) throws -> DataFile {
        for _ in 0..<3 {
            let file = try create(path, fileSystem: fileSystem)
            do {
                try file.holdWriteLock()
                let opened = try fileSystem.status(of: file.fd, path: path)
                if let there = try fileSystem.status(path), there.device == opened.device, there.inode == opened.inode {
                    return file
                }
            } catch {
                // Ours, by its random name, unless a verifier took it:
                // then there is nothing to remove.
                file.close()
                try? fileSystem.remove(path, syncDirectory: false)
                throw error
            }
            file.close()
        }
        throw IOError("create (removed while it was made)", path: path, errno: EAGAIN)
    }

    /// Removes the file at `path` unless a live process holds its write
    /// lock, holding the lock itself while it unlinks: a writer that takes
    /// the lock after that finds the file gone (see
    /// ``createLocked(_:fileSystem:)``). Returns false, and leaves the
    /// file, if it is in use. A missing file is not an error; a symbolic
    /// link or a directory found there, which no writer makes, is removed
    /// as it is (the link, or the directory with what it holds).
    public static func removeIfUnused(_ path: String, fileSystem: FileSystem) throws -> Bool {
        let fd: Int32
        do {
            fd = try fileSystem.open(path, unusedCheckFlags)
        } catch {
            if error.errno == ENOENT { return true }
            // A symbolic link, a socket, or a device with no driver behind
            // it: nothing a writer makes or locks.
            if error.errno == ELOOP || error.errno == ENXIO || error.errno == ENODEV {
                try fileSystem.remove(path, syncDirectory: false)
                return true
            }
            throw error
        }
        defer { fileSystem.close(fd) }
        do {
            try fileSystem.flock(fd, LOCK_EX | LOCK_NB, path: path)
        } catch {
            if error.errno == EWOULDBLOCK { return false }
            throw error
        }
        if try fileSystem.status(of: fd, path: path).isDirectory {
            try fileSystem.removeTree(path)
        } else {
            try fileSystem.remove(path, syncDirectory: false)
        }
        return true
    }

    /// How the two checks above open a name that may have been planted:
    /// through no symbolic link, without waiting for a writer if it is a
    /// FIFO, and without a terminal becoming this process's.
    private static let unusedCheckFlags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY

    /// Whether a live process holds the write lock of the file at `path`.
    /// A file left by a process that died is not in use.
    public static func isInUse(_ path: String, fileSystem: FileSystem) -> Bool {
        guard let fd = try? fileSystem.open(path, unusedCheckFlags) else { return false }
        defer { fileSystem.close(fd) }
        // Only a file or a directory is ever locked by a writer; anything
        // else found under such a name was planted.
        guard let status = try? fileSystem.status(of: fd, path: path), status.isRegularFile || status.isDirectory else {
            return false
        }
        do {
            try fileSystem.flock(fd, LOCK_EX | LOCK_NB, path: path)
        } catch {
            return error.errno == EWOULDBLOCK
        }
        try? fileSystem.flock(fd, LOCK_UN, path: path)
        return false
    }

    /// Opens an existing file for reading. With `large`, if the kernel
    /// says (cachestat) that at most an eighth of the file is in the page
    /// cache, the reads of ``read(_:at:in:)`` go from the disk to memory
    /// past it (`O_DIRECT`), where the file system takes that: reading a
    /// large file through the page cache costs a new page for every 4 KiB
    /// where new memory is slow, and a file written past the page cache
    /// (a large object's data file) is not in it. A file that is, or a
    /// kernel that cannot tell, is read through the page cache.
    public static func openForReading(_ path: String, fileSystem: FileSystem, large: Bool = false) throws -> DataFile {
        let (fd, status) = try fileSystem.openRegularFile(path)
        var directFD: Int32?
        if large, let cached = fileSystem.syscalls.cachedPages(fd) {
            let page = UInt64(FileSystem.pageSize)
            let pages = (status.size + page - 1) / page
            if cached <= pages / 8 { directFD = fileSystem.openForDirectReading(path, sameFileAs: fd) }
        }
        return DataFile(path: path, fileSystem: fileSystem, fd: fd, directFD: directFD)
    }

    /// Whether reads go past the page cache (see
    /// ``openForReading(_:fileSystem:large:)``).
    public var readsPastThePageCache: Bool { direct.isUsable }

    /// The room ``read(_:at:in:)`` needs beyond the bytes it reads: the
    /// rest of the page before them and of the page after.
    public static let readSlack = 2 * FileSystem.directAlignment

    /// Reads exactly `count` bytes at `offset` into `buffer`, which is
    /// page-aligned and has room for `count + readSlack` bytes, and
    /// returns where they are in it: at its start through the page cache,
    /// or a little after it past the page cache (whole pages are read). A
    /// file that ends first is ``IOError`` with ENODATA.
    public func read(_ count: Int, at offset: UInt64, in buffer: UnsafeMutableRawBufferPointer) throws -> UnsafeMutableRawBufferPointer {
        let alignment = FileSystem.directAlignment
        if count > 0, direct.isUsable, Int(bitPattern: buffer.baseAddress) % alignment == 0 {
            let start = offset - offset % UInt64(alignment)
            let skip = Int(offset - start)
            let end = skip + count
            let length = (end + alignment - 1) / alignment * alignment
            precondition(length <= buffer.count, "read buffer without room for alignment")
            let read = try direct.attempt { fd throws(IOError) in
                var done = 0
                while done < end {
                    let n = try fileSystem.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<length]),
                                                 at: Int64(start) + Int64(done), path: path)
                    if n == 0 { throw IOError("read", path: path, errno: ENODATA) }
                    done += n
                    // A read that stops inside a page (the file's end, or a
                    // file system that splits direct reads into smaller
                    // blocks) cannot go on directly from there: the rest,
                    // if any, comes through the page cache.
                    if done % alignment != 0 && done < end {
                        try self.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<end]),
                                      at: start + UInt64(done))
                        done = end
                    }
                }
                return UnsafeMutableRawBufferPointer(rebasing: buffer[skip..<end])
            }
            if let read { return read }
        }
        let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[..<count])
        try read(into: bytes, at: offset)
        return bytes
    }

    /// Appends all of `bytes`.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        try fileSystem.writeAll(fd, bytes, path: path)
    }

    /// An ``OutputFile`` on this file, for writes at offsets whose whole
    /// pages go past the page cache. Writes through it do not move the
    /// offset ``write(_:)`` appends at, so a file is written one way or
    /// the other.
    public func writingPastThePageCache() -> OutputFile {
        OutputFile(fd: fd, path: path, size: .max, fileSystem: fileSystem)
    }

    /// Reads exactly `buffer.count` bytes at `offset`. A file that ends
    /// first is ``IOError`` with ENODATA.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws(IOError) {
        var done = 0
        while done < buffer.count {
            let n = try fileSystem.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]),
                                         at: Int64(offset) + Int64(done), path: path)
            if n == 0 { throw IOError("read", path: path, errno: ENODATA) }
            done += n
        }
    }

    /// The file's size.
    public func size() throws -> UInt64 {
        try fileSystem.fstat(fd, path: path).size
    }

    /// Makes the written bytes durable.
    public func sync() throws {
        try fileSystem.fsync(fd, path: path)
    }

    /// Closes the file now.
    public func close() {
        if fd >= 0 { fileSystem.close(fd) }
        fd = -1
        direct.close()
    }
}

/// A `flock`, held until deinit (or until the process ends).
public final class FileLock {
    private let fileSystem: FileSystem
    private let path: String
    private let fd: Int32

    private init(path: String, flags: Int32, operation: Int32, fileSystem: FileSystem) throws {
        // Not a stored property until locked: a throw after full
        // initialization would run deinit, which closes it again.
        let fd = try fileSystem.open(path, flags, 0o600)
        do {
            try fileSystem.flock(fd, operation, path: path)
        } catch {
            fileSystem.close(fd)
            throw error
        }
        self.fileSystem = fileSystem
        self.path = path
        self.fd = fd
    }

    deinit {
        try? fileSystem.flock(fd, LOCK_UN, path: path)
        fileSystem.close(fd)
    }

    /// The store-wide lock, held while the namespace changes, on the file
    /// at `path` (created if missing). Blocks until held. Like every lock
    /// here, never taken through a symbolic link at `path` (ELOOP): a
    /// planted link would have it create a file wherever it leads.
    public static func store(path: String, fileSystem: FileSystem) throws -> FileLock {
        try FileLock(path: path, flags: O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, operation: LOCK_EX, fileSystem: fileSystem)
    }

    /// A batch writer's share of the staging lock on the file at `path`
    /// (created if missing), held while the batch has temporaries that
    /// are not locked one by one. Blocks while ``stagingIfIdle(path:fileSystem:)``
    /// holds it.
    public static func staging(path: String, fileSystem: FileSystem) throws -> FileLock {
        try FileLock(path: path, flags: O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, operation: LOCK_SH, fileSystem: fileSystem)
    }

    /// The staging lock at `path` held exclusively, if no batch writer
    /// holds a share of it; nil, without waiting, if one does. While it is
    /// held no batch begins.
    public static func stagingIfIdle(path: String, fileSystem: FileSystem) throws -> FileLock? {
        do {
            return try FileLock(path: path, flags: O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, operation: LOCK_EX | LOCK_NB, fileSystem: fileSystem)
        } catch let error as IOError where error.errno == EWOULDBLOCK {
            return nil
        }
    }

    /// The lock of a directory a live process is still building, so that
    /// ``DataFile/isInUse(_:fileSystem:)`` says so. Fails rather than
    /// waits if another process holds it.
    public static func building(directory path: String, fileSystem: FileSystem) throws -> FileLock {
        try FileLock(path: path, flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC, operation: LOCK_EX | LOCK_NB, fileSystem: fileSystem)
    }
}

/// Memory for plaintext in flight: page-aligned, kept out of core dumps,
/// locked where the limit allows, and zeroed before it is released.
public final class SensitiveBuffer: @unchecked Sendable {
    public let bytes: UnsafeMutableRawBufferPointer
    private let size: Int
    private let locked: Bool

    public init(count: Int) {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        size = max(page, (count + page - 1) / page * page)
        var raw: UnsafeMutableRawPointer?
        precondition(posix_memalign(&raw, page, size) == 0 && raw != nil, "out of memory")
        let base = raw!
        _ = madvise(base, size, MADV_DONTDUMP)
        locked = mlock(base, size) == 0
        bytes = UnsafeMutableRawBufferPointer(start: base, count: count)
    }

    /// Zeroes the first `count` bytes (all of them by default), in a way
    /// the compiler cannot drop.
    public func wipe(upTo count: Int? = nil) {
        wipe(0..<min(count ?? bytes.count, bytes.count))
    }

    /// Zeroes the bytes at offsets `range`, in a way the compiler cannot
    /// drop.
    public func wipe(_ range: Range<Int>) {
        precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count, "a wipe outside the buffer")
        if !range.isEmpty { explicit_bzero(bytes.baseAddress! + range.lowerBound, range.count) }
    }

    deinit {
        let base = bytes.baseAddress!
        explicit_bzero(base, size)
        if locked { _ = munlock(base, size) }
        free(base)
    }
}
