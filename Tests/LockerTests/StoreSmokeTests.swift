import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO
import Testing
import Synchronization

@Suite struct StoreSmokeTests {
    @Test func putGetRoundTrip() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10))
        for size in [0, 1, 16383, 16384, 16385, 3 * 16384 + 7, 1 << 20] {
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 / 7) }
            try store.put(StorePath("/a/b/obj\(size)"), bytes: data, protection: .complete)
            var out: [UInt8] = []
            try store.read(StorePath("/a/b/obj\(size)")) { out.append(contentsOf: $0) }
            #expect(out == data, "size \(size)")
            if size > 100 {
                var part: [UInt8] = []
                try store.read(StorePath("/a/b/obj\(size)"), range: 50..<UInt64(size - 3)) { part.append(contentsOf: $0) }
                #expect(part == Array(data[50..<(size - 3)]))
            }
        }
        #expect(try store.list(StorePath("/a/b")).count == 7)
    }

    /// A path is split on its "/" bytes: "/" before a combining mark is one
    /// Swift Character, and splitting on Characters kept it inside a name,
    /// which a fetch would then write out as a path (through DEST/d into
    /// wherever that leads).
    @Test func pathsAreSplitOnSlashBytes() throws {
        let mark = "\u{301}x"
        #expect(try StorePath("/d/" + mark).components.map { Array($0.utf8) } == [Array("d".utf8), Array(mark.utf8)])
        #expect(try StorePath("/\u{301}/").components.map { Array($0.utf8) } == [Array("\u{301}".utf8)])
        #expect(throws: StoreError.self) { try StorePath("/a//\u{301}") }
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let store = try Store(path: root + "/s", keys: device)
        try store.put(StorePath("/d/" + mark), bytes: Array("x".utf8))
        #expect(try store.list(StorePath("/")).map(\.path.name) == ["d"])
        #expect(try store.list(StorePath("/d")).map { Array($0.path.name.utf8) } == [Array(mark.utf8)])
    }

    /// An object replaced with no class given keeps a class that was set
    /// explicitly, through `put` and through a batch; an inherited class
    /// follows the directory's default as it is now, as a new object's.
    @Test func aReplacedObjectKeepsAnExplicitClass() throws {
        try Self.withStore { store, _ in
            try store.makeDirectory(StorePath("/d"), defaultClass: ProtectionClass.none)
            let secret = try StorePath("/d/secret")
            #expect(try store.put(secret, bytes: Array("v1".utf8), protection: .complete).protectionClass == .complete)
            var info = try store.put(secret, bytes: Array("v2".utf8))
            #expect(info.protectionClass == .complete && info.protectionSource == .explicit)
            info = try store.putBatch([Self.item("/d/secret", Array("v3".utf8))])[0]
            #expect(info.protectionClass == .complete && info.protectionSource == .explicit)
            var read: [UInt8] = []
            try store.read(secret) { read.append(contentsOf: $0) }
            #expect(read == Array("v3".utf8))
            // Given again, the class given wins.
            #expect(try store.put(secret, bytes: [], protection: .completeUnlessOpen).protectionClass == .completeUnlessOpen)

            // Inherited: follows the directory's default now.
            let plain = try StorePath("/d/plain")
            #expect(try store.put(plain, bytes: Array("v1".utf8)).protectionClass == ProtectionClass.none)
            try store.setDefaultClass(.complete, ofDirectory: StorePath("/d"))
            info = try store.put(plain, bytes: Array("v2".utf8))
            #expect(info.protectionClass == .complete && info.protectionSource == .inherited("/d"))
            try store.setDefaultClass(ProtectionClass.none, ofDirectory: StorePath("/d"))
            info = try store.putBatch([Self.item("/d/plain", Array("v3".utf8))])[0]
            #expect(info.protectionClass == ProtectionClass.none && info.protectionSource == .inherited("/d"))
        }
    }

    /// Clearing a directory's default with `recursive` rewraps each object
    /// below to the class its directories then give it, with that source:
    /// it used to clear the default and leave every object as it was,
    /// still saying it inherited from the directory.
    @Test func clearingADefaultRecursivelyRewrapsToWhatTheDirectoriesGive() throws {
        try Self.withStore { store, _ in
            try store.makeDirectory(StorePath("/R"), defaultClass: ProtectionClass.none)
            try store.makeDirectory(StorePath("/R/S"), defaultClass: .complete)
            try store.put(StorePath("/R/x"), bytes: Array("x".utf8))
            try store.put(StorePath("/R/S/y"), bytes: Array("y".utf8))
            try store.setDefaultClass(.completeUnlessOpen, ofDirectory: StorePath("/R"), recursive: true)
            func info(_ path: String) throws -> ObjectInfo {
                guard case .object(let object) = try store.stat(StorePath(path)).kind else { throw StoreError.notFound(path) }
                return object
            }
            #expect(try info("/R/S/y").protectionSource == .inherited("/R"))
            // Explicit, and from a nearer directory: neither follows /R's
            // default away.
            try store.put(StorePath("/R/e"), bytes: Array("e".utf8), protection: .complete)
            try store.put(StorePath("/R/S/n"), bytes: Array("n".utf8))
            try store.setDefaultClass(nil, ofDirectory: StorePath("/R"), recursive: true)
            let x = try info("/R/x"), y = try info("/R/S/y"), e = try info("/R/e"), n = try info("/R/S/n")
            #expect(x.protectionClass == .completeUntilFirstUserAuthentication && x.protectionSource == .storeDefault)
            #expect(y.protectionClass == .complete && y.protectionSource == .inherited("/R/S"))
            #expect(e.protectionClass == .complete && e.protectionSource == .explicit)
            #expect(n.protectionClass == .complete && n.protectionSource == .inherited("/R/S"))
            var read: [UInt8] = []
            try store.read(StorePath("/R/S/y")) { read.append(contentsOf: $0) }
            #expect(read == Array("y".utf8))
        }
    }

    /// `verify --read-data` reports an object whose data the disk cannot
    /// give back (EIO) as damaged, and goes on reading the others: it used
    /// to stop the whole report at that error.
    @Test func verifyReadingDataGoesOnPastAnObjectTheDiskCannotRead() throws {
        let dataFiles = Mutex<Set<Int32>>([])
        let failed = Mutex(false)
        var syscalls = Syscalls.system
        let open = syscalls.open
        let pread = syscalls.pread
        syscalls.open = { path, flags, mode in
            let fd = open(path, flags, mode)
            if fd >= 0, path.contains("/data/") { dataFiles.withLock { _ = $0.insert(fd) } }
            return fd
        }
        // The first read of a data file fails, once.
        syscalls.pread = { fd, buffer, offset in
            if dataFiles.withLock({ $0.contains(fd) }), failed.withLock({ let first = !$0; $0 = true; return first }) {
                errno = EIO
                return -1
            }
            return pread(fd, buffer, offset)
        }
        try Self.withStore(fileSystem: FileSystem(syscalls: syscalls)) { store, _ in
            // Incompressible and larger than the inline limit: each has a
            // data file.
            for name in ["/a", "/b", "/c"] {
                try store.put(StorePath(name), bytes: (0..<300_000).map { _ in UInt8.random(in: 0...255) })
            }
            let report = try store.verify(readData: true)
            #expect(failed.withLock { $0 }, "no data file read failed")
            #expect(report.damaged.count == 1, "\(report.damaged)")
            #expect(report.damaged.first?.reason.hasPrefix("its data cannot be read: ") == true, "\(report.damaged)")
            #expect(report.objectsReadInFull == 2)
        }
    }

    /// A path made from components is not checked when it is made; the
    /// store refuses a component no entry may have before it writes
    /// anything, on every path that names an entry: an object named "/"
    /// was stored, and then listed as damage.
    @Test func aComponentNoEntryMayHaveIsRefused() throws {
        try Self.withStore { store, _ in
            try store.makeDirectory(StorePath("/d"))
            let bad = ["a/b", "/", "", ".", "..", "nul\u{0}", String(repeating: "n", count: 1025)]
            for name in bad {
                let path = StorePath(components: ["d", name])
                #expect(throws: StoreError.self, "\(name.debugDescription)") { try store.put(path, bytes: Array("x".utf8)) }
                #expect(throws: StoreError.self, "\(name.debugDescription)") { try store.makeDirectory(path) }
                #expect(throws: StoreError.self, "\(name.debugDescription)") { try store.putBatch([PutBatchItem(path: path) { _ in 0 }]) }
            }
            try store.put(StorePath("/d/ok"), bytes: Array("x".utf8))
            #expect(throws: StoreError.self) { try store.move(StorePath("/d/ok"), to: StorePath(components: ["d", "x/y"])) }
            #expect(try store.list(StorePath("/d")).map(\.path.name) == ["ok"])
            // The longest name there may be is taken.
            let longest = String(repeating: "n", count: NameCodec.maxNameLength)
            try store.put(StorePath(components: ["d", longest]), bytes: [])
            #expect(try store.list(StorePath("/d")).count == 2)
        }
    }

    /// An object of more chunks than a reader takes (its index would pass
    /// 64 MiB) is refused while it is written, by `put` and by a batch,
    /// and nothing of it stays: it used to be stored, and then never read
    /// back. The limit is lowered here through the store's options.
    @Test func anObjectOfTooManyChunksIsRefusedAndLeavesNothing() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let chunk = 16 << 10
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: UInt32(chunk), maxChunkCount: 4))
        let fits = try SecureRandom.bytes(4 * chunk)  // incompressible: too large to go inline
        try store.put(StorePath("/fits"), bytes: fits)
        var back: [UInt8] = []
        try store.read(StorePath("/fits")) { back.append(contentsOf: $0) }
        #expect(back == fits)
        let dataFiles = try FileManager.default.contentsOfDirectory(atPath: root + "/s/data")
        #expect(dataFiles.count == 1)

        let tooLarge = fits + [1]
        #expect(throws: StoreError.objectTooLarge(maxLength: UInt64(4 * chunk))) {
            try store.put(StorePath("/big"), bytes: tooLarge)
        }
        var offset = 0
        let item = PutBatchItem(path: try StorePath("/batch/big"), expectedLength: UInt64(tooLarge.count)) { buffer in
            let n = min(buffer.count, tooLarge.count - offset)
            tooLarge.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + n])) }
            offset += n
            return n
        }
        #expect(throws: StoreError.objectTooLarge(maxLength: UInt64(4 * chunk))) { try store.putBatch([item]) }
        #expect(throws: StoreError.notFound("/big")) { try store.stat(StorePath("/big")) }
        #expect((try? store.stat(StorePath("/batch/big"))) == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/s/data") == dataFiles)
        #expect(try store.verify().isClean)
    }

    @Test func anOpenEntryIsClosedWithItsObjectEvenWhenTheDeviceCannotListThem() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let keys = ForwardingKeys(device)
        let store = try Store(path: root + "/s", keys: keys, options: .init(chunkSize: 16 << 10))
        for name in ["/removed", "/reclassed", "/replaced"] {
            try store.put(StorePath(name), bytes: [1, 2, 3], protection: .completeUnlessOpen)
            #expect(try store.open(StorePath(name)).protectionClass == .completeUnlessOpen)
        }
        #expect(try device.status().openObjects.count == 3)
        // The device cannot list its open objects: each change still
        // closes its object's entry, not none.
        keys.statusFails.withLock { $0 = true }
        try store.remove(StorePath("/removed"))
        try store.setClass(StorePath("/reclassed"), to: .complete)
        // A put asks for the status (for its report) before it commits:
        // without it, nothing is stored and the entry stays.
        #expect(throws: DeviceError.integrity("status")) {
            try store.put(StorePath("/replaced"), bytes: [4], protection: .completeUnlessOpen)
        }
        var replaced: [UInt8] = []
        try store.read(StorePath("/replaced")) { replaced.append(contentsOf: $0) }
        #expect(replaced == [1, 2, 3])
        #expect(try device.status().openObjects.count == 1)
        // With that answer, the put commits; the replaced object's entry is
        // closed though the device cannot list its open objects after.
        keys.statusAnswersFirst.withLock { $0 = 1 }
        try store.put(StorePath("/replaced"), bytes: [4], protection: .completeUnlessOpen)
        keys.statusFails.withLock { $0 = false }
        #expect(try device.status().openObjects.isEmpty)
        replaced = []
        try store.read(StorePath("/replaced")) { replaced.append(contentsOf: $0) }
        #expect(replaced == [4])
        guard case .object(let reclassed) = try store.stat(StorePath("/reclassed")).kind else {
            Issue.record("/reclassed is not an object")
            return
        }
        #expect(reclassed.protectionClass == .complete)
        #expect(throws: StoreError.notFound("/removed")) { try store.stat(StorePath("/removed")) }
    }

    /// Bytes LZ4 cannot compress (xorshift64), so that chunk records sit at
    /// fixed offsets in the data file.
    static func noise(_ count: Int) -> [UInt8] {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        return (0..<count).map { _ in
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            return UInt8(truncatingIfNeeded: x >> 32)
        }
    }

    /// The pieces a positioned read hands over, from whichever thread.
    final class Pieces: @unchecked Sendable {
        private let lock = NSLock()
        private var pieces: [(offset: UInt64, bytes: [UInt8])] = []

        func add(_ offset: UInt64, _ bytes: UnsafeRawBufferPointer) {
            lock.withLock { pieces.append((offset, Array(bytes))) }
        }

        var all: [(offset: UInt64, bytes: [UInt8])] { lock.withLock { pieces.sorted { $0.offset < $1.offset } } }
    }

    /// `read(_:range:at:)` hands over every byte of the range exactly once,
    /// each at its offset, for objects inline and in a data file, and on a
    /// damaged chunk throws an integrity error having handed over only
    /// true bytes.
    @Test func positionedReadCoversTheRangeOnce() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let chunk = 16 << 10
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: UInt32(chunk), workers: 2))
        for size in [0, 1, chunk - 1, chunk, 20 * chunk + 5, 90 * chunk + 11] {
            let data = Self.noise(size)
            let path = try StorePath("/p/obj\(size)")
            try store.put(path, bytes: data, protection: .complete)
            var ranges: [Range<Int>] = [0..<size]
            if size > 2 { ranges += [1..<(size - 1), (size - 1)..<size] }
            if size > 3 * chunk { ranges += [(chunk - 1)..<(chunk + 1), (chunk / 2)..<(3 * chunk + 7), (2 * chunk)..<(3 * chunk)] }
            for range in ranges {
                let pieces = Pieces()
                try store.read(path, range: UInt64(range.lowerBound)..<UInt64(range.upperBound)) { pieces.add($0, $1) }
                var next: UInt64 = 0
                var joined: [UInt8] = []
                for piece in pieces.all {
                    #expect(piece.offset == next, "size \(size) range \(range): a gap or overlap at \(piece.offset)")
                    next = piece.offset + UInt64(piece.bytes.count)
                    joined += piece.bytes
                }
                #expect(joined == Array(data[range]), "size \(size) range \(range)")
            }
        }

        // Damage in chunk 40 of 91: an integrity error, and every byte
        // handed over before it is the object's own.
        let size = 90 * chunk + 11
        let truth = Self.noise(size)
        let header = try store.stat(try StorePath("/p/obj\(size)"))
        guard case .object(let info) = header.kind else {
            Issue.record("not an object")
            return
        }
        #expect(info.chunks == 91)
        let dataDirectory = root + "/s/data"
        var damaged: String?
        for name in try FileManager.default.contentsOfDirectory(atPath: dataDirectory) {
            let attributes = try FileManager.default.attributesOfItem(atPath: dataDirectory + "/" + name)
            if (attributes[.size] as? Int ?? 0) > 90 * chunk { damaged = dataDirectory + "/" + name }
        }
        let file = try #require(damaged)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[40 * (chunk + 17) + 100] ^= 0x01
        try bytes.write(to: URL(fileURLWithPath: file))
        let pieces = Pieces()
        #expect {
            try store.read(try StorePath("/p/obj\(size)")) { pieces.add($0, $1) }
        } throws: { error in
            if case StoreError.integrity = error { return true }
            return false
        }
        for piece in pieces.all {
            #expect(piece.bytes == Array(truth[Int(piece.offset)..<(Int(piece.offset) + piece.bytes.count)]))
            #expect(piece.offset != UInt64(40 * chunk), "the damaged chunk was handed over")
        }
    }

    /// Opening without `create` never makes a store: a missing path or an
    /// empty directory is `noStore`, and nothing appears. A directory of
    /// other files is `notAStore` either way and stays as it was; an
    /// embedded device is not made for one.
    @Test func openingWithoutCreateMakesNothing() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: nil,
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let files = FileManager.default
        #expect(throws: StoreError.noStore(root + "/missing/s")) { try Store(path: root + "/missing/s", keys: device, create: false) }
        #expect(!files.fileExists(atPath: root + "/missing"))
        try files.createDirectory(atPath: root + "/empty", withIntermediateDirectories: false)
        #expect(throws: StoreError.noStore(root + "/empty")) { try Store(path: root + "/empty", keys: device, create: false) }
        #expect(try files.contentsOfDirectory(atPath: root + "/empty").isEmpty)

        try files.createDirectory(atPath: root + "/documents", withIntermediateDirectories: false)
        #expect(files.createFile(atPath: root + "/documents/notes.txt", contents: Data("mine".utf8)))
        for create in [false, true] {
            #expect(throws: StoreError.notAStore(root + "/documents")) { try Store(path: root + "/documents", keys: device, create: create) }
        }
        #expect(try files.contentsOfDirectory(atPath: root + "/documents") == ["notes.txt"])
        #expect(throws: StoreError.notAStore(root + "/documents")) {
            try Store.embedded(storeDirectory: root + "/documents", deviceDirectory: root + "/embedded", passcode: nil,
                               options: .init(passcodeCost: .fixed(logN: 10)))
        }
        #expect(!files.fileExists(atPath: root + "/embedded"))

        // Made once with `create`, the store opens without it.
        let made = try Store(path: root + "/empty", keys: device)
        try made.put(StorePath("/x"), protection: ProtectionClass.none) { _ in 0 }
        let reopened = try Store(path: root + "/empty", keys: device, create: false)
        #expect(try reopened.list(StorePath("/")).map(\.path.name) == ["x"])
    }

    /// The directories a new store and device are made of are synced
    /// into their parents, the missing parents of their paths too: a
    /// crash after `init` returned cannot take away a directory whose
    /// files were synced. Each of the three checked is synced by nothing
    /// else.
    @Test func newStoreAndDeviceDirectoriesAreSyncedIntoTheirParents() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        let synced = Mutex<[String]>([])
        let syscalls = Self.syscalls { path, sync in
            if let path { synced.withLock { $0.append(path) } }
            return sync()
        }
        let store = try Store.embedded(
            storeDirectory: root + "/new/store", deviceDirectory: root + "/new/device", passcode: nil,
            options: .init(passcodeCost: .fixed(logN: 10)), storeOptions: .init(fileSystem: FileSystem(syscalls: syscalls)))
        try store.put(StorePath("/x"), protection: ProtectionClass.none) { _ in 0 }
        let paths = synced.withLock { $0 }
        for directory in [root, root + "/new", root + "/new/store"] {
            #expect(paths.contains(directory), "\(directory) not synced: \(paths)")
        }
    }

    /// A put whose only failure is the sync of its directory after the
    /// commit says that the object was stored (and which), not a bare
    /// I/O error: the new version is in place and readable, an object
    /// put with `keepOpen` stays open, and the replaced data file stays
    /// (as garbage) until a sync has made the new name durable.
    @Test func aPutWhoseDirectorySyncFailsAfterTheCommitSaysItWasStored() throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let failNamespaceDirectorySync = Mutex(false)
        let syscalls = Self.syscalls { path, sync in
            let path = path ?? ""
            var isDirectory: ObjCBool = false
            let inNamespace = path.hasPrefix(root + "/s/ns/") && FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
                && isDirectory.boolValue
            if inNamespace, failNamespaceDirectorySync.withLock({ $0 }) {
                errno = EIO
                return -1
            }
            return sync()
        }
        let store = try Store.embedded(
            storeDirectory: root + "/s", deviceDirectory: root + "/d", passcode: nil,
            options: .init(passcodeCost: .fixed(logN: 10)), storeOptions: .init(fileSystem: FileSystem(syscalls: syscalls)))
        func put(_ path: String, _ bytes: [UInt8], keepOpen: Bool = false) throws {
            var offset = 0
            try store.put(StorePath(path), protection: .completeUnlessOpen, keepOpen: keepOpen) { buffer in
                let n = min(buffer.count, bytes.count - offset)
                buffer.copyBytes(from: bytes[offset..<(offset + n)])
                offset += n
                return n
            }
        }
        func contents(_ path: String) throws -> [UInt8] {
            var out: [UInt8] = []
            try store.read(StorePath(path)) { out += $0 }
            return out
        }
        func dataFiles() throws -> Set<String> { Set(try FileManager.default.contentsOfDirectory(atPath: root + "/s/data")) }
        // Incompressible, so that it takes a data file.
        var generator = SystemRandomNumberGenerator()
        let large = (0..<(2 * ObjectHeader.maxInlineDataLength)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try store.makeDirectory(StorePath("/d"))
        try put("/d/small", Array("old".utf8))
        try put("/d/large", large.reversed())
        let oldData = try dataFiles()
        try #require(oldData.count == 1)

        failNamespaceDirectorySync.withLock { $0 = true }
        let expected = StoreError.storedNotDurable(path: "/d/small", reason: String(cString: strerror(EIO)))
        #expect(throws: expected) { try put("/d/small", Array("new".utf8), keepOpen: true) }
        #expect(throws: StoreError.storedNotDurable(path: "/d/large", reason: String(cString: strerror(EIO)))) {
            try put("/d/large", large)
        }
        failNamespaceDirectorySync.withLock { $0 = false }

        #expect(try contents("/d/small") == Array("new".utf8))
        #expect(try contents("/d/large") == large)
        guard case .object(let small) = try store.stat(StorePath("/d/small")).kind else {
            Issue.record("/d/small is not an object")
            return
        }
        #expect(try store.device?.status().openObjects.map(\.id) == [small.objectID])
        // The old data file stays beside the new one until a repair.
        #expect(try dataFiles().isSuperset(of: oldData))
        #expect(try dataFiles().count == 2)

        // Control: with the disk mended, the same put succeeds.
        try put("/d/small", Array("again".utf8))
        #expect(try contents("/d/small") == Array("again".utf8))
    }

    /// The system's calls, each `fsync` handed to `fsync` with the path
    /// its descriptor was opened at through this table (nil if it was
    /// not) and the call itself, to make or not.
    static func syscalls(fsync hook: @escaping @Sendable (_ path: String?, _ sync: () -> Int32) -> Int32) -> Syscalls {
        let opened = Mutex<[Int32: String]>([:])
        var syscalls = Syscalls.system
        let (open, fsync) = (syscalls.open, syscalls.fsync)
        syscalls.open = { path, flags, mode in
            let fd = open(path, flags, mode)
            if fd >= 0 { opened.withLock { $0[fd] = path } }
            return fd
        }
        syscalls.fsync = { fd in hook(opened.withLock { $0[fd] }) { fsync(fd) } }
        return syscalls
    }

    /// A store on a fresh device, removed at the end of `body`.
    static func withStore(temporaries: any TemporaryCleanups = NoTemporaryCleanups(), fileSystem: FileSystem = .init(),
                          _ body: (Store, String) throws -> Void) throws {
        let root = NSTemporaryDirectory() + "lks-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let options = Store.Options(chunkSize: 16 << 10, workers: 2, fileSystem: fileSystem, temporaries: temporaries)
        try body(try Store(path: root + "/s", keys: device, options: options), root + "/s")
    }

    static func item(_ path: String, _ data: [UInt8]) throws -> PutBatchItem {
        var offset = 0
        return PutBatchItem(path: try StorePath(path)) { buffer in
            let n = min(buffer.count, data.count - offset)
            buffer.copyBytes(from: data[offset..<(offset + n)])
            offset += n
            return n
        }
    }

    /// A batch reads small sources ahead and stores what each source
    /// gives whatever its expected length said: the same, fewer bytes,
    /// more (past the inline limit, into a data file), in small pieces,
    /// and many more bytes than the read-ahead window holds; a source
    /// expected to be large, or of unknown length, is read as it is
    /// written. A source that fails fails the batch, and nothing of it is
    /// stored.
    @Test func readAheadStoresWhatEachSourceGives() throws {
        try Self.withStore { store, root in
            func item(_ path: String, _ data: [UInt8], expected: Int?, piece: Int = .max) throws -> PutBatchItem {
                var offset = 0
                return PutBatchItem(path: try StorePath(path), expectedLength: expected.map(UInt64.init)) { buffer in
                    let n = min(buffer.count, piece, data.count - offset)
                    buffer.copyBytes(from: data[offset..<(offset + n)])
                    offset += n
                    return n
                }
            }
            func pattern(_ count: Int, _ step: UInt32) -> [UInt8] {
                (0..<count).map { UInt8(truncatingIfNeeded: (UInt32($0) &* step) >> 7) }
            }
            var cases: [(String, [UInt8], Int?, Int)] = []
            cases.append(("/r/same", pattern(3000, 1 << 7), 3000, .max))
            cases.append(("/r/fewer", pattern(1000, 3 << 7), 4000, .max))
            // Incompressible enough to need a data file.
            cases.append(("/r/more", pattern(70_000, 2_654_435_761), 1000, .max))
            cases.append(("/r/pieces", pattern(2500, 5 << 7), 2500, 100))
            cases.append(("/r/large", pattern(90_000, 40_503), 90_000, .max))
            cases.append(("/r/unknown", pattern(500, 9 << 7), nil, .max))
            // 300 objects of 20–50 KiB: the window (2 MiB) is reused many
            // times over.
            for k in 0..<300 { cases.append(("/w/n\(k)", pattern(20_000 + 100 * k, 2_654_435_761 &+ UInt32(k)), 20_000 + 100 * k, .max)) }
            for batch in [Array(cases[..<6]), Array(cases[6...])] {
                try store.putBatch(try batch.map { try item($0.0, $0.1, expected: $0.2, piece: $0.3) })
            }
            for (path, data, _, _) in cases {
                var back: [UInt8] = []
                try store.read(try StorePath(path)) { back += $0 }
                #expect(back == data, "\(path)")
            }

            struct Unreadable: Error {}
            var failing = try (0..<100).map { try item("/f/n\($0)", pattern(5000, UInt32($0) + 1), expected: 5000) }
            failing[50] = PutBatchItem(path: try StorePath("/f/bad"), expectedLength: 10) { _ in throw Unreadable() }
            #expect(throws: Unreadable.self) { try store.putBatch(failing) }
            #expect(throws: StoreError.self) { try store.stat(try StorePath("/f/n0")) }
            #expect(Self.temporaries(under: root).isEmpty)
        }
    }

    /// Small sources are read several at once, more than the writers (two
    /// here): each source waits a moment for others to start. With no
    /// expected length, no more than the writers read at once.
    @Test func smallSourcesAreReadSeveralAtOnce() throws {
        try Self.withStore { store, _ in
            func concurrency(expected: UInt64?) throws -> Int {
                let state = Mutex((active: 0, most: 0))
                let items = try (0..<12).map { k in
                    var started = false
                    return PutBatchItem(path: try StorePath("/c\(expected ?? 0)/n\(k)"), expectedLength: expected) { buffer in
                        if started { return 0 }
                        started = true
                        state.withLock { $0.active += 1; $0.most = max($0.most, $0.active) }
                        let deadline = Date().addingTimeInterval(0.3)
                        while state.withLock({ $0.active }) < 4, Date() < deadline { usleep(1000) }
                        state.withLock { $0.active -= 1 }
                        buffer[0] = UInt8(k)
                        return 1
                    }
                }
                try store.putBatch(items)
                return state.withLock { $0.most }
            }
            let ahead = try concurrency(expected: 1)
            let unknown = try concurrency(expected: nil)
            #expect(ahead >= 4, "\(ahead) sources read at once")
            #expect(unknown <= 2, "\(unknown) sources read at once")
        }
    }

    /// Every file under `root` whose name marks a write in progress.
    static func temporaries(under root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter { $0.contains(".tmp-") }
    }

    static func names(_ store: Store, _ path: String) throws -> [String] {
        try store.list(try StorePath(path)).map(\.path.name).sorted()
    }

    /// rm -r of a directory a batch has staged into takes the batch's
    /// temporaries with it; the batch's commit then says the directory
    /// was removed meanwhile, rather than a raw rename error naming the
    /// store's internal path, and leaves nothing behind.
    @Test func aBatchWhoseDirectoryIsRemovedMeanwhileSaysSo() throws {
        try Self.withStore { store, root in
            try store.putBatch([try Self.item("/d/keep", Array(repeating: 1, count: 100))])
            let batch = try store.stageBatch([try Self.item("/d/new", Array(repeating: 2, count: 300)),
                                              try Self.item("/d/keep", Array(repeating: 3, count: 300))])
            #expect(Self.temporaries(under: root + "/ns").count == 2)
            try store.remove(try StorePath("/d"), recursive: true)
            #expect(throws: StoreError.changedMeanwhile(path: "/d", what: "moved or removed it")) { try store.commit(batch) }
            #expect(throws: StoreError.notFound("/d")) { try store.stat(try StorePath("/d")) }
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try store.verify(readData: true).isClean)
            // The store takes the same paths again.
            try store.putBatch([try Self.item("/d/new", Array(repeating: 4, count: 300))])
            var out: [UInt8] = []
            try store.read(try StorePath("/d/new")) { out.append(contentsOf: $0) }
            #expect(out == Array(repeating: 4, count: 300))
        }
    }

    /// The same for a directory moved meanwhile. Its header temporary
    /// went with it, to a place the batch does not know: readers ignore
    /// it, and once the batch has ended verify calls it garbage, which
    /// --repair removes, as after a crash.
    @Test func aBatchWhoseDirectoryIsMovedMeanwhileSaysSo() throws {
        try Self.withStore { store, root in
            try store.putBatch([try Self.item("/d/keep", Array(repeating: 1, count: 100))])
            let batch = try store.stageBatch([try Self.item("/d/new", Array(repeating: 2, count: 300))])
            try store.move(try StorePath("/d"), to: try StorePath("/e"))
            let moved = Self.temporaries(under: root + "/ns")
            #expect(moved.count == 1, "the temporary moved with its directory")
            #expect(throws: StoreError.changedMeanwhile(path: "/d", what: "moved or removed it")) { try store.commit(batch) }
            #expect(try Self.names(store, "/e") == ["keep"])
            let report = try store.verify(readData: true, repair: true)
            #expect(report.damaged.isEmpty)
            #expect(report.removed == moved.map { "ns/" + $0 })
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try store.verify(readData: true).isClean)
        }
    }

    /// rm -r of a directory that another writer keeps storing into removes
    /// what was stored meanwhile too, or says the directory kept changing;
    /// it never says "not empty" (with a hint to use rm -r, which it is).
    @Test func removingATreeWhileObjectsAreStoredInItRemovesThemToo() throws {
        try Self.withStore { store, _ in
            var storedMeanwhile = 0
            for round in 0..<6 {
                for i in 0..<150 { try store.putBatch([try Self.item("/d/s\(i % 5)/o\(i)", [UInt8(i)])]) }
                let stop = Atomic(false)
                let stored = Atomic(0)
                let writerDone = DispatchSemaphore(value: 0)
                // Another thread of the same store stands for another
                // process: every change takes the store lock anew. Its own
                // thread, so that it runs beside the removal on any number
                // of cores; bounded, so that a removal that never ends
                // cannot keep it going.
                Thread.detachNewThread {
                    var n = 0
                    while !stop.load(ordering: .acquiring) && n < 20_000 {
                        n += 1
                        if (try? store.putBatch([try Self.item("/d/s\(n % 5)/new\(n)", [1, 2, 3])])) != nil {
                            stored.add(1, ordering: .relaxed)
                        }
                    }
                    writerDone.signal()
                }
                usleep(UInt32(round) * 2_000)
                var removal: (any Error)?
                do {
                    try store.remove(try StorePath("/d"), recursive: true)
                } catch {
                    removal = error
                }
                stop.store(true, ordering: .releasing)
                writerDone.wait()
                storedMeanwhile += stored.load(ordering: .relaxed)
                if let error = removal {
                    // /d, or a directory below it that kept changing.
                    guard case .changedMeanwhile(let path, "kept storing objects in it")? = error as? StoreError, path.hasPrefix("/d") else {
                        Issue.record("round \(round): \(error)")
                        continue
                    }
                }
                _ = try? store.remove(try StorePath("/d"), recursive: true)
                #expect(try store.verify(repair: true).damaged.isEmpty)
            }
            // Else the writer stored nothing in any round: nothing raced.
            #expect(storedMeanwhile > 0)
        }
    }

    /// makeDirectories creates what is missing, parents included, keeps
    /// what exists (with the objects in it), leaves no temporary, and with
    /// an object in the way creates nothing.
    @Test func makeDirectoriesCreatesOnlyWhatIsMissing() throws {
        try Self.withStore { store, root in
            try store.putBatch([try Self.item("/a/keep", Array(repeating: 7, count: 300))])
            try store.setDefaultClass(.complete, ofDirectory: try StorePath("/a"))
            try store.makeDirectories([try StorePath("/a/b/c"), try StorePath("/a/d"), try StorePath("/x"), try StorePath("/a/b")])
            #expect(try Self.names(store, "/") == ["a", "x"])
            #expect(try Self.names(store, "/a") == ["b", "d", "keep"])
            #expect(try Self.names(store, "/a/b") == ["c"])
            #expect(try Self.names(store, "/a/b/c").isEmpty)
            var kept: [UInt8] = []
            try store.read(try StorePath("/a/keep")) { kept += $0 }
            #expect(kept == Array(repeating: 7, count: 300))
            // The existing directory kept its record (its default class).
            guard case .directory(let info) = try store.stat(try StorePath("/a")).kind else {
                Issue.record("/a is not a directory")
                return
            }
            #expect(info.defaultClass == .complete)
            // New objects go into the new directories.
            try store.putBatch([try Self.item("/a/b/c/new", [1, 2, 3])])
            #expect(try Self.names(store, "/a/b/c") == ["new"])
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try store.verify().isClean)

            // Again: nothing to create, nothing changes.
            try store.makeDirectories([try StorePath("/a/b/c"), try StorePath("/x")])
            #expect(try Self.names(store, "/") == ["a", "x"])

            // An object in the way: nothing is created, not even /n.
            #expect {
                try store.makeDirectories([try StorePath("/n/m"), try StorePath("/a/keep/sub")])
            } throws: { error in
                if case StoreError.notADirectory = error { return true }
                return false
            }
            #expect(try Self.names(store, "/") == ["a", "x"])
            #expect(Self.temporaries(under: root).isEmpty)
        }
    }

    /// `verify(repair:)` while a batch is staged (its headers written as
    /// temporaries beside their entries, not committed) takes none of them
    /// for garbage, and the batch then commits; with no batch staged, a
    /// header temporary a crash left is garbage, and repair removes it.
    @Test func verifyRepairLeavesAStagedBatchAlone() throws {
        try Self.withStore { store, root in
            // /d exists, so the batch's headers are temporaries.
            try store.putBatch([try Self.item("/d/old", [9, 9])])
            let staged = try store.stageBatch([try Self.item("/d/old", [1]), try Self.item("/d/new", [2, 3])])
            let during = Self.temporaries(under: root)
            #expect(during.count == 2)
            let report = try store.verify(repair: true)
            #expect(report.garbage.isEmpty)
            #expect(report.removed.isEmpty)
            #expect(Self.temporaries(under: root) == during)
            try store.commit(staged)
            for (name, expected) in [("old", [UInt8(1)]), ("new", [2, 3])] {
                var bytes: [UInt8] = []
                try store.read(try StorePath("/d/" + name)) { bytes += $0 }
                #expect(bytes == expected)
            }
            #expect(Self.temporaries(under: root).isEmpty)

            // What a crash in the middle of a batch leaves.
            let leftover = try #require(during.first)
            #expect(FileManager.default.createFile(atPath: root + "/" + leftover, contents: Data([1, 2, 3])))
            let repaired = try store.verify(repair: true)
            #expect(repaired.garbage == [leftover])
            #expect(repaired.removed == [leftover])
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try store.verify().isClean)
        }
    }

    /// A staged batch changes nothing a reader sees until committed;
    /// released uncommitted, it removes what it wrote; it commits once.
    @Test func stagedBatchIsInvisibleUntilCommitted() throws {
        try Self.withStore { store, root in
            let large = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
            try store.putBatch([try Self.item("/d/old", [9, 9])])
            let dataFiles = { (try? FileManager.default.contentsOfDirectory(atPath: root + "/data").count) ?? -1 }
            let before = dataFiles()
            do {
                let staged = try store.stageBatch([try Self.item("/d/old", [1]), try Self.item("/d/big", Self.noise(200_000))])
                #expect(staged.count == 2)
                #expect(try Self.names(store, "/d") == ["old"])
                var old: [UInt8] = []
                try store.read(try StorePath("/d/old")) { old += $0 }
                #expect(old == [9, 9])
                #expect(dataFiles() == before + 1, "the large object's data file is written when staged")
                // Released here, uncommitted.
            }
            #expect(dataFiles() == before)
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try Self.names(store, "/d") == ["old"])
            #expect(try store.verify().isClean)

            let staged = try store.stageBatch([try Self.item("/d/big", large), try Self.item("/d/old", [1])])
            let next = try store.stageBatch([try Self.item("/d/later", [2])])
            #expect(try store.commit(staged).map(\.path.name) == ["big", "old"])
            #expect(try Self.names(store, "/d") == ["big", "old"])
            #expect(throws: StoreError.self) { try store.commit(staged) }
            try store.commit(next)
            var big: [UInt8] = []
            try store.read(try StorePath("/d/big")) { big += $0 }
            #expect(big == large)
            #expect(try Self.names(store, "/d") == ["big", "later", "old"])
            #expect(Self.temporaries(under: root).isEmpty)
            #expect(try store.verify().isClean)
        }
    }
}
