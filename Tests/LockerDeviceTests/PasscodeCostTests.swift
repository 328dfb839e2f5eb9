import Foundation
import LockerCrypto
@testable import LockerDevice
import LockerFormat
import Testing

/// The scrypt cost of a new passcode: calibrated at `init`; on a passcode
/// change re-tuned from the CPU time the old passcode's derivation took;
/// on a reset, or a device's first passcode, kept where it is the
/// calibrated cost or one step above. Not moved up and down by the noise
/// of one timing.
@Suite struct PasscodeCostTests {
    @Test func keptOnlyAtTheCalibratedCostOrOneStepAbove() {
        let cases: [(calibrated: UInt8, current: UInt8, expected: UInt8)] = [
            (16, 16, 16),
            (16, 17, 17),  // one step above: kept
            (16, 15, 16),  // below the calibration: never kept
            (16, 18, 16),  // two steps above: the machine changed
            (12, 10, 12),  // two steps below
            (19, 20, 19),  // above the range: 2^20 at r = 8 is over the 1 GiB limit
        ]
        for c in cases {
            #expect(Device.keptLogN(calibrated: c.calibrated, current: c.current) == c.expected,
                    "calibrated \(c.calibrated), current \(c.current)")
        }
    }

    @Test func retunedFromTheTimeOfARealDerivation() {
        let target = Duration.milliseconds(100)
        let cases: [(current: UInt8, took: Duration, expected: UInt8)] = [
            (16, .milliseconds(125), 16),  // at or over the target, under 1.1x twice it
            (16, .milliseconds(100), 16),
            (16, .milliseconds(99), 17),   // under it: one step up
            (16, .milliseconds(30), 18),   // as many steps as it takes
            (17, .milliseconds(219), 17),  // one step down would be under 1.1x the target
            (17, .milliseconds(220), 16),
            (17, .milliseconds(250), 16),
            (17, .milliseconds(1000), 16), // one step down at most, however slow
            (12, .milliseconds(1000), 12), // never below the calibration's floor
            (19, .milliseconds(1), 19),    // nor above 2^19
            (12, .zero, 19),
            (10, .milliseconds(20), 13),   // from 10 (a fixed cost's): 20 ms doubled three times
            (10, .milliseconds(1), 17),
        ]
        for c in cases {
            #expect(Device.retunedLogN(current: c.current, derivationTime: c.took, target: target) == c.expected,
                    "at \(c.current), took \(c.took)")
        }
    }

    /// A passcode change hands its timing to the re-tune, and no
    /// calibration runs: a 100 ms target, timings far from it.
    @Test func aTimedChangeIsRetunedFromItsTiming() throws {
        func kdf(_ logN: UInt8, r: UInt32 = 8) -> Keybag.PasscodeKDF {
            .init(logN: logN, r: r, p: 1, salt: [UInt8](repeating: 1, count: 32))
        }
        let cost = PasscodeCost.calibrated(milliseconds: 100)
        #expect(try Device.passcodeLogN(cost, current: kdf(16), derivationTime: .milliseconds(30)) == 18)
        #expect(try Device.passcodeLogN(cost, current: kdf(17), derivationTime: .milliseconds(250)) == 16)
        #expect(try Device.passcodeLogN(cost, current: kdf(16), derivationTime: .milliseconds(150)) == 16)
        // A reading of zero is no reading: the calibration (12 or more
        // here, never 19 as a zero time would ask).
        let zero = try Device.passcodeLogN(cost, current: kdf(16), derivationTime: .zero)
        #expect(zero < 19)
        // Other parameters: calibrated, not re-tuned (which would give 18).
        let other = try Device.passcodeLogN(cost, current: kdf(16, r: 4), derivationTime: .milliseconds(30))
        #expect(other < 18)
        #expect(try #require(Device.threadCPUTime()) > .zero)
    }

    @Test func aFixedCostIsTakenWhateverTheKeybagHas() throws {
        let current = Keybag.PasscodeKDF(logN: 15, r: 8, p: 1, salt: [UInt8](repeating: 1, count: 32))
        // 14 and 15: the keybag's cost is the given one or one step above,
        // which a calibrated cost would keep.
        #expect(try Device.passcodeLogN(.fixed(logN: 14), current: current) == 14)
        #expect(try Device.passcodeLogN(.fixed(logN: 16), current: current) == 16)
        #expect(try Device.passcodeLogN(.fixed(logN: 11), current: current) == 11)
        // Nor does a timing change it: 1 s at 15 against a fixed 14.
        #expect(try Device.passcodeLogN(.fixed(logN: 14), current: current, derivationTime: .seconds(1)) == 14)
    }

    @Test func aBootCostOutsideTheRangeIsRefusedBeforeAnythingIsRead() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        _ = try makeDevice(temp, clock: clock)
        // A 0 ms target made the first passcode change trap (log2 of 0).
        for cost in [PasscodeCost.calibrated(milliseconds: 0), .calibrated(milliseconds: -5),
                     .fixed(logN: Device.Options.logNRange.upperBound + 1)] {
            #expect(throws: FormatError.invalidField("passcode cost")) {
                try Device.boot(at: temp.directory, clock: clock, passcodeCost: cost)
            }
        }
        // A device that is not there: the cost is refused first.
        let missing = TemporaryDevice()
        #expect(throws: FormatError.invalidField("passcode cost")) {
            try Device.boot(at: missing.directory, clock: clock, passcodeCost: .calibrated(milliseconds: 0))
        }
    }

    /// Through the device, with a 1 ms target. One scrypt at 2^12 and r = 8
    /// takes several milliseconds, so a calibration gives the floor, 2^12; one
    /// at 2^13 or more takes far more than 2.2 ms, so a passcode change, which
    /// times the old passcode's derivation, goes one step down, never below the
    /// floor (for 10 and 12, whatever the timing). What each leaves follows
    /// from the cost the device was made with alone. At 13 and 14 the two
    /// differ: a reset keeps 13 (the calibration's one step above) and takes 12
    /// for 14; a change goes one step down from either.
    @Test(arguments: [(made: UInt8(13), afterChange: UInt8(12), afterReset: UInt8(13)),
                      (made: 12, afterChange: 12, afterReset: 12), (made: 14, afterChange: 13, afterReset: 12),
                      (made: 10, afterChange: 12, afterReset: 12)])
    func passcodeChangeRetunesAndResetKeeps(made: UInt8, afterChange: UInt8, afterReset: UInt8) throws {
        for viaReset in [false, true] {
            let after = viaReset ? afterReset : afterChange
            let temp = TemporaryDevice()
            defer { temp.cleanUp() }
            let files = try Self.make(temp, logN: made, passcode: "1234")
            #expect(try files.keybag().kdf.logN == made)
            let before = try files.keybag().kdf.salt

            let device = try Self.bootAtOneMillisecond(temp)
            try device.unlock(passcode: passcode("1234"))
            if viaReset {
                try device.reset(newPasscode: passcode("5678"))
            } else {
                try device.changePasscode(old: passcode("1234"), new: passcode("5678"))
            }
            let kdf = try files.keybag().kdf
            #expect(kdf.logN == after, "made with \(made), \(viaReset ? "reset" : "passwd")")
            #expect((kdf.r, kdf.p) == (8, 1))
            #expect(kdf.salt != before, "a new passcode gets a new salt, whatever its cost")

            // The new passcode opens the keybag at that cost.
            device.lock(immediately: true)
            try device.unlock(passcode: passcode("5678"))
            #expect(device.state == .unlocked)
        }
    }

    /// A keybag whose scrypt has other r or p: its `logN` says nothing of
    /// the cost at r = 8, so it is never kept. Only a reset can show it
    /// (the passcode set under r = 8 no longer opens it).
    @Test func aKeybagWithOtherParametersIsRecalibrated() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let files = try Self.make(temp, logN: 13, passcode: "1234")
        var keybag = try files.keybag()
        keybag.kdf.r = 4
        try files.write(keybag)

        let device = try Self.bootAtOneMillisecond(temp)
        try device.reset(newPasscode: passcode("5678"))
        let kdf = try files.keybag().kdf
        #expect((kdf.logN, kdf.r, kdf.p) == (12, 8, 1), "13 at r = 4 kept as 13 at r = 8")
        try device.unlock(passcode: passcode("5678"))
        #expect(device.state == .unlocked)
    }

    /// The first passcode of a device made without one: no old passcode is
    /// derived, so nothing is timed, and the cost is kept as on a reset
    /// (timed, the HKDF alone would have asked for 2^19).
    @Test func aFirstPasscodeKeepsTheCost() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let files = try Self.make(temp, logN: 13, passcode: nil)
        let device = try Self.bootAtOneMillisecond(temp)
        try device.changePasscode(old: SecretBytes(copying: []), new: passcode("5678"))
        #expect(try files.keybag().kdf.logN == 13)
        device.lock(immediately: true)
        try device.unlock(passcode: passcode("5678"))
        #expect(device.state == .unlocked)
    }

    /// Makes a device in `temp` with `code` (nil: none) at the fixed cost
    /// 2^`logN`, and returns its files, opened as format.md says.
    static func make(_ temp: TemporaryDevice, logN: UInt8, passcode code: String?) throws -> WrongPasscodeTagTests.Files {
        _ = try Device.initialize(at: temp.directory, passcode: code.map(passcode),
                                  options: .init(passcodeCost: .fixed(logN: logN)), clock: ManualClock())
        return try WrongPasscodeTagTests.Files(temp)
    }

    /// Boots the device in `temp` with a calibration target of 1 ms, which
    /// any scrypt run here exceeds.
    static func bootAtOneMillisecond(_ temp: TemporaryDevice) throws -> Device {
        try Device.boot(at: temp.directory, clock: ManualClock(), passcodeCost: .calibrated(milliseconds: 1))
    }
}
