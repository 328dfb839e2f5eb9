import CLockerSupport
import Foundation
import LockerIO
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct FileSystemTests {
    /// An atomic write's temporary stays locked until it is renamed: a
    /// verifier that finds it unlocked may remove it as a dead process's.
    @Test func anAtomicWritesTemporaryIsLockedUntilItsRename() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: root) }
        // What another process's try for the lock got, at the rename.
        let heldAtRename = Mutex<[Bool]>([])
        var syscalls = Syscalls.system
        let rename = syscalls.rename
        syscalls.rename = { source, destination in
            let other = Glibc.open(source, O_RDONLY | O_CLOEXEC)
            if other >= 0 {
                let refused = flock(other, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK
                heldAtRename.withLock { $0.append(refused) }
                Glibc.close(other)
            }
            return rename(source, destination)
        }
        try FileSystem(syscalls: syscalls).writeFileAtomically(root + "/f", Array("contents".utf8))
        #expect(heldAtRename.withLock { $0 } == [true])
        #expect(FileManager.default.contents(atPath: root + "/f") == Data("contents".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root) == ["f"])
    }

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

    /// Runs `body` with a file system whose first open, by path or below
    /// a directory (`openBeneath`), fails with EPERM (as opening a file
    /// the caller does not own with O_NOATIME does), and returns the flags
    /// of every open it made.
    static func withFirstOpenRefused(_ body: (FileSystem) throws -> Void) throws -> [Int32] {
        let flags = Mutex<[Int32]>([])
        /// Records `flag`; true for the first call, which is refused.
        @Sendable func refuse(_ flag: Int32) -> Bool {
            let first = flags.withLock { $0.append(flag); return $0.count == 1 }
            if first { errno = EPERM }
            return first
        }
        var syscalls = Syscalls.system
        let open = syscalls.open
        let openBeneath = syscalls.openBeneath
        syscalls.open = { path, flag, mode in refuse(flag) ? -1 : open(path, flag, mode) }
        syscalls.openBeneath = { root, relative, flag in refuse(flag) ? -1 : openBeneath(root, relative, flag) }
        try body(FileSystem(syscalls: syscalls))
        return flags.withLock { $0 }
    }

    /// Store and device files are read without updating their access
    /// time (a plain read of the same file does update it here, so the
    /// check can fail); where the kernel refuses that (EPERM: a file the
    /// caller does not own), the file is opened without it.
    @Test func shredZeroesAKeyWholeAndAPlantedHugeFileOnlyAsFarAsADeviceFileGoes() throws {
        let dir = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func bytes(_ fd: Int32, at offset: Int, _ count: Int) -> [UInt8] {
            var out = [UInt8](repeating: 1, count: count)
            #expect(out.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, offset) } == count)
            return out
        }
        // Each file is held open, to look at its bytes after shred removed
        // its name (a second name would be a link, which shred leaves alone).
        let key = dir + "/effaceable"
        try Data(repeating: 0xAA, count: 32).write(to: URL(fileURLWithPath: key))
        let keyFD = Glibc.open(key, O_RDONLY)
        try #require(keyFD >= 0)
        defer { Glibc.close(keyFD) }
        try FileSystem().shred(key)
        #expect(!FileManager.default.fileExists(atPath: key))
        #expect(bytes(keyFD, at: 0, 32) == [UInt8](repeating: 0, count: 32))

        // A sparse file claiming 1 TiB, planted where a temporary would be.
        let planted = dir + "/keybag.tmp-99999-1"
        let fd = Glibc.open(planted, O_RDWR | O_CREAT, 0o600)
        try #require(fd >= 0)
        defer { Glibc.close(fd) }
        try #require(ftruncate(fd, 1 << 40) == 0)
        let marks: [UInt8] = [0xAA, 0xBB, 0xCC, 0xDD]
        for offset in [0, FileSystem.shredLimit - 4, FileSystem.shredLimit] {
            #expect(marks.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4, offset) } == 4)
        }
        try FileSystem().shred(planted)
        #expect(!FileManager.default.fileExists(atPath: planted))
        #expect(bytes(fd, at: 0, 4) == [0, 0, 0, 0])
        #expect(bytes(fd, at: FileSystem.shredLimit - 4, 4) == [0, 0, 0, 0])
        #expect(bytes(fd, at: FileSystem.shredLimit, 4) == marks, "nothing written past the limit")
        var st = stat()
        #expect(fstat(fd, &st) == 0 && st.st_size == 1 << 40)
    }

    /// A temporary's name hard-linked to another file (planted, to make a
    /// boot or a wipe zero that file) is removed, and the file keeps its
    /// bytes.
    @Test func shredLeavesAFileWithAnotherNameAlone() throws {
        let dir = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let victim = dir + "/victim"
        let content = Data("somebody else's file".utf8)
        try content.write(to: URL(fileURLWithPath: victim))
        let planted = dir + "/keybag.tmp-99999-1"
        try #require(link(victim, planted) == 0)
        try FileSystem().shred(planted)
        #expect(!FileManager.default.fileExists(atPath: planted))
        #expect(FileManager.default.contents(atPath: victim) == content)
    }

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

        let seen = try Self.withFirstOpenRefused { (fs: FileSystem) throws in
            #expect(try fs.readFile(root + "/f") == Array("abc".utf8))
        }
        #expect(seen.count == 2 && seen[0] != seen[1] && seen[0] & seen[1] == seen[1], "open flags: \(seen)")
    }

    /// `FileStatus` of a descriptor tells a file written since an earlier
    /// look (its size, modification or status-change time moved), and
    /// only such a file: what `put` uses to warn about a file that changed
    /// while it was read. Times are set explicitly, so that no write can
    /// fall within one tick of the kernel's file clock.
    @Test func statusTellsAFileWrittenSinceAnEarlierLook() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fs = FileSystem()
        let path = root + "/f"
        try fs.writeNewFile(path, Array("abc".utf8))
        let fd = open(path, O_RDWR)
        try #require(fd >= 0)
        defer { close(fd) }
        var past = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 5)]
        try #require(futimens(fd, &past) == 0)

        let first = try fs.status(of: fd, path: path)
        #expect(first.size == 3 && first.modified == 1_000_000_000_000_000_005)
        let again = try fs.status(of: fd, path: path)
        #expect(!again.mayDiffer(from: first))
        #expect(again == first)

        // Only the modification time moves (a write of the same size).
        var later = [past[0], timespec(tv_sec: 1_000_000_000, tv_nsec: 6)]
        try #require(futimens(fd, &later) == 0)
        let touched = try fs.status(of: fd, path: path)
        #expect(touched.size == first.size && touched.modified == first.modified + 1)
        #expect(touched.mayDiffer(from: first))

        // Only the status-change time moves: the same mode set again,
        // a tick of the file clock later, changes the inode alone.
        usleep(50_000)
        try #require(fchmod(fd, 0o600) == 0)
        let chmodded = try fs.status(of: fd, path: path)
        #expect(chmodded.size == touched.size && chmodded.modified == touched.modified)
        #expect(chmodded.statusChanged != touched.statusChanged)
        #expect(chmodded.mayDiffer(from: touched))

        // Only the size moves.
        var grown = first
        grown.size += 1
        #expect(grown.mayDiffer(from: first))

        // Another file with the same size and times.
        var other = first
        other.inode += 1
        #expect(other.mayDiffer(from: first))
    }

    /// `openBeneath` opens what lies below a directory descriptor and
    /// nothing else: a symbolic link anywhere on the way (to a file or a
    /// directory outside, or inside) fails with ELOOP, a path that climbs
    /// out or is absolute with EXDEV, and the same holds for the
    /// component-by-component walk used where the kernel has no openat2.
    @Test func openBeneathFollowsNoLinkAndStaysBelow() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        let fm = FileManager.default
        try fm.createDirectory(atPath: root + "/tree/dir/deeper", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: root + "/outside", withIntermediateDirectories: true)
        defer { try? fm.removeItem(atPath: root) }
        let fs = FileSystem()
        try fs.writeNewFile(root + "/tree/dir/deeper/file", Array("inside".utf8))
        try fs.writeNewFile(root + "/outside/secret", Array("outside".utf8))
        try #require(symlink(root + "/outside", root + "/tree/dir-link") == 0)
        try #require(symlink(root + "/outside/secret", root + "/tree/dir/file-link") == 0)
        try #require(symlink("deeper", root + "/tree/dir/inner-link") == 0)
        let tree = open(root + "/tree", O_RDONLY | O_DIRECTORY)
        try #require(tree >= 0)
        defer { close(tree) }

        func contents(_ fd: Int32) -> String {
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(fd, &buffer, buffer.count)
            close(fd)
            return String(decoding: buffer.prefix(max(0, n)), as: UTF8.self)
        }
        #expect(contents(try fs.openBeneath(tree, "dir/deeper/file", name: "file")) == "inside")
        let directory = try fs.openBeneath(tree, "dir/deeper", directory: true, name: "deeper")
        close(directory)
        let top = try fs.openBeneath(tree, ".", directory: true, name: "tree")
        close(top)

        let refused: [(String, Bool, Int32)] = [
            ("dir-link/secret", false, ELOOP), ("dir-link", true, ELOOP), ("dir/file-link", false, ELOOP),
            ("dir/inner-link/file", false, ELOOP), ("../outside/secret", false, EXDEV),
            (root + "/outside/secret", false, EXDEV), ("dir/deeper/file", true, ENOTDIR), ("dir/none", false, ENOENT),
        ]
        for (path, directory, errno) in refused {
            #expect(throws: IOError.self, "\(path)") { _ = try fs.openBeneath(tree, path, directory: directory, name: path) }
            do {
                let fd = try fs.openBeneath(tree, path, directory: directory, name: path)
                close(fd)
            } catch {
                #expect(error.errno == errno, "\(path): \(error)")
            }
            // The same without openat2.
            let flags = O_RDONLY | (directory ? O_DIRECTORY : 0)
            let fd = locker_open_beneath_by_components(tree, path, flags)
            let walkErrno = Glibc.errno
            if fd >= 0 { close(fd) }
            #expect(fd < 0 && walkErrno == errno, "walk \(path): \(fd) errno \(walkErrno)")
        }
        let walked = locker_open_beneath_by_components(tree, "dir/deeper/file", O_RDONLY)
        try #require(walked >= 0)
        #expect(contents(walked) == "inside")

        // Where O_NOATIME is refused (a file the caller does not own), the
        // open is made again without it, as `openForReading` does.
        let seen = try Self.withFirstOpenRefused { (fs: FileSystem) throws in
            #expect(contents(try fs.openBeneath(tree, "dir/deeper/file", name: "file")) == "inside")
        }
        #expect(seen.count == 2 && seen[0] != seen[1] && seen[0] & seen[1] == seen[1], "open flags: \(seen)")
    }

    /// Listing a store directory leaves its access time alone too (a plain
    /// listing of the same directory does update it here, so the check can
    /// fail), with the same fallback where the kernel refuses the flag.
    @Test func listingLeavesTheAccessTimeAlone() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root + "/control", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/d", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fs = FileSystem()
        for name in ["control/x", "d/a", "d/b"] { try fs.writeNewFile(root + "/" + name, Array("abc".utf8)) }

        let aged = try Self.ageAccessTime(root + "/control")
        _ = try FileManager.default.contentsOfDirectory(atPath: root + "/control")
        try #require(Self.accessTime(root + "/control") != aged, "this file system does not update access times on listing")

        let old = try Self.ageAccessTime(root + "/d")
        #expect(try fs.contentsOfDirectory(root + "/d").sorted() == ["a", "b"])
        #expect(Self.accessTime(root + "/d") == old)

        let seen = try Self.withFirstOpenRefused { (fs: FileSystem) throws in
            #expect(try fs.contentsOfDirectory(root + "/d").sorted() == ["a", "b"])
        }
        #expect(seen.count == 2 && seen[0] != seen[1] && seen[0] & seen[1] == seen[1], "open flags: \(seen)")
        #expect(throws: IOError.self) { try fs.contentsOfDirectory(root + "/d/a") }
    }

    /// A listing interrupted after it has read the directory starts over
    /// from its first entry: the names come back whole, once each.
    /// A listing says what each entry is as lstat would: a link to a
    /// directory is not a directory.
    @Test func aListingSaysWhichEntriesAreDirectories() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileSystem().writeNewFile(root + "/file", [1])
        try #require(symlink(root + "/sub", root + "/link") == 0)
        let entries = try FileSystem().entriesOfDirectory(root).sorted { $0.name < $1.name }
        #expect(entries.map(\.name) == ["file", "link", "sub"])
        // ext4 and tmpfs give every entry's type; a file system that does
        // not gives nil, which the store answers with an lstat.
        #expect(entries.map(\.isDirectory) == [false, false, true])
        #expect(try FileSystem().contentsOfDirectory(root).sorted() == ["file", "link", "sub"])
    }

    @Test func anInterruptedListingStartsOver() throws {
        let root = NSTemporaryDirectory() + "lkfs-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let names = (0..<300).map { "entry-\($0)" }
        for name in names { try FileSystem().writeNewFile(root + "/" + name, []) }
        let calls = Mutex(0)
        var syscalls = Syscalls.system
        let list = syscalls.listDirectory
        syscalls.listDirectory = { fd in
            let result = list(fd)
            if calls.withLock({ $0 += 1; return $0 == 1 }) {
                errno = EINTR
                return nil
            }
            return result
        }
        let listed = try FileSystem(syscalls: syscalls).contentsOfDirectory(root)
        #expect(calls.withLock { $0 } == 2)
        #expect(listed.sorted() == names.sorted())
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
