import Foundation
import Locker
import LockerCrypto
import LockerDevice
import LockerFormat
import Synchronization
import Testing

/// A clock the library tests move by hand (test targets cannot share
/// files, so this repeats LockerDeviceTests' ManualClock).
final class LibraryClock: DeviceClock {
    private let seconds = Mutex<Double>(1_800_000_000)
    func now() -> Double { seconds.withLock { $0 } }
    func advance(_ delta: Double) { seconds.withLock { $0 += delta } }
}

func secret(_ text: String) -> SecretBytes { SecretBytes(copying: Array(text.utf8)) }

/// A store and an embedded device under a fresh directory in /tmp.
struct LibraryFixture {
    static let passcode = "1234"

    let root: String
    let clock = LibraryClock()
    var storeDirectory: String { root + "/store" }
    var deviceDirectory: String { root + "/device" }

    init() {
        root = NSTemporaryDirectory() + "locker-lib-" + UUID().uuidString.prefix(8)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: root) }

    /// Initializes the device on first call (unlocked); later calls boot
    /// it, and unlock it when `passcode` is given.
    /// `workers` 0 uses every core; a test whose timing depends on how
    /// many threads share a read gives a number.
    func open(passcode: String? = LibraryFixture.passcode, grace: UInt32 = 10, workers: Int = 0) throws -> Store {
        try Store.embedded(
            storeDirectory: storeDirectory, deviceDirectory: deviceDirectory, passcode: passcode.map(secret),
            options: Device.Options(graceSeconds: grace, passcodeCost: .fixed(logN: 10)),
            storeOptions: Store.Options(chunkSize: 16 << 10, workers: workers), clock: clock)
    }

    /// Drives the store's device into `state`. Before first unlock is a
    /// reboot (shutdown, then boot without a passcode), which gives a new
    /// store on the new device.
    func drive(_ store: Store, to state: DeviceState) throws -> Store {
        let device = try #require(store.device)
        switch state {
        case .beforeFirstUnlock:
            device.shutdown()
            return try open(passcode: nil)
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
        return store
    }

    func unlock(_ store: Store) throws {
        try #require(store.device).unlock(passcode: secret(Self.passcode))
    }
}

/// Test bytes that differ at every offset within a chunk.
func sampleData(_ count: Int, seed: Int = 0) -> Data {
    Data((0..<count).map { UInt8(truncatingIfNeeded: ($0 &+ seed) &* 31 &+ $0 / 251) })
}

/// The class named by an attribute dictionary (FileProtectionType is not
/// Equatable in swift-corelibs-foundation).
func protection(_ attributes: [FileAttributeKey: Any]) -> ProtectionClass? {
    (attributes[.protectionKey] as? FileProtectionType).flatMap { ProtectionClass($0) }
}

/// A key service that forwards to a device, as the agent client does over
/// its socket: the store cannot see a `Device` behind it.
final class ForwardingKeys: KeyService {
    let device: Device
    /// While true, `status` fails, as the agent does when it cannot say
    /// (after answering ``statusAnswersFirst`` more calls).
    let statusFails = Mutex(false)
    let statusAnswersFirst = Mutex(0)
    /// Run before each rewrap: another command's change, made while a
    /// command that rewraps has read what it changes but not locked it.
    let beforeRewrap = Mutex<(@Sendable () throws -> Void)?>(nil)
    init(_ device: Device) { self.device = device }

    func status() throws -> DeviceStatus {
        if statusFails.withLock({ $0 }) {
            let answers = statusAnswersFirst.withLock { count in
                defer { count = max(0, count - 1) }
                return count > 0
            }
            if !answers { throw DeviceError.integrity("status") }
        }
        return try device.status()
    }
    func unlock(passcode: SecretBytes) throws { try device.unlock(passcode: passcode) }
    func lock(immediately: Bool) throws { device.lock(immediately: immediately) }
    func changePasscode(old: SecretBytes, new: SecretBytes) throws { try device.changePasscode(old: old, new: new) }
    func reset(newPasscode: SecretBytes?) throws { try device.reset(newPasscode: newPasscode) }
    func wipe() throws { try device.wipe() }
    func metadataKey() throws -> SecretBytes { try device.metadataKey() }
    func classBPublicKey() throws -> ClassPublicKey { try device.classBPublicKey() }
    func wrap(fileKey: SecretBytes, for protectionClass: ProtectionClass) throws -> WrappedFileKey {
        try device.wrap(fileKey: fileKey, for: protectionClass)
    }
    func unwrap(_ wrapped: WrappedFileKey) throws -> SecretBytes { try device.unwrap(wrapped) }
    func rewrap(_ wrapped: WrappedFileKey, to newClass: ProtectionClass) throws -> WrappedFileKey {
        let hook = beforeRewrap.withLock { hook in
            defer { hook = nil }
            return hook
        }
        try hook?()
        return try device.rewrap(wrapped, to: newClass)
    }
    func open(objectID: String, wrapped: WrappedFileKey) throws -> SecretBytes {
        try device.open(objectID: objectID, wrapped: wrapped)
    }
    func registerOpen(objectID: String, fileKey: SecretBytes, protectionClass: ProtectionClass) throws {
        try device.registerOpen(objectID: objectID, fileKey: fileKey, protectionClass: protectionClass)
    }
    func openFileKey(objectID: String) throws -> SecretBytes { try device.openFileKey(objectID: objectID) }
    func close(objectID: String) throws { try device.close(objectID: objectID) }
}

extension Store {
    /// Stores `bytes` at `path`, handed to the store as it asks for them.
    @discardableResult
    func put(_ path: StorePath, bytes: [UInt8], protection: ProtectionClass? = nil) throws -> ObjectInfo {
        var offset = 0
        return try put(path, protection: protection) { buffer in
            let n = min(buffer.count, bytes.count - offset)
            buffer.copyBytes(from: bytes[offset..<(offset + n)])
            offset += n
            return n
        }
    }
}
