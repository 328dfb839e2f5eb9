internal import CLZ4

/// The LZ4 frame format, for output that the reference `lz4` tool reads.
///
/// Compression writes one frame with independent 4 MiB-max blocks and no
/// content checksum. Decompression accepts any valid frame sequence,
/// including skippable frames, and refuses truncated or damaged input and
/// output beyond a caller-set limit.
public enum LZ4Frame {
    /// Compresses `input` into a single LZ4 frame that records the content
    /// size.
    public static func compress(_ input: [UInt8]) throws -> [UInt8] {
        var preferences = LZ4F_preferences_t()
        preferences.frameInfo.contentSize = UInt64(input.count)
        preferences.frameInfo.blockMode = LZ4F_blockIndependent
        preferences.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum
        let bound = LZ4F_compressFrameBound(input.count, &preferences)
        var out = [UInt8](repeating: 0, count: bound)
        let written = input.withUnsafeBytes { i in
            out.withUnsafeMutableBytes { o in
                LZ4F_compressFrame(o.baseAddress, o.count, i.baseAddress, i.count, &preferences)
            }
        }
        guard LZ4F_isError(written) == 0 else { throw FormatError.inputTooLarge }
        out.removeSubrange(written...)
        return out
    }

    /// Decompresses every frame in `input`, in order.
    ///
    /// Throws ``FormatError/corruptCompressedData`` for any malformed,
    /// truncated or checksum-failing input, and
    /// ``FormatError/inputTooLarge`` if the output would pass
    /// `maxOutputSize`.
    public static func decompress(_ input: [UInt8], maxOutputSize: Int = 1 << 30) throws -> [UInt8] {
        var context: OpaquePointer?
        guard LZ4F_isError(LZ4F_createDecompressionContext(&context, UInt32(LZ4F_VERSION))) == 0, let context else {
            throw FormatError.corruptCompressedData
        }
        defer { LZ4F_freeDecompressionContext(context) }
        guard !input.isEmpty else { throw FormatError.corruptCompressedData }

        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var offset = 0
        // A frame is complete when LZ4F_decompress returns 0 (its "hint" of
        // bytes still expected). Input that ends while a frame still wants
        // bytes is truncated.
        var hint = 1
        try input.withUnsafeBytes { raw in
            while offset < raw.count {
                var consumed = raw.count - offset
                var produced = buffer.count
                let result = buffer.withUnsafeMutableBytes { b in
                    LZ4F_decompress(context, b.baseAddress, &produced, raw.baseAddress! + offset, &consumed, nil)
                }
                guard LZ4F_isError(result) == 0 else { throw FormatError.corruptCompressedData }
                hint = result
                offset += consumed
                guard output.count + produced <= maxOutputSize else { throw FormatError.inputTooLarge }
                output.append(contentsOf: buffer[..<produced])
                if consumed == 0 && produced == 0 { break }
            }
            // Drain what the context still buffers.
            while hint != 0 {
                var consumed = 0
                var produced = buffer.count
                let result = buffer.withUnsafeMutableBytes { b in
                    LZ4F_decompress(context, b.baseAddress, &produced, raw.baseAddress! + offset, &consumed, nil)
                }
                guard LZ4F_isError(result) == 0 else { throw FormatError.corruptCompressedData }
                if produced == 0 { hint = result; break }
                guard output.count + produced <= maxOutputSize else { throw FormatError.inputTooLarge }
                output.append(contentsOf: buffer[..<produced])
                hint = result
            }
        }
        guard hint == 0 else { throw FormatError.corruptCompressedData }
        return output
    }
}
