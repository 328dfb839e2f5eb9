import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

/// `Device.initialize` takes only options a device can be made with, and
/// refuses the others before it writes anything.
@Suite struct InitializeOptionsTests {
    /// One option out of range each, with the field `validate()` names.
    /// Each of these used to be refused by the keybag's seal or by scrypt,
    /// after `uid` and `effaceable` were written.
    static let outOfRange: [(String, Device.Options)] = [
        ("grace", .init(graceSeconds: Keybag.maxGraceSeconds + 1, passcodeCost: fastCost)),
        ("grace", .init(graceSeconds: .max, passcodeCost: fastCost)),
        ("erase after", .init(eraseAfter: Keybag.maxEraseAfter + 1, passcodeCost: fastCost)),
        ("passcode cost", .init(passcodeCost: .fixed(logN: Device.Options.logNRange.upperBound + 1))),
        ("passcode cost", .init(passcodeCost: .fixed(logN: 22))),
        ("passcode cost", .init(passcodeCost: .fixed(logN: Device.Options.logNRange.lowerBound - 1))),
    ]

    @Test func outOfRangeOptionsAreRefusedBeforeAnythingIsWritten() throws {
        for (field, options) in Self.outOfRange {
            for code in ["1234", nil] {
                // A directory that is not there stays away, and one that is
                // there stays empty.
                for existing in [false, true] {
                    let temp = TemporaryDevice()
                    defer { temp.cleanUp() }
                    if existing {
                        try FileManager.default.createDirectory(atPath: temp.directory.path, withIntermediateDirectories: true)
                    }
                    #expect(throws: FormatError.invalidField(field)) {
                        try Device.initialize(at: temp.directory, passcode: code.map(passcode), options: options, clock: ManualClock())
                    }
                    let left = try? FileManager.default.contentsOfDirectory(atPath: temp.directory.path)
                    #expect(left == (existing ? [] : nil), "\(field), passcode \(code ?? "none"): left \(left ?? [])")
                }
            }
        }
    }

    @Test func validateNamesTheOptionOutOfRange() throws {
        for (field, options) in Self.outOfRange {
            #expect(throws: FormatError.invalidField(field)) { try options.validate() }
        }
        for milliseconds in [0, -1, 10_001, .max] {
            #expect(throws: FormatError.invalidField("passcode cost")) {
                try Device.Options(passcodeCost: .calibrated(milliseconds: milliseconds)).validate()
            }
        }
        let edges: [Device.Options] = [
            .init(graceSeconds: 0, eraseAfter: 0, passcodeCost: .fixed(logN: Device.Options.logNRange.lowerBound)),
            .init(graceSeconds: Keybag.maxGraceSeconds, eraseAfter: Keybag.maxEraseAfter,
                  passcodeCost: .fixed(logN: Device.Options.logNRange.upperBound)),
            .init(passcodeCost: .calibrated(milliseconds: 1)),
            .init(passcodeCost: .calibrated(milliseconds: 10_000)),
        ]
        for options in edges { try options.validate() }
    }

    /// The top of the cost range is the largest scrypt N (at r = 8, p = 1)
    /// that `PasswordKDF` runs.
    @Test func costRangeEndsAtTheLargestScryptRuns() {
        func memory(_ logN: UInt8) -> UInt64 {
            PasswordKDF.ScryptParameters(n: 1 << UInt64(logN), r: 8, p: 1).memoryByteCount
        }
        let top = Device.Options.logNRange.upperBound
        #expect(memory(top) <= PasswordKDF.scryptMemoryLimit)
        #expect(memory(top + 1) > PasswordKDF.scryptMemoryLimit)
    }
}
