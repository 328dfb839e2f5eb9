import Foundation
import LockerCrypto
@testable import LockerDevice
import LockerFormat
import Testing

/// The record's tag of the last wrong passcode: a repeat counts once, but
/// the tag costs a scrypt to test and never refuses the right passcode.
@Suite struct WrongPasscodeTagTests {
    /// The device's files, opened with keys derived here from `uid` and
    /// `effaceable` (docs/format.md, "Key derivation"), not by the device.
    struct Files {
        let directory: DeviceDirectory
        let uid: SecretBytes
        let recordMACKey: SecretBytes
        let sealKey: SecretBytes

        init(_ temp: TemporaryDevice) throws {
            directory = temp.directory
            uid = try directory.loadUID(create: false)
            let effaceable = try directory.loadEffaceable()
            let joined = SecretBytes(copying: uid.withUnsafeBytes { Array($0) } + effaceable.withUnsafeBytes { Array($0) })
            recordMACKey = try Self.deviceKey(uid, "device record mac")
            sealKey = try Self.deviceKey(joined, "keybag seal")
        }

        static func deviceKey(_ ikm: SecretBytes, _ info: String) throws -> SecretBytes {
            try HKDF.deriveKey(inputKeyMaterial: ikm, salt: Array("locker v1".utf8), info: Array(info.utf8),
                               outputByteCount: 32)
        }

        func record() throws -> DeviceRecord { try directory.readRecord(macKey: recordMACKey) }
        func write(_ record: DeviceRecord) throws { try directory.writeRecord(record, macKey: recordMACKey) }
        func keybag() throws -> Keybag { try Keybag.open(directory.readKeybag(), with: sealKey) }
        func write(_ keybag: Keybag) throws { try directory.writeKeybag(keybag.sealed(with: sealKey)) }

        /// What the record held for a wrong passcode before: an HMAC under
        /// a key from `uid` alone, one HMAC per guess.
        func uidOnlyTag(_ code: String) throws -> [UInt8] {
            try HMAC.authenticationCode(for: Array(code.utf8), key: Self.deviceKey(uid, "wrong passcode tag"))
        }

        /// The tag now: from the passcode key, after scrypt under `kdf`.
        func passcodeKeyTag(_ code: String, kdf: Keybag.PasscodeKDF) throws -> [UInt8] {
            let stretched = try PasswordKDF.scrypt(password: passcode(code), salt: kdf.salt,
                                                   parameters: kdf.scryptParameters, outputByteCount: 32)
            let passcodeKey = try HKDF.deriveKey(inputKeyMaterial: stretched, secretSalt: Self.deviceKey(uid, "passcode tangle"),
                                                 info: Array("locker v1 passcode key".utf8), outputByteCount: 32)
            let tag = try HKDF.deriveKey(inputKeyMaterial: passcodeKey, info: Array("locker v1 wrong passcode tag".utf8),
                                         outputByteCount: 32)
            return tag.withUnsafeBytes { Array($0) }
        }
    }

    @Test func aRepeatCountsOnceAndLeavesTheRecordAsItWas() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        var device = try makeDevice(temp, clock: clock)
        device.lock(immediately: true)
        let files = try Files(temp)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("a")) }
        let afterFirst = try files.record()
        clock.advance(5)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("a")) }
        // Not even the failure time moves.
        #expect(try files.record() == afterFirst)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 2, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("b")) }
        // Only the last wrong passcode is remembered.
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 3, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("a")) }
        // The tag survives a reboot.
        device.shutdown()
        device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 3, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("a")) }
        try device.unlock(passcode: passcode("1234"))
        #expect(try files.record().failedAttempts == 0)
        #expect(try files.record().lastWrongPasscodeTag == [UInt8](repeating: 0, count: 32))
    }

    @Test func theTagDerivesFromThePasscodeKeyNotFromUIDAlone() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        device.lock(immediately: true)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("1235")) }
        let files = try Files(temp)
        let stored = try files.record().lastWrongPasscodeTag
        #expect(stored != (try files.uidOnlyTag("1235")))
        #expect(stored == (try files.passcodeKeyTag("1235", kdf: files.keybag().kdf)))
    }

    /// An attacker who can write the device directory changes the keybag's
    /// scrypt salt, so that the user's right passcode fails and its tag is
    /// stored, then puts the keybag back.
    @Test func aForgedSaltLeavesNoCheapTagAndTheRightPasscodeStillUnlocks() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        var device = try makeDevice(temp, clock: clock)
        device.shutdown()
        let files = try Files(temp)
        let original = try files.keybag()
        var forged = original
        forged.kdf.salt[0] ^= 1
        try files.write(forged)
        device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(throws: DeviceError.wrongPasscode(failedAttempts: 1, nextAttemptAt: nil)) { try device.unlock(passcode: passcode("1234")) }
        let stored = try files.record().lastWrongPasscodeTag
        // Testing a guess against this tag needs scrypt under the forged
        // salt: no faster than against the keybag.
        #expect(stored != (try files.uidOnlyTag("1234")))
        #expect(stored == (try files.passcodeKeyTag("1234", kdf: forged.kdf)))

        device.shutdown()
        try files.write(original)
        device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        try device.unlock(passcode: passcode("1234"))
        #expect(device.state == .unlocked)
        #expect(try files.record().failedAttempts == 0)
    }

    /// A record holding the very tag the right passcode gives (forged, or
    /// left from an earlier keybag) does not refuse it as a repeat.
    @Test func theRightPasscodeIsNeverRefusedAsARepeat() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        device.lock(immediately: true)
        let files = try Files(temp)
        var record = try files.record()
        record.failedAttempts = 2
        record.lastFailureTime = Int64(clock.now())
        record.lastWrongPasscodeTag = try files.passcodeKeyTag("1234", kdf: files.keybag().kdf)
        try files.write(record)
        try device.unlock(passcode: passcode("1234"))
        #expect(device.state == .unlocked)
        #expect(try files.record().failedAttempts == 0)
    }
}
