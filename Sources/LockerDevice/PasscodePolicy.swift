/// The delays after failed passcode attempts, as Apple's devices enforce
/// them.
///
/// | failed attempts | delay before the next try |
/// |---|---|
/// | 1–4 | none |
/// | 5 | 1 min |
/// | 6 | 5 min |
/// | 7–8 | 15 min |
/// | 9 and more | 1 h |
public enum PasscodePolicy {
    /// Seconds to wait after `failedAttempts` failures before the next try.
    public static func delay(afterFailedAttempts failedAttempts: Int) -> Double {
        switch failedAttempts {
        case ..<5: 0
        case 5: 60
        case 6: 300
        case 7, 8: 900
        default: 3600
        }
    }

    /// When the next try is allowed, or `nil` if it is allowed at once.
    public static func nextAttempt(failedAttempts: Int, lastFailure: Double) -> Double? {
        let wait = delay(afterFailedAttempts: failedAttempts)
        return wait > 0 ? lastFailure + wait : nil
    }
}

/// How expensive the passcode KDF (scrypt, r = 8, p = 1) is made.
public enum PasscodeCost: Sendable, Equatable {
    /// Measure on this machine and pick the smallest N that takes at least
    /// this many milliseconds. `init` and `passwd` use 100.
    case calibrated(milliseconds: Int)
    /// A fixed N = 2^logN; for callers that have measured already.
    case fixed(logN: UInt8)
}
