import Foundation
import LockerCrypto
@testable import LockerDevice
import LockerFormat
import Testing

/// The scrypt cost of a new passcode: calibrated at `init`, and on a
/// passcode change or reset kept where it is the calibrated cost or one
/// step above, so that it does not double or halve with the noise of one
/// timing.
@Suite struct PasscodeCostTests {
    @Test func keptOnlyAtTheCalibratedCostOrOneStepAbove() {
        let cases: [(calibrated: UInt8, current: UInt8, expected: UInt8)] = [
            (16, 16, 16),
            (16, 17, 17),  // one step above: kept
            (16, 15, 16),  // below the calibration: never kept
            (16, 18, 16),  // two steps above: the machine changed
            (12, 10, 12),  // two steps below
            (19, 20, 19),  // above it (more than 512 MiB of memory)
        ]
        for c in cases {
            #expect(Device.keptLogN(calibrated: c.calibrated, current: c.current) == c.expected,
                    "calibrated \(c.calibrated), current \(c.current)")
        }
    }

    @Test func aFixedCostIsTakenWhateverTheKeybagHas() throws {
        let current = Keybag.PasscodeKDF(logN: 15, r: 8, p: 1, salt: [UInt8](repeating: 1, count: 32))
        #expect(try Device.passcodeLogN(.fixed(logN: 11), current: current) == 11)
        #expect(try Device.passcodeLogN(.fixed(logN: 16), current: current) == 16)
    }

    /// Through the device: a 1 ms target calibrates to the floor, 2^12
    /// (one scrypt at 2^12 and r = 8 fills 4 MiB, far more than 1 ms), so
    /// what a passcode change and a reset leave follows from the cost the
    /// device was made with alone.
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
}
