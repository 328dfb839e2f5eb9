public import LockerCrypto
public import LockerFormat

/// The fixed keys the fuzz targets open with and the seed generator seals
/// with. A seed only reaches past authentication if it was sealed under the
/// key its target uses, so both sides take them from here.
public enum FuzzKeys {
    /// The metadata keys of object headers, directory records and names.
    public static let metadata: MetadataKeys = {
        // HKDF over a valid 32-byte key cannot fail.
        try! MetadataKeys(metadataKey: SecretBytes(copying: (0..<32).map { UInt8($0) }))
    }()
    /// The file key of the data files; the chunk key derives from it.
    public static let fileKey = SecretBytes(copying: (0..<32).map { UInt8(0x40 + $0) })
    public static let chunkKey: SecretBytes = {
        try! ChunkLayout.chunkKey(fileKey: fileKey)
    }()
    /// Seals the keybag file.
    public static let keybagSealKey = SecretBytes(copying: (0..<32).map { UInt8(0x80 + $0) })
    /// Authenticates the device record.
    public static let deviceMACKey = SecretBytes(copying: (0..<32).map { UInt8(0xC0 + $0) })
    /// The directory ID names are sealed for.
    public static let parentID = [UInt8](repeating: 0x11, count: DirectoryRecord.directoryIDByteCount)
}
