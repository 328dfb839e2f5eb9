internal import CLZ4

/// Raw LZ4 blocks, as stored inside Locker's chunks.
///
/// A block carries no length of its own; the caller stores the
/// decompressed size and passes it back. Decompression never writes past
/// the buffer it is given and fails on any malformed input.
public enum LZ4Block {
    /// The largest input one block may hold (LZ4_MAX_INPUT_SIZE).
    public static let maxInputSize = Int(LZ4_MAX_INPUT_SIZE)

    /// The size of buffer `compress` needs for `inputSize` bytes in the
    /// worst case.
    public static func compressBound(_ inputSize: Int) -> Int {
        Int(LZ4_compressBound(Int32(clamping: inputSize)))
    }

    /// Compresses `input` into `output` at the fastest setting and returns
    /// the compressed size, or `nil` if the result would not fit in
    /// `output`. Give `output` fewer bytes than `input` to learn cheaply
    /// that compression does not pay.
    public static func compress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard input.count <= maxInputSize, output.count > 0 else { return nil }
        if input.isEmpty { return nil }
        let n = LZ4_compress_default(
            input.baseAddress!.assumingMemoryBound(to: CChar.self),
            output.baseAddress!.assumingMemoryBound(to: CChar.self),
            Int32(input.count), Int32(clamping: output.count))
        return n > 0 ? Int(n) : nil
    }

    /// Decompresses `input` into exactly `output.count` bytes.
    ///
    /// Throws ``FormatError/corruptCompressedData`` unless the block decodes
    /// to exactly that many bytes.
    public static func decompress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws {
        guard input.count <= Int(Int32.max), output.count <= maxInputSize else { throw FormatError.inputTooLarge }
        if output.isEmpty {
            throw FormatError.corruptCompressedData
        }
        guard !input.isEmpty else { throw FormatError.corruptCompressedData }
        let n = LZ4_decompress_safe(
            input.baseAddress!.assumingMemoryBound(to: CChar.self),
            output.baseAddress!.assumingMemoryBound(to: CChar.self),
            Int32(input.count), Int32(output.count))
        guard n == Int32(output.count) else { throw FormatError.corruptCompressedData }
    }

    /// Convenience: compresses `input`, or returns `nil` if it does not
    /// shrink.
    public static func compress(_ input: [UInt8]) -> [UInt8]? {
        guard !input.isEmpty else { return nil }
        var out = [UInt8](repeating: 0, count: input.count - 1)
        guard !out.isEmpty else { return nil }
        let n = input.withUnsafeBytes { i in out.withUnsafeMutableBytes { compress(i, into: $0) } }
        guard let n else { return nil }
        out.removeSubrange(n...)
        return out
    }

    /// Convenience: decompresses `input` to exactly `size` bytes.
    public static func decompress(_ input: [UInt8], size: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: size)
        try input.withUnsafeBytes { i in try out.withUnsafeMutableBytes { try decompress(i, into: $0) } }
        return out
    }
}
