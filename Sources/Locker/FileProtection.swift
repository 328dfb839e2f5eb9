public import FoundationEssentials
public import LockerFormat

// Foundation's Data Protection vocabulary, mapped onto Locker's classes.
//
// swift-corelibs-foundation declares `FileProtectionType`,
// `FileAttributeKey.protectionKey` and the protection `Data.WritingOptions`
// on Linux but enforces none of them; Locker gives them their Apple meaning.

extension ProtectionClass {
    /// The class Foundation calls `fileProtection`, or `nil` for a
    /// `FileProtectionType` Locker does not know (such as Apple's
    /// `completeWhenUserInactive`).
    public init?(_ fileProtection: FileProtectionType) {
        // swift-corelibs-foundation's FileProtectionType is not Equatable:
        // compare the raw names.
        switch fileProtection.rawValue {
        case FileProtectionType.complete.rawValue: self = .complete
        case FileProtectionType.completeUnlessOpen.rawValue: self = .completeUnlessOpen
        case FileProtectionType.completeUntilFirstUserAuthentication.rawValue:
            self = .completeUntilFirstUserAuthentication
        case FileProtectionType.none.rawValue: self = .none
        default: return nil
        }
    }

    /// Foundation's name for this class.
    public var fileProtectionType: FileProtectionType {
        switch self {
        case .complete: .complete
        case .completeUnlessOpen: .completeUnlessOpen
        case .completeUntilFirstUserAuthentication: .completeUntilFirstUserAuthentication
        case .none: .none
        }
    }

    /// The `Data.WritingOptions` protection option that asks for this
    /// class.
    public var writingOption: Data.WritingOptions {
        switch self {
        case .complete: .completeFileProtection
        case .completeUnlessOpen: .completeFileProtectionUnlessOpen
        case .completeUntilFirstUserAuthentication: .completeFileProtectionUntilFirstUserAuthentication
        case .none: .noFileProtection
        }
    }

    /// The class that the protection option in `options` asks for: `nil`
    /// when `options` has none, meaning "inherit" (the nearest ancestor
    /// directory's default, else the store's default), as on Apple
    /// platforms.
    ///
    /// The protection options are values in `.fileProtectionMask`, not
    /// independent bits (`.completeFileProtectionUnlessOpen` is the bits
    /// of `.noFileProtection` and `.completeFileProtection` together), so
    /// they are compared as values. A value in the mask Locker does not
    /// know throws ``ProtectedFileError/unsupportedWritingOptions(_:)``.
    public init?(writingOptions options: Data.WritingOptions) throws {
        let value = options.rawValue & Data.WritingOptions.fileProtectionMask.rawValue
        switch value {
        case 0: return nil
        case Data.WritingOptions.completeFileProtection.rawValue: self = .complete
        case Data.WritingOptions.completeFileProtectionUnlessOpen.rawValue: self = .completeUnlessOpen
        case Data.WritingOptions.completeFileProtectionUntilFirstUserAuthentication.rawValue:
            self = .completeUntilFirstUserAuthentication
        case Data.WritingOptions.noFileProtection.rawValue: self = .none
        default: throw ProtectedFileError.unsupportedWritingOptions(Data.WritingOptions(rawValue: value))
        }
    }
}

extension FileProtectionType {
    /// Foundation's name for a Locker class.
    public init(_ protectionClass: ProtectionClass) {
        self = protectionClass.fileProtectionType
    }
}

/// Why a call of the Foundation-style API was refused before it reached
/// the store. Refusals of the store and the device keep their own types:
/// ``StoreError`` (`notFound`, `alreadyExists`, …) and `DeviceError`
/// (`protectedDataUnavailable` when the class key is not held now,
/// `keyReset`, `wiped`).
public enum ProtectedFileError: Error, Equatable, Sendable {
    /// A `Data.WritingOptions` Locker cannot honour: an unknown protection
    /// value, or `.withoutOverwriting` (see ``Store/write(_:to:options:)``).
    case unsupportedWritingOptions(Data.WritingOptions)
    /// An attribute key other than `.protectionKey` given to
    /// ``Store/setAttributes(_:ofItemAtPath:)`` or
    /// ``Store/createDirectory(atPath:withIntermediateDirectories:attributes:)``.
    case unsupportedAttribute(FileAttributeKey)
    /// A `.protectionKey` value that is not a known `FileProtectionType`
    /// (or its raw string). Carries a description of the value.
    case invalidProtectionValue(String)
    /// The handle was closed.
    case handleClosed
    /// The object a handle was opened on was replaced, moved or removed:
    /// the handle reads only the version it opened.
    case itemChanged(String)
}

extension ProtectionClass {
    /// The class an attribute dictionary's `.protectionKey` value names.
    /// Accepts a `FileProtectionType`, its raw string
    /// (`"NSFileProtectionComplete"`, …) or a ``ProtectionClass``.
    static func fromAttribute(_ value: Any) throws -> ProtectionClass {
        if let cls = value as? ProtectionClass { return cls }
        let type: FileProtectionType
        if let given = value as? FileProtectionType {
            type = given
        } else if let raw = value as? String {
            type = FileProtectionType(rawValue: raw)
        } else {
            throw ProtectedFileError.invalidProtectionValue(String(describing: value))
        }
        guard let cls = ProtectionClass(type) else { throw ProtectedFileError.invalidProtectionValue(type.rawValue) }
        return cls
    }
}
