import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

@Suite struct PasscodeTests {
    @Test func delayTable() {
        let expected: [(Int, Double)] = [(0, 0), (1, 0), (4, 0), (5, 60), (6, 300), (7, 900), (8, 900), (9, 3600), (20, 3600)]
        for (attempts, delay) in expected {
            #expect(PasscodePolicy.delay(afterFailedAttempts: attempts) == delay, "after \(attempts)")
        }
    }

    @Test func failuresCountDelayAndSurviveReboot() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        var device = try makeDevice(temp, clock: clock)
        device.lock(immediately: true)
        for i in 1...4 {
            #expect(throws: DeviceError.wrongPasscode(failedAttempts: i, nextAttemptAt: nil)) {
                try device.unlock(passcode: passcode("wrong\(i)"))
            }
        }
        // The same wrong passcode again is not counted.
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 4, nextAttemptAt: nil)) {
            try device.unlock(passcode: passcode("wrong4"))
        }
        let fifthAt = clock.now()
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 5, nextAttemptAt: fifthAt + 60)) {
            try device.unlock(passcode: passcode("wrong5"))
        }
        // Reboot keeps the counter and the delay.
        device.shutdown()
        device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(try device.status().failedAttempts == 5)
        #expect(try device.status().nextAttemptAllowedAt == fifthAt + 60)
        // Even the right passcode waits.
        #expect(throws: DeviceError.lockedOut(failedAttempts: 5, until: fifthAt + 60)) {
            try device.unlock(passcode: passcode("1234"))
        }
        clock.advance(60)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 6, nextAttemptAt: clock.now() + 300)) {
            try device.unlock(passcode: passcode("wrong6"))
        }
        clock.advance(300)
        try device.unlock(passcode: passcode("1234"))
        #expect(device.state == .unlocked)
        #expect(try device.status().failedAttempts == 0)
    }

    /// A lockout recorded while the wall clock was a day ahead does not
    /// last a day once the clock is set right: the last failure counts as
    /// now, and the wait is the policy's.
    @Test func aLockoutIsNotLengthenedByAClockSetBack() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        device.lock(immediately: true)
        for i in 1...5 { _ = try? device.unlock(passcode: passcode("wrong\(i)")) }
        #expect(try device.status().failedAttempts == 5)
        clock.setTime(by: -86_400)
        #expect(try device.status().nextAttemptAllowedAt == clock.now() + 60)
        #expect(throws: DeviceError.lockedOut(failedAttempts: 5, until: clock.now() + 60)) {
            try device.unlock(passcode: passcode("1234"))
        }
        clock.advance(60)
        try device.unlock(passcode: passcode("1234"))
        #expect(device.state == .unlocked)
    }

    @Test func eraseAfterN() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock, eraseAfter: 3)
        let d = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .none)
        device.lock(immediately: true)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("a")) }
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 2, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("b")) }
        #expect(throws: DeviceError.wipedAfterFailedAttempts(3)) { try device.unlock(passcode: passcode("c")) }
        #expect(device.state == .wiped)
        #expect(throws: DeviceError.wiped) { try device.unwrap(d) }
    }

    @Test func changePasscodeThenOnlyTheNewOneWorks() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        var device = try makeDevice(temp, clock: clock)
        let a = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: .complete)
        let keyA = try device.unwrap(a)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) {
            try device.changePasscode(old: passcode("nope"), new: passcode("5678"))
        }
        try device.changePasscode(old: passcode("1234"), new: passcode("5678"))
        device.shutdown()
        device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) {
            try device.unlock(passcode: passcode("1234"))
        }
        try device.unlock(passcode: passcode("5678"))
        // The class key did not change, so old objects still open.
        #expect(try device.unwrap(a) == keyA)
    }

    @Test func resetRefusesADeviceWithoutAPasscode() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let device = try makeDevice(temp, clock: ManualClock(), passcode: nil)
        let key = try SecretBytes(randomCount: 32)
        let wrapped = try device.wrap(fileKey: key, for: .complete)
        let keybag = try Data(contentsOf: URL(fileURLWithPath: temp.directory.path + "/keybag"))
        for new in [passcode("0000"), nil] {
            #expect(throws: DeviceError.noPasscode) { try device.reset(newPasscode: new) }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: temp.directory.path + "/keybag")) == keybag)
        #expect(try device.status().keyGeneration == 1)
        #expect(try device.unwrap(wrapped) == key)
    }

    @Test func resetMakesOldObjectsKeyReset() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        var old: [ProtectionClass: WrappedFileKey] = [:]
        for cls in ProtectionClass.allCases { old[cls] = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: cls) }
        let keyD = try device.unwrap(old[.none]!)
        try device.reset(newPasscode: passcode("0000"))
        for cls in [ProtectionClass.complete, .completeUnlessOpen, .completeUntilFirstUserAuthentication] {
            #expect(throws: DeviceError.keyReset(cls)) { try device.unwrap(old[cls]!) }
            // Several at once, with a key of the new generation first.
            let new = try device.wrap(fileKey: SecretBytes(randomCount: 32), for: cls)
            #expect(throws: DeviceError.keyReset(cls)) { try device.unwrap([new, old[cls]!, new]) }
        }
        #expect(try device.unwrap(old[.none]!) == keyD)
        #expect(try device.status().keyGeneration == 2)
        device.lock(immediately: true)
        try device.unlock(passcode: passcode("0000"))
    }
}
