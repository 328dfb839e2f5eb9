import Foundation
import LockerIO
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct FileSystemTests {
    /// The access time a file would have after a read that updates it:
    /// set an hour before its modification, which relatime updates on the
    /// next read. Returns that access time.
    static func ageAccessTime(_ path: String) throws -> Int {
        var st = Glibc.stat()
        try #require(lstat(path, &st) == 0)
        var times = [timespec(tv_sec: st.st_mtim.tv_sec - 3600, tv_nsec: 0), st.st_mtim]
        try #require(utimensat(AT_FDCWD, path, &times, 0) == 0)
        return st.st_mtim.tv_sec - 3600
    }

    static func accessTime(_ path: String) -> Int {
        var st = Glibc.stat()
        return lstat(path, &st) == 0 ? st.st_atim.tv_sec : -1
    }

    /// Store and device files are read without updating their access
    /// time (a plain read of the same file does update it here, so the
    /// check can fail); where the kernel refuses that (EPERM: a file the
    /// caller does not own), the file is opened without it.
    @Test func readsLeaveTheAccessTimeAlone() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fs = FileSystem()
        try fs.writeNewFile(root + "/control", Array("abc".utf8))
        try fs.writeNewFile(root + "/f", Array("abc".utf8))

        let aged = try Self.ageAccessTime(root + "/control")
        _ = FileManager.default.contents(atPath: root + "/control")
        try #require(Self.accessTime(root + "/control") != aged, "this file system does not update access times on read")

        let old = try Self.ageAccessTime(root + "/f")
        #expect(try fs.readFile(root + "/f") == Array("abc".utf8))
        let file = try DataFile.openForReading(root + "/f", fileSystem: fs)
        file.close()
        #expect(Self.accessTime(root + "/f") == old)

        let flags = Mutex<[Int32]>([])
        var syscalls = Syscalls.system
        let open = syscalls.open
        syscalls.open = { path, flag, mode in
            let first = flags.withLock { $0.append(flag); return $0.count == 1 }
            if first {
                errno = EPERM
                return -1
            }
            return open(path, flag, mode)
        }
        #expect(try FileSystem(syscalls: syscalls).readFile(root + "/f") == Array("abc".utf8))
        let seen = flags.withLock { $0 }
        #expect(seen.count == 2 && seen[0] != seen[1] && seen[0] & seen[1] == seen[1], "open flags: \(seen)")
    }

    /// `renameIfAbsent` moves the file only onto a free name, with
    /// renameat2 and, where that fails with EINVAL (a file system that
    /// cannot) or ENOSYS (an old kernel), by looking first; an existing
    /// target is left as it was.
    @Test(arguments: [0, EINVAL, ENOSYS])
    func renameIfAbsent(noReplaceFailsWith failure: Int32) throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        var syscalls = Syscalls.system
        if failure != 0 {
            syscalls.renameNoReplace = { _, _ in
                errno = failure
                return -1
            }
        }
        let fs = FileSystem(syscalls: syscalls)
        try fs.writeNewFile(root + "/a", Array("new".utf8))
        #expect(try fs.renameIfAbsent(root + "/a", to: root + "/b"))
        #expect(!fs.exists(root + "/a"))
        #expect(try fs.readFile(root + "/b") == Array("new".utf8))

        try fs.writeNewFile(root + "/c", Array("other".utf8))
        #expect(try !fs.renameIfAbsent(root + "/c", to: root + "/b"))
        #expect(try fs.readFile(root + "/b") == Array("new".utf8))
        #expect(try fs.readFile(root + "/c") == Array("other".utf8))

        #expect(throws: IOError.self) { try fs.renameIfAbsent(root + "/missing", to: root + "/d") }
    }
}
