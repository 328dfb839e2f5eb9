import Foundation
import Locker
import LockerDevice
import LockerFormat
import Testing

/// Read handles: open objects across a lock, sticky failures, close.
@Suite struct ProtectedFileHandleTests {
    @Test func readsSeeksAndEndOfFile() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let data = sampleData(100_000, seed: 5)
        try store.write(data, to: "/big", options: .completeFileProtectionUntilFirstUserAuthentication)
        let handle = try store.fileHandle(forReadingAtPath: "/big")
        #expect(handle.size == 100_000)
        #expect(handle.protectionClass == .completeUntilFirstUserAuthentication)
        #expect(handle.fileProtection.rawValue == FileProtectionType.completeUntilFirstUserAuthentication.rawValue)
        #expect(handle.path == (try StorePath("/big")))

        var collected = Data()
        while let piece = try handle.read(upToCount: 7_001) {
            #expect(piece.count == min(7_001, data.count - collected.count))
            collected.append(piece)
        }
        #expect(collected == data)
        #expect(handle.offsetInFile == 100_000)
        #expect(try handle.read(upToCount: 10) == nil)
        #expect(try handle.readToEnd() == nil)

        try handle.seek(toOffset: 16_380)
        #expect(try handle.offset() == 16_380)
        #expect(try handle.read(upToCount: 10) == data[16_380..<16_390])
        #expect(try handle.read(upToCount: 0) == Data())
        #expect(try handle.readToEnd() == data[16_390...])
        try handle.seek(toOffset: 1 << 40)
        #expect(try handle.read(upToCount: 10) == nil)
        #expect(try handle.seekToEnd() == 100_000)
        try handle.seek(toOffset: 0)
        #expect(try handle.readToEnd() == data)

