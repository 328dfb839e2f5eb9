import Foundation
import Locker
import LockerDevice
import LockerCrypto
import LockerFormat
import LockerIO
import Synchronization
import Testing

/// The protection semantics table, through the library: read an existing
/// closed object / create a new one, for every class in every state.
@Suite struct LibraryStateTableTests {
    /// (read, create) per class, per state, exactly as the table in
    /// PROTECTION-SEMANTICS.md.
    static let table: [DeviceState: [ProtectionClass: (read: Bool, create: Bool)]] = [
        .beforeFirstUnlock: [.complete: (false, false), .completeUnlessOpen: (false, true),
                             .completeUntilFirstUserAuthentication: (false, false), .none: (true, true)],
        .unlocked: [.complete: (true, true), .completeUnlessOpen: (true, true),
                    .completeUntilFirstUserAuthentication: (true, true), .none: (true, true)],
        .locking: [.complete: (true, true), .completeUnlessOpen: (true, true),
                   .completeUntilFirstUserAuthentication: (true, true), .none: (true, true)],
        .locked: [.complete: (false, false), .completeUnlessOpen: (false, true),
                  .completeUntilFirstUserAuthentication: (true, true), .none: (true, true)],
    ]

    @Test(arguments: [DeviceState.beforeFirstUnlock, .unlocked, .locking, .locked])
    func everyCell(state: DeviceState) throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        var store = try fixture.open()
        for cls in ProtectionClass.allCases {
            try store.write(sampleData(1000, seed: Int(cls.rawValue)), to: "/closed-\(cls.letter)", options: cls.writingOption)
        }
        store = try fixture.drive(store, to: state)
        #expect(store.device?.state == state)
        #expect(store.isProtectedDataAvailable == (state == .unlocked || state == .locking))

        for cls in ProtectionClass.allCases {
            let expected = Self.table[state]![cls]!
            let path = "/closed-\(cls.letter)"
            let data = sampleData(1000, seed: Int(cls.rawValue))
            // Read, three ways: throwing, optional, and through a handle.
            if expected.read {
                #expect(try store.contentsOfItem(atPath: path) == data, "read \(cls) in \(state)")
                #expect(store.contents(atPath: path) == data)
                let handle = try store.fileHandle(forReadingAtPath: path)
                #expect(try handle.readToEnd() == data)
                try handle.close()
            } else {
                #expect(throws: DeviceError.protectedDataUnavailable(cls), "read \(cls) in \(state)") {
                    try store.contentsOfItem(atPath: path)
                }
                #expect(store.contents(atPath: path) == nil)
                #expect(throws: DeviceError.protectedDataUnavailable(cls)) { try store.fileHandle(forReadingAtPath: path) }
            }
            // Names and attributes in every state.
            #expect(protection(try store.attributesOfItem(atPath: path)) == cls)

