import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing

/// Every single-bit flip in a device file must end in a typed error.
@Suite struct DeviceFileTamperTests {
    @Test(arguments: ["keybag", "record", "uid", "effaceable"])
    func everyBitFlipIsRejected(file: String) throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        device.shutdown()
        let path = temp.directory.path + "/" + file
        let original = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        var rejected = 0
        for bit in 0..<(original.count * 8) {
            var damaged = original
            damaged[bit / 8] ^= 1 << UInt8(bit % 8)
            try Data(damaged).write(to: URL(fileURLWithPath: path))
            do {
                let booted = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
                // uid and effaceable flips can only show once a key derived
                // from them is used: the keybag or record no longer opens.
                Issue.record("\(file) bit \(bit) accepted, state \(booted.state)")
            } catch let error as DeviceError {
                switch error {
                case .integrity, .rollback: rejected += 1
                default: Issue.record("\(file) bit \(bit): untyped outcome \(error)")
                }
            }
        }
        try Data(original).write(to: URL(fileURLWithPath: path))
        #expect(rejected == original.count * 8)
        #expect(throws: Never.self) { try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost) }
    }

    @Test func olderKeybagIsARollback() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        let keybagPath = temp.directory.path + "/keybag"
        let old = try Data(contentsOf: URL(fileURLWithPath: keybagPath))
        try device.changePasscode(old: passcode("1234"), new: passcode("1"))
        try device.changePasscode(old: passcode("1"), new: passcode("2"))
        device.shutdown()
        try old.write(to: URL(fileURLWithPath: keybagPath))
        #expect(throws: DeviceError.rollback) { try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost) }
    }

    @Test func bootRemovesTemporariesOfDeadWritersOnly() throws {
        let temp = TemporaryDevice()
        defer { temp.cleanUp() }
        let clock = ManualClock()
        let device = try makeDevice(temp, clock: clock)
        device.shutdown()
        let dir = temp.directory.path
        // No pid is this large on Linux (pid_max is at most 2^22).
        let dead = dir + "/keybag.tmp-2147483647-17"
        let live = dir + "/record.tmp-\(getpid())-18"
        for path in [dead, live] {
            #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: 64)))
        }
        _ = try Device.boot(at: temp.directory, clock: clock, passcodeCost: fastCost)
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(FileManager.default.fileExists(atPath: live))
    }
}
