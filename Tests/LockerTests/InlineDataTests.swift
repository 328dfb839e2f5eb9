import Foundation
@testable import LockerStore
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO
import Synchronization
import Testing

/// Small objects keep their data in their header file (docs/format.md,
/// "Object header"): no data file is made for them, and every operation
/// that rewrites a header carries the data along.
@Suite struct InlineDataTests {
    let root = NSTemporaryDirectory() + "lki-" + UUID().uuidString.prefix(8)

    func makeStore() throws -> Store {
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        return try Store(path: root + "/s", keys: device)
    }

    func put(_ store: Store, _ path: String, _ data: [UInt8], _ cls: ProtectionClass? = .complete) throws {
        try store.put(StorePath(path), bytes: data, protection: cls)
    }

    func get(_ store: Store, _ path: String) throws -> [UInt8] {
        var out: [UInt8] = []
        try store.read(StorePath(path)) { out.append(contentsOf: $0) }
        return out
    }

    var dataFiles: [String] { (try? FileManager.default.contentsOfDirectory(atPath: root + "/s/data")) ?? [] }

    func bytes(_ count: Int, seed: UInt8) -> [UInt8] {
        // Incompressible enough that the size decides, not LZ4.
        var state = UInt64(seed) &+ 0x9e37_79b9_7f4a_7c15
        return (0..<count).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    @Test func smallObjectsMakeNoDataFileAndLargeOnesDo() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try makeStore()
        // Random data is stored raw: data = n + 17 (record) + 20 (index).
        let largestInline = ObjectHeader.maxInlineDataLength - 37
        for (size, inline) in [(0, true), (1, true), (16_000, true), (largestInline, true), (largestInline + 1, false)] {
            let before = dataFiles.count
            let data = bytes(size, seed: 1)
            try put(store, "/o\(size)", data)
            #expect(dataFiles.count == before + (inline ? 0 : 1), "size \(size)")
            #expect(try get(store, "/o\(size)") == data, "size \(size)")
            guard case .object(let info) = try store.stat(StorePath("/o\(size)")).kind else {
                Issue.record("not an object")
                continue
            }
            // Stored size counts the one header file, or the header and data file.
            #expect(info.storedSize >= UInt64(size) + 37, "size \(size): stored \(info.storedSize)")
            #expect(info.storedSize < UInt64(size) + 37 + 1024, "size \(size): stored \(info.storedSize)")
        }
        var part: [UInt8] = []
        try store.read(StorePath("/o16000"), range: 100..<9000) { part.append(contentsOf: $0) }
        #expect(part == Array(bytes(16_000, seed: 1)[100..<9000]))
        #expect(try store.verify(readData: true).isClean)
    }