            // Create.
            let created = "/new-\(cls.letter)"
            let fresh = sampleData(500, seed: 77)
            if expected.create {
                try store.write(fresh, to: created, options: cls.writingOption)
                #expect(protection(try store.attributesOfItem(atPath: created)) == cls)
                if expected.read {
                    #expect(try store.contentsOfItem(atPath: created) == fresh)
                } else {
                    #expect(throws: DeviceError.protectedDataUnavailable(cls)) { try store.contentsOfItem(atPath: created) }
                }
            } else {
                #expect(throws: DeviceError.protectedDataUnavailable(cls), "create \(cls) in \(state)") {
                    try store.write(fresh, to: created, options: cls.writingOption)
                }
                #expect(!store.fileExists(atPath: created), "a refused create leaves nothing")
            }
        }

        // After unlock, everything reads, including what was created.
        try fixture.unlock(store)
        #expect(store.isProtectedDataAvailable)
        for cls in ProtectionClass.allCases {
            #expect(try store.contentsOfItem(atPath: "/closed-\(cls.letter)") == sampleData(1000, seed: Int(cls.rawValue)))
            if Self.table[state]![cls]!.create {
                #expect(try store.contentsOfItem(atPath: "/new-\(cls.letter)") == sampleData(500, seed: 77))
            }
        }
    }

    @Test func protectedDataAvailabilityFollowsTheState() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        var store = try fixture.open(grace: 5)
        let device = try #require(store.device)
        #expect(store.isProtectedDataAvailable)
        device.lock(immediately: false)
        #expect(store.isProtectedDataAvailable, "grace keeps class A")
        fixture.clock.advance(4.9)
        #expect(store.isProtectedDataAvailable)
        fixture.clock.advance(0.1)
        #expect(!store.isProtectedDataAvailable)
        try fixture.unlock(store)
        #expect(store.isProtectedDataAvailable)
        device.lock(immediately: true)
        #expect(!store.isProtectedDataAvailable)
        store = try fixture.drive(store, to: .beforeFirstUnlock)
        #expect(!store.isProtectedDataAvailable)
        try fixture.unlock(store)
        #expect(store.isProtectedDataAvailable)
        // Wiped: nothing is available, and the property does not throw.
        try #require(store.device).wipe()
        #expect(!store.isProtectedDataAvailable)
    }

    /// A batch prepared for fetching (`get -r`, `export`) before a lock
    /// does not read class A or closed class B objects after it: their
    /// keys are asked for again at each read. Class C and D read on.
    @Test func preparedReadsStopAtALockForClassesAAndB() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open(grace: 5)
        let device = try #require(store.device)
        try store.createDirectory(atPath: "/d", withIntermediateDirectories: false)
        for cls in ProtectionClass.allCases {
            try store.write(sampleData(1000, seed: Int(cls.rawValue)), to: "/d/\(cls.letter)", options: cls.writingOption)
        }
        try store.write(sampleData(1000, seed: 9), to: "/d/open-B", options: ProtectionClass.completeUnlessOpen.writingOption)
        _ = try store.open(StorePath("/d/open-B"))
        let prepared = try store.prepareReads(try store.listForFetch(StorePath("/d")).objects)
        #expect(prepared.count == 5)
        device.lock(immediately: true)
        for read in prepared {
            var bytes = Data()
            let result = Result { try store.read(read, into: { bytes.append(contentsOf: $0) }) }
            switch read.path.name {
            case "A", "B":
                #expect(throws: DeviceError.self, "\(read.path)") { try result.get() }
                #expect(bytes.isEmpty, "\(read.path)")
            default:
                #expect(throws: Never.self, "\(read.path)") { try result.get() }
                #expect(bytes.count == 1000, "\(read.path)")
            }
        }
    }

    /// Class C and D keys unwrapped together for a fetch serve the whole
    /// batch, however small its objects, only until the device is asked
    /// again: after a shutdown (a reboot's first half), the next object
    /// read once the interval has passed stops the fetch.
    @Test func preparedClassCReadsStopAfterAShutdown() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let device = try #require(store.device)
        try store.createDirectory(atPath: "/d", withIntermediateDirectories: false)
        for i in 0..<3 {
            try store.write(sampleData(1000, seed: i), to: "/d/c\(i)", options: ProtectionClass.completeUntilFirstUserAuthentication.writingOption)
        }
        let prepared = try store.prepareReads(try store.listForFetch(StorePath("/d")).objects)
        #expect(prepared.count == 3)
        var bytes = Data()
        try store.read(prepared[0]) { bytes.append(contentsOf: $0) }
        #expect(bytes == sampleData(1000, seed: 0))
        device.shutdown()
        Thread.sleep(forTimeInterval: 0.7)
        bytes = Data()
        #expect(throws: DeviceError.self) { try store.read(prepared[1]) { bytes.append(contentsOf: $0) } }
        #expect(bytes.isEmpty)
    }

    /// A read already under way when the grace period ends stops for a
    /// class A object and a closed class B one ("even open objects fail
    /// once grace ends"), and goes on for an open B, C and D; both the
    /// in-order read and the one that hands over chunks from every core.
    @Test(arguments: [false, true])
    func readsUnderWayStopWhenGraceEnds(atOffsets: Bool) throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        // Two threads on any machine: with many more, the read at offsets
        // could take every run before the recheck interval has passed.
        let store = try fixture.open(grace: 5, workers: 2)
        let device = try #require(store.device)
        // 16 hand-overs either way: runs of 1 MiB at offsets, batches of
        // four 16 KiB chunks (two cores) in order.
        let size = atOffsets ? 16 << 20 : 1 << 20
        let data = sampleData(size)
        for cls in ProtectionClass.allCases {
            try store.write(data, to: "/\(cls.letter)", options: cls.writingOption)
        }
        try store.write(data, to: "/open-B", options: ProtectionClass.completeUnlessOpen.writingOption)
        _ = try store.open(StorePath("/open-B"))
        for name in ["A", "B", "open-B", "C", "D"] {
            if device.state != .unlocked { try device.unlock(passcode: secret(LibraryFixture.passcode)) }
            let received = Mutex(0)
            let locked = Mutex(false)
            // The lock comes after the first bytes, and the read must
            // outlast KeyRecheck.interval to be asked again: every later
            // hand-over is slow too, or the other thread of the read at
            // offsets would take the rest while the first one sleeps.
            let lockOnce: @Sendable (Int) -> Void = { count in
                received.withLock { $0 += count }
                let first = locked.withLock { done in defer { done = true }; return !done }
                if first { device.lock(immediately: true) }
                Thread.sleep(forTimeInterval: first ? 0.7 : 0.05)
            }
            let result = Result {
                if atOffsets {
                    try store.read(StorePath("/\(name)"), at: { _, bytes in lockOnce(bytes.count) })
                } else {
                    try store.read(StorePath("/\(name)")) { lockOnce($0.count) }
                }
            }
            let got = received.withLock { $0 }
            switch name {
            case "A", "B":
                #expect(throws: DeviceError.protectedDataUnavailable(name == "A" ? .complete : .completeUnlessOpen), "\(name)") {
                    try result.get()
                }
                #expect(got > 0 && got < size, "\(name): \(got) bytes")
            default:
                #expect(throws: Never.self, "\(name)") { try result.get() }
                #expect(got == size, "\(name)")
            }
        }
    }

    /// What the caller's sink throws comes back as it was: only the
    /// reader's own failures are the object's damage. A destination that
    /// fails with ENODATA (or a sink that throws a crypto or format error
    /// of its own) is not reported as a damaged object.
    @Test(arguments: [false, true])
    func aSinksErrorIsNotTakenForDamage(atOffsets: Bool) throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open(grace: 5)
        try store.write(sampleData(3000), to: "/small", options: ProtectionClass.none.writingOption)
        try store.write(sampleData(3 << 20), to: "/large", options: ProtectionClass.none.writingOption)
        let errors: [any Error] = [
            IOError("write", path: "/destination", errno: ENODATA), CryptoError.authenticationFailure, FormatError.truncated,
        ]
        for name in ["/small", "/large"] {
            for error in errors {
                let result = Result {
                    if atOffsets {
                        try store.read(StorePath(name), at: { _, _ in throw error })
                    } else {
                        try store.read(StorePath(name)) { _ in throw error }
                    }
                }
                guard case .failure(let thrown) = result else {
                    Issue.record("\(name): the sink's \(error) was not thrown")
                    continue
                }
                #expect(!(thrown is StoreError), "\(name): \(error) came back as \(thrown)")
                #expect(String(describing: thrown) == String(describing: error), "\(name): \(thrown)")
            }
            // The same read with a sink that does not fail succeeds.
            #expect(throws: Never.self) { try store.read(StorePath(name)) { _ in } }
        }
    }

    /// A put under way when the grace period ends stops for class A (its
    /// class no longer takes new objects) and stores nothing; B (public
    /// key), C and D go on.
    @Test func putsUnderWayStopWhenGraceEnds() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open(grace: 5)
        let device = try #require(store.device)
        let data = sampleData(1 << 20)
        for cls in ProtectionClass.allCases {
            if device.state != .unlocked { try device.unlock(passcode: secret(LibraryFixture.passcode)) }
            var offset = 0
            var locked = false
            let result = Result {
                try store.put(StorePath("/\(cls.letter)"), protection: cls) { buffer in
                    // After the first batch: the recheck must be asked.
                    if offset >= 256 << 10, !locked {
                        locked = true
                        device.lock(immediately: true)
                        Thread.sleep(forTimeInterval: 0.7)
                    }
                    let n = min(buffer.count, data.count - offset, 16 << 10)
                    data.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + n])) }
                    offset += n
                    return n
                }
            }
            #expect(locked, "\(cls)")
            if cls == .complete {
                #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try result.get() }
                #expect(throws: StoreError.self) { try store.attributesOfItem(atPath: "/A") }
                // Its data file went with it (B, C and D are stored after A).
                #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.storeDirectory + "/data") == [])
            } else {
                #expect(throws: Never.self, "\(cls)") { try result.get() }
                if device.state != .unlocked { try device.unlock(passcode: secret(LibraryFixture.passcode)) }
                #expect(try store.contentsOfItem(atPath: "/\(cls.letter)") == data, "\(cls)")
            }
        }
    }

    @Test func withoutAPasscodeLockChangesNothing() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        var store = try fixture.open(passcode: nil)
        try store.write(sampleData(100), to: "/a", options: .completeFileProtection)
        store.device?.lock(immediately: true)
        #expect(store.device?.state == .locked)
        #expect(store.isProtectedDataAvailable)
        #expect(try store.contentsOfItem(atPath: "/a") == sampleData(100))
        // A reboot comes back unlocked.
        store.device?.shutdown()
        store = try fixture.open(passcode: nil)
        #expect(store.device?.state == .unlocked)
        #expect(try store.contentsOfItem(atPath: "/a") == sampleData(100))
    }

    @Test func embeddedBootUnlocksWithThePasscode() throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        var store = try fixture.open()
        try store.write(sampleData(100), to: "/a", options: .completeFileProtection)
        store.device?.shutdown()
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try fixture.open(passcode: "0000") }
        store = try fixture.open()
        #expect(store.device?.state == .unlocked)
        #expect(try store.contentsOfItem(atPath: "/a") == sampleData(100))
        // The same device and store through a key service that is not a
        // Device (as behind the agent): same answers, but no event stream.
        let forwarded = try Store(path: fixture.storeDirectory, keys: ForwardingKeys(try #require(store.device)))
        #expect(forwarded.device == nil)
        #expect(forwarded.protectedDataEvents() == nil)
        #expect(forwarded.isProtectedDataAvailable)
        #expect(try forwarded.contentsOfItem(atPath: "/a") == sampleData(100))
    }

    @Test func eventsUseTheIOSNames() async throws {
        let fixture = LibraryFixture()
        defer { fixture.cleanUp() }
        let store = try fixture.open()
        let device = try #require(store.device)
        let events = try #require(store.protectedDataEvents())
        device.lock(immediately: false)
        fixture.clock.advance(10)
        #expect(!store.isProtectedDataAvailable)
        try fixture.unlock(store)
        device.lock(immediately: true)
        device.shutdown()
        var seen: [ProtectionEvent] = []
        for await event in events { seen.append(event) }
        #expect(seen == [.protectedDataWillBecomeUnavailable, .protectedDataDidBecomeAvailable,
                         .protectedDataWillBecomeUnavailable])
    }
}
