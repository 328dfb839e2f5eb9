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
        let store = try Store(path: root + "/s", keys: device, options: .init(chunkSize: 16 << 10))
        let data = (0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var offset = 0
        try store.put(StorePath("/a/x"), protection: .completeUntilFirstUserAuthentication) { buffer in
            let n = min(buffer.count, data.count - offset)
            buffer.copyBytes(from: data[offset..<(offset + n)])
            offset += n
            return n
        }
        try store.makeDirectory(StorePath("/b"))
        let headersBefore = try headerFiles()
        #expect(headersBefore.count == 1)
        let source = headersBefore[0]
        let sourceBytes = try Data(contentsOf: URL(fileURLWithPath: root + "/s/" + source))
        try store.move(StorePath("/a/x"), to: StorePath("/b/y"))
        #expect(!FileManager.default.fileExists(atPath: root + "/s/move.intent"), "a finished move leaves no intent")
        let target = try #require(try headerFiles().first)
        try sourceBytes.write(to: URL(fileURLWithPath: root + "/s/" + source))

        let keys = try MetadataKeys(metadataKey: device.metadataKey())
        let header = try ObjectHeader.open(Array(sourceBytes), with: keys)
        let intent = MoveIntent(source: source, target: target, objectID: header.objectID)
        try Data(intent.sealed(with: keys)).write(to: URL(fileURLWithPath: root + "/s/move.intent"))
        return (store, source, data)
    }

    /// Object header files under ns/, relative to the store directory.
    private func headerFiles() throws -> [String] {
        let base = root + "/s/"
        let all = FileManager.default.enumerator(atPath: base + "ns")?.compactMap { $0 as? String } ?? []
        return all.filter { path in
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: base + "ns/" + path, isDirectory: &isDirectory)
            return exists && !isDirectory.boolValue && !path.hasSuffix(".dir")
        }.map { "ns/" + $0 }
    }

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

    @Test func aForgedIntentIsDamageAndNothingIsRemoved() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        let device = try makeDevice()
        let (store, source, _) = try interruptedMove(device)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: root + "/s/move.intent"))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: root + "/s/move.intent"))
        let report = try store.verify(readData: true, repair: true)
        #expect(report.damaged.contains { $0.location == "move.intent" && $0.reason == "move intent does not authenticate" })
        #expect(FileManager.default.fileExists(atPath: root + "/s/" + source))
        // A change leaves an unreadable intent alone too.
        try store.makeDirectory(StorePath("/c"))
        #expect(FileManager.default.fileExists(atPath: root + "/s/" + source))
        #expect(FileManager.default.fileExists(atPath: root + "/s/move.intent"))
    }
}
