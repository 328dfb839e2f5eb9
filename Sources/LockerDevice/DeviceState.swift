public import LockerFormat

/// The states of the simulated device. See docs/architecture.md.
public enum DeviceState: String, Sendable, Codable, CaseIterable {
    /// After boot (agent start), before the first unlock. Only class D and
    /// class B's public key are usable.
    case beforeFirstUnlock
    /// Every class key is held.
    case unlocked
    /// Locked, inside the grace period: every key is still held.
    case locking
    /// Grace is over: class A and B's private key are evicted.
    case locked
    /// The keybag's keys are destroyed.
    case wiped
}

/// The notifications a device posts, with the names iOS uses.
public enum ProtectionEvent: String, Sendable, Codable {
    /// A lock began; class A data goes away when the grace period ends.
    case protectedDataWillBecomeUnavailable
    /// The device was unlocked.
    case protectedDataDidBecomeAvailable
}

/// A snapshot of the device, as `locker status` prints it.
public struct DeviceStatus: Sendable, Codable, Equatable {
    public struct OpenObject: Sendable, Codable, Equatable {
        public var id: String
        public var protection: String
        public init(id: String, protection: String) {
            self.id = id
            self.protection = protection
        }
    }

    public var state: DeviceState
    public var passcodeSet: Bool
    /// Classes whose existing objects can be read now (canonical names).
    public var readableClasses: [String]
    /// Classes in which new objects can be created now.
    public var creatableClasses: [String]
    /// Seconds of grace left, while locking.
    public var graceRemaining: Double?
    public var graceSeconds: Int
    public var failedAttempts: Int
    /// When the next passcode attempt is allowed (seconds since 1970), if
    /// it must wait.
    public var nextAttemptAllowedAt: Double?
    public var eraseAfter: Int?
    public var keyGeneration: Int
    public var defaultClass: String
    public var openObjects: [OpenObject]
    /// True while class A data is available (iOS's
    /// `isProtectedDataAvailable`).
    public var isProtectedDataAvailable: Bool
}

extension ProtectionClass {
    /// Whether existing objects of this class can be read in `state`,
    /// per the protection semantics table. (Open objects are separate.)
    public func isReadable(in state: DeviceState) -> Bool {
        switch (self, state) {
        case (_, .wiped): false
        case (.none, _): true
        case (.completeUntilFirstUserAuthentication, .beforeFirstUnlock): false
        case (.completeUntilFirstUserAuthentication, _): true
        case (.complete, .unlocked), (.complete, .locking): true
        case (.completeUnlessOpen, .unlocked), (.completeUnlessOpen, .locking): true
        default: false
        }
    }

    /// Whether new objects of this class can be created in `state`.
    public func isCreatable(in state: DeviceState) -> Bool {
        if self == .completeUnlessOpen { return state != .wiped }
        return isReadable(in: state)
    }
}
