import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

/// An object move cut off between writing the new name and removing the
/// old one leaves both names on one data file. Its move intent says which
/// name is the old one.
@Suite struct MoveIntentTests {
    let root = NSTemporaryDirectory() + "lkmv-" + UUID().uuidString.prefix(8)

    /// Stores /a/x, moves it to /b/y, then puts back the old header and
    /// writes the intent: the state a crash between the two steps leaves.
    /// Returns the store, the old name's path relative to the store, and
    /// the data.
    private func interruptedMove(_ device: Device) throws -> (Store, String, [UInt8]) {
        let data = (0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let store = try storeHoldingAX(data, device)
        try store.makeDirectory(StorePath("/b"))
        let headersBefore = headerFiles()
        #expect(headersBefore.count == 1)
        let source = headersBefore[0]
        let sourceBytes = try Data(contentsOf: URL(fileURLWithPath: root + "/s/" + source))
        try store.move(StorePath("/a/x"), to: StorePath("/b/y"))
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"), "a finished move leaves no intent")
        let target = try #require(headerFiles().first)
        try sourceBytes.write(to: URL(fileURLWithPath: root + "/s/" + source))

        let keys = try MetadataKeys(metadataKey: device.metadataKey())
        let header = try ObjectHeader.open(Array(sourceBytes), with: keys)
        let intent = MoveIntent(source: source, target: target, objectID: header.objectID)
        try Data(intent.sealed(with: keys)).write(to: URL(fileURLWithPath: root + "/s/move.intent"))
        return (store, source, data)
    }

    /// A new store holding `data` as /a/x (three chunks).
    private func storeHoldingAX(_ data: [UInt8], _ device: Device) throws -> Store {
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10))
        try store.put(StorePath("/a/x"), bytes: data, protection: .completeUntilFirstUserAuthentication)
        return store
    }

    /// Entries under ns/ that are directories (or else object header
    /// files), relative to the store directory.
    private func namespaceEntries(directories: Bool) -> [String] {
        let base = root + "/s/"
        let all = FileManager.default.enumerator(atPath: base + "ns")?.compactMap { $0 as? String } ?? []
        return all.filter { path in
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: base + "ns/" + path, isDirectory: &isDirectory)
            return exists && isDirectory.boolValue == directories && (directories || !path.hasSuffix(".dir"))
        }.map { "ns/" + $0 }
    }

    /// Object header files under ns/, relative to the store directory.
    private func headerFiles() -> [String] { namespaceEntries(directories: false) }

    /// Directories under ns/, relative to the store directory.
    private func directories() -> [String] { namespaceEntries(directories: true) }

    private func makeDevice() throws -> Device {
        try Device.initialize(at: DeviceDirectory(path: root + "/d"), passcode: SecretBytes(copying: Array("1".utf8)),
                              options: .init(passcodeCost: .fixed(logN: 10)))
    }

    @Test func verifyCallsTheOldNameGarbageAndRepairRemovesIt() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, source, data) = try interruptedMove(device)
        let report = try store.verify(readData: true)
        #expect(report.damaged.isEmpty, "\(report.damaged)")
        #expect(report.garbage == [source, "move.intent"])
        let repaired = try store.verify(readData: true, repair: true)
        #expect(repaired.removed == [source, "move.intent"])
        #expect(try store.verify(readData: true).isClean)
        var out: [UInt8] = []
        try store.read(StorePath("/b/y")) { out.append(contentsOf: $0) }
        #expect(out == data)
        #expect(throws: StoreError.self) { try store.read(StorePath("/a/x")) { _ in } }
    }

    @Test func theNextChangeFinishesTheMoveSoRemovingTheOldNameKeepsTheData() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, _, data) = try interruptedMove(device)
        // Before any change both names read the same bytes.
        var old: [UInt8] = []
        try store.read(StorePath("/a/x")) { old.append(contentsOf: $0) }
        #expect(old == data)
        // rm of the old name: the move is finished first, so the name is
        // already gone and the data stays with the new one.
        #expect(throws: StoreError.notFound("/a/x")) { try store.remove(StorePath("/a/x")) }
        var out: [UInt8] = []
        try store.read(StorePath("/b/y")) { out.append(contentsOf: $0) }
        #expect(out == data)
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"))
        #expect(try store.verify(readData: true).isClean)
    }

    /// Stores /a/x and makes /b, moves /a to /b/a, then puts back what a
    /// crash inside the directory move leaves: the intent, and the record
    /// naming the new place with the old one as previous, at the new place
    /// (`renamed`) or with the directory back at the old one. Returns the
    /// store, both directories' paths relative to the store, the data, and
    /// the metadata keys the records are sealed with.
    private func interruptedDirectoryMove(_ device: Device, renamed: Bool) throws
        -> (Store, old: String, new: String, [UInt8], MetadataKeys)
    {
        let data = (0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let store = try storeHoldingAX(data, device)
        let old = try #require(directories().first)
        try store.makeDirectory(StorePath("/b"))
        try store.move(StorePath("/a"), to: StorePath("/b/a"))
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"), "a finished move leaves no intent")
        let new = try #require(directories().first { $0.split(separator: "/").count == 3 })

        let keys = try MetadataKeys(metadataKey: device.metadataKey())
        let rootRecord = try record(at: "ns", keys)
        var halfMoved = try record(at: new, keys)
        #expect(halfMoved.previous == nil)
        halfMoved.previous = .init(parentID: rootRecord.directoryID, name: "a")
        if !renamed { try FileManager.default.moveItem(atPath: root + "/s/" + new, toPath: root + "/s/" + old) }
        try Data(halfMoved.sealed(with: keys)).write(to: URL(fileURLWithPath: root + "/s/" + (renamed ? new : old) + "/.dir"))
        let intent = MoveIntent(source: old, target: new, objectID: halfMoved.directoryID)
        try Data(intent.sealed(with: keys)).write(to: URL(fileURLWithPath: root + "/s/move.intent"))
        return (store, old, new, data, keys)
    }

    private func record(at directory: String, _ keys: MetadataKeys) throws -> DirectoryRecord {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: root + "/s/" + directory + "/.dir"))
        return try DirectoryRecord.open(Array(bytes), with: keys)
    }

    private func read(_ store: Store, _ path: String) throws -> [UInt8] {
        var out: [UInt8] = []
        try store.read(StorePath(path)) { out.append(contentsOf: $0) }
        return out
    }

    @Test func aDirectoryMoveCutOffAfterItsRenameKeepsOnlyTheNewPlaceAfterTheNextChange() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, old, new, data, keys) = try interruptedDirectoryMove(device, renamed: true)
        #expect(try read(store, "/b/a/x") == data)
        // Until the move is settled, its record vouches for both places:
        // moved back to the old one on disk, the directory is taken there.
        try FileManager.default.moveItem(atPath: root + "/s/" + new, toPath: root + "/s/" + old)
        #expect(try read(store, "/a/x") == data)
        try FileManager.default.moveItem(atPath: root + "/s/" + old, toPath: root + "/s/" + new)

        try store.makeDirectory(StorePath("/c"))
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"))
        #expect(try record(at: new, keys).previous == nil)
        #expect(try read(store, "/b/a/x") == data)
        #expect(try store.verify(readData: true).isClean)
        // Settled, the same swap is refused.
        try FileManager.default.moveItem(atPath: root + "/s/" + new, toPath: root + "/s/" + old)
        #expect(throws: StoreError.integrity(path: "/a", what: "directory record belongs to another directory")) { try read(store, "/a/x") }
        #expect(try store.verify().damaged.map(\.location) == ["/a"])
    }

    @Test func aDirectoryMoveCutOffBeforeItsRenameKeepsOnlyTheOldPlaceAfterTheNextChange() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, old, new, data, keys) = try interruptedDirectoryMove(device, renamed: false)
        #expect(try read(store, "/a/x") == data)
        try store.makeDirectory(StorePath("/c"))
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"))
        let settled = try record(at: old, keys)
        #expect(settled.previous == nil)
        #expect(settled.name == "a")
        #expect(settled.parentID == (try record(at: "ns", keys)).directoryID)
        #expect(try read(store, "/a/x") == data)
        #expect(throws: StoreError.notFound("/b/a")) { try read(store, "/b/a/x") }
        #expect(try store.verify(readData: true).isClean)
        // Moved on disk to the place it was going to, it is refused.
        try FileManager.default.moveItem(atPath: root + "/s/" + old, toPath: root + "/s/" + new)
        #expect(throws: StoreError.integrity(path: "/b/a", what: "directory record belongs to another directory")) { try read(store, "/b/a/x") }
    }

    @Test func verifyReportsAnInterruptedDirectoryMoveAndRepairSettlesIt() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, _, new, data, keys) = try interruptedDirectoryMove(device, renamed: true)
        let report = try store.verify(readData: true)
        #expect(report.damaged.isEmpty, "\(report.damaged)")
        #expect(report.garbage == ["move.intent"])
        #expect(try record(at: new, keys).previous != nil, "verify alone changes nothing")
        let repaired = try store.verify(readData: true, repair: true)
        #expect(repaired.removed == ["move.intent"])
        #expect(try record(at: new, keys).previous == nil)
        #expect(try store.verify(readData: true).isClean)
        #expect(try read(store, "/b/a/x") == data)
    }

    @Test func aForgedIntentIsDamageAndNothingIsRemoved() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, source, _) = try interruptedMove(device)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: root + "/s/move.intent"))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: root + "/s/move.intent"))
        let report = try store.verify(readData: true, repair: true)
        #expect(report.damaged.contains { $0.location == "move.intent" && $0.reason == "move intent failed authentication" })
        #expect(FileManager.default.fileExists(atPath: root + "/s/" + source))
        // A change leaves an unreadable intent alone too.
        try store.makeDirectory(StorePath("/c"))
        #expect(FileManager.default.fileExists(atPath: root + "/s/" + source))
        #expect(FileManager.default.fileExists(atPath: root + "/s/move.intent"))
    }

    /// The same store through a file system whose faults the test sets.
    private func faultyStore(_ device: Device, _ faulty: FaultyFileSystem) throws -> Store {
        try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10, fileSystem: faulty.fileSystem))
    }

    @Test func aChangeStopsWhenTheIntentCannotBeReadAndTheDataStays() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, source, data) = try interruptedMove(device)
        let faulty = FaultyFileSystem()
        let failing = try faultyStore(device, faulty)
        // Out of descriptors just when the intent is opened: the change
        // must not go ahead as if there were no intent, which would remove
        // /a/x with the data file /b/y shares.
        faulty.failOpens(of: "move.intent", errno: EMFILE)
        #expect(throws: (any Error).self) { try failing.remove(StorePath("/a/x")) }
        #expect(throws: (any Error).self) { try failing.verify(readData: true, repair: true) }
        faulty.failOpens(of: nil)
        #expect(FileManager.default.fileExists(atPath: root + "/s/move.intent"))
        #expect(FileManager.default.fileExists(atPath: root + "/s/" + source))
        #expect(try read(store, "/b/y") == data)
        // Once it reads, the next change settles it first, as ever.
        #expect(throws: StoreError.notFound("/a/x")) { try failing.remove(StorePath("/a/x")) }
        #expect(try read(store, "/b/y") == data)
        #expect(try store.verify(readData: true).isClean)
    }

    @Test func repairSyncsTheOldNamesRemovalBeforeRemovingTheIntent() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, source, data) = try interruptedMove(device)
        let faulty = FaultyFileSystem()
        let repairing = try faultyStore(device, faulty)
        faulty.arm(.none)
        let report = try repairing.verify(readData: true, repair: true)
        let calls = faulty.disarm().calls
        #expect(report.removed == [source, "move.intent"])
        let unlinks = calls.indices.filter { calls[$0] == "unlink" }
        #expect(unlinks.count == 2, "the old name and the intent: \(calls)")
        if unlinks.count == 2 {
            #expect(calls[unlinks[0]..<unlinks[1]].contains("fsync"),
                    "the old name's directory is synced before the intent goes: \(calls[unlinks[0]...unlinks[1]])")
        }
        #expect(try read(store, "/b/y") == data)
        #expect(try store.verify(readData: true).isClean)
    }
}
