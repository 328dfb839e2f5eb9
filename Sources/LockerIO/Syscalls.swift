internal import CLockerSupport
#if canImport(Glibc)
internal import Glibc
#endif

/// The system calls the store and the device make, one closure per call.
///
/// Each closure has libc's contract: the call's result, or -1 (`nil` for
/// the ones that return a value) with `errno` set. Nothing here retries or
/// throws; ``FileSystem`` does that, once, for every call.
///
/// ``system`` calls the kernel, and is what a ``FileSystem`` uses unless it
/// is given another table. Tests wrap it to count calls and to make one of
/// them fail.
public struct Syscalls: Sendable {
    public var open: @Sendable (_ path: String, _ flags: Int32, _ mode: UInt32) -> Int32
    /// Opens `relative` below the directory open as `root`, following no
    /// symbolic link in it and never leaving `root` (openat2(2) with
    /// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or one component at a time
    /// with O_NOFOLLOW where the kernel lacks it).
    public var openBeneath: @Sendable (_ root: Int32, _ relative: String, _ flags: Int32) -> Int32
    /// The descriptor is released even when this fails (Linux), so it is
    /// never retried.
    public var close: @Sendable (_ fd: Int32) -> Int32
    public var read: @Sendable (_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Int
    public var pread: @Sendable (_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, _ offset: Int64) -> Int
    public var write: @Sendable (_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int
    public var pwrite: @Sendable (_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ offset: Int64) -> Int
    /// cachestat(2): how many of the file's pages are in the page cache;
    /// nil (errno set) where the kernel cannot tell.
    public var cachedPages: @Sendable (_ fd: Int32) -> UInt64?
    public var fsync: @Sendable (_ fd: Int32) -> Int32
    /// syncfs(2): everything written to the file system holding `fd`.
    public var syncfs: @Sendable (_ fd: Int32) -> Int32
    public var flock: @Sendable (_ fd: Int32, _ operation: Int32) -> Int32
    public var fstat: @Sendable (_ fd: Int32) -> FileStatus?
    public var lstat: @Sendable (_ path: String) -> FileStatus?
    public var rename: @Sendable (_ source: String, _ destination: String) -> Int32
    /// renameat2(2) with RENAME_NOREPLACE: EEXIST if `destination` exists.
    public var renameNoReplace: @Sendable (_ source: String, _ destination: String) -> Int32
    public var unlink: @Sendable (_ path: String) -> Int32
    public var mkdir: @Sendable (_ path: String, _ mode: UInt32) -> Int32
    public var rmdir: @Sendable (_ path: String) -> Int32
    public var chmod: @Sendable (_ path: String, _ mode: UInt32) -> Int32
    /// The calls of an ``OpenDirectory``, each on a name (one component)
    /// in the open directory `directory`, never following a link at it:
    /// mkdirat(2); fstatat(2) with AT_SYMLINK_NOFOLLOW; openat(2) of a new
    /// file for writing (O_CREAT | O_EXCL | O_NOFOLLOW); renameat(2), and
    /// renameat2(2) with RENAME_NOREPLACE; unlinkat(2) (`flags`:
    /// AT_REMOVEDIR for a directory).
    public var mkdirAt: @Sendable (_ directory: Int32, _ name: String, _ mode: UInt32) -> Int32
    public var statAt: @Sendable (_ directory: Int32, _ name: String) -> FileStatus?
    public var createAt: @Sendable (_ directory: Int32, _ name: String, _ mode: UInt32) -> Int32
    public var renameAt: @Sendable (_ fromDirectory: Int32, _ from: String, _ toDirectory: Int32, _ to: String) -> Int32
    public var renameAtNoReplace: @Sendable (_ fromDirectory: Int32, _ from: String, _ toDirectory: Int32, _ to: String) -> Int32
    public var unlinkAt: @Sendable (_ directory: Int32, _ name: String, _ flags: Int32) -> Int32
    /// readdir(3) of the open directory `fd` from its start to its end:
    /// the entries, with `.` and `..`. `fd` stays open.
    public var listDirectory: @Sendable (_ fd: Int32) -> [DirectoryEntry]?

    /// The kernel's calls.
    public static let system = Syscalls(
        open: { Glibc.open($0, $1, mode_t($2)) },
        openBeneath: { locker_open_beneath($0, $1, $2) },
        close: { Glibc.close($0) },
        read: { Glibc.read($0, $1.baseAddress, $1.count) },
        pread: { Glibc.pread($0, $1.baseAddress, $1.count, off_t($2)) },
        write: { Glibc.write($0, $1.baseAddress, $1.count) },
        pwrite: { Glibc.pwrite($0, $1.baseAddress, $1.count, off_t($2)) },
        cachedPages: { fd in
            var pages: UInt64 = 0
            return locker_cached_pages(fd, &pages) == 0 ? pages : nil
        },
        fsync: { Glibc.fsync($0) },
        syncfs: { locker_syncfs($0) },
        flock: { lockFile($0, $1) },
        fstat: { fd in
            var st = stat()
            return Glibc.fstat(fd, &st) == 0 ? FileStatus(st) : nil
        },
        lstat: { path in
            var st = stat()
            return Glibc.lstat(path, &st) == 0 ? FileStatus(st) : nil
        },
        rename: { Glibc.rename($0, $1) },
        renameNoReplace: { locker_rename_noreplace($0, $1) },
        unlink: { Glibc.unlink($0) },
        mkdir: { Glibc.mkdir($0, mode_t($1)) },
        rmdir: { Glibc.rmdir($0) },
        chmod: { Glibc.chmod($0, mode_t($1)) },
        mkdirAt: { Glibc.mkdirat($0, $1, mode_t($2)) },
        statAt: { directory, name in
            var st = stat()
            return Glibc.fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? FileStatus(st) : nil
        },
        createAt: { Glibc.openat($0, $1, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode_t($2)) },
        renameAt: { Glibc.renameat($0, $1, $2, $3) },
        renameAtNoReplace: { locker_renameat_noreplace($0, $1, $2, $3) },
        unlinkAt: { Glibc.unlinkat($0, $1, $2) },
        listDirectory: { fd in
            // fdopendir takes over the descriptor it is given, and closedir
            // closes it: the stream gets a duplicate, and the caller's stays
            // open. The duplicate shares the offset, so a retried listing
            // rewinds.
            let copy = dup(fd)
            guard copy >= 0 else { return nil }
            guard let dir = fdopendir(copy) else {
                let error = errno
                Glibc.close(copy)
                errno = error
                return nil
            }
            rewinddir(dir)
            var entries: [DirectoryEntry] = []
            while true {
                errno = 0
                guard let entry = readdir(dir) else { break }
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                let type = entry.pointee.d_type
                entries.append(DirectoryEntry(name: name, isDirectory: type == UInt8(DT_UNKNOWN) ? nil : type == UInt8(DT_DIR)))
            }
            // readdir's NULL is the end, or an error if it set errno.
            let error = errno
            closedir(dir)
            errno = error
            return error == 0 ? entries : nil
        })
}

/// `flock(2)`; `Glibc.flock` also names the struct of `fcntl` locks.
private func lockFile(_ fd: Int32, _ operation: Int32) -> Int32 {
    flock(fd, operation)
}

/// One entry of a directory listing.
public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    /// What the listing says the entry is (`d_type`), as `lstat` would
    /// say then; nil where the file system does not say. The entry may
    /// have been replaced since: whoever opens it checks what it opened.
    public var isDirectory: Bool?

    public init(name: String, isDirectory: Bool?) {
        self.name = name
        self.isDirectory = isDirectory
    }
}

/// What `lstat` and `fstat` report that Locker uses.
public struct FileStatus: Sendable, Equatable {
    public var size: UInt64
    /// `st_mode`: the file type and the permission bits.
    public var mode: UInt32
    public var uid: UInt32
    /// `st_dev` and `st_ino`: together, which file this is.
    public var device: UInt64
    public var inode: UInt64
    /// `st_mtim` and `st_ctim`, in nanoseconds since 1970: when the
    /// contents, and when the contents or the inode, last changed.
    public var modified: Int64
    public var statusChanged: Int64
    /// `st_nlink`: how many names the file has.
    public var linkCount: UInt64

