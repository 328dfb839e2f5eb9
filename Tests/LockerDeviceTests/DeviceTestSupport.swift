import Foundation
import LockerCrypto
import LockerDevice
import LockerFormat
import Synchronization

/// A clock the test moves by hand: time passing moves the wall clock and
/// the elapsed one; setting the time moves the wall clock alone.
final class ManualClock: DeviceClock {
    private let wall = Mutex<Double>(1_800_000_000)
    private let sinceBoot = Mutex<Double>(1_000)
    func now() -> Double { wall.withLock { $0 } }
    func elapsed() -> Double { sinceBoot.withLock { $0 } }
    func advance(_ delta: Double) {
        wall.withLock { $0 += delta }
        sinceBoot.withLock { $0 += delta }
    }
    /// Steps the wall clock by `delta` (negative: back), as NTP or a user
    /// setting the time does, with no time passing.
    func setTime(by delta: Double) { wall.withLock { $0 += delta } }
}

/// A fresh device directory under /tmp, removed by `cleanUp`.
struct TemporaryDevice {
    let root: String
    let directory: DeviceDirectory

    init() {
        root = NSTemporaryDirectory() + "locker-dev-" + UUID().uuidString.prefix(8)
        directory = DeviceDirectory(path: root + "/device")
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: root) }
}

let fastCost = PasscodeCost.fixed(logN: 10)

func passcode(_ text: String) -> SecretBytes { SecretBytes(copying: Array(text.utf8)) }

func makeDevice(_ temp: TemporaryDevice, clock: ManualClock, passcode code: String? = "1234", grace: UInt32 = 10,
                eraseAfter: UInt8 = 0) throws -> Device {
    try Device.initialize(
        at: temp.directory, passcode: code.map(passcode),
        options: .init(graceSeconds: grace, eraseAfter: eraseAfter, passcodeCost: fastCost), clock: clock)
}
