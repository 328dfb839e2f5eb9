import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

/// The protection semantics table: read an existing closed object / create
/// a new one, for every class in every state.
@Suite struct StateTableTests {
    /// (readable, creatable) per class, per state, exactly as the table.
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

    /// Drives a device into `state` and returns it, with one object of each
    /// class wrapped while it was unlocked.
    func device(in state: DeviceState, temp: TemporaryDevice, clock: ManualClock) throws
        -> (Device, [ProtectionClass: WrappedFileKey])
    {
        var device = try makeDevice(temp, clock: clock)
        var wrapped: [ProtectionClass: WrappedFileKey] = [:]
        for cls in ProtectionClass.allCases {
            wrapped[cls] = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: cls)
        }
        switch state {
        case .beforeFirstUnlock:
            device.shutdown()
            device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        case .unlocked:
            break
        case .locking:
            device.lock(immediately: false)
        case .locked:
            device.lock(immediately: false)
            clock.advance(10)
        case .wiped:
            try device.wipe()
        }
        return (device, wrapped)
    }

    @Test(arguments: [DeviceState.beforeFirstUnlock, .unlocked, .locking, .locked])
    func everyCell(state: DeviceState) throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let (device, wrapped) = try device(in: state, temp: temp, clock: clock)
        #expect(device.state == state)
        for cls in ProtectionClass.allCases {
            let expected = Self.table[state]![cls]!
            let readResult = Result { try device.unwrap(wrapped[cls]!) }
            switch readResult {
            case .success: #expect(expected.read, "read \(cls) in \(state) should be refused")
            case .failure(let error):
                #expect(!expected.read, "read \(cls) in \(state) should work, got \(error)")
                #expect(error as? DeviceError == .protectedDataUnavailable(cls))
            }
            let createResult = Result { try device.wrap(fileKey: SecretBytes(randomCount: 32), for: cls) }
            switch createResult {
            case .success: #expect(expected.create, "create \(cls) in \(state) should be refused")
            case .failure(let error):
                #expect(!expected.create, "create \(cls) in \(state) should work, got \(error)")
                #expect(error as? DeviceError == .protectedDataUnavailable(cls))
            }
            // Several keys at once follow the same table: one request
            // of a batch (`put -r`, `get -r`) gets no more than one key does.
            let pair = [wrapped[cls]!, wrapped[cls]!]
            let readMany = Result { try device.unwrap(pair) }
            switch readMany {
            case .success(let keys): #expect(expected.read && keys.count == 2 && keys[0] == keys[1], "read \(cls) in \(state), two at once")
            case .failure(let error):
                #expect(!expected.read, "read \(cls) in \(state), two at once, should work, got \(error)")
                #expect(error as? DeviceError == .protectedDataUnavailable(cls))
            }
            let createMany = Result { try device.wrap(fileKeys: [SecretBytes(randomCount: 32), SecretBytes(randomCount: 32)], for: cls) }
            switch createMany {
            case .success(let keys): #expect(expected.create && keys.count == 2, "create \(cls) in \(state), two at once")
            case .failure(let error):
                #expect(!expected.create, "create \(cls) in \(state), two at once, should work, got \(error)")
                #expect(error as? DeviceError == .protectedDataUnavailable(cls))
            }
            // The pure table function agrees with the device.
            #expect(cls.isReadable(in: state) == expected.read)
            #expect(cls.isCreatable(in: state) == expected.create)
        }
        let status = try device.status()
        #expect(status.state == state)
        #expect(Set(status.readableClasses) == Set(ProtectionClass.allCases.filter { Self.table[state]![$0]!.read }.map(\.canonicalName)))
        #expect(status.isProtectedDataAvailable == (state == .unlocked || state == .locking))
    }

    @Test("several keys at once: the same wraps as one at a time, and the first failure in order is the answer")
    func manyKeysAtOnce() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        let fileKeys = try (0..<5).map { _ in try SecretBytes(randomCount: 32) }
        for cls in ProtectionClass.allCases {
            let many = try device.wrap(fileKeys: fileKeys, for: cls)
            #expect(many.count == fileKeys.count && many.allSatisfy { $0.protectionClass == cls })
            if cls != .completeUnlessOpen {
                // RFC 3394 is deterministic: the wraps are those of one key
                // at a time, byte for byte.
                #expect(try many == fileKeys.map { try device.wrap(fileKey: $0, for: cls) })
            }
            #expect(try device.unwrap(many) == fileKeys)
            #expect(try many.map { try device.unwrap($0) } == fileKeys)
        }
        #expect(try device.wrap(fileKeys: [], for: .complete).isEmpty)
        #expect(try device.unwrap([]).isEmpty)

        let c = try device.wrap(fileKeys: fileKeys, for: .completeUntilFirstUserAuthentication)
        let a = try device.wrap(fileKeys: Array(fileKeys.prefix(2)), for: .complete)
        var tampered = c[2]
        tampered.blob[tampered.blob.count - 1] ^= 1
        let damaged = DeviceError.integrity("wrapped key failed authentication")
        #expect(throws: damaged) { try device.unwrap(tampered) }
        // One bad key among good ones of its class fails the call as that
        // key fails alone, wherever it is.
        #expect(throws: damaged) { try device.unwrap([c[0], c[1], tampered, c[3]]) }
        #expect(throws: damaged) { try device.unwrap([tampered] + c) }
        #expect(throws: damaged) { try device.unwrap(c + [tampered]) }
        // Mixed classes, unlocked: the keys come back in order.
        #expect(try device.unwrap([c[0], a[0], c[1], a[1]]) == [fileKeys[0], fileKeys[0], fileKeys[1], fileKeys[1]])
        // Locked: the first failure in order is the answer.
        device.lock(immediately: true)
        #expect(throws: damaged) { try device.unwrap([c[0], tampered, a[0]]) }
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.unwrap([c[0], a[0], tampered]) }
        #expect(try device.unwrap(Array(c.prefix(2))) == Array(fileKeys.prefix(2)))
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.wrap(fileKeys: fileKeys, for: .complete) }
        // Keys of different lengths are each wrapped as one alone would be:
        // refused as a whole if any is.
        #expect(throws: CryptoError.invalidInputSize) {
            try device.wrap(fileKeys: [fileKeys[0], SecretBytes(copying: [UInt8](repeating: 1, count: 12))], for: .none)
        }
    }

    @Test func wipedRefusesEverything() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let (device, wrapped) = try device(in: .wiped, temp: temp, clock: clock)
        for cls in ProtectionClass.allCases {
            #expect(throws: DeviceError.wiped) { try device.unwrap(wrapped[cls]!) }
            #expect(throws: DeviceError.wiped) { try device.wrap(fileKey: SecretBytes(randomCount: 32), for: cls) }
            #expect(throws: DeviceError.wiped) { try device.unwrap([wrapped[cls]!, wrapped[cls]!]) }
            #expect(throws: DeviceError.wiped) { try device.wrap(fileKeys: [SecretBytes(randomCount: 32)], for: cls) }
        }
        #expect(throws: DeviceError.wiped) { try device.unlock(passcode: passcode("1234")) }
        device.shutdown()
        let rebooted = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(rebooted.state == .wiped)
        #expect(throws: DeviceError.wiped) { try rebooted.unlock(passcode: passcode("1234")) }
        #expect(throws: DeviceError.wiped) { try rebooted.metadataKey() }
    }

    @Test func graceExpiresOnTheInjectedClock() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, grace: 5)
        let a = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .complete)
        device.lock(immediately: false)
        #expect(device.state == .locking)
        #expect(try device.status().graceRemaining == 5)
        clock.advance(4.9)
        #expect(throws: Never.self) { try device.unwrap(a) }
        clock.advance(0.1)
        // Grace ends when the device is next asked anything: here, first,
        // for several keys at once.
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.unwrap([a, a]) }
        #expect(device.state == .locked)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.unwrap(a) }
        try device.unlock(passcode: passcode("1234"))
        #expect(throws: Never.self) { try device.unwrap(a) }
        // Again, and this time asked first to wrap several keys.
        device.lock(immediately: false)
        clock.advance(5)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) {
            try device.wrap(fileKeys: [SecretBytes(randomCount: 32), SecretBytes(randomCount: 32)], for: .complete)
        }
        #expect(device.state == .locked)
    }

    /// The grace period is measured on the elapsed clock: a wall clock
    /// set back an hour during it (NTP stepping it) does not keep the
    /// class A and B keys an hour longer, nor does one set forward end it.
    @Test func graceIsNotMovedBySettingTheTime() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, grace: 5)
        let a = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .complete)
        device.lock(immediately: false)
        clock.setTime(by: -3600)
        #expect(try device.status().graceRemaining == 5)
        #expect(try #require(device.graceEndsAt) == clock.now() + 5)
        clock.advance(4.9)
        #expect(throws: Never.self) { try device.unwrap(a) }
        clock.advance(0.1)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.unwrap(a) }
        #expect(device.state == .locked)
        try device.unlock(passcode: passcode("1234"))
        device.lock(immediately: false)
        clock.setTime(by: 3600)
        #expect(throws: Never.self) { try device.unwrap(a) }
        #expect(device.state == .locking)
    }

    /// A wipe zeroes the effaceable key through every name it has: a
    /// second name kept for the file must not keep the key.
    @Test func aWipeZeroesTheEffaceableKeyThroughASecondName() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        let kept = temp.root + "/effaceable-kept"
        try #require(link(temp.directory.path + "/effaceable", kept) == 0)
        let before = try #require(FileManager.default.contents(atPath: kept))
        #expect(before.contains { $0 != 0 })
        try device.wipe()
        #expect(!FileManager.default.fileExists(atPath: temp.directory.path + "/effaceable"))
        let after = try #require(FileManager.default.contents(atPath: kept))
        #expect(after.count == before.count && after.allSatisfy { $0 == 0 }, "the key survived under its second name")
    }

    @Test func lockNowSkipsGrace() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        device.lock(immediately: true)
        #expect(device.state == .locked)
    }

    @Test func openObjectsAcrossALock() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, grace: 3)
        let a = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .complete)
        let b = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .completeUnlessOpen)
        let keyA = try device.open(objectID: "a", wrapped: a)
        let keyB = try device.open(objectID: "b", wrapped: b)
        device.lock(immediately: false)
        #expect(try device.openFileKey(objectID: "a") == keyA)
        clock.advance(3)
        // B stays open across the lock; A is evicted when grace ends.
        #expect(try device.openFileKey(objectID: "b") == keyB)
        #expect(throws: DeviceError.notOpen) { try device.openFileKey(objectID: "a") }
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try device.unwrap(b) }
        #expect(try device.status().openObjects.map(\.id) == ["b"])
        // Opened again while locked: the key kept, though B's class key
        // is not held; A, evicted, is not.
        #expect(try device.open(objectID: "b", wrapped: b) == keyB)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.open(objectID: "a", wrapped: a) }
        // The kept key is given only for the class it was kept under.
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.open(objectID: "b", wrapped: a) }
        // B created while locked: readable through its open handle only.
        let fresh = try SecretBytes(randomCount: 32)
        let created = try device.wrap(fileKey: fresh, for: .completeUnlessOpen)
        try device.registerOpen(objectID: "new", fileKey: fresh, protectionClass: .completeUnlessOpen)
        #expect(try device.openFileKey(objectID: "new") == fresh)
        try device.close(objectID: "new")
        #expect(throws: DeviceError.notOpen) { try device.openFileKey(objectID: "new") }
        #expect(throws: DeviceError.notOpen) { try device.close(objectID: "new") }
        #expect(throws: DeviceError.protectedDataUnavailable(.completeUnlessOpen)) { try device.unwrap(created) }
        try device.unlock(passcode: passcode("1234"))
        #expect(try device.unwrap(created) == fresh)
    }

    @Test func withoutPasscodeLockChangesNothing() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, passcode: nil)
        let a = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .complete)
        device.lock(immediately: true)
        #expect(device.state == .locked)
        #expect(throws: Never.self) { try device.unwrap(a) }
        #expect(try device.status().passcodeSet == false)
        #expect(throws: DeviceError.noPasscode) { try device.unlock(passcode: passcode("x")) }
        device.shutdown()
        let rebooted = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(rebooted.state == .unlocked)
        #expect(throws: Never.self) { try rebooted.unwrap(a) }
    }

    /// Without a passcode, a lock with a grace period locks at once (there
    /// is nothing to evict, so no grace to wait for), posts no event, and
    /// the empty passcode ends it, again with no event.
    @Test func withoutPasscodeLockHasNoGraceNoEventAndTheEmptyPasscodeEndsIt() async throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, passcode: nil, grace: 10)
        let events = device.events()
        device.lock()
        #expect(device.state == .locked)
        let locked = try device.status()
        #expect(locked.graceRemaining == nil)
        #expect(locked.isProtectedDataAvailable)
        #expect(throws: DeviceError.noPasscode) { try device.unlock(passcode: passcode("x")) }
        #expect(device.state == .locked)
        try device.unlock(passcode: SecretBytes(copying: []))
        #expect(device.state == .unlocked)
        device.lock(immediately: true)
        #expect(device.state == .locked)
        device.shutdown()
        var seen: [ProtectionEvent] = []
        for await event in events { seen.append(event) }
        #expect(seen.isEmpty)
    }

    @Test func aFirstPasscodeKeepsTheKeysAndLocksFromThenOn() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, passcode: nil)
        let key = try SecretBytes(randomCount: 32)
        let a = try device.wrap(fileKey: key, for: .complete)
        #expect(throws: DeviceError.noPasscode) { try device.changePasscode(old: passcode("x"), new: passcode("5678")) }
        device.lock(immediately: true)
        try device.changePasscode(old: SecretBytes(copying: []), new: passcode("5678"))
        #expect(device.state == .unlocked)
        #expect(try device.status().passcodeSet)
        #expect(try device.unwrap(a) == key)
        device.lock(immediately: true)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try device.unwrap(a) }
        #expect(throws: DeviceError.self) { try device.unlock(passcode: passcode("1234")) }
        try device.unlock(passcode: passcode("5678"))
        #expect(try device.unwrap(a) == key)
        device.shutdown()
        let rebooted = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(rebooted.state == .beforeFirstUnlock)
        #expect(throws: DeviceError.protectedDataUnavailable(.complete)) { try rebooted.unwrap(a) }
        try rebooted.unlock(passcode: passcode("5678"))
        #expect(try rebooted.unwrap(a) == key)
    }

    @Test func eventsAreEmitted() async throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        let events = device.events()
        device.lock(immediately: true)
        try device.unlock(passcode: passcode("1234"))
        // Unlocked already: nothing becomes available, and nothing is said.
        try device.unlock(passcode: passcode("1234"))
        device.shutdown()
        var seen: [ProtectionEvent] = []
        for await event in events { seen.append(event) }
        #expect(seen == [.protectedDataWillBecomeUnavailable, .protectedDataDidBecomeAvailable])
    }

    // Regression: a watcher cancelled while a transition posted an event
    // deadlocked the device (the stream's termination handler waited for
    // the device lock while the posting thread, holding it, waited for the
    // runtime's lock on the cancelled task). Events are now delivered after
    // the device lock is released.
    @Test func cancellingWatchersDuringTransitionsDoesNotDeadlock() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        let code = passcode("1234")
        let finished = DispatchSemaphore(value: 0)
        let cycles = Thread {
            for _ in 0..<300 {
                device.lock(immediately: true)
                try? device.unlock(passcode: code)
            }
            finished.signal()
        }
        cycles.start()
        let watchers = Thread {
            for _ in 0..<300 {
                let stream = device.events()
                let task = Task { for await _ in stream {} }
                Thread.sleep(forTimeInterval: Double.random(in: 0..<0.0002))
                task.cancel()
            }
            finished.signal()
        }
        watchers.start()
        // A deadlock leaves the threads stuck: stop here rather than touch
        // the device again.
        try #require(finished.wait(timeout: .now() + 30) == .success, "deadlock")
        try #require(finished.wait(timeout: .now() + 30) == .success, "deadlock")
        #expect(device.state == .unlocked)
        device.shutdown()
    }

    @Test func eventsArriveInTransitionOrder() async throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock())
        let events = device.events()
        for _ in 0..<20 {
            device.lock(immediately: true)
            try device.unlock(passcode: passcode("1234"))
        }
        device.shutdown()
        var seen: [ProtectionEvent] = []
        for await event in events { seen.append(event) }
        let cycle: [ProtectionEvent] = [.protectedDataWillBecomeUnavailable, .protectedDataDidBecomeAvailable]
        #expect(seen == Array(repeating: cycle, count: 20).flatMap { $0 })
    }
}
