public import LockerCrypto
public import LockerDevice
internal import FoundationEssentials
internal import Glibc
internal import LockerIO

extension Store {
    /// The in-process device, when the store runs in embedded mode (see
    /// ``Store/embedded(storeDirectory:deviceDirectory:passcode:options:storeOptions:clock:)``);
    /// `nil` behind the agent.
    public var device: Device? { keys as? Device }

    /// Opens a store on a device that runs inside this process (the
    /// embedded mode), without the agent.
    ///
    /// If `deviceDirectory` holds no device, one is initialized there with
    /// `passcode` (`nil`: a device without a passcode) and `options`, and is
    /// left unlocked, as `locker init` does. Otherwise the device is booted,
    /// as the agent does at start: before first unlock if it has a
    /// passcode, and then, if `passcode` is given, unlocked with it (a
    /// wrong one throws `DeviceError.wrongPasscode` and counts as an
    /// attempt). With `passcode` `nil`, a booted device stays before first
    /// unlock; unlock it later through ``Store/device``. Of `options`, only
    /// `passcodeCost` matters at boot: the rest was fixed at init. A
    /// `storeDirectory` that holds other files throws
    /// ``StoreError/notAStore(_:)`` before any device is made; a missing one
    /// is created.
    ///
    /// **Contract.** The semantics equal the agent path: the agent holds
    /// the same ``Device`` type and the agent client forwards the same
    /// ``KeyService`` calls, so every state, class rule, error
    /// (`DeviceError.protectedDataUnavailable(_:)`, …), open-object rule
    /// and grace period is the same. As in the agent, grace expiry is
    /// applied on every call and also by a timer every 100 ms, so class A
    /// keys leave memory on time even when the app makes no call. What
    /// differs is only where the keys live: in the app's own process, not
    /// behind a socket owned by the user. Do not run the agent and an
    /// embedded device on the same device directory at the same time:
    /// each would hold its own state.
    ///
    /// `clock` is for tests (a clock moved by hand); apps keep
    /// ``SystemClock``. The device is reachable as ``Store/device``;
    /// `device.shutdown()` ends this boot like a reboot.
    public static func embedded(
        storeDirectory: String, deviceDirectory: String, passcode: SecretBytes?,
        options: Device.Options = Device.Options(), storeOptions: Store.Options = Store.Options(),
        clock: any DeviceClock = SystemClock()
    ) throws -> Store {
        // Before the device is made: a directory of other files is refused
        // with nothing created.
        try Store.checkDirectory(storeDirectory, create: true, fileSystem: storeOptions.fileSystem)
        let directory = DeviceDirectory(path: deviceDirectory, fileSystem: storeOptions.fileSystem)
        let device: Device
        if directory.exists {
            device = try Device.boot(at: directory, clock: clock, passcodeCost: options.passcodeCost)
            if let passcode, device.state == .beforeFirstUnlock { try device.unlock(passcode: passcode) }
        } else {
            device = try Device.initialize(at: directory, passcode: passcode, options: options, clock: clock)
        }
        guard EmbeddedTicker.start(for: device) else {
            // Without its clock a locked device would keep class A keys
            // past the grace period while the app made no call.
            device.shutdown()
            throw IOError("start the device's clock thread", path: deviceDirectory, errno: EAGAIN)
        }
        return try Store(path: storeDirectory, keys: device, options: storeOptions)
    }
}

/// Applies grace expiry on time, as the agent's ticker does, for as long
/// as the device is alive.
enum EmbeddedTicker {
    static let intervalMilliseconds = 100

    private final class WeakDevice: @unchecked Sendable {
        weak var device: Device?
        init(_ device: Device) { self.device = device }
    }

    /// Starts the ticker; false if its thread could not be started.
    static func start(for device: Device) -> Bool {
        let box = WeakDevice(device)
        return DetachedThread.start(stackSize: 64 << 10) {
            while true {
                usleep(UInt32(intervalMilliseconds) * 1000)
                guard let device = box.device else { return }
                device.tick()
            }
        }
    }
}
