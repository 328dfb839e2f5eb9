import LockerCrypto
import LockerFormat
import Testing

// A test-only reference model of an object's data file, as documented in
// ChunkStream.swift: the plaintext cut into chunks, one sealed record per
// chunk, the records concatenated, then the sealed index of record lengths.
//
// `DataFileModel.seal` writes a whole data file with ChunkSealer;
// `DataFileModel.open` / `read(_:range:...)` read it back with ChunkOpener,
// trusting only what the (authenticated) header would say: the plaintext
// length and the chunk size. Everything else comes from the file and is
// checked before use.

/// A data file and the pieces it was assembled from.
struct SealedDataFile {
    var bytes: [UInt8]
    var records: [[UInt8]]
    var index: [UInt8]

    var recordLengths: [Int] { records.map(\.count) }
}

/// Errors the reference reader raises for structural damage the index
/// reveals (the record and index authentication errors come from
/// ChunkOpener itself).
enum DataFileModelError: Error, Equatable {
    case tooShortForIndex
    case badRecordLength
    case lengthsDoNotSum
    case rangePastEnd
}

enum DataFileModel {
    /// Seals all of `plaintext` into a data file.
    static func seal(_ plaintext: [UInt8], fileKey: SecretBytes, chunkSize: UInt32) throws -> SealedDataFile {
        let sealer = try ChunkSealer(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey))
        let length = UInt64(plaintext.count)
        let count = ChunkLayout.chunkCount(plaintextLength: length, chunkSize: chunkSize)
        var buffer = [UInt8](repeating: 0, count: ChunkLayout.maxRecordLength(chunkSize: chunkSize))
        var records: [[UInt8]] = []
        for i in 0..<count {
            let start = Int(i) * Int(chunkSize)
            let chunkLength = ChunkLayout.chunkLength(index: i, plaintextLength: length, chunkSize: chunkSize)
            let written = try plaintext.withUnsafeBytes { p in
                try buffer.withUnsafeMutableBytes { r in
                    try sealer.seal(UnsafeRawBufferPointer(rebasing: p[start..<(start + chunkLength)]), index: i,
                                    isFinal: i == count - 1, into: r)
                }
            }
            records.append(Array(buffer[..<written]))
        }
        let index = try sealer.sealIndex(records.map { UInt32($0.count) })
        return SealedDataFile(bytes: assemble(records, index: index), records: records, index: index)
    }

    /// Records, then the index.
    static func assemble(_ records: [[UInt8]], index: [UInt8]) -> [UInt8] {
        records.flatMap { $0 } + index
    }

    /// Seals an index of `lengths` under `fileKey`, as a writer would (used
    /// to build damaged files whose structure still parses).
    static func sealIndex(_ lengths: [Int], fileKey: SecretBytes) throws -> [UInt8] {
        try ChunkSealer(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey)).sealIndex(lengths.map { UInt32($0) })
    }

    /// Opens the whole data file.
    static func open(_ data: [UInt8], fileKey: SecretBytes, plaintextLength: UInt64, chunkSize: UInt32) throws -> [UInt8] {
        let count = ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize)
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey))
        return try openChunks(0..<count, data: data, opener: opener, plaintextLength: plaintextLength,
                              chunkSize: chunkSize).bytes
    }

    /// Opens the whole data file with a ready opener (for loops that open
    /// thousands of damaged copies).
    static func open(_ data: [UInt8], opener: ChunkOpener, plaintextLength: UInt64, chunkSize: UInt32) throws -> [UInt8] {
        let count = ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize)
        return try openChunks(0..<count, data: data, opener: opener, plaintextLength: plaintextLength,
                              chunkSize: chunkSize).bytes
    }

    /// Reads the plaintext bytes in `range`, opening only the chunks that
    /// overlap it. Returns the bytes and the chunk indexes it decrypted.
    static func read(_ data: [UInt8], range: Range<UInt64>, fileKey: SecretBytes, plaintextLength: UInt64,
                     chunkSize: UInt32) throws -> (bytes: [UInt8], openedChunks: [UInt64]) {
        guard range.upperBound <= plaintextLength else { throw DataFileModelError.rangePastEnd }
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey))
        let cs = UInt64(chunkSize)
        let chunks = range.isEmpty ? 0..<0 : (range.lowerBound / cs)..<((range.upperBound - 1) / cs + 1)
        let (bytes, opened) = try openChunks(chunks, data: data, opener: opener, plaintextLength: plaintextLength,
                                             chunkSize: chunkSize)
        // An empty range still authenticates the index, but opens nothing.
        if range.isEmpty { return ([], opened) }
        // `bytes` starts at the first opened chunk's first byte.
        let base = chunks.lowerBound * cs
        return (Array(bytes[Int(range.lowerBound - base)..<Int(range.upperBound - base)]), opened)
    }

    /// Authenticates the index, checks the record lengths against the file,
    /// then opens `chunks` in order and concatenates their plaintext.
    private static func openChunks(_ chunks: Range<UInt64>, data: [UInt8], opener: ChunkOpener,
                                   plaintextLength: UInt64, chunkSize: UInt32)
        throws -> (bytes: [UInt8], opened: [UInt64])
    {
        let count = ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize)
        let indexLength = Int(ChunkLayout.indexLength(chunkCount: count))
        guard data.count >= indexLength else { throw DataFileModelError.tooShortForIndex }
        let lengths = try opener.openIndex(Array(data[(data.count - indexLength)...]), chunkCount: count)
        var offsets: [Int] = []
        var offset = 0
        for length in lengths {
            guard Int(length) >= ChunkLayout.recordOverhead,
                  Int(length) <= ChunkLayout.maxRecordLength(chunkSize: chunkSize)
            else { throw DataFileModelError.badRecordLength }
            offsets.append(offset)
            offset += Int(length)
        }
        guard offset == data.count - indexLength else { throw DataFileModelError.lengthsDoNotSum }

        var out: [UInt8] = []
        var opened: [UInt64] = []
        for i in chunks {
            var record = Array(data[offsets[Int(i)]..<(offsets[Int(i)] + Int(lengths[Int(i)]))])
            var plain = [UInt8](repeating: 0,
                                count: ChunkLayout.chunkLength(index: i, plaintextLength: plaintextLength,
                                                               chunkSize: chunkSize))
            try record.withUnsafeMutableBytes { r in
                try plain.withUnsafeMutableBytes { p in
                    try opener.open(r, index: i, isFinal: i == count - 1, into: p)
                }
            }
            opened.append(i)
            out += plain
        }
        return (out, opened)
    }

    /// Opens one record on its own (for the record-level damage tests).
    static func openRecord(_ record: [UInt8], index: UInt64, isFinal: Bool, plainLength: Int,
                           fileKey: SecretBytes) throws -> [UInt8] {
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey))
        var record = record
        var plain = [UInt8](repeating: 0, count: plainLength)
        try record.withUnsafeMutableBytes { r in
            try plain.withUnsafeMutableBytes { p in try opener.open(r, index: index, isFinal: isFinal, into: p) }
        }
        return plain
    }

    /// The documented record nonce: an 11-byte big-endian counter, then the
    /// flag byte (0 = not final, 1 = final, 2 = index). Built independently
    /// of ChunkLayout so the tests check the layout, not restate it.
    static func nonce(counter: UInt64, flag: UInt8) throws -> AESGCM.Nonce {
        var bytes = [UInt8](repeating: 0, count: 12)
        var c = counter
        for i in stride(from: 10, through: 0, by: -1) {
            bytes[i] = UInt8(truncatingIfNeeded: c)
            c >>= 8
        }
        bytes[11] = flag
        return try AESGCM.Nonce(bytes)
    }
}

/// Plaintexts for the data-file and header tests.
enum ObjectTestData: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case compressible
    case random

    var testDescription: String { rawValue }

    func bytes(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
        switch self {
        case .compressible:
            let line = Array("The quick brown fox jumps over the lazy locker, chunk after chunk.\n".utf8)
            return (0..<count).map { line[$0 % line.count] }
        case .random:
            return splitMixBytes(count, seed: seed &+ UInt64(count))
        }
    }
}

/// Deterministic, LZ4-incompressible bytes (SplitMix64).
func splitMixBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = 0x9e37_79b9_7f4a_7c15 &* (seed | 1)
    var out: [UInt8] = []
    out.reserveCapacity(count + 8)
    while out.count < count {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        z ^= z >> 31
        withUnsafeBytes(of: z.littleEndian) { out.append(contentsOf: $0) }
    }
    return Array(out.prefix(count))
}

/// A fresh 32-byte file key.
func newFileKey() throws -> SecretBytes { try SecretBytes(randomCount: 32) }

/// The sizes the brief asks for, around the edges of `chunkSize`.
func edgeSizes(_ chunkSize: UInt32) -> [Int] {
    let c = Int(chunkSize)
    return [0, 1, c - 1, c, c + 1, 3 * c + 7]
}
