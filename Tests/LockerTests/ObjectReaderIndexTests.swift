@testable import LockerStore
import LockerCrypto
import LockerFormat
import Testing

// The reader's check of an authenticated index against the header: each
// record holds at most its own chunk. An index sealed under the right key
// is authentic, but only the header says how long the last chunk is.

@Suite("Object reader index")
struct ObjectReaderIndexTests {
    static let chunkSize: UInt32 = 4096

    /// Seals `chunks` (the last one final) and their index under `fileKey`:
    /// the bytes a data file holds.
    static func seal(_ chunks: [[UInt8]], fileKey: SecretBytes) throws -> [UInt8] {
        let sealer = try ChunkSealer(chunkKey: try ChunkLayout.chunkKey(fileKey: fileKey))
        var data: [UInt8] = []
        var lengths: [UInt32] = []
        for (i, chunk) in chunks.enumerated() {
            var record = [UInt8](repeating: 0, count: ChunkLayout.maxRecordLength(chunkSize: chunkSize))
            let length = try chunk.withUnsafeBytes { plain in
                try record.withUnsafeMutableBytes { out in
                    try sealer.seal(plain, index: UInt64(i), isFinal: i == chunks.count - 1, into: out)
                }
            }
            data += record[..<length]
            lengths.append(UInt32(length))
        }
        return data + (try sealer.sealIndex(lengths))
    }

    static func header(plaintextLength: UInt64, dataLength: UInt64) throws -> ObjectHeader {
        ObjectHeader(parentID: try SecureRandom.bytes(16), name: "x", protectionSource: .explicit,
                     wrappedKey: WrappedFileKey(protectionClass: .none, keyID: try SecureRandom.bytes(16), keyGeneration: 1,
                                                blob: try SecureRandom.bytes(WrappedFileKey.blobByteCount(for: .none))),
                     objectID: try SecureRandom.bytes(16), chunkSize: chunkSize, plaintextLength: plaintextLength,
                     dataLength: dataLength, created: 0, modified: 0, headerMAC: [UInt8](repeating: 0, count: 32))
    }

    static func read(_ range: Range<UInt64>, header: ObjectHeader, fileKey: SecretBytes, data: [UInt8]) throws -> [UInt8] {
        let reader = try ObjectReader(header: header, fileKey: fileKey, file: InlineChunks(bytes: data), workers: 1)
        var out: [UInt8] = []
        try reader.read(range) { out += $0 }
        return out
    }

    /// Three chunks whose last, in the header, is 100 bytes. The data's
    /// last record is sealed from a whole 4096-byte chunk of noise, so the
    /// index is authentic but that record is longer than its chunk can be.
    /// A range read of the first chunk alone, which never opens the last
    /// record, must refuse the object all the same.
    @Test func aLastRecordLongerThanTheLastChunkIsRefusedBeforeAnyRead() throws {
        let fileKey = try SecretBytes(randomCount: 32)
        let first = (0..<4096).map { UInt8(truncatingIfNeeded: $0 / 7) }
        let second = [UInt8](repeating: 0x41, count: 4096)
        let last = try SecureRandom.bytes(100)
        let plaintextLength: UInt64 = 4096 * 2 + 100

        // The control: the same chunks with the right last one read back.
        let good = try Self.seal([first, second, last], fileKey: fileKey)
        let goodHeader = try Self.header(plaintextLength: plaintextLength, dataLength: UInt64(good.count))
        #expect(try Self.read(0..<4096, header: goodHeader, fileKey: fileKey, data: good) == first)
        #expect(try Self.read(0..<plaintextLength, header: goodHeader, fileKey: fileKey, data: good) == first + second + last)

        let long = try Self.seal([first, second, try SecureRandom.bytes(4096)], fileKey: fileKey)
        let longHeader = try Self.header(plaintextLength: plaintextLength, dataLength: UInt64(long.count))
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try Self.read(0..<4096, header: longHeader, fileKey: fileKey, data: long)
        }
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try ObjectReader(header: longHeader, fileKey: fileKey, file: InlineChunks(bytes: long), workers: 1)
        }
    }
}
