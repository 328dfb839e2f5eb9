#if canImport(Glibc)
internal import Glibc
#endif

/// An open file for streaming an object's data: written once, front to
/// back, or read at offsets. Closes itself on deinit.
public final class DataFile {
    public let path: String
    private var fd: Int32

    private init(path: String, fd: Int32) {
        self.path = path
        self.fd = fd
    }

    deinit { if fd >= 0 { _ = Glibc.close(fd) } }

    /// Creates a new file that must not exist yet, mode 0600.
    public static func create(_ path: String) throws -> DataFile {
        let fd = try FileSystem().open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        return DataFile(path: path, fd: fd)
    }

    /// Takes an exclusive `flock` on the file for as long as it is open, to
    /// tell ``isInUse(_:)`` that a live process is still writing it.
    public func holdWriteLock() throws {
        guard flock(fd, LOCK_EX) == 0 else { throw IOError("flock", path: path, errno: errno) }
    }

    /// Whether a live process holds the write lock of the file at `path`.
    /// A file left by a process that died is not in use.
    public static func isInUse(_ path: String) -> Bool {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { _ = Glibc.close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            _ = flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    /// Opens an existing file for reading.
    public static func openForReading(_ path: String) throws -> DataFile {
        let fd = try FileSystem().open(path, O_RDONLY | O_CLOEXEC)
        return DataFile(path: path, fd: fd)
    }

    /// Appends all of `bytes`.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let n = try FileSystem().retrying("write", path) { Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
            guard n > 0 else { throw IOError("write", path: path, errno: EIO) }
            offset += n
        }
    }

    /// Reads exactly `buffer.count` bytes at `offset`. A file that ends
    /// first is ``IOError`` with ENODATA.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws {
        var done = 0
        while done < buffer.count {
            let n = try FileSystem().retrying("read", path) {
                pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            }
            if n == 0 { throw IOError("read", path: path, errno: ENODATA) }
            done += n
        }
    }

    /// The file's size.
    public func size() throws -> UInt64 {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw IOError("fstat", path: path, errno: errno) }
        return UInt64(st.st_size)
    }

    /// Makes the written bytes durable.
    public func sync() throws {
        _ = try FileSystem().retrying("fsync", path) { Int(fsync(fd)) }
    }

    /// Closes the file now.
    public func close() {
        if fd >= 0 { _ = Glibc.close(fd) }
        fd = -1
    }
}

/// A store-wide exclusive lock (flock), held while the namespace changes.
public final class StoreLock {
    private let fd: Int32

    /// Blocks until the lock on `path` is held.
    public init(path: String) throws {
        fd = try FileSystem().open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        while flock(fd, LOCK_EX) != 0 {
            let e = errno
            if e == EINTR { continue }
            _ = Glibc.close(fd)
            throw IOError("flock", path: path, errno: e)
        }
    }

    deinit {
        _ = flock(fd, LOCK_UN)
        _ = Glibc.close(fd)
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

    deinit {
        let base = bytes.baseAddress!
        explicit_bzero(base, size)
        if locked { _ = munlock(base, size) }
        free(base)
    }
}
