import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import LockerIO
import Synchronization
import Testing

// Commands that look a directory up before they take the store lock must
// find it again under the lock: another command may have moved or removed
// it meanwhile and made a new one at its path, whose entries are sealed
// under a different directory ID.

@Suite("Changes made while a command runs")
struct ConcurrentChangeTests {
    static func makeStore(_ root: String) throws -> (Store, ForwardingKeys) {
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let keys = ForwardingKeys(device)
        return (try Store(path: root + "/s", keys: keys, options: .init(chunkSize: 16 << 10)), keys)
    }

    static func read(_ store: Store, _ path: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        try store.read(StorePath(path)) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// A put whose parent directory is replaced while its data is read
    /// (moved away or removed, and a new one made at its path) stores
    /// nothing: before, it committed its header into the new directory
    /// under a name that did not authenticate there, and no command could
    /// remove it. Small (inline) and large (data file) objects alike.
    @Test(arguments: [false, true], [100, 200_000])
    func aPutWhoseDirectoryIsReplacedMeanwhileStoresNothing(moveAway: Bool, size: Int) throws {
        let root = NSTemporaryDirectory() + "lkcc-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let (store, _) = try Self.makeStore(root)
        let other = try Store(path: root + "/s", keys: store.keys)
        _ = try store.makeDirectory(StorePath("/d"))
        try store.put(StorePath("/d/kept"), bytes: [7, 7])

        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
        var offset = 0
        var replaced = false
        #expect(throws: StoreError.changedMeanwhile(path: "/d", what: "moved or removed it")) {
            try store.put(StorePath("/d/x")) { buffer in
                if !replaced {
                    replaced = true
                    if moveAway {
                        _ = try other.move(StorePath("/d"), to: StorePath("/g"))
                    } else {
                        try other.remove(StorePath("/d"), recursive: true)
                    }
                    _ = try other.makeDirectory(StorePath("/d"))
                }
                let n = min(buffer.count, bytes.count - offset)
                buffer.copyBytes(from: bytes[offset..<offset + n])
                offset += n
                return n
            }
        }
        // The new /d holds nothing, and everything in the store reads.
        #expect(try store.list(StorePath("/d")).isEmpty)
        if moveAway {
            #expect(try store.list(StorePath("/g")).map(\.path.description) == ["/g/kept"])
            #expect(try Self.read(store, "/g/kept") == [7, 7])
        }
        let report = try store.verify(readData: true)
        #expect(report.damaged.isEmpty, "\(report.damaged)")
        #expect(report.garbage.isEmpty, "\(report.garbage)")
        // A put after it stores as usual.
        try store.put(StorePath("/d/x"), bytes: bytes)
        #expect(try Self.read(store, "/d/x") == bytes)
    }

    /// `setclass -r` on a directory replaced while its objects' keys are
    /// rewrapped writes no record: before, the old directory's record (with
    /// its ID) went into the new directory, and nothing in the new one
    /// authenticated any more.
    @Test func aDefaultClassIsNotWrittenIntoADirectoryReplacedMeanwhile() throws {
        let root = NSTemporaryDirectory() + "lkcc-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let (store, keys) = try Self.makeStore(root)
        let other = try Store(path: root + "/s", keys: store.keys)
        _ = try store.makeDirectory(StorePath("/d"))
        try store.put(StorePath("/d/a"), bytes: [1])
        keys.beforeRewrap.withLock {
            $0 = {
                _ = try other.move(StorePath("/d"), to: StorePath("/g"))
                _ = try other.makeDirectory(StorePath("/d"))
                try other.put(StorePath("/d/new"), bytes: [2])
            }
        }
        #expect(throws: StoreError.changedMeanwhile(path: "/d", what: "moved or removed it")) {
            try store.setDefaultClass(ProtectionClass.none, ofDirectory: StorePath("/d"), recursive: true)
        }
        #expect(try Self.read(store, "/d/new") == [2])
        #expect(try Self.read(store, "/g/a") == [1])
        guard case .directory(let d) = try store.stat(StorePath("/d")).kind else {
            Issue.record("/d is not a directory")
            return
        }
        #expect(d.defaultClass == nil)
        let report = try store.verify(readData: true)
        #expect(report.damaged.isEmpty, "\(report.damaged)")
    }
}

/// A put's data file is created, then locked. A `verify --repair` that
/// scans in between finds it unreferenced and unlocked.
@Suite("A repair while a put makes its data file")
struct RepairDuringPutTests {
    /// The repair runs at the put's first blocking `flock` of a data file,
    /// in another store on the same directory. It removes the new file
    /// (unlocked, referenced by nothing); the put makes it again and
    /// stores an object that reads back. Before, the put wrote into the
    /// unlinked file and committed a header whose data file was gone.
    @Test(arguments: [false, true])
    func aDataFileRemovedBeforeItWasLockedIsMadeAgain(batch: Bool) throws {
        let root = NSTemporaryDirectory() + "lkcc-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                                           options: .init(passcodeCost: .fixed(logN: 10)))
        let repairs = Mutex<[VerifyReport]>([])
        let armed = Mutex(true)
        var syscalls = Syscalls.system
        syscalls.flock = { fd, operation in
            if operation == LOCK_EX, Self.dataFile(fd), armed.withLock({ let was = $0; $0 = false; return was }) {
                if let report = try? Store(path: root + "/s", keys: device).verify(repair: true) {
                    repairs.withLock { $0.append(report) }
                }
            }
            return Syscalls.system.flock(fd, operation)
        }
        let store = try Store(path: root + "/s", keys: device,
                              options: .init(chunkSize: 16 << 10, workers: 1, fileSystem: FileSystem(syscalls: syscalls)))
        let bytes = (0..<300_000).map { _ in UInt8.random(in: 0...255) }
        if batch {
            var offset = 0
            let item = PutBatchItem(path: try StorePath("/x"), expectedLength: UInt64(bytes.count)) { buffer in
                let n = min(buffer.count, bytes.count - offset)
                buffer.copyBytes(from: bytes[offset..<offset + n])
                offset += n
                return n
            }
            _ = try store.putBatch([item])
        } else {
            try store.put(StorePath("/x"), bytes: bytes)
        }
        // The repair ran, and removed the first file.
        let ran = repairs.withLock { $0 }
        #expect(ran.count == 1)
        #expect(ran.first?.removed.count == 1, "\(ran)")
        #expect(ran.first?.removed.first?.hasPrefix("data/") == true, "\(ran)")
        var read: [UInt8] = []
        try store.read(StorePath("/x")) { read.append(contentsOf: $0) }
        #expect(read == bytes)
        let report = try store.verify(readData: true)
        #expect(report.isClean && report.objectsReadInFull == 1, "\(report)")
    }

    /// Whether `fd` is a file in a store's data directory.
    static func dataFile(_ fd: Int32) -> Bool {
        let target = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? ""
        return target.contains("/s/data/")
    }

    /// The other side: a data file whose writer holds its lock is left by
    /// a repair, and not reported as garbage.
    @Test func aLockedDataFileIsLeftByRemoval() throws {
        let root = NSTemporaryDirectory() + "lkcc-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let fs = FileSystem()
        let held = try DataFile.createLocked(root + "/held", fileSystem: fs)
        #expect(try DataFile.removeIfUnused(root + "/held", fileSystem: fs) == false)
        #expect(fs.exists(root + "/held"))
        held.close()
        #expect(try DataFile.removeIfUnused(root + "/held", fileSystem: fs) == true)
        #expect(!fs.exists(root + "/held"))
        #expect(try DataFile.removeIfUnused(root + "/held", fileSystem: fs) == true)
    }
}
