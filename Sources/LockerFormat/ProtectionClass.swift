/// A data protection class: which key protects an object and so in which
/// device states it can be read and created.
///
/// The raw value is the class byte stored on disk.
public enum ProtectionClass: UInt8, CaseIterable, Sendable, Hashable, Codable, CustomStringConvertible {
    /// Class A: readable only while the device is unlocked (and during the
    /// grace period after a lock).
    case complete = 1
    /// Class B: created at any time with the class public key; read while
    /// unlocked or while an object opened before the lock stays open.
    case completeUnlessOpen = 2
    /// Class C: readable from the first unlock after boot until the next
    /// reboot.
    case completeUntilFirstUserAuthentication = 3
    /// Class D: protected by the device secret only.
    case none = 4

    /// The canonical name, as `stat` prints it.
    public var canonicalName: String {
        switch self {
        case .complete: "complete"
        case .completeUnlessOpen: "completeUnlessOpen"
        case .completeUntilFirstUserAuthentication: "completeUntilFirstUserAuthentication"
        case .none: "none"
        }
    }

    /// The single-letter alias: A, B, C or D.
    public var letter: String {
        switch self {
        case .complete: "A"
        case .completeUnlessOpen: "B"
        case .completeUntilFirstUserAuthentication: "C"
        case .none: "D"
        }
    }

    public var description: String { canonicalName }

    /// Parses a canonical name, a letter alias (A–D) or `untilFirstAuth`.
    /// Letters are accepted in either case; names are matched exactly.
    public init?(name: String) {
        switch name {
        case "complete", "A", "a": self = .complete
        case "completeUnlessOpen", "B", "b": self = .completeUnlessOpen
        case "completeUntilFirstUserAuthentication", "untilFirstAuth", "C", "c":
            self = .completeUntilFirstUserAuthentication
        case "none", "D", "d": self = .none
        default: return nil
        }
    }

    /// Whether the class key is protected by the passcode (A, B and C).
    public var isPasscodeProtected: Bool { self != .none }
}
