public import LockerCrypto

/// The layout of an object's data file. See docs/format.md, "Data file".
///
/// The plaintext is cut into chunks of `chunkSize` bytes (the last may be
/// shorter; an empty object has one empty chunk). Each chunk becomes one
/// record: AES-256-GCM under the chunk key of `mode || payload`, where mode
/// 1 means the payload is an LZ4 block and mode 0 that it is the raw chunk
/// (used when LZ4 does not shrink it). The nonce is an 11-byte big-endian
/// chunk counter and a flag byte: 1 on the final chunk, 0 otherwise, as in
/// the STREAM construction. After the last record comes the index: the
/// record lengths as big-endian u32, sealed with the counter equal to the
/// chunk count and flag 2.
public enum ChunkLayout {
    /// Chunk sizes a reader accepts: powers of two from 16 KiB to 4 MiB.
    public static let allowedChunkSizes: Set<UInt32> = Set((14...22).map { UInt32(1) << UInt32($0) })
    /// The chunk size new objects use. See docs/performance.md for the
    /// measurement behind it.
    public static let defaultChunkSize: UInt32 = 256 << 10
    /// The largest object: 2^48 bytes (256 TiB), and at most
    /// ``maxChunkCount`` chunks.
    public static let maxPlaintextLength: UInt64 = 1 << 48
    /// The most chunks an object has: 16,777,212, so that its index is at
    /// most 64 MiB, which a reader holds in memory whole (4 TiB at the
    /// default chunk size).
    public static let maxChunkCount: UInt64 = ((64 << 20) - UInt64(AESGCM.tagByteCount)) / 4

    static let finalFlag: UInt8 = 1
    static let indexFlag: UInt8 = 2
    /// Mode byte and tag around each payload.
    public static let recordOverhead = 1 + AESGCM.tagByteCount

    public static func chunkCount(plaintextLength: UInt64, chunkSize: UInt32) -> UInt64 {
        plaintextLength == 0 ? 1 : (plaintextLength + UInt64(chunkSize) - 1) / UInt64(chunkSize)
    }

    /// The plaintext length of chunk `index`.
    public static func chunkLength(index: UInt64, plaintextLength: UInt64, chunkSize: UInt32) -> Int {
        let start = index * UInt64(chunkSize)
        return Int(min(UInt64(chunkSize), plaintextLength - min(start, plaintextLength)))
    }

    /// The largest record a chunk of this size can take.
    public static func maxRecordLength(chunkSize: UInt32) -> Int { Int(chunkSize) + recordOverhead }

    /// The sealed index's length for `chunkCount` chunks.
    public static func indexLength(chunkCount: UInt64) -> UInt64 { chunkCount * 4 + UInt64(AESGCM.tagByteCount) }

    /// The data-file lengths a header may claim for these parameters.
    public static func dataLengthBounds(plaintextLength: UInt64, chunkSize: UInt32) throws -> ClosedRange<UInt64> {
        let n = chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize)
        let index = indexLength(chunkCount: n)
        // A record's payload is at least one byte of LZ4 (or nothing for an
        // empty chunk) and at most the raw chunk.
        let low = n * UInt64(recordOverhead) + index
        let high = plaintextLength + n * UInt64(recordOverhead) + index
        return low...high
    }

    static func nonce(counter: UInt64, flag: UInt8) -> AESGCM.Nonce {
        var bytes = [UInt8](repeating: 0, count: 12)
        for i in 0..<8 { bytes[3 + i] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(7 - i))) }
        bytes[11] = flag
        return try! AESGCM.Nonce(bytes)  // always 12 bytes
    }

    /// The key that seals chunks, derived from the file key.
    public static func chunkKey(fileKey: SecretBytes) throws -> SecretBytes {
        try HKDF.deriveKey(inputKeyMaterial: fileKey, info: Array("locker v1 chunk".utf8), outputByteCount: 32)
    }

    /// The key of the header MAC, derived from the file key.
    public static func headerMACKey(fileKey: SecretBytes) throws -> SecretBytes {
        try HKDF.deriveKey(inputKeyMaterial: fileKey, info: Array("locker v1 header mac".utf8), outputByteCount: 32)
    }
}

/// Turns chunks into records: compress, then seal in place. One per
/// thread; buffers are the caller's, so nothing is allocated per chunk.
public final class ChunkSealer {
    private let cipher: AESGCMCipher

    public init(chunkKey: SecretBytes) throws {
        cipher = try AESGCMCipher(key: chunkKey)
    }

    /// Seals chunk `index` from `plaintext` into `record`, which must hold
    /// ``ChunkLayout/maxRecordLength(chunkSize:)`` bytes, and returns the
    /// record's length.
    public func seal(_ plaintext: UnsafeRawBufferPointer, index: UInt64, isFinal: Bool,
                     into record: UnsafeMutableRawBufferPointer) throws -> Int {
        precondition(record.count >= plaintext.count + ChunkLayout.recordOverhead, "record buffer too small")
        let payload = UnsafeMutableRawBufferPointer(rebasing: record[1..<(1 + max(0, plaintext.count - 1))])
        let nonce = ChunkLayout.nonce(counter: index, flag: isFinal ? ChunkLayout.finalFlag : 0)
        let noAAD = UnsafeRawBufferPointer(start: nil, count: 0)
        let payloadLength: Int
        if let compressed = LZ4Block.compress(plaintext, into: payload) {
            record[0] = 1
            payloadLength = compressed
            try cipher.seal(UnsafeRawBufferPointer(rebasing: record[..<(1 + payloadLength)]), nonce: nonce,
                            authenticating: noAAD, into: record)
        } else {
            // Sealed straight from the chunk, not copied into the record
            // first: for incompressible data that copy took more CPU than
            // the AES did (docs/performance.md, after pass 20).
            record[0] = 0
            payloadLength = plaintext.count
            try cipher.seal(head: UnsafeRawBufferPointer(rebasing: record[..<1]), body: plaintext, nonce: nonce,
                            authenticating: noAAD, into: record)
        }
        return 1 + payloadLength + AESGCM.tagByteCount
    }

