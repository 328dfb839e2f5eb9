public import LockerFormat
public import LockerIO

/// Why a device operation was refused.
///
/// The cases map one to one onto the CLI's exit codes (docs/cli.md).
public enum DeviceError: Error, Equatable, Sendable {
    /// The device directory holds no device; run `init`.
    case notInitialized
    /// `init` found a device already there.
    case alreadyInitialized
    /// The device was wiped: nothing can be decrypted again.
    case wiped
    /// The passcode was wrong, and this failure reached the erase-after
    /// limit: the device was wiped by this attempt.
    case wipedAfterFailedAttempts(Int)
    /// The class key this operation needs is not held in the current
    /// state (EX_TEMPFAIL: try again after unlock).
    case protectedDataUnavailable(ProtectionClass)
    /// The object's key belongs to a class-key generation that `reset`
    /// replaced; the object can never be decrypted.
    case keyReset(ProtectionClass)
    /// The passcode was wrong. `nextAttemptAt` is set when the next try
    /// must wait.
    case wrongPasscode(failedAttempts: Int, nextAttemptAt: Double?)
    /// Too many failed attempts: no passcode is tried until `until`
    /// (seconds since 1970).
    case lockedOut(failedAttempts: Int, until: Double)
    /// The device has no passcode, so there is nothing to unlock with one.
    case noPasscode
    /// Device or keybag bytes failed authentication or validation. The
    /// string says what is wrong with which file or structure, as a clause
    /// ("keybag failed authentication", "keybag is missing"), never the
    /// byte.
    case integrity(String)
    /// The keybag is older than the device record says: a rollback.
    case rollback
    /// The object is not open.
    case notOpen
    /// The device already holds `limit` (``Device/maxOpenObjects``) open
    /// objects, so it opens no other until one is closed.
    case tooManyOpenObjects(limit: Int)
    /// A file operation failed.
    case io(IOError)
}
