#if canImport(Glibc)
internal import Glibc
#endif

/// The one place Locker's store and device files meet the kernel.
///
/// Each operation steps down to plain syscalls, retries on EINTR, and
/// throws ``IOError`` with the errno. Writes that replace a file are atomic:
/// temporary file in the same directory, write, fsync, rename, fsync of the
/// directory.
public struct FileSystem: Sendable {
    public init() {}

    /// Reads a whole file of at most `limit` bytes.
    public func readFile(_ path: String, limit: Int = 1 << 20) throws -> [UInt8] {
        let fd = try open(path, O_RDONLY | O_CLOEXEC)
        defer { _ = Glibc.close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = try retrying("read", path) { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if n == 0 { break }
            guard out.count + n <= limit else { throw IOError("read", path: path, errno: EFBIG) }
            out.append(contentsOf: buffer[..<n])
        }
        return out
    }

    /// Replaces `path` with `bytes` atomically and durably, with `mode`.
    public func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: UInt32 = 0o600) throws {
        let directory = Self.directory(of: path)
        let temporary = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        // Held until close: a verifier removes only temporaries no live
        // process holds.
        _ = flock(fd, LOCK_EX)
        do {
            try writeAll(fd, bytes, path: temporary)
            _ = try retrying("fsync", temporary) { Int(fsync(fd)) }
            _ = Glibc.close(fd)
        } catch {
            _ = Glibc.close(fd)
            _ = unlink(temporary)
            throw error
        }
        do {
            _ = try retrying("rename", path) { Int(rename(temporary, path)) }
        } catch {
            _ = unlink(temporary)
            throw error
        }
        try syncDirectory(directory)
    }

    /// Overwrites a file's bytes with zeros in place, syncs, then removes
    /// it. Used for the effaceable key; on flash and journaling file
    /// systems the overwrite is best effort, so the key's secrecy must not
    /// rest on it alone.
    public func shred(_ path: String) throws {
        let fd = try open(path, O_WRONLY | O_CLOEXEC)
        var st = stat()
        _ = fstat(fd, &st)
        let zeros = [UInt8](repeating: 0, count: Int(st.st_size))
        try? writeAll(fd, zeros, path: path)
        _ = fsync(fd)
        _ = Glibc.close(fd)
        try remove(path)
    }

    /// Removes a file and syncs its directory. A missing file is not an
    /// error.
    public func remove(_ path: String) throws {
        if unlink(path) != 0 {
            let e = errno
            if e == ENOENT { return }
            throw IOError("unlink", path: path, errno: e)
        }
        try syncDirectory(Self.directory(of: path))
    }

    /// The names in a directory, without `.` and `..`.
    public func contentsOfDirectory(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw IOError("opendir", path: path, errno: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Whether something exists at `path`.
    public func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// Creates `path` and any missing parents with `mode`. An existing
    /// directory is not an error.
    public func createDirectory(_ path: String, mode: UInt32 = 0o700) throws {
        if exists(path) { return }
        let parent = Self.directory(of: path)
        if parent != path, !exists(parent) { try createDirectory(parent, mode: mode) }
        if mkdir(path, mode) != 0 {
            let e = errno
            if e == EEXIST { return }
            throw IOError("mkdir", path: path, errno: e)
        }
        _ = chmod(path, mode)
    }

    /// The permission bits and owner of `path`.
    public func ownerAndMode(_ path: String) throws -> (uid: UInt32, mode: UInt32) {
        var st = stat()
        guard lstat(path, &st) == 0 else { throw IOError("stat", path: path, errno: errno) }
        return (st.st_uid, st.st_mode & 0o7777)
    }

    /// Sets the permission bits of `path`.
    public func setMode(_ path: String, _ mode: UInt32) throws {
        guard chmod(path, mode) == 0 else { throw IOError("chmod", path: path, errno: errno) }
    }

    /// fsyncs a directory, so that a rename or unlink in it is durable.
    public func syncDirectory(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { _ = Glibc.close(fd) }
        _ = try retrying("fsync", path) { Int(fsync(fd)) }
    }

    // MARK: Syscall steps

    func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws -> Int32 {
        Int32(try retrying("open", path) { Int(Glibc.open(path, flags, mode)) })
    }

    func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = try retrying("write", path) {
                bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            }
            guard n > 0 else { throw IOError("write", path: path, errno: EIO) }
            offset += n
        }
    }

    /// Runs a syscall, retrying while it fails with EINTR.
    func retrying(_ operation: String, _ path: String, _ call: () -> Int) throws -> Int {
        while true {
            let result = call()
            if result >= 0 { return result }
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