    /// Seals an object of one chunk whole: `plaintext`, at most the
    /// object's chunk size (the caller's to check), as its only and final
    /// record, then the index. Returns the object's data, exactly the
    /// bytes ``seal(_:index:isFinal:into:)`` and ``sealIndex(_:)`` give for
    /// it. The record is compressed and sealed in `scratch`, which must
    /// hold `plaintext.count` + ``ChunkLayout/recordOverhead`` bytes and
    /// holds the compressed plaintext in between (the caller keeps and
    /// wipes it as it does the plaintext): the returned array only ever
    /// holds ciphertext.
    public func sealWhole(_ plaintext: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) throws -> [UInt8] {
        let recordLength = try seal(plaintext, index: 0, isFinal: true, into: scratch)
        let index = try sealIndex([UInt32(recordLength)])
        var data = [UInt8]()
        data.reserveCapacity(recordLength + index.count)
        data.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[..<recordLength]))
        data.append(contentsOf: index)
        return data
    }

    /// Seals the index of record lengths.
    public func sealIndex(_ lengths: [UInt32]) throws -> [UInt8] {
        var plain = ByteWriter(capacity: lengths.count * 4)
        for length in lengths { plain.write(length) }
        var out = [UInt8](repeating: 0, count: plain.bytes.count + AESGCM.tagByteCount)
        try plain.bytes.withUnsafeBytes { input in
            try out.withUnsafeMutableBytes { output in
                try cipher.seal(input, nonce: ChunkLayout.nonce(counter: UInt64(lengths.count), flag: ChunkLayout.indexFlag),
                                authenticating: UnsafeRawBufferPointer(start: nil, count: 0), into: output)
            }
        }
        return out
    }
}

/// Turns records back into chunks. Nothing it returns was not
/// authenticated first.
public final class ChunkOpener {
    private let cipher: AESGCMCipher

    public init(chunkKey: SecretBytes) throws {
        cipher = try AESGCMCipher(key: chunkKey)
    }

    /// Opens record `index` and writes exactly `output.count` plaintext
    /// bytes to `output`. `record` is scratch: a compressed record is
    /// decrypted in place there, a raw one straight into `output`. If the
    /// record fails to authenticate, what was decrypted into either is
    /// zeroed.
    ///
    /// Throws ``CryptoError/authenticationFailure`` if the record is not
    /// chunk `index` of this object with this finality, and
    /// ``FormatError`` if an authenticated record does not decode to the
    /// expected length.
    public func open(_ record: UnsafeMutableRawBufferPointer, index: UInt64, isFinal: Bool,
                     into output: UnsafeMutableRawBufferPointer) throws {
        guard record.count >= ChunkLayout.recordOverhead, record.count <= output.count + ChunkLayout.recordOverhead else {
            throw CryptoError.authenticationFailure
        }
        let nonce = ChunkLayout.nonce(counter: index, flag: isFinal ? ChunkLayout.finalFlag : 0)
        let noAAD = UnsafeRawBufferPointer(start: nil, count: 0)
        if record.count == output.count + ChunkLayout.recordOverhead {
            // A payload as long as the chunk: stored as it is (the writer
            // compresses only when that makes it shorter). Opened straight
            // into `output` rather than in place and then copied; the
            // length is the record's, not a byte of unverified plaintext.
            try cipher.open(UnsafeRawBufferPointer(record), nonce: nonce, authenticating: noAAD,
                            head: UnsafeMutableRawBufferPointer(rebasing: record[..<1]), body: output)
            switch record[0] {
            case 0:
                return
            case 1:
                // Authentic, though no writer here makes it: LZ4 as long
                // as the chunk. Decompressed from the record, where the
                // payload is copied back.
                let payload = UnsafeMutableRawBufferPointer(rebasing: record[1..<(1 + output.count)])
                payload.copyMemory(from: UnsafeRawBufferPointer(output))
                try LZ4Block.decompress(UnsafeRawBufferPointer(payload), into: output)
                return
            default:
                throw FormatError.invalidField("chunk mode")
            }
        }
        let length = try cipher.open(UnsafeRawBufferPointer(record), nonce: nonce, authenticating: noAAD, into: record)
        let payload = UnsafeRawBufferPointer(rebasing: record[1..<length])
        switch record[0] {
        case 0:
            throw FormatError.invalidField("chunk length")
        case 1:
            try LZ4Block.decompress(payload, into: output)
        default:
            throw FormatError.invalidField("chunk mode")
        }
    }

    /// Opens the index and returns the record lengths.
    public func openIndex(_ sealed: [UInt8], chunkCount: UInt64) throws -> [UInt32] {
        guard UInt64(sealed.count) == ChunkLayout.indexLength(chunkCount: chunkCount) else {
            throw CryptoError.authenticationFailure
        }
        var plain = [UInt8](repeating: 0, count: sealed.count - AESGCM.tagByteCount)
        try sealed.withUnsafeBytes { input in
            try plain.withUnsafeMutableBytes { output in
                _ = try cipher.open(input, nonce: ChunkLayout.nonce(counter: chunkCount, flag: ChunkLayout.indexFlag),
                                    authenticating: UnsafeRawBufferPointer(start: nil, count: 0), into: output)
            }
        }
        var r = ByteReader(plain)
        return try (0..<chunkCount).map { _ in try r.readUInt32() }
    }
}
