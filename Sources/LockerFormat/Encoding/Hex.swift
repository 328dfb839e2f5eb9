/// Lowercase hexadecimal, as object IDs are named on disk and on the
/// wire, and as the agent's socket is named when its path is too long.
public enum Hex {
    /// The digits, by value.
    public static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Two lowercase digits per byte, most significant first.
    public static func lowercase(_ bytes: some Collection<UInt8>) -> String {
        digits.withUnsafeBufferPointer { digit in
            String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                for (i, byte) in bytes.enumerated() {
                    out[2 * i] = digit[Int(byte >> 4)]
                    out[2 * i + 1] = digit[Int(byte & 0x0F)]
                }
                return bytes.count * 2
            }
        }
    }
}