    @Test func anObjectOfManyBatchesThatCompressesToLittleIsInlineAndOneThatDoesNotIsWhole() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        // 16 KiB chunks, one worker: a batch is two chunks (32 KiB).
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10, workers: 1))
        let zeros = [UInt8](repeating: 0, count: 300 << 10)
        let cases: [(name: String, data: [UInt8], inline: Bool)] = [
            // Ten batches of zeros: about 2 KiB stored.
            ("zeros", zeros, true),
            // The held records go to the data file when a later batch
            // takes them past the limit (writes queued after them) ...
            ("late", bytes(48 << 10, seed: 2) + zeros + bytes(30 << 10, seed: 3), false),
            // ... or when the last batch does.
            ("last", bytes(64 << 10, seed: 4), false),
        ]
        for item in cases {
            let before = dataFiles.count
            try put(store, "/" + item.name, item.data)
            #expect(dataFiles.count == before + (item.inline ? 0 : 1), "\(item.name)")
            #expect(try get(store, "/" + item.name) == item.data, "\(item.name)")
            var part: [UInt8] = []
            try store.read(StorePath("/" + item.name), range: 40_000..<60_000) { part.append(contentsOf: $0) }
            #expect(part == Array(item.data[40_000..<60_000]), "\(item.name)")
        }
        // The same through a batch (put -r's path, one worker per object).
        let before = dataFiles.count
        try store.makeDirectory(StorePath("/batch"))
        try store.putBatch(cases.map { PutBatchItem(path: try! StorePath("/batch/" + $0.name), source: Self.source($0.data)) })
        #expect(dataFiles.count == before + cases.filter { !$0.inline }.count)
        for item in cases { #expect(try get(store, "/batch/" + item.name) == item.data, "batch \(item.name)") }
        #expect(try store.verify(readData: true).isClean)
    }

    @Test func replacingMovesBetweenInlineAndADataFileWithoutLeavingData() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try makeStore()
        let small = bytes(5000, seed: 2), large = bytes(200_000, seed: 3)
        try put(store, "/x", small)
        #expect(dataFiles.isEmpty)
        try put(store, "/x", large)
        #expect(dataFiles.count == 1)
        #expect(try get(store, "/x") == large)
        try put(store, "/x", small)
        #expect(dataFiles.isEmpty, "the replaced version's data file was left")
        #expect(try get(store, "/x") == small)
        // The same through a batch.
        try store.putBatch([PutBatchItem(path: StorePath("/x"), protection: ProtectionClass.none, source: Self.source(large)),
                            PutBatchItem(path: StorePath("/y"), protection: ProtectionClass.none, source: Self.source(small))])
        #expect(dataFiles.count == 1)
        try store.putBatch([PutBatchItem(path: StorePath("/x"), protection: ProtectionClass.none, source: Self.source(small))])
        #expect(dataFiles.isEmpty)
        #expect(try get(store, "/x") == small && get(store, "/y") == small)
        try store.remove(StorePath("/x"))
        try store.remove(StorePath("/y"))
        #expect(dataFiles.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/s/ns") == [".dir"])
        #expect(try store.verify().isClean)
    }

    /// A batch reads small sources ahead, and seals an object of one chunk
    /// that it read whole from where it was read; any other object, a
    /// source that grew past what was expected among them, goes through the
    /// stream. Either way each object is what its source gave.
    @Test func aBatchReadingAheadStoresWhatEachSourceGave() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        // Two workers: sources are read ahead. 16 KiB chunks.
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10, workers: 2))
        let text = Array(String(repeating: "a small object, sealed whole. ", count: 400).utf8)
        let cases: [(name: String, data: [UInt8], expected: UInt64, inline: Bool)] = [
            ("empty", [], 0, true),
            ("one", [7], 1, true),
            ("text", Array(text[..<5000]), 5000, true),
            ("chunk", bytes(16 << 10, seed: 5), 16 << 10, true),
            // Two chunks: through the stream, still inline.
            ("two", bytes((16 << 10) + 1, seed: 6), (16 << 10) + 1, true),
            ("three", bytes(40_000, seed: 7), 40_000, true),
            // Grew since it was looked at: the rest is read by the stream.
            ("grew", bytes(3000, seed: 8), 100, true),
            ("grewPastInline", bytes(70_000, seed: 9), 100, false),
            // Shrank: what it gave is the object.
            ("shrank", Array(text[..<4000]), 9000, true),
        ]
        try store.makeDirectory(StorePath("/batch"))
        try store.putBatch(cases.map {
            PutBatchItem(path: try! StorePath("/batch/" + $0.name), expectedLength: $0.expected, source: Self.source($0.data))
        })
        #expect(dataFiles.count == cases.filter { !$0.inline }.count)
        for item in cases {
            #expect(try get(store, "/batch/" + item.name) == item.data, "\(item.name)")
            guard case .object(let info) = try store.stat(StorePath("/batch/" + item.name)).kind else {
                Issue.record("\(item.name): not an object")
                continue
            }
            #expect(info.size == UInt64(item.data.count), "\(item.name)")
        }
        #expect(try store.verify(readData: true).isClean)
    }

    /// An object is sealed whole only when its record and index fit inline
    /// whatever it compresses to: at 16 KiB chunks the chunk decides, from
    /// 64 KiB the inline limit does (57,344 bytes less 37).
    @Test func whatIsSealedWhole() {
        let limit = ObjectHeader.maxInlineDataLength - 37
        #expect(Store.sealsWhole(length: 0, chunkSize: 16 << 10, maxChunkCount: 1))
        #expect(Store.sealsWhole(length: 16 << 10, chunkSize: 16 << 10, maxChunkCount: 1))
        #expect(!Store.sealsWhole(length: (16 << 10) + 1, chunkSize: 16 << 10, maxChunkCount: 1))
        #expect(Store.sealsWhole(length: limit, chunkSize: 64 << 10, maxChunkCount: 1 << 20))
        #expect(!Store.sealsWhole(length: limit + 1, chunkSize: 64 << 10, maxChunkCount: 1 << 20))
        #expect(!Store.sealsWhole(length: 10, chunkSize: 16 << 10, maxChunkCount: 0))
    }

    /// At the inline limit, in 64 KiB chunks, through a batch reading ahead:
    /// the largest object sealed whole stays inline, one byte more of
    /// incompressible data takes a data file.
    @Test func aBatchAtTheInlineLimit() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 64 << 10, workers: 2))
        let limit = ObjectHeader.maxInlineDataLength - 37
        let cases: [(name: String, data: [UInt8], inline: Bool)] = [
            ("atLimit", bytes(limit, seed: 10), true),
            ("pastLimit", bytes(limit + 1, seed: 11), false),
            ("small", bytes(10, seed: 12), true),
        ]
        try store.makeDirectory(StorePath("/l"))
        try store.putBatch(cases.map {
            PutBatchItem(path: try! StorePath("/l/" + $0.name), expectedLength: UInt64($0.data.count), source: Self.source($0.data))
        })
        #expect(dataFiles.count == 1)
        for item in cases {
            #expect(try get(store, "/l/" + item.name) == item.data, "\(item.name)")
            guard case .object(let info) = try store.stat(StorePath("/l/" + item.name)).kind else {
                Issue.record("\(item.name): not an object")
                continue
            }
            // Data files are named by object ID.
            #expect(dataFiles.contains(info.objectID) == !item.inline, "\(item.name)")
        }
        #expect(try store.verify(readData: true).isClean)
    }

    /// setclass and mv rewrite the header file, which for a small object
    /// holds the data: it must come along unchanged.
    @Test func setClassAndMoveCarryTheData() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try makeStore()
        let small = bytes(3000, seed: 4)
        try put(store, "/a/obj", small, .completeUntilFirstUserAuthentication)
        try store.setClass(StorePath("/a/obj"), to: .completeUnlessOpen)
        #expect(try get(store, "/a/obj") == small)
        try store.makeDirectory(StorePath("/b"))
        try store.move(StorePath("/a/obj"), to: StorePath("/b/moved"))
        #expect(try get(store, "/b/moved") == small)
        try store.setDefaultClass(ProtectionClass.none, ofDirectory: StorePath("/b"), recursive: true)
        #expect(try get(store, "/b/moved") == small)
        guard case .object(let info) = try store.stat(StorePath("/b/moved")).kind else {
            Issue.record("not an object")
            return
        }
        #expect(info.protectionClass == ProtectionClass.none)
        #expect(dataFiles.isEmpty)
        #expect(try store.verify(readData: true).isClean)
    }

    /// A fetch listing keeps at most its budget of inline data; entries
    /// past it are read again from their header files, with the same
    /// result.
    @Test func fetchListingsPastTheirInlineBudgetStillRead() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try makeStore()
        // 400 objects of 50 KB: 20 MB inline, past the 16 MiB budget.
        let count = 400
        var items: [PutBatchItem] = []
        for i in 0..<count {
            items.append(PutBatchItem(path: try StorePath("/many/f\(i)"), protection: ProtectionClass.none, source: Self.source(self.bytes(50_000, seed: UInt8(i % 251)))))
        }
        try store.putBatch(items)
        #expect(dataFiles.isEmpty)
        let listing = try store.listForFetch(StorePath("/many"))
        #expect(listing.objects.count == count)
        let prepared = try store.prepareReads(listing.objects)
        for read in prepared {
            var out: [UInt8] = []
            try store.read(read) { out.append(contentsOf: $0) }
            let i = Int(read.path.name.dropFirst())!
            #expect(out == bytes(50_000, seed: UInt8(i % 251)), "\(read.path)")
        }
    }

    /// Where a listing does not say which entries are directories (a file
    /// system without `d_type`), the store looks at each entry instead,
    /// and lists and fetches the same tree; where it does say, the fetch
    /// of a directory does not look at each object again. A listing that
    /// says wrongly (types altered on disk) shows damage or the truth,
    /// never another entry.
    @Test func listingsWithAndWithoutEntryTypesAgree() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        try Store(path: root + "/s", keys: device).putBatch((0..<20).map { i in
            PutBatchItem(path: try! StorePath(i % 4 == 0 ? "/t/sub\(i)/f\(i)" : "/t/f\(i)"), protection: ProtectionClass.none,
                         source: Self.source(self.bytes(100 + i, seed: UInt8(i))))
        })
        let lstats = Mutex(0)
        /// nil: the listing as the kernel gives it.
        func store(typed: Bool?) throws -> Store {
            var syscalls = Syscalls.system
            let list = syscalls.listDirectory, lstat = syscalls.lstat
            if typed != true {
                // Untyped, or every entry said to be a directory.
                let said: Bool? = typed == nil ? nil : true
                syscalls.listDirectory = { fd in list(fd)?.map { DirectoryEntry(name: $0.name, isDirectory: said) } }
            }
            syscalls.lstat = { path in
                lstats.withLock { $0 += 1 }
                return lstat(path)
            }
            return try Store(path: root + "/s", keys: device, options: .init(fileSystem: FileSystem(syscalls: syscalls)))
        }
        func fetched(_ store: Store) throws -> (listed: [String], fetched: [String: [UInt8]], lstats: Int) {
            lstats.withLock { $0 = 0 }
            let listed = try store.list(StorePath("/t")).map(\.path.description)
            let listing = try store.listForFetch(StorePath("/t"))
            var out: [String: [UInt8]] = [:]
            for read in try store.prepareReads(listing.objects) {
                try store.read(read) { out[read.path.description, default: []].append(contentsOf: $0) }
            }
            return (listed + listing.directories.map(\.description), out, lstats.withLock { $0 })
        }
        let typed = try fetched(store(typed: true))
        let untyped = try fetched(store(typed: nil))
        let allDirectories = try fetched(store(typed: false))
        #expect(typed.listed == untyped.listed)
        #expect(typed.listed == allDirectories.listed)
        #expect(typed.listed.count == 25)
        #expect(typed.fetched == untyped.fetched)
        #expect(typed.fetched == allDirectories.fetched)
        #expect(typed.fetched.count == 15)
        #expect(typed.fetched["/t/f1"] == bytes(101, seed: 1))
        // 15 objects listed twice (list, then the fetch's listing): each
        // looked at by lstat when the listing does not say it is a file.
        #expect(untyped.lstats - typed.lstats == 30)
        #expect(allDirectories.lstats == untyped.lstats)

        // Every entry said to be a file: the five directories are damage.
        var syscalls = Syscalls.system
        let list = syscalls.listDirectory
        syscalls.listDirectory = { fd in list(fd)?.map { DirectoryEntry(name: $0.name, isDirectory: false) } }
        let lying = try Store(path: root + "/s", keys: device, options: .init(fileSystem: FileSystem(syscalls: syscalls)))
        let listing = try lying.listForFetch(StorePath("/t"))
        #expect(listing.objects.count == 15)
        #expect(listing.directories.isEmpty)
        #expect(listing.damaged.count == 5)
        #expect(listing.damaged.allSatisfy { $0.isIntegrity })
    }

    /// A store's batches after one whose small sources came from memory
    /// (no reads from storage) leave each source to its object's writer:
    /// objects written that way, ones that grew past their expected
    /// length and ones too large to read whole among them, read back as
    /// they were given, and the store verifies.
    @Test func batchesAfterOneFromThePageCacheAreReadByTheirWriters() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try makeStore()
        try store.makeDirectory(StorePath("/b"))
        #expect(store.readAheadPolicy.sourcesWaitForStorage)
        for batch in 0..<2 {
            let cases = (0..<40).map { i -> (name: String, data: [UInt8], expected: UInt64) in
                let data = bytes(i == 7 ? 70_000 : i * 613 % 16_000, seed: UInt8(batch * 40 + i))
                // Object 3 grew by a byte since it was listed; object 5 by more.
                let expected = i == 3 ? data.count - 1 : i == 5 ? 100 : data.count
                return ("o\(batch)-\(i)", data, UInt64(max(0, expected)))
            }
            try store.putBatch(cases.map {
                PutBatchItem(path: try! StorePath("/b/" + $0.name), expectedLength: $0.expected, source: Self.source($0.data))
            })
            // Sources in memory read nothing from storage.
            #expect(!store.readAheadPolicy.sourcesWaitForStorage, "batch \(batch)")
            for item in cases { #expect(try get(store, "/b/" + item.name) == item.data, "\(item.name)") }
        }
        #expect(try store.verify(readData: true).isClean)
    }

    static func source(_ data: [UInt8]) -> (UnsafeMutableRawBufferPointer) throws -> Int {
        var offset = 0
        return { buffer in
            let n = min(buffer.count, data.count - offset)
            buffer.copyBytes(from: data[offset..<(offset + n)])
            offset += n
            return n
        }
    }
}
