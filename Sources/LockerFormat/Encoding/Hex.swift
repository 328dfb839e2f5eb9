/// Lowercase hexadecimal, as object IDs are named on disk and on the
/// wire, and as the agent's socket is named when its path is too long.
public enum Hex {
    /// The digits, by value.
    public static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Two lowercase digits per byte, most significant first.
    // An array, not any collection: a generic function of another module
    // runs unspecialized, through witness tables for every byte, and the
    // store names several object IDs for each object it writes.
    public static func lowercase(_ bytes: [UInt8]) -> String {
        digits.withUnsafeBufferPointer { digit in
            bytes.withUnsafeBufferPointer { bytes in
                String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                    for i in 0..<bytes.count {
                        out[2 * i] = digit[Int(bytes[i] >> 4)]
                        out[2 * i + 1] = digit[Int(bytes[i] & 0x0F)]
                    }
                    return bytes.count * 2
                }
            }
        }
    }
}
