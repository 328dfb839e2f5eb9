import Foundation
import LockerCrypto
@testable import LockerDevice
import LockerFormat
import Testing

/// The scrypt cost of a new passcode: calibrated at `init`, and on a
/// passcode change or reset kept where it is the calibrated cost or one
/// step above, so that it never falls below the calibration and does not
/// move up and down with the noise of one timing.
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

    @Test func aFixedCostIsTakenWhateverTheKeybagHas() throws {
        let current = Keybag.PasscodeKDF(logN: 15, r: 8, p: 1, salt: [UInt8](repeating: 1, count: 32))
        // 14 and 15: the keybag's cost is the given one or one step above,
        // which a calibrated cost would keep.
        #expect(try Device.passcodeLogN(.fixed(logN: 14), current: current) == 14)
        #expect(try Device.passcodeLogN(.fixed(logN: 16), current: current) == 16)
        #expect(try Device.passcodeLogN(.fixed(logN: 11), current: current) == 11)
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

    /// Through the device: a 1 ms target calibrates to the floor, 2^12 (one
    /// scrypt at 2^12 and r = 8 takes several milliseconds), so what a
    /// passcode change and a reset leave follows from the cost the device
    /// was made with alone.
    @Test(arguments: [(made: UInt8(13), after: UInt8(13)), (made: 12, after: 12), (made: 14, after: 12),
                      (made: 10, after: 12)])
    func passcodeChangeAndResetKeepOrRecalibrate(made: UInt8, after: UInt8) throws {
        for viaReset in [false, true] {
            let temp = TemporaryDevice()
            defer { temp.cleanUp() }
            let clock = ManualClock()
            _ = try Device.initialize(at: temp.directory, passcode: passcode("1234"),
                                      options: .init(passcodeCost: .fixed(logN: made)), clock: clock)
            let files = try WrongPasscodeTagTests.Files(temp)
            #expect(try files.keybag().kdf.logN == made)
            let before = try files.keybag().kdf.salt

            let device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: .calibrated(milliseconds: 1))
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
        let clock = ManualClock()
        _ = try Device.initialize(at: temp.directory, passcode: passcode("1234"),
                                  options: .init(passcodeCost: .fixed(logN: 13)), clock: clock)
        let files = try WrongPasscodeTagTests.Files(temp)
        var keybag = try files.keybag()
        keybag.kdf.r = 4
        try files.write(keybag)

        let device = try Device.boot(at: temp.directory, clock: clock, passcodeCost: .calibrated(milliseconds: 1))
        try device.reset(newPasscode: passcode("5678"))
        let kdf = try files.keybag().kdf
        #expect((kdf.logN, kdf.r, kdf.p) == (12, 8, 1), "13 at r = 4 kept as 13 at r = 8")
        try device.unlock(passcode: passcode("5678"))
        #expect(device.state == .unlocked)
    }
}
