import Foundation
import Locker
import LockerDevice
import LockerFormat
import Testing

/// The Foundation-style API: names, options and attributes.
@Suite struct ProtectedFilesTests {
    @Test func protectionNamesMapBothWays() throws {
        let expected: [(ProtectionClass, FileProtectionType, Data.WritingOptions)] = [
            (.complete, .complete, .completeFileProtection),
            (.completeUnlessOpen, .completeUnlessOpen, .completeFileProtectionUnlessOpen),
            (.completeUntilFirstUserAuthentication, .completeUntilFirstUserAuthentication,
             .completeFileProtectionUntilFirstUserAuthentication),
            (.none, .none, .noFileProtection),
        ]
        for (cls, type, option) in expected {
            #expect(cls.fileProtectionType.rawValue == type.rawValue)
            #expect(FileProtectionType(cls).rawValue == type.rawValue)
            #expect(ProtectionClass(type) == cls)
            #expect(cls.writingOption == option)
            #expect(try ProtectionClass(writingOptions: option) == cls)
            // Other options do not disturb the protection value.
            #expect(try ProtectionClass(writingOptions: [option, .atomic]) == cls)
        }
        // No protection option: inherit.
        #expect(try ProtectionClass(writingOptions: []) == nil)
        #expect(try ProtectionClass(writingOptions: .atomic) == nil)
        // A value in the mask Locker does not know.
        #expect(throws: ProtectedFileError.unsupportedWritingOptions(Data.WritingOptions(rawValue: 0x5000_0000))) {
            try ProtectionClass(writingOptions: Data.WritingOptions(rawValue: 0x5000_0000))
        }
        #expect(ProtectionClass(FileProtectionType(rawValue: "NSFileProtectionCompleteWhenUserInactive")) == nil)
    }

    @Test(arguments: ProtectionClass.allCases)
    func writeAndReadBackWithEachOption(cls: ProtectionClass) throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let before = Date()
        for (name, data) in [("empty", Data()), ("small", sampleData(100)), ("chunks", sampleData(40_000, seed: 3))] {
            let path = "/\(name)-\(cls.letter)"
            try store.write(data, to: path, options: [cls.writingOption, .atomic])
            #expect(store.contents(atPath: path) == data)
            #expect(try store.contentsOfItem(atPath: path) == data)
            let attributes = try store.attributesOfItem(atPath: path)
            #expect(protection(attributes) == cls)
            #expect((attributes[.protectionKey] as? FileProtectionType)?.rawValue == cls.fileProtectionType.rawValue)
            #expect(attributes[.type] as? FileAttributeType == .typeRegular)
            #expect((attributes[.size] as? NSNumber)?.uint64Value == UInt64(data.count))
            #expect(attributes[.size] as? UInt64 == UInt64(data.count))
            let created = try #require(attributes[.creationDate] as? Date)
            let modified = try #require(attributes[.modificationDate] as? Date)
            #expect(created.timeIntervalSince(before) > -1 && created.timeIntervalSinceNow < 1)
            #expect(modified >= created)
        }
    }

    @Test func newObjectsInheritTheDirectoryProtection() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        try store.createDirectory(atPath: "/vault", withIntermediateDirectories: false,
                                  attributes: [.protectionKey: FileProtectionType.complete])
        let directory = try store.attributesOfItem(atPath: "/vault")
        #expect(protection(directory) == .complete)
        #expect(directory[.type] as? FileAttributeType == .typeDirectory)
        #expect(directory[.creationDate] is Date)

        try store.write(sampleData(10), to: "/vault/inherits")
        #expect(protection(try store.attributesOfItem(atPath: "/vault/inherits")) == .complete)
        // An explicit option wins over the directory default.
        try store.write(sampleData(10), to: "/vault/explicit", options: .noFileProtection)
        #expect(protection(try store.attributesOfItem(atPath: "/vault/explicit")) == ProtectionClass.none)
        // The nearest ancestor with a default counts; intermediates get none.
        try store.createDirectory(atPath: "/vault/sub/deeper", withIntermediateDirectories: true)
        #expect(try store.attributesOfItem(atPath: "/vault/sub")[.protectionKey] == nil)
        try store.write(sampleData(10), to: "/vault/sub/deeper/nested")
        #expect(protection(try store.attributesOfItem(atPath: "/vault/sub/deeper/nested")) == .complete)
        // Outside any directory with a default: the store default (C).
        #expect(try store.attributesOfItem(atPath: "/")[.protectionKey] == nil)
        try store.write(sampleData(10), to: "/plain")
        #expect(protection(try store.attributesOfItem(atPath: "/plain")) == .completeUntilFirstUserAuthentication)
        // The raw string form of the attribute is accepted too.
        try store.createDirectory(atPath: "/open", withIntermediateDirectories: false,
                                  attributes: [.protectionKey: "NSFileProtectionNone"])
        try store.write(sampleData(10), to: "/open/x")
        #expect(protection(try store.attributesOfItem(atPath: "/open/x")) == ProtectionClass.none)
    }

    @Test func setAttributesChangesTheClassNotTheContent() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let data = sampleData(50_000, seed: 9)
        try store.write(data, to: "/doc", options: .completeFileProtectionUntilFirstUserAuthentication)
        let before = try store.attributesOfItem(atPath: "/doc")
        for cls in [ProtectionClass.complete, .completeUnlessOpen, .none, .completeUntilFirstUserAuthentication] {
            try store.setAttributes([.protectionKey: cls.fileProtectionType], ofItemAtPath: "/doc")
            let after = try store.attributesOfItem(atPath: "/doc")
            #expect(protection(after) == cls)
            #expect(try store.contentsOfItem(atPath: "/doc") == data)
            #expect(after[.size] as? UInt64 == UInt64(data.count))
            #expect(after[.modificationDate] as? Date == before[.modificationDate] as? Date)
        }
        // On a directory: its default, for objects created afterwards only.
        try store.createDirectory(atPath: "/dir", withIntermediateDirectories: false)
        try store.write(sampleData(5), to: "/dir/old")
        try store.setAttributes([.protectionKey: FileProtectionType.completeUnlessOpen], ofItemAtPath: "/dir")
        #expect(protection(try store.attributesOfItem(atPath: "/dir")) == .completeUnlessOpen)
        #expect(protection(try store.attributesOfItem(atPath: "/dir/old")) == .completeUntilFirstUserAuthentication)
        try store.write(sampleData(5), to: "/dir/new")
        #expect(protection(try store.attributesOfItem(atPath: "/dir/new")) == .completeUnlessOpen)
        // The root's default too.
        try store.setAttributes([.protectionKey: FileProtectionType.none], ofItemAtPath: "/")
        try store.write(sampleData(5), to: "/top")
        #expect(protection(try store.attributesOfItem(atPath: "/top")) == ProtectionClass.none)

        // Refusals change nothing.
        #expect(throws: ProtectedFileError.unsupportedAttribute(.posixPermissions)) {
            try store.setAttributes([.protectionKey: FileProtectionType.complete, .posixPermissions: 0o600],
                                    ofItemAtPath: "/doc")
        }
        #expect(throws: ProtectedFileError.invalidProtectionValue("NSFileProtectionSometimes")) {
            try store.setAttributes([.protectionKey: "NSFileProtectionSometimes"], ofItemAtPath: "/doc")
        }
        #expect(throws: ProtectedFileError.invalidProtectionValue("42")) {
            try store.setAttributes([.protectionKey: 42], ofItemAtPath: "/doc")
        }
        #expect(protection(try store.attributesOfItem(atPath: "/doc")) == .completeUntilFirstUserAuthentication)
        #expect(throws: StoreError.notFound("/missing")) {
            try store.setAttributes([.protectionKey: FileProtectionType.complete], ofItemAtPath: "/missing")
        }
        #expect(throws: StoreError.notFound("/missing")) { try store.setAttributes([:], ofItemAtPath: "/missing") }
    }

    @Test func namespaceOperations() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        #expect(throws: StoreError.notFound("/a")) {
            try store.createDirectory(atPath: "/a/b", withIntermediateDirectories: false)
        }
        try store.createDirectory(atPath: "/a/b", withIntermediateDirectories: true)
        try store.createDirectory(atPath: "/a/b", withIntermediateDirectories: true)
        #expect(throws: StoreError.alreadyExists("/a/b")) {
            try store.createDirectory(atPath: "/a/b", withIntermediateDirectories: false)
        }
        // Like Data.write, a write does not create directories.
        #expect(throws: StoreError.notFound("/nowhere")) { try store.write(Data([1]), to: "/nowhere/x") }
        #expect(throws: StoreError.isADirectory("/a")) { try store.write(Data([1]), to: "/a") }
        #expect(throws: ProtectedFileError.unsupportedWritingOptions(.withoutOverwriting)) {
            try store.write(Data([1]), to: "/a/x", options: .withoutOverwriting)
        }
        #expect(!store.fileExists(atPath: "/a/x"))

        try store.write(sampleData(10, seed: 1), to: "/a/b/one", options: .completeFileProtection)
        try store.write(sampleData(20, seed: 2), to: "/a/b/two")
        try store.write(sampleData(30, seed: 3), to: "/a/top")
        #expect(try store.contentsOfDirectory(atPath: "/a") == ["b", "top"])
        #expect(try store.contentsOfDirectory(atPath: "/a/b") == ["one", "two"])
        #expect(try store.contentsOfDirectory(atPath: "/") == ["a"])
        #expect(throws: StoreError.notADirectory("/a/top")) { try store.contentsOfDirectory(atPath: "/a/top") }

        var isDirectory: ObjCBool = false
        #expect(store.fileExists(atPath: "/a/b", isDirectory: &isDirectory) && isDirectory.boolValue)
        #expect(store.fileExists(atPath: "/a/top", isDirectory: &isDirectory) && !isDirectory.boolValue)
        #expect(store.fileExists(atPath: "/"))
        #expect(!store.fileExists(atPath: "/a/none"))
        #expect(!store.fileExists(atPath: "/a/top/below"))
        #expect(!store.fileExists(atPath: "/a/../etc"))

        // A replace is atomic; the content is the new one.
        try store.write(sampleData(40, seed: 4), to: "/a/top", options: .atomic)
        #expect(store.contents(atPath: "/a/top") == sampleData(40, seed: 4))

        // moveItem goes to exactly the destination and keeps the class.
        try store.moveItem(atPath: "/a/b/one", toPath: "/a/moved")
        #expect(!store.fileExists(atPath: "/a/b/one"))
        #expect(store.contents(atPath: "/a/moved") == sampleData(10, seed: 1))
        #expect(protection(try store.attributesOfItem(atPath: "/a/moved")) == .complete)
        #expect(throws: StoreError.alreadyExists("/a/b")) { try store.moveItem(atPath: "/a/moved", toPath: "/a/b") }
        #expect(throws: StoreError.alreadyExists("/a/top")) { try store.moveItem(atPath: "/a/moved", toPath: "/a/top") }
        #expect(throws: StoreError.notFound("/a/ghost")) { try store.moveItem(atPath: "/a/ghost", toPath: "/a/g2") }
        try store.moveItem(atPath: "/a/b", toPath: "/c")
        #expect(try store.contentsOfDirectory(atPath: "/c") == ["two"])
        #expect(store.contents(atPath: "/c/two") == sampleData(20, seed: 2))

        // removeItem is recursive, like FileManager's.
        try store.removeItem(atPath: "/a/moved")
        #expect(!store.fileExists(atPath: "/a/moved"))
        try store.write(Data([7]), to: "/c/three")
        try store.createDirectory(atPath: "/c/d/e", withIntermediateDirectories: true)
        try store.write(Data([8]), to: "/c/d/e/four")
        try store.removeItem(atPath: "/c")
        #expect(!store.fileExists(atPath: "/c"))
        #expect(try store.contentsOfDirectory(atPath: "/") == ["a"])
        #expect(throws: StoreError.notFound("/c")) { try store.removeItem(atPath: "/c") }

        // contents(atPath:) is nil on any failure; the throwing form says why.
        #expect(store.contents(atPath: "/missing") == nil)
        #expect(store.contents(atPath: "/a") == nil)
        #expect(throws: StoreError.notFound("/missing")) { try store.contentsOfItem(atPath: "/missing") }
        #expect(throws: StoreError.isADirectory("/a")) { try store.contentsOfItem(atPath: "/a") }
        #expect(throws: StoreError.notFound("/missing")) { try store.attributesOfItem(atPath: "/missing") }
    }

    @Test func namesNeedNoClassKey() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        var store = try fixture.open()
        try store.createDirectory(atPath: "/secret", withIntermediateDirectories: false,
                                  attributes: [.protectionKey: FileProtectionType.complete])
        try store.write(sampleData(10), to: "/secret/a")
        try store.write(sampleData(10), to: "/secret/b")
        for state in [DeviceState.locked, .beforeFirstUnlock] {
            store = try fixture.drive(store, to: state)
            #expect(try store.contentsOfDirectory(atPath: "/secret").count == 2)
            #expect(protection(try store.attributesOfItem(atPath: "/secret/a")) == .complete)
            #expect(store.fileExists(atPath: "/secret/a"))
            #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try store.contentsOfItem(atPath: "/secret/a") }
            try store.createDirectory(atPath: "/made-\(state)", withIntermediateDirectories: false,
                                      attributes: [.protectionKey: FileProtectionType.completeUnlessOpen])
            try store.setAttributes([.protectionKey: FileProtectionType.none], ofItemAtPath: "/made-\(state)")
            // An object's class cannot change without its class key.
            #expect(throws: DeviceError.protectedDataUnavailable(.complete)) {
                try store.setAttributes([.protectionKey: FileProtectionType.none], ofItemAtPath: "/secret/a")
            }
        }
        try store.moveItem(atPath: "/secret/a", toPath: "/a")
        try store.removeItem(atPath: "/secret")
        try fixture.unlock(store)
        #expect(try store.contentsOfItem(atPath: "/a") == sampleData(10))
        #expect(try store.contentsOfDirectory(atPath: "/") == ["a", "made-beforeFirstUnlock", "made-locked"])
    }
}
