import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Which pages of the file at `path` are in the page cache, one Bool per
/// page (mincore(2) of a shared read-only mapping).
func pagesInCache(_ path: String) throws -> [Bool] {
    let fd = open(path, O_RDONLY)
    try #require(fd >= 0)
    defer { close(fd) }
    var st = stat()
    try #require(fstat(fd, &st) == 0)
    let size = Int(st.st_size)
    if size == 0 { return [] }
    let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
    try #require(map != MAP_FAILED)
    defer { munmap(map, size) }
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    var vector = [UInt8](repeating: 0, count: (size + page - 1) / page)
    try #require(mincore(map, size, &vector) == 0)
    return vector.map { $0 & 1 == 1 }
}

@Suite struct OutputFileTests {
    static let page = 4096

    /// A new file in a directory of its own, and a descriptor open for
    /// writing it.
    static func newFile() throws -> (root: String, path: String, fd: Int32) {
        let root = NSTemporaryDirectory() + "lkout-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let path = root + "/out"
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        return (root, path, fd)
    }

    /// `count` bytes of a pattern that differs per page, in page-aligned
    /// memory (as the store's chunk buffers are).
    static func alignedPattern(_ count: Int, seed: UInt8) -> UnsafeMutableRawBufferPointer {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: page)
        for i in 0..<count { buffer[i] = UInt8(truncatingIfNeeded: i / 7) &+ UInt8(truncatingIfNeeded: i / page) &+ seed }
        return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
    }

    /// Writes `length` bytes in chunks of `chunk` from two threads, the
    /// chunks out of order, and returns what was written.
    static func writeChunks(_ out: OutputFile, length: Int, chunk: Int) throws -> Data {
        let chunks = (length + chunk - 1) / chunk
        let buffers = (0..<chunks).map { alignedPattern(min(chunk, length - $0 * chunk), seed: UInt8($0 & 0xff)) }
        defer { for b in buffers { b.deallocate() } }
        let failures = Mutex<[any Error]>([])
        // Read only, and deallocated after both threads are done.
        nonisolated(unsafe) let shared = buffers
        DispatchQueue.concurrentPerform(iterations: 2) { worker in
            for i in stride(from: chunks - 1 - worker, through: 0, by: -2) {
                do { try out.write(UnsafeRawBufferPointer(shared[i]), at: UInt64(i * chunk)) }
                catch { failures.withLock { $0.append(error) } }
            }
        }
        let errors = failures.withLock { $0 }
        try #require(errors.isEmpty, "\(errors)")
        var expected = Data()
        for b in buffers { expected.append(contentsOf: UnsafeRawBufferPointer(b)) }
        return expected
    }

    /// Whether the kernel reports page-cache residency (cachestat, Linux
    /// 6.5 and later), which deciding to read past the page cache needs.
    static func kernelHasCachestat() throws -> Bool {
        let fd = open("/proc/self/exe", O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }
        return Syscalls.system.cachedPages(fd) != nil
    }

    /// Whether this file system takes O_DIRECT writes of aligned pages and
    /// keeps them out of the page cache (tmpfs, for one, takes them into
    /// it: run these tests with TMPDIR on a disk file system).
    static func fileSystemTakesDirectWrites() throws -> Bool {
        let (root, path, fd) = try newFile()
        defer { close(fd); try? FileManager.default.removeItem(atPath: root) }
        let out = OutputFile(fd: fd, path: path, size: OutputFile.directMinimum)
        let buffer = alignedPattern(2 * page, seed: 1)
        defer { buffer.deallocate() }
        try out.write(UnsafeRawBufferPointer(buffer), at: 0)
        let cached = try pagesInCache(path)
        return out.writesPastThePageCache && cached == [false, false]
    }

    static let directWritesRequired: Comment =
        "this file system does not take O_DIRECT writes past the page cache (is TMPDIR on tmpfs?)"

    /// A large file written chunk by chunk, from two threads and out of
    /// order, reads back whole; every page but its last, partial one went
    /// past the page cache (the last chunk's whole pages too). A small
    /// file's pages are all in it (so the check can fail here).
    @Test func largeFilesGoPastThePageCache() throws {
        try #require(try Self.fileSystemTakesDirectWrites(), Self.directWritesRequired)
        let chunk = 300 << 10
        let length = Int(OutputFile.directMinimum) + 3 * chunk + 1000
        let (root, path, fd) = try Self.newFile()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let out = OutputFile(fd: fd, path: path, size: UInt64(length))
        let expected = try Self.writeChunks(out, length: length, chunk: chunk)
        #expect(out.writesPastThePageCache)
        #expect(fsync(fd) == 0)
        close(fd)
        let cached = try pagesInCache(path)
        #expect(cached.count == (length + Self.page - 1) / Self.page)
        #expect(cached.dropLast().allSatisfy { !$0 }, "\(cached.filter { $0 }.count) of \(cached.count) pages cached")
        #expect(FileManager.default.contents(atPath: path) == expected)

        let (smallRoot, smallPath, smallFD) = try Self.newFile()
        defer { try? FileManager.default.removeItem(atPath: smallRoot) }
        let small = OutputFile(fd: smallFD, path: smallPath, size: OutputFile.directMinimum - 1)
        let smallExpected = try Self.writeChunks(small, length: Int(OutputFile.directMinimum) - 1, chunk: chunk)
        close(smallFD)
        #expect(!small.writesPastThePageCache)
        #expect(try pagesInCache(smallPath).allSatisfy { $0 })
        #expect(FileManager.default.contents(atPath: smallPath) == smallExpected)
    }

    /// The file system refusing the direct open (EINVAL), refusing a
    /// direct write (EINVAL: an alignment it does not take), or writing
    /// short: the file still comes out whole, the rest through the page
    /// cache. After a refused write, no other write is tried directly.
    @Test(arguments: ["open refused", "write refused", "short write"])
    func fallsBackToThePageCache(_ fault: String) throws {
        let directFD = Mutex<Int32?>(nil)
        let directWrites = Mutex(0)
        var syscalls = Syscalls.system
        let open = syscalls.open
        let pwrite = syscalls.pwrite
        syscalls.open = { path, flags, mode in
            // The only open an OutputFile makes is the direct one.
            if fault == "open refused" {
                errno = EINVAL
                return -1
            }
            let fd = open(path, flags, mode)
            directFD.withLock { $0 = fd }
            return fd
        }
        syscalls.pwrite = { fd, bytes, offset in
            guard fd == directFD.withLock({ $0 }) else { return pwrite(fd, bytes, offset) }
            let n = directWrites.withLock { $0 += 1; return $0 }
            if fault == "write refused" {
                errno = EINVAL
                return -1
            }
            if fault == "short write" && n == 2 {
                return pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes.prefix(bytes.count / 2)), offset)
            }
            return pwrite(fd, bytes, offset)
        }
        let chunk = 256 << 10
        let length = Int(OutputFile.directMinimum) + 1000
        let (root, path, fd) = try Self.newFile()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let out = OutputFile(fd: fd, path: path, size: UInt64(length), fileSystem: FileSystem(syscalls: syscalls))
        let expected = try Self.writeChunks(out, length: length, chunk: chunk)
        close(fd)
        #expect(FileManager.default.contents(atPath: path) == expected)
        let tried = directWrites.withLock { $0 }
        switch fault {
        case "open refused":
            #expect(!out.writesPastThePageCache && tried == 0)
        case "write refused":
            // Both threads may have tried one write before either saw the
            // refusal.
            #expect(!out.writesPastThePageCache && (1...2).contains(tried), "\(tried) direct writes")
        default:
            #expect(out.writesPastThePageCache && tried == length / chunk, "\(tried) direct writes")
        }
    }

    /// A put of an object larger than one batch of chunks writes its data
    /// file past the page cache (all but its last, partial page), and it
    /// reads back; the data file of an object of one batch is written
    /// through the page cache, so the check can fail here.
    @Test func largePutsGoPastThePageCache() throws {
        try #require(try Self.fileSystemTakesDirectWrites(), Self.directWritesRequired)
        let root = NSTemporaryDirectory() + "lkput-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        // Batches of four 16 KiB chunks (two workers, whatever the
        // machine's cores): 64 KiB.
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10, workers: 2))
        var seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        func put(_ name: String, _ count: Int) throws -> (data: [UInt8], file: String) {
            // Incompressible: the data file is as large as the object.
            let data = (0..<count).map { _ in
                seed = seed &* 6364136223846793005 &+ 1442695040888963407
                return UInt8(truncatingIfNeeded: seed >> 33)
            }
            let before = Set(try FileManager.default.contentsOfDirectory(atPath: root + "/s/data"))
            try store.put(StorePath("/" + name), bytes: data, protection: ProtectionClass.none)
            let added = Set(try FileManager.default.contentsOfDirectory(atPath: root + "/s/data")).subtracting(before)
            try #require(added.count == 1, "\(added)")
            return (data, root + "/s/data/" + added.first!)
        }
        let small = try put("small", 60 << 10)
        #expect(try pagesInCache(small.file).allSatisfy { $0 })

        let large = try put("large", (3 << 20) + 123)
        let cached = try pagesInCache(large.file)
        #expect(cached.count > 768)
        #expect(cached.dropLast().allSatisfy { !$0 }, "\(cached.filter { $0 }.count) of \(cached.count) pages cached")
        for (name, expected) in [("small", small.data), ("large", large.data)] {
            var out: [UInt8] = []
            try store.read(StorePath("/" + name)) { out.append(contentsOf: $0) }
            #expect(out == expected, "\(name)")
            // In a range, at offsets from several threads.
            let range: Range<UInt64> = 5000..<UInt64(expected.count - 77)
            let ranged = Mutex([UInt8](repeating: 0, count: range.count))
            try store.read(StorePath("/" + name), range: range) { offset, bytes in
                ranged.withLock { $0.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[Int(offset)...]).copyMemory(from: bytes) } }
            }
            #expect(ranged.withLock { $0 } == Array(expected[Int(range.lowerBound)..<Int(range.upperBound)]), "\(name)")
        }
        try #require(try Self.kernelHasCachestat(), "this kernel has no cachestat (Linux 6.5+): data files are read through the page cache")
        // The large object's data file, not in the page cache, was read
        // past it (but for its index, at the end, read through it); the
        // small one's was read through it.
        let afterReads = try pagesInCache(large.file)
        #expect(afterReads.dropLast(2).allSatisfy { !$0 }, "\(afterReads.filter { $0 }.count) of \(afterReads.count) pages cached")
        #expect(try pagesInCache(small.file).allSatisfy { $0 })
        let report = try store.verify(readData: true)
        #expect(report.damaged.isEmpty && report.garbage.isEmpty && report.objectsReadInFull == 2, "\(report)")
    }

    /// A large data file mostly out of the page cache is read past it; one
    /// in the page cache, or on a kernel that cannot tell (cachestat
    /// failing), through it; a small one always through it.
    @Test func dataFilesAreReadPastThePageCacheWhenNotInIt() throws {
        try #require(try Self.fileSystemTakesDirectWrites(), Self.directWritesRequired)
        try #require(try Self.kernelHasCachestat(), "this kernel has no cachestat (Linux 6.5+): data files are read through the page cache")
        let length = 2 << 20
        let content = Self.alignedPattern(length, seed: 5)
        defer { content.deallocate() }
        func file(direct: Bool) throws -> (root: String, path: String) {
            let (root, path, fd) = try Self.newFile()
            defer { close(fd) }
            if direct {
                let out = OutputFile(fd: fd, path: path, size: UInt64(length))
                try out.write(UnsafeRawBufferPointer(content), at: 0)
                out.close()
            } else {
                #expect(Glibc.write(fd, content.baseAddress, length) == length)
            }
            #expect(fsync(fd) == 0)
            return (root, path)
        }
        let uncached = try file(direct: true)
        let cached = try file(direct: false)
        defer { for f in [uncached, cached] { try? FileManager.default.removeItem(atPath: f.root) } }
        try #require(try pagesInCache(uncached.path).allSatisfy { !$0 } && pagesInCache(cached.path).allSatisfy { $0 })

        let fs = FileSystem()
        #expect(try DataFile.openForReading(uncached.path, fileSystem: fs, large: true).readsPastThePageCache)
        #expect(try !DataFile.openForReading(uncached.path, fileSystem: fs, large: false).readsPastThePageCache)
        #expect(try !DataFile.openForReading(cached.path, fileSystem: fs, large: true).readsPastThePageCache)
        var unknowing = Syscalls.system
        unknowing.cachedPages = { _ in
            errno = ENOSYS
            return nil
        }
        #expect(try !DataFile.openForReading(uncached.path, fileSystem: FileSystem(syscalls: unknowing), large: true).readsPastThePageCache)

        // Reading the uncached one past the page cache leaves it out.
        let data = try DataFile.openForReading(uncached.path, fileSystem: fs, large: true)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length + DataFile.readSlack, alignment: Self.page)
        defer { buffer.deallocate() }
        #expect(Array(try data.read(length - 3000, at: 1000, in: buffer)) == Array(content[1000..<length - 2000]))
        #expect(try pagesInCache(uncached.path).allSatisfy { !$0 })
    }

    /// A data file read past the page cache gives the bytes asked for at
    /// any offset, and the same bytes when the file system refuses the
    /// direct open or a direct read (EINVAL), or returns a direct read
    /// short, inside a page (the rest then comes through the page cache);
    /// a file that ends before them is ENODATA either way.
    @Test(arguments: ["direct", "open refused", "read refused", "short read"])
    func dataFileReadsFallBackToThePageCache(_ mode: String) throws {
        let (root, path, fd) = try Self.newFile()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let length = 3 * Self.page * 64 + 555
        let content = Self.alignedPattern(length, seed: 9)
        defer { content.deallocate() }
        #expect(Glibc.write(fd, content.baseAddress, length) == length)
        close(fd)
        let directReads = Mutex(0)
        let opens = Mutex<[Int32]>([])
        var syscalls = Syscalls.system
        let open = syscalls.open
        let pread = syscalls.pread
        // As if nothing were cached, so that the direct open is tried.
        syscalls.cachedPages = { _ in 0 }
        syscalls.open = { path, flags, mode2 in
            // The second open is the direct one.
            if opens.withLock({ $0.count }) == 1 && mode == "open refused" {
                errno = EINVAL
                return -1
            }
            let fd = open(path, flags, mode2)
            opens.withLock { $0.append(fd) }
            return fd
        }
        syscalls.pread = { fd, buffer, offset in
            let all = opens.withLock { $0 }
            guard all.count == 2, fd == all[1] else { return pread(fd, buffer, offset) }
            directReads.withLock { $0 += 1 }
            if mode == "read refused" {
                errno = EINVAL
                return -1
            }
            let n = pread(fd, buffer, offset)
            // As if the file system had stopped 512 bytes short.
            return mode == "short read" && n > Self.page ? n - 512 : n
        }
        let file = try DataFile.openForReading(path, fileSystem: FileSystem(syscalls: syscalls), large: true)
        #expect(file.readsPastThePageCache == (mode != "open refused"))
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length + DataFile.readSlack, alignment: Self.page)
        defer { buffer.deallocate() }
        for (offset, count) in [(0, length), (1, 4095), (4095, 2), (4096, 8192), (777, length - 777), (length - 10, 10)] {
            let bytes = try file.read(count, at: UInt64(offset), in: buffer)
            #expect(Array(bytes) == Array(content[offset..<offset + count]), "\(offset)+\(count)")
        }
        #expect(throws: IOError("read", path: path, errno: ENODATA)) { _ = try file.read(20, at: UInt64(length - 10), in: buffer) }
        let tried = directReads.withLock { $0 }
        switch mode {
        case "direct", "short read": #expect(tried >= 6 && file.readsPastThePageCache)
        case "open refused": #expect(tried == 0)
        default: #expect(tried == 1 && !file.readsPastThePageCache)
        }
    }

    /// The direct descriptor is opened by name, after the caller opened
    /// the file. Where the name no longer leads to that file (someone who
    /// can write to the directory replaced it in between) or is a symbolic
    /// link, no direct descriptor is used: every byte goes to the caller's
    /// file, none to the other one. With the name intact, it is used (so
    /// the check can fail).
    @Test func directOpensRefuseAnotherFile() throws {
        try #require(try Self.fileSystemTakesDirectWrites(), Self.directWritesRequired)
        let length = Int(OutputFile.directMinimum)
        let content = Self.alignedPattern(length, seed: 4)
        defer { content.deallocate() }
        let theirs = Data("their file".utf8)

        // Writing: the name replaced after the caller's open.
        let (root, path, fd) = try Self.newFile()
        defer { close(fd); try? FileManager.default.removeItem(atPath: root) }
        try theirs.write(to: URL(fileURLWithPath: root + "/other"))
        try #require(rename(root + "/other", path) == 0)
        let replaced = OutputFile(fd: fd, path: path, size: UInt64(length))
        #expect(!replaced.writesPastThePageCache)
        try replaced.write(UnsafeRawBufferPointer(content), at: 0)
        #expect(FileManager.default.contents(atPath: path) == theirs)
        #expect(FileManager.default.contents(atPath: "/proc/self/fd/\(fd)") == Data(content))

        // Writing: the name is a symbolic link to the caller's file.
        let (linkRoot, target, targetFD) = try Self.newFile()
        defer { close(targetFD); try? FileManager.default.removeItem(atPath: linkRoot) }
        try #require(symlink(target, linkRoot + "/link") == 0)
        let linked = OutputFile(fd: targetFD, path: linkRoot + "/link", size: UInt64(length))
        #expect(!linked.writesPastThePageCache)
        try linked.write(UnsafeRawBufferPointer(content), at: 0)
        #expect(FileManager.default.contents(atPath: target) == Data(content))
        #expect(OutputFile(fd: targetFD, path: target, size: UInt64(length)).writesPastThePageCache)

        // Reading: the name replaced between the data file's two opens.
        var syscalls = Syscalls.system
        let open = syscalls.open
        let opens = Mutex(0)
        syscalls.cachedPages = { _ in 0 }
        syscalls.open = { openPath, flags, mode in
            if opens.withLock({ $0 += 1; return $0 }) == 2 {
                try? theirs.write(to: URL(fileURLWithPath: root + "/swap"))
                rename(root + "/swap", openPath)
            }
            return open(openPath, flags, mode)
        }
        let data = root + "/data"
        try Data(content).write(to: URL(fileURLWithPath: data))
        let file = try DataFile.openForReading(data, fileSystem: FileSystem(syscalls: syscalls), large: true)
        #expect(opens.withLock { $0 } == 2)
        #expect(!file.readsPastThePageCache)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length + DataFile.readSlack, alignment: Self.page)
        defer { buffer.deallocate() }
        #expect(Array(try file.read(length, at: 0, in: buffer)) == Array(content))
        #expect(try DataFile.openForReading(target, fileSystem: FileSystem(syscalls: { var s = Syscalls.system; s.cachedPages = { _ in 0 }; return s }()),
                                            large: true).readsPastThePageCache)
    }

    /// Any other failure of a direct write is the write's failure.
    @Test func otherDirectWriteFailuresAreReported() throws {
        var syscalls = Syscalls.system
        let open = syscalls.open
        let directFD = Mutex<Int32?>(nil)
        syscalls.open = { path, flags, mode in
            let fd = open(path, flags, mode)
            directFD.withLock { $0 = fd }
            return fd
        }
        let pwrite = syscalls.pwrite
        syscalls.pwrite = { fd, bytes, offset in
            guard fd == directFD.withLock({ $0 }) else { return pwrite(fd, bytes, offset) }
            errno = ENOSPC
            return -1
        }
        let (root, path, fd) = try Self.newFile()
        defer { close(fd); try? FileManager.default.removeItem(atPath: root) }
        let out = OutputFile(fd: fd, path: path, size: OutputFile.directMinimum, fileSystem: FileSystem(syscalls: syscalls))
        let buffer = Self.alignedPattern(Self.page, seed: 2)
        defer { buffer.deallocate() }
        #expect(throws: IOError("write", path: path, errno: ENOSPC)) { try out.write(UnsafeRawBufferPointer(buffer), at: 0) }
        // Unaligned memory never goes direct, so it is written.
        let unaligned = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer)[1...])
        try out.write(unaligned, at: 0)
        #expect(FileManager.default.contents(atPath: path) == Data(unaligned))
    }
}