    public init(size: UInt64, mode: UInt32, uid: UInt32, device: UInt64 = 0, inode: UInt64 = 0,
                modified: Int64 = 0, statusChanged: Int64 = 0, linkCount: UInt64 = 1) {
        self.linkCount = linkCount
        self.size = size
        self.mode = mode
        self.uid = uid
        self.device = device
        self.inode = inode
        self.modified = modified
        self.statusChanged = statusChanged
    }

    init(_ st: stat) {
        self.init(size: UInt64(st.st_size), mode: UInt32(st.st_mode), uid: UInt32(st.st_uid),
                  device: UInt64(st.st_dev), inode: UInt64(st.st_ino),
                  modified: Int64(st.st_mtim.tv_sec) &* 1_000_000_000 &+ Int64(st.st_mtim.tv_nsec),
                  statusChanged: Int64(st.st_ctim.tv_sec) &* 1_000_000_000 &+ Int64(st.st_ctim.tv_nsec),
                  linkCount: UInt64(st.st_nlink))
    }

    /// Whether both describe the same file (device and inode).
    public func isSameFile(as other: FileStatus) -> Bool {
        device == other.device && inode == other.inode
    }

    /// Whether the file may have been written between the look that gave
    /// `earlier` and this one: another file, another size, or another
    /// modification or status-change time. (A write within one tick of
    /// the kernel's file clock can leave all of them as they were.)
    public func mayDiffer(from earlier: FileStatus) -> Bool {
        !isSameFile(as: earlier) || size != earlier.size
            || modified != earlier.modified || statusChanged != earlier.statusChanged
    }

    public var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
    public var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
}
