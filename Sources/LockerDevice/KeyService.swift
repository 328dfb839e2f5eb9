public import LockerCrypto
public import LockerFormat

/// The public half of the class B key, which anyone may use to create
/// class B objects in any state.
public struct ClassPublicKey: Sendable, Equatable {
    public var keyID: [UInt8]
    public var keyGeneration: UInt32
    public var publicKey: [UInt8]

    public init(keyID: [UInt8], keyGeneration: UInt32, publicKey: [UInt8]) {
        self.keyID = keyID
        self.keyGeneration = keyGeneration
        self.publicKey = publicKey
    }
}

/// What the store needs from a device: the operations whose answers
/// depend on which class keys are held now.
///
/// ``Device`` implements it in-process (the embedded mode). The agent
/// client implements it over the agent's socket, with the same semantics
/// and the same ``DeviceError``s. Class keys never cross this interface;
/// file keys do, one object at a time, when the class allows.
public protocol KeyService: AnyObject, Sendable {
    func status() throws -> DeviceStatus
    func unlock(passcode: SecretBytes) throws
    func lock(immediately: Bool) throws
    func changePasscode(old: SecretBytes, new: SecretBytes) throws
    func reset(newPasscode: SecretBytes?) throws
    func wipe() throws

    /// The key for names and metadata; every state but wiped.
    func metadataKey() throws -> SecretBytes
    /// Class B's public key; every state but wiped.
    func classBPublicKey() throws -> ClassPublicKey

    func wrap(fileKey: SecretBytes, for protectionClass: ProtectionClass) throws -> WrappedFileKey
    func unwrap(_ wrapped: WrappedFileKey) throws -> SecretBytes
    func rewrap(_ wrapped: WrappedFileKey, to newClass: ProtectionClass) throws -> WrappedFileKey

    func open(objectID: String, wrapped: WrappedFileKey) throws -> SecretBytes
    func registerOpen(objectID: String, fileKey: SecretBytes, protectionClass: ProtectionClass) throws
    func openFileKey(objectID: String) throws -> SecretBytes
    func close(objectID: String) throws

    /// Wraps several file keys for one class: the same as calling
    /// ``wrap(fileKey:for:)`` for each, in order, at once.
    func wrap(fileKeys: [SecretBytes], for protectionClass: ProtectionClass) throws -> [WrappedFileKey]
    /// Unwraps several keys: the same as ``unwrap(_:)`` for each, in
    /// order, except that the first failure fails the whole call.
    func unwrap(_ wrapped: [WrappedFileKey]) throws -> [SecretBytes]
}

extension KeyService {
    public func wrap(fileKeys: [SecretBytes], for protectionClass: ProtectionClass) throws -> [WrappedFileKey] {
        try fileKeys.map { try wrap(fileKey: $0, for: protectionClass) }
    }

    public func unwrap(_ wrapped: [WrappedFileKey]) throws -> [SecretBytes] {
        try wrapped.map { try unwrap($0) }
    }
}

extension Device: KeyService {}
