internal import LockerCrypto
internal import LockerFormat
public import LockerIO
#if canImport(Glibc)
internal import Glibc
#endif

/// The device directory: the simulated hardware secret (UID), the
/// effaceable key, the keybag and the device record. Mode 0700, separate
/// from the store. See docs/format.md, "Device directory".
public struct DeviceDirectory: Sendable {
    public let path: String
    let fileSystem: FileSystem

    public init(path: String, fileSystem: FileSystem = FileSystem()) {
        self.path = path
        self.fileSystem = fileSystem
    }

    var uidPath: String { path + "/uid" }
    var effaceablePath: String { path + "/effaceable" }
    var keybagPath: String { path + "/keybag" }
    var recordPath: String { path + "/record" }

    /// The file names that may exist in a device directory.
    public static let fileNames = ["uid", "effaceable", "keybag", "record"]

    /// Whether a device was ever initialized here.
    public var exists: Bool { fileSystem.exists(recordPath) }

    /// ``exists``, for deciding whether there is a device: a failure to
    /// look (a directory this user may not search) throws
    /// ``DeviceError/io(_:)`` instead of reading as "no".
    public func recordExists() throws -> Bool {
        try present(recordPath)
    }

    private func present(_ path: String) throws -> Bool {
        do {
            return try fileSystem.status(path) != nil
        } catch {
            throw DeviceError.io(error)
        }
    }

    /// Creates the directory (0700), or checks an existing one is private.
    func prepare() throws {
        do {
            try fileSystem.createDirectory(path, mode: 0o700, durable: true)
            try fileSystem.setMode(path, 0o700)
        } catch let error as IOError {
            throw DeviceError.io(error)
        }
    }

    /// Loads the UID, creating it when `create` is set and none exists.
    func loadUID(create: Bool) throws -> SecretBytes {
        if try create && !present(uidPath) {
            let uid = try SecretBytes(randomCount: 32)
            try writeSecret(uidPath, uid)
            return uid
        }
        var bytes = try read(uidPath, what: "uid")
        defer { SecretBytes.wipe(&bytes) }
        guard bytes.count == 32 else { throw DeviceError.integrity("uid has the wrong length") }
        return SecretBytes(copying: bytes)
    }

    func loadEffaceable() throws -> SecretBytes {
        var bytes = try read(effaceablePath, what: "effaceable key")
        defer { SecretBytes.wipe(&bytes) }
        guard bytes.count == 32 else { throw DeviceError.integrity("effaceable key has the wrong length") }
        return SecretBytes(copying: bytes)
    }

    func writeEffaceable(_ key: SecretBytes) throws {
        try writeSecret(effaceablePath, key)
    }

    /// Writes a device secret; the transient copy handed to the file
    /// system is wiped afterwards. The kept copy lives in ``SecretBytes``.
    private func writeSecret(_ path: String, _ key: SecretBytes) throws {
        var bytes = key.withUnsafeBytes { Array($0) }
        defer { SecretBytes.wipe(&bytes) }
        try write(path, bytes)
    }

    func readKeybag() throws -> [UInt8] { try read(keybagPath, what: "keybag") }
    func writeKeybag(_ bytes: [UInt8]) throws { try write(keybagPath, bytes) }

    /// Replaces the keybag without syncing the directory (``sync()``): a
    /// throw means the old keybag is still in place.
    func replaceKeybag(_ bytes: [UInt8]) throws { try write(keybagPath, bytes, syncDirectory: false) }

    /// Makes the replacements and removals in the directory durable.
    func sync() throws {
        do {
            try fileSystem.syncDirectory(path)
        } catch let error as IOError {
            throw DeviceError.io(error)
        }
    }

    func readRecord(macKey: SecretBytes) throws -> DeviceRecord {
        let bytes = try read(recordPath, what: "device record")
        do {
            return try DeviceRecord.decode(bytes, macKey: macKey)
        } catch {
            throw DeviceError.integrity("device record failed authentication")
        }
    }