        try handle.close()
        try handle.close()
        #expect(throws: ProtectedFileError.handleClosed) { try handle.read(upToCount: 1) }
        #expect(throws: ProtectedFileError.handleClosed) { try handle.seek(toOffset: 0) }
        #expect(throws: StoreError.notFound("/nothing")) { try store.fileHandle(forReadingAtPath: "/nothing") }
        #expect(throws: StoreError.isADirectory("/")) { try store.fileHandle(forReadingAtPath: "/") }
    }

    @Test func classBOpenedBeforeTheLockReadsAfterIt() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let data = sampleData(40_000, seed: 11)
        try store.write(data, to: "/b", options: .completeFileProtectionUnlessOpen)
        let handle = try store.fileHandle(forReadingAtPath: "/b")
        _ = try fixture.drive(store, to: .locked)
        #expect(store.device?.state == .locked)
        // The device keeps the open object's key: the handle keeps working
        // (and so does any read of that object until it is closed).
        #expect(try handle.read(upToCount: 20_000) == data[0..<20_000])
        try handle.seek(toOffset: 30_000)
        #expect(try handle.readToEnd() == data[30_000...])
        try handle.seek(toOffset: 0)
        #expect(try handle.readToEnd() == data)
        #expect(try store.device?.status().openObjects.map(\.protection) == ["completeUnlessOpen"])
        #expect(try store.contentsOfItem(atPath: "/b") == data)

        // After close, class B fails until unlock.
        try handle.close()
        #expect(try store.device?.status().openObjects.isEmpty == true)
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) {
            try store.fileHandle(forReadingAtPath: "/b")
        }
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try store.contentsOfItem(atPath: "/b") }
        try fixture.unlock(store)
        #expect(try store.contentsOfItem(atPath: "/b") == data)
        #expect(try store.fileHandle(forReadingAtPath: "/b").readToEnd() == data)
    }

    /// PROTECTION-SEMANTICS: a class B object created while locked can be
    /// read through its open handle, but not reopened after close until
    /// unlock. In both states it cannot be unwrapped (before first unlock,
    /// and locked), and a large object (data file) as well as a small one.
    /// The same write without a handle is not readable at all until
    /// unlock; class A cannot be created, and leaves nothing open.
    @Test(arguments: [DeviceState.locked, .beforeFirstUnlock], [3_000, 200_000])
    func classBCreatedWhileLockedReadsThroughItsHandleUntilClosed(state: DeviceState, size: Int) throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.drive(try fixture.open(), to: state)
        #expect(store.isProtectedDataAvailable == false)
        let data = sampleData(size, seed: 21)
        let handle = try store.fileHandle(creatingAtPath: "/b", contents: data, options: .completeFileProtectionUnlessOpen)
        #expect(handle.size == UInt64(size))
        #expect(handle.fileProtection.rawValue == FileProtectionType.completeUnlessOpen.rawValue)
        #expect(try handle.readToEnd() == data)
        try handle.seek(toOffset: UInt64(size / 2))
        #expect(try handle.read(upToCount: 100) == data[(size / 2)..<(size / 2 + 100)])
        #expect(try store.device?.status().openObjects.map(\.protection) == ["completeUnlessOpen"])
        #expect(try store.contentsOfItem(atPath: "/b") == data, "open objects keep working")

        // Without the handle, the same write is stored but not readable.
        try store.write(data, to: "/plain", options: .completeFileProtectionUnlessOpen)
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try store.contentsOfItem(atPath: "/plain") }

        try handle.close()
        #expect(try store.device?.status().openObjects.isEmpty == true)
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try store.contentsOfItem(atPath: "/b") }
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) {
            try store.fileHandle(forReadingAtPath: "/b")
        }

        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) {
            try store.fileHandle(creatingAtPath: "/a", contents: data, options: .completeFileProtection)
        }
        #expect(!store.fileExists(atPath: "/a"))
        #expect(try store.device?.status().openObjects.isEmpty == true)

        try fixture.unlock(store)
        #expect(try store.contentsOfItem(atPath: "/b") == data)
        #expect(try store.contentsOfItem(atPath: "/plain") == data)
    }

    /// A create that fails leaves nothing open: its parent is missing, or
    /// its source fails after the key was kept.
    @Test func aFailedCreateLeavesNothingOpen() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        #expect(throws: StoreError.notFound("/missing")) {
            try store.fileHandle(creatingAtPath: "/missing/b", contents: Data("x".utf8), options: .completeFileProtectionUnlessOpen)
        }
        #expect(try store.device?.status().openObjects.isEmpty == true)
        struct SourceFailed: Error {}
        for size in [10, 200_000] {
            var given = 0
            #expect(throws: SourceFailed.self) {
                try store.put(StorePath("/c"), protection: .completeUnlessOpen, keepOpen: true) { buffer in
                    guard given < size else { throw SourceFailed() }
                    let n = min(buffer.count, size - given)
                    buffer.initializeMemory(as: UInt8.self, repeating: 7)
                    given += n
                    return n
                }
            }
            #expect(given == size)
            #expect(try store.device?.status().openObjects.isEmpty == true)
            #expect(!store.fileExists(atPath: "/c"))
        }
        // Options as Data.write takes them: what write refuses, this
        // refuses, rather than overwrite what .withoutOverwriting keeps.
        try store.write(Data("kept".utf8), to: "/d")
        #expect(throws: ProtectedFileError.unsupportedWritingOptions(.withoutOverwriting)) {
            try store.fileHandle(creatingAtPath: "/d", contents: Data("x".utf8), options: .withoutOverwriting)
        }
        #expect(try store.contentsOfItem(atPath: "/d") == Data("kept".utf8))
        #expect(try store.device?.status().openObjects.isEmpty == true)
        let handle = try store.fileHandle(creatingAtPath: "/d", contents: Data("x".utf8))
        #expect(handle.protectionClass == .completeUntilFirstUserAuthentication, "the store default")
        #expect(try store.device?.status().openObjects.count == 1)
        try handle.close()
        #expect(try store.device?.status().openObjects.isEmpty == true)
    }

    @Test func classAHandleFailsWhenGraceEndsAndStaysFailed() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let data = sampleData(40_000, seed: 12)
        try store.write(data, to: "/a", options: .completeFileProtection)
        let handle = try store.fileHandle(forReadingAtPath: "/a")
        _ = try fixture.drive(store, to: .locking)
        #expect(try handle.read(upToCount: 1000) == data[0..<1000], "grace keeps class A")
        fixture.clock.advance(10)
        #expect(store.device?.state == .locked)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try handle.read(upToCount: 1000) }
        #expect(handle.offsetInFile == 1000, "a failed read does not move the offset")

        // Sticky: unlocking does not revive the handle.
        try fixture.unlock(store)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try handle.read(upToCount: 1000) }
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try handle.readToEnd() }
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try handle.seek(toOffset: 0) }
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try handle.offset() }
        try handle.close()
        // A new handle after unlock reads again.
        let again = try store.fileHandle(forReadingAtPath: "/a")
        #expect(try again.readToEnd() == data)
    }

    @Test func classBWrittenWhileLockedIsReadableOnlyAfterUnlock() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        for state in [DeviceState.locked, .beforeFirstUnlock] {
            var store = try fixture.open()
            store = try fixture.drive(store, to: state)
            let data = sampleData(30_000, seed: 13)
            let path = "/inbox-\(state)"
            try store.write(data, to: path, options: .completeFileProtectionUnlessOpen)
            #expect(protection(try store.attributesOfItem(atPath: path)) == .completeUnlessOpen)
            #expect((try store.attributesOfItem(atPath: path))[.size] as? UInt64 == 30_000)
            #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try store.contentsOfItem(atPath: path) }
            #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) {
                try store.fileHandle(forReadingAtPath: path)
            }
            try fixture.unlock(store)
            #expect(try store.contentsOfItem(atPath: path) == data)
            #expect(try store.fileHandle(forReadingAtPath: path).readToEnd() == data)
            store.device?.shutdown()
        }
    }

    @Test func replacedOrRemovedObjectFailsTheHandle() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        try store.write(sampleData(1000, seed: 1), to: "/x")
        let handle = try store.fileHandle(forReadingAtPath: "/x")
        #expect(try handle.read(upToCount: 10) == sampleData(1000, seed: 1)[0..<10])
        // A new version at the path is not what the handle opened.
        try store.write(sampleData(1000, seed: 2), to: "/x")
        #expect(throws: ProtectedFileError.itemChanged("/x")) { try handle.read(upToCount: 10) }
        #expect(throws: ProtectedFileError.itemChanged("/x")) { try handle.read(upToCount: 10) }
        try handle.close()

        let other = try store.fileHandle(forReadingAtPath: "/x")
        try store.removeItem(atPath: "/x")
        #expect(throws: ProtectedFileError.itemChanged("/x")) { try other.readToEnd() }
        try other.close()
        #expect(try store.device?.status().openObjects.isEmpty == true)
    }

    @Test func twoHandlesShareTheOpenObject() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let data = sampleData(5000, seed: 14)
        try store.write(data, to: "/b", options: .completeFileProtectionUnlessOpen)
        let first = try store.fileHandle(forReadingAtPath: "/b")
        let second = try store.fileHandle(forReadingAtPath: "/b")
        _ = try fixture.drive(store, to: .locked)
        try first.close()
        #expect(try second.readToEnd() == data, "closing one handle keeps the key for the other")
        try second.close()
        #expect(try store.device?.status().openObjects.isEmpty == true)
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try store.contentsOfItem(atPath: "/b") }
    }

    @Test func droppingAHandleClosesIt() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        try store.write(sampleData(100), to: "/b", options: .completeFileProtectionUnlessOpen)
        do {
            let handle = try store.fileHandle(forReadingAtPath: "/b")
            #expect(try handle.read(upToCount: 1) != nil)
            #expect(try store.device?.status().openObjects.count == 1)
        }
        #expect(try store.device?.status().openObjects.isEmpty == true)
    }
}
