import Foundation
import LockerIO
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct FileSystemTests {
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