    func writeRecord(_ record: DeviceRecord, macKey: SecretBytes) throws {
        try write(recordPath, try record.encoded(macKey: macKey))
    }

    /// Shreds temporary copies (`<file>.tmp-<pid>-<random>`) whose writer
    /// is gone: a process killed between writing a temporary and renaming
    /// it leaves one, holding a keybag or record. A temporary of a live
    /// process is left alone (it may be about to be renamed). Best effort:
    /// a failure leaves the file for the next boot or `wipe`.
    func removeStaleTemporaries() {
        guard let names = try? fileSystem.contentsOfDirectory(path) else { return }
        for name in names {
            guard let range = name.firstRange(of: ".tmp-") else { continue }
            let pidText = name[range.upperBound...].prefix { $0 != "-" }
            guard let pid = Int32(pidText), pid > 0, kill(pid, 0) != 0, errno == ESRCH else { continue }
            try? fileSystem.shred(path + "/" + name)
        }
    }

    /// Destroys the effaceable key and the keybag, and any temporary copy
    /// an interrupted write left behind.
    func efface() throws {
        do {
            // Zeroed through every name it has: a second name kept for it
            // must not keep the key.
            if fileSystem.exists(effaceablePath) { try fileSystem.shred(effaceablePath, evenIfLinked: true) }
            try fileSystem.remove(keybagPath)
            for name in try fileSystem.contentsOfDirectory(path) where name.contains(".tmp-") {
                try fileSystem.shred(path + "/" + name)
            }
        } catch let error as IOError {
            throw DeviceError.io(error)
        }
    }

    private func read(_ path: String, what: String) throws -> [UInt8] {
        do {
            return try fileSystem.readFile(path, limit: 64 << 10)
        } catch let error as IOError where error.isNotFound {
            throw what == "device record" ? DeviceError.notInitialized : DeviceError.integrity("\(what) is missing")
        } catch let error as IOError where error.isNotRegularFile || error.errno == EFBIG {
            throw DeviceError.integrity("\(what) failed authentication")
        } catch let error as IOError {
            throw DeviceError.io(error)
        }
    }

    private func write(_ path: String, _ bytes: [UInt8], syncDirectory: Bool = true) throws {
        do {
            try fileSystem.writeFileAtomically(path, bytes, mode: 0o600, syncDirectory: syncDirectory)
        } catch let error as IOError {
            throw DeviceError.io(error)
        }
    }
}

/// The keys derived from the UID and the effaceable key. See
/// docs/format.md, "Key derivation".
struct DeviceKeys {
    /// Wraps class D.
    let classDKEK: SecretBytes
    /// MACs the device record.
    let recordMACKey: SecretBytes
    /// Tangles the passcode with the device (HKDF salt).
    let passcodeTangle: SecretBytes
    /// Seals the keybag; gone with the effaceable key.
    let keybagSealKey: SecretBytes?
    /// Encrypts names and metadata in the store; gone with the effaceable
    /// key.
    let metadataKey: SecretBytes?

    init(uid: SecretBytes, effaceable: SecretBytes?) throws {
        func derive(_ ikm: SecretBytes, _ label: String) throws -> SecretBytes {
            try HKDF.deriveKey(inputKeyMaterial: ikm, salt: Array("locker v1".utf8), info: Array(label.utf8),
                               outputByteCount: 32)
        }
        classDKEK = try derive(uid, "class D kek")
        recordMACKey = try derive(uid, "device record mac")
        passcodeTangle = try derive(uid, "passcode tangle")
        if let effaceable {
            // Both the UID and the effaceable key go in: a keybag or name
            // can only be opened on this device, and never after a wipe.
            let joined = try SecretBytes(count: 64) { out in
                uid.withUnsafeBytes { out.copyMemory(from: $0) }
                effaceable.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[32...]).copyMemory(from: $0) }
            }
            keybagSealKey = try derive(joined, "keybag seal")
            metadataKey = try derive(joined, "metadata")
        } else {
            keybagSealKey = nil
            metadataKey = nil
        }
    }
}
