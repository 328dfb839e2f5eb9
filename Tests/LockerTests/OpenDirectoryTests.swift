import CLockerSupport
import Foundation
import LockerIO
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A directory written into by descriptor: no name that is a symbolic
/// link is followed, and what is written lands in the directory opened,
/// wherever it was moved.
@Suite struct OpenDirectoryTests {
    private func scratch() throws -> String {
        let root = NSTemporaryDirectory() + "lkdir-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root + "/tree", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/outside", withIntermediateDirectories: true)
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: root + "/outside/kept"))
        return root
    }

    /// The errno `body` fails with; nil if it does not fail, -1 for an
    /// error that is not an ``IOError``.
    private func errno(_ body: () throws -> Void) -> Int32? {
        do {
            try body()
            return nil
        } catch let error as IOError {
            return error.errno
        } catch {
            return -1
        }
    }

    /// Links are never followed: not by a new file, a subdirectory, a
    /// rename over them or a removal.
    @Test func noNameThatIsALinkIsFollowed() throws {
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        try #require(symlink(root + "/outside", root + "/tree/dir-link") == 0)
        try #require(symlink(root + "/outside/new", root + "/tree/file-link") == 0)
        let tree = try OpenDirectory(root + "/tree")

        // A new file where a link is (even a dangling one): EEXIST.
        #expect(errno { _ = try tree.createFile("file-link") } == EEXIST)
        #expect(!FileManager.default.fileExists(atPath: root + "/outside/new"))
        // A subdirectory that is a link: ELOOP; a file: ENOTDIR.
        #expect(errno { _ = try tree.subdirectory("dir-link") } == ELOOP)
        let fd = try tree.createFile("plain")
        close(fd)
        #expect(errno { _ = try tree.subdirectory("plain") } == ENOTDIR)
        // Made where a link is: not made, nothing made where it leads.
        #expect(try tree.makeDirectory("dir-link", mode: 0o700) == false)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/outside") == ["kept"])
        // A link is looked at, not followed.
        let link = try #require(try tree.status(of: "dir-link"))
        #expect(link.mode & UInt32(S_IFMT) == UInt32(S_IFLNK))
        #expect(try tree.status(of: "missing") == nil)
        // Renamed over: the link is replaced, the file it leads to is not
        // touched.
        try tree.rename("plain", to: "dir-link")
        #expect(try tree.status(of: "dir-link")?.isRegularFile == true)
        #expect(FileManager.default.contents(atPath: root + "/outside/kept") == Data("theirs".utf8))
        // A tree removed: a link in it goes, not what it leads to.
        #expect(try tree.makeDirectory("sub", mode: 0o700))
        try #require(symlink(root + "/outside", root + "/tree/sub/link") == 0)
        try tree.removeTree("sub")
        #expect(try tree.status(of: "sub") == nil)
        #expect(FileManager.default.contents(atPath: root + "/outside/kept") == Data("theirs".utf8))
    }

    /// A directory moved away and replaced by a link still gets what is
    /// written through its descriptor; reopening it below the root by
    /// its path then fails (ELOOP), and renameIfAbsent refuses a taken
    /// name.
    @Test func writesLandInTheDirectoryOpenedWhereverItWent() throws {
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let tree = try OpenDirectory(root + "/tree")
        #expect(try tree.makeDirectory("dir", mode: 0o700))
        let dir = try tree.subdirectory("dir")
        #expect(dir.path == root + "/tree/dir")
        #expect(try tree.makeDirectory("dir", mode: 0o700) == false)

        try #require(rename(root + "/tree/dir", root + "/moved") == 0)
        try #require(symlink(root + "/outside", root + "/tree/dir") == 0)
        let fd = try dir.createFile("secret")
        #expect(write(fd, "plain", 5) == 5)
        close(fd)
        #expect(FileManager.default.contents(atPath: root + "/moved/secret") == Data("plain".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/outside") == ["kept"])
        #expect(errno { _ = try OpenDirectory("dir", beneath: tree, path: root + "/tree/dir") } == ELOOP)

        // renameIfAbsent: across directories, never over a name in use.
        let other = try OpenDirectory(root + "/tree")
        #expect(try dir.renameIfAbsent("secret", to: "dir", in: other) == false)
        #expect(try dir.renameIfAbsent("secret", to: "fetched", in: other))
        #expect(FileManager.default.contents(atPath: root + "/tree/fetched") == Data("plain".utf8))
        #expect(try dir.status(of: "secret") == nil)
        try dir.sync()
        try dir.syncFileSystem()
    }

    /// A subdirectory on another file system than its parent (a mount
    /// point: here its device number reported one higher) is not entered:
    /// EXDEV, whatever owner and mode it reports.
    @Test func aMountPointIsNotEntered() throws {
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root + "/tree/mounted", withIntermediateDirectories: true)
        let looks = Mutex(0)
        var syscalls = Syscalls.system
        let fstat = syscalls.fstat
        // The tree's own look is the first; every later one is of the
        // subdirectory.
        syscalls.fstat = { fd in
            guard var status = fstat(fd) else { return nil }
            if looks.withLock({ $0 += 1; return $0 }) > 1 { status.device += 1 }
            return status
        }
        let tree = try OpenDirectory(root + "/tree", fileSystem: FileSystem(syscalls: syscalls))
        #expect(errno { _ = try tree.subdirectory("mounted") } == EXDEV)
        // The same directory, on the same file system: entered.
        let plain = try OpenDirectory(root + "/tree")
        #expect(try plain.subdirectory("mounted").status.isDirectory)
    }

    /// A directory that may be written to but not listed (a drop box) is
    /// still opened, and a file written into it. It cannot be synced
    /// itself; its file system is synced through a file the caller holds,
    /// where a directory open for reading is synced itself.
    @Test func aDropBoxIsWrittenInto() throws {
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var syscalls = Syscalls.system
        let open = syscalls.open
        // As for a user without read permission (root is never refused).
        syscalls.open = { path, flags, mode in
            if path == root + "/tree", flags & locker_o_path() == 0 {
                Glibc.errno = EACCES
                return -1
            }
            return open(path, flags, mode)
        }
        let synced = Mutex<[Int32]>([])
        let syncfs = syscalls.syncfs
        syscalls.syncfs = { fd in
            synced.withLock { $0.append(fd) }
            return syncfs(fd)
        }
        let fsynced = Mutex<[Int32]>([])
        let fsync = syscalls.fsync
        syscalls.fsync = { fd in
            fsynced.withLock { $0.append(fd) }
            return fsync(fd)
        }
        let tree = try OpenDirectory(root + "/tree", fileSystem: FileSystem(syscalls: syscalls))
        #expect(tree.isPathOnly)
        let fd = try tree.createFile("dropped")
        defer { close(fd) }
        #expect(write(fd, "plain", 5) == 5)
        try tree.rename("dropped", to: "kept")
        #expect(FileManager.default.contents(atPath: root + "/tree/kept") == Data("plain".utf8))
        #expect(errno { try tree.sync() } == EBADF)
        #expect(errno { try tree.syncFileSystem() } == EBADF)
        synced.withLock { $0.removeAll() }
        fsynced.withLock { $0.removeAll() }
        try tree.sync(through: fd)
        #expect(synced.withLock { $0 } == [fd] && fsynced.withLock { $0 }.isEmpty)

        let plain = try OpenDirectory(root + "/outside", fileSystem: FileSystem(syscalls: syscalls))
        #expect(!plain.isPathOnly)
        synced.withLock { $0.removeAll() }
        try plain.sync(through: fd)
        #expect(fsynced.withLock { $0 } == [plain.fd] && synced.withLock { $0 }.isEmpty)
    }

    /// Where the file system cannot rename without replacing (EINVAL),
    /// renameIfAbsent looks first: it still never replaces a name in use.
    @Test func renameIfAbsentWithoutKernelSupportStillRefusesATakenName() throws {
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var syscalls = Syscalls.system
        syscalls.renameAtNoReplace = { _, _, _, _ in
            Glibc.errno = EINVAL
            return -1
        }
        let tree = try OpenDirectory(root + "/tree", fileSystem: FileSystem(syscalls: syscalls))
        close(try tree.createFile("a"))
        close(try tree.createFile("taken"))
        #expect(try tree.renameIfAbsent("a", to: "taken", in: tree) == false)
        #expect(try tree.status(of: "a") != nil)
        #expect(try tree.renameIfAbsent("a", to: "free", in: tree))
        #expect(try tree.status(of: "a") == nil && tree.status(of: "free") != nil)
    }

    /// An output file named in a directory writes past the page cache only
    /// while the name is still the caller's file, and not a link.
    @Test func outputFileReopensOnlyTheFileCreated() throws {
        try #require(try OutputFileTests.fileSystemTakesDirectWrites(), OutputFileTests.directWritesRequired)
        let root = try scratch()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let tree = try OpenDirectory(root + "/tree")
        let size = OutputFile.directMinimum
        let fd = try tree.createFile("out")
        defer { close(fd) }
        #expect(OutputFile(fd: fd, name: "out", in: tree, size: size).writesPastThePageCache)
        // Below the minimum: never.
        #expect(!OutputFile(fd: fd, name: "out", in: tree, size: size - 1).writesPastThePageCache)
        // The name replaced by a link to the same file: refused.
        try tree.rename("out", to: "out-moved")
        try #require(symlink(root + "/tree/out-moved", root + "/tree/out") == 0)
        #expect(!OutputFile(fd: fd, name: "out", in: tree, size: size).writesPastThePageCache)
        // Replaced by another file: refused.
        try tree.remove("out")
        close(try tree.createFile("out"))
        #expect(!OutputFile(fd: fd, name: "out", in: tree, size: size).writesPastThePageCache)
    }
}
