import LockerCrypto
import LockerFormat
import Testing

// ChunkLayout, ChunkSealer and ChunkOpener, exercised through the reference
// data-file model in DataFileModel.swift.

/// The smallest chunk size a reader accepts: keeps the tests fast.
let smallChunk: UInt32 = 16 << 10

struct SizeCase: Sendable, CustomTestStringConvertible {
    var chunkSize: UInt32
    var size: Int
    var testDescription: String { "\(size) bytes in \(chunkSize >> 10) KiB chunks" }

    static let all: [SizeCase] = [smallChunk, ChunkLayout.defaultChunkSize].flatMap { c in
        edgeSizes(c).map { SizeCase(chunkSize: c, size: $0) }
    }
}

/// Flips one bit of `bytes[offset]`.
func flipped(_ bytes: [UInt8], at offset: Int, bit: Int) -> [UInt8] {
    var copy = bytes
    copy[offset] ^= UInt8(1) << UInt8(bit)
    return copy
}

@Suite("Chunk stream: round trips and layout")
struct ChunkStreamRoundTripTests {
    @Test("whole-file round trip", arguments: SizeCase.all, ObjectTestData.allCases)
    func roundTrip(sizeCase: SizeCase, kind: ObjectTestData) throws {
        let c = sizeCase.chunkSize
        let plaintext = kind.bytes(sizeCase.size)
        let key = try newFileKey()
        let file = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: c)
        let length = UInt64(plaintext.count)
        let count = ChunkLayout.chunkCount(plaintextLength: length, chunkSize: c)

        #expect(try DataFileModel.open(file.bytes, fileKey: key, plaintextLength: length, chunkSize: c) == plaintext)
        #expect(UInt64(file.records.count) == count)
        #expect(UInt64(file.index.count) == ChunkLayout.indexLength(chunkCount: count))
        let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: length, chunkSize: c)
        #expect(bounds.contains(UInt64(file.bytes.count)), "data length \(file.bytes.count) outside \(bounds)")

        // The index holds the real record lengths.
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: key))
        #expect(try opener.openIndex(file.index, chunkCount: count).map(Int.init) == file.recordLengths)

        for (i, record) in file.records.enumerated() {
            let chunkLength = ChunkLayout.chunkLength(index: UInt64(i), plaintextLength: length, chunkSize: c)
            #expect(record.count <= ChunkLayout.maxRecordLength(chunkSize: c))
            switch kind {
            case .random:
                // Incompressible: stored raw, mode byte + chunk + tag.
                #expect(record.count == chunkLength + 17, "record \(i)")
            case .compressible:
                if chunkLength >= 1024 {
                    // Stored compressed: the mode byte must have said LZ4.
                    #expect(record.count < chunkLength / 4, "record \(i): \(record.count) bytes for \(chunkLength)")
                } else if chunkLength <= 7 {
                    // Too short for LZ4 to shrink: stored raw.
                    #expect(record.count == chunkLength + 17, "record \(i)")
                }
            }
        }
        switch kind {
        case .random:
            // All raw: the data file is exactly the upper bound.
            #expect(UInt64(file.bytes.count) == bounds.upperBound)
        case .compressible:
            if sizeCase.size >= Int(c) - 1 {
                #expect(file.bytes.count < plaintext.count)
            }
        }
        if sizeCase.size == 0 {
            // One empty, final chunk: exactly the lower bound.
            #expect(file.records.map(\.count) == [17])
            #expect(UInt64(file.bytes.count) == bounds.lowerBound)
        }
    }

    @Test("records and index follow the documented nonce and mode byte", arguments: ObjectTestData.allCases)
    func documentedLayout(kind: ObjectTestData) throws {
        let c = smallChunk
        let plaintext = kind.bytes(3 * Int(c) + 7)
        let key = try newFileKey()
        let chunkKey = try ChunkLayout.chunkKey(fileKey: key)
        let file = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: c)
        let n = file.records.count
        #expect(n == 4)
        for (i, record) in file.records.enumerated() {
            let body = try AESGCM.open(record, key: chunkKey,
                                       nonce: DataFileModel.nonce(counter: UInt64(i), flag: i == n - 1 ? 1 : 0))
            let chunk = Array(plaintext[(i * Int(c))..<min(plaintext.count, (i + 1) * Int(c))])
            let payload = Array(body.dropFirst())
            switch (kind, i == n - 1) {
            case (.compressible, false):
                #expect(body[0] == 1, "record \(i) should be LZ4")
                #expect(try LZ4Block.decompress(payload, size: chunk.count) == chunk)
            default:
                #expect(body[0] == 0, "record \(i) should be raw")
                #expect(payload == chunk)
            }
        }
        let indexPlain = try AESGCM.open(file.index, key: chunkKey, nonce: DataFileModel.nonce(counter: UInt64(n), flag: 2))
        var expected: [UInt8] = []
        for length in file.recordLengths {
            expected += [UInt8(length >> 24 & 0xff), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff),
                         UInt8(length & 0xff)]
        }
        #expect(indexPlain == expected)

        // The empty object: one record holding only a raw mode byte.
        let empty = try DataFileModel.seal([], fileKey: key, chunkSize: c)
        #expect(try AESGCM.open(empty.records[0], key: chunkKey, nonce: DataFileModel.nonce(counter: 0, flag: 1)) == [0])
    }

    @Test("an object of one chunk sealed whole is the data file the stream gives, in the documented layout",
          arguments: ObjectTestData.allCases, [0, 1, 7, 1000, Int(smallChunk) - 1, Int(smallChunk)])
    func sealedWhole(kind: ObjectTestData, size: Int) throws {
        let plaintext = kind.bytes(size)
        let key = try newFileKey()
        let chunkKey = try ChunkLayout.chunkKey(fileKey: key)
        var scratch = [UInt8](repeating: 0, count: size + ChunkLayout.recordOverhead)
        let whole = try plaintext.withUnsafeBytes { p in
            try scratch.withUnsafeMutableBytes { try ChunkSealer(chunkKey: chunkKey).sealWhole(p, scratch: $0) }
        }
        #expect(whole == (try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk)).bytes)
        #expect(try DataFileModel.open(whole, fileKey: key, plaintextLength: UInt64(size), chunkSize: smallChunk) == plaintext)

        // Checked against the format itself, not only against the stream:
        // one final record, then the index of its length.
        let recordLength = whole.count - Int(ChunkLayout.indexLength(chunkCount: 1))
        let body = try AESGCM.open(Array(whole[..<recordLength]), key: chunkKey, nonce: DataFileModel.nonce(counter: 0, flag: 1))
        if body[0] == 1 {
            #expect(kind == .compressible && size > 7)
            #expect(try LZ4Block.decompress(Array(body.dropFirst()), size: size) == plaintext)
        } else {
            #expect(body[0] == 0)
            #expect(Array(body.dropFirst()) == plaintext)
        }
        let index = try AESGCM.open(Array(whole[recordLength...]), key: chunkKey, nonce: DataFileModel.nonce(counter: 1, flag: 2))
        #expect(index == [UInt8(recordLength >> 24 & 0xff), UInt8(recordLength >> 16 & 0xff), UInt8(recordLength >> 8 & 0xff),
                          UInt8(recordLength & 0xff)])
    }

    @Test("sealing is deterministic per key and differs between keys")
    func determinism() throws {
        let plaintext = ObjectTestData.compressible.bytes(2 * Int(smallChunk) + 3)
        let key = try newFileKey()
        let a = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk)
        let b = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk)
        let other = try DataFileModel.seal(plaintext, fileKey: try newFileKey(), chunkSize: smallChunk)
        #expect(a.bytes == b.bytes)
        #expect(a.recordLengths == other.recordLengths)
        #expect(a.bytes != other.bytes)
        for (x, y) in zip(a.records, other.records) { #expect(x != y) }
    }

    @Test("derived keys are distinct and deterministic")
    func derivedKeys() throws {
        let key = try newFileKey()
        let chunk = try ChunkLayout.chunkKey(fileKey: key)
        let mac = try ChunkLayout.headerMACKey(fileKey: key)
        #expect(chunk.count == 32 && mac.count == 32)
        #expect(chunk != mac)
        #expect(chunk != key && mac != key)
        #expect(try ChunkLayout.chunkKey(fileKey: key) == chunk)
        #expect(try ChunkLayout.headerMACKey(fileKey: key) == mac)
        #expect(try ChunkLayout.chunkKey(fileKey: try newFileKey()) != chunk)
    }
}

@Suite("Chunk stream: range reads")
struct ChunkStreamRangeTests {
    static let c = UInt64(smallChunk)
    static let length = 3 * c + 7
    static let ranges: [Range<UInt64>] = [
        0..<0, 0..<1, (c - 1)..<(c + 1), c..<c, c..<(2 * c), (c - 1)..<(2 * c + 1), (2 * c + 5)..<length,
        (3 * c)..<length, (length - 1)..<length, 0..<length, 1..<(length - 1), (c + 1)..<(c + 2),
        (2 * c - 1)..<(2 * c), (2 * c)..<(2 * c + 1),
    ]

    @Test("range reads match the plaintext and open only the chunks they need",
          arguments: ranges, ObjectTestData.allCases)
    func rangeRead(range: Range<UInt64>, kind: ObjectTestData) throws {
        let c = Self.c
        let plaintext = kind.bytes(Int(Self.length))
        let key = try newFileKey()
        let file = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk)
        let expectedChunks: [UInt64] = range.isEmpty ? [] : Array((range.lowerBound / c)...((range.upperBound - 1) / c))
        let expectedBytes = Array(plaintext[Int(range.lowerBound)..<Int(range.upperBound)])

        let (bytes, opened) = try DataFileModel.read(file.bytes, range: range, fileKey: key,
                                                     plaintextLength: Self.length, chunkSize: smallChunk)
        #expect(bytes == expectedBytes)
        #expect(opened == expectedChunks)

        // Damage every record the range does not need: the read still
        // succeeds, so those records were indeed never decrypted...
        var records = file.records
        for i in records.indices where !expectedChunks.contains(UInt64(i)) {
            records[i][records[i].count / 2] ^= 0x40
        }
        let damagedElsewhere = DataFileModel.assemble(records, index: file.index)
        let again = try DataFileModel.read(damagedElsewhere, range: range, fileKey: key,
                                           plaintextLength: Self.length, chunkSize: smallChunk)
        #expect(again.bytes == expectedBytes)

        // ...while damage to any needed record fails the read.
        for needed in expectedChunks {
            var records = file.records
            records[Int(needed)][0] ^= 0x01
            let damaged = DataFileModel.assemble(records, index: file.index)
            #expect(throws: CryptoError.authenticationFailure) {
                _ = try DataFileModel.read(damaged, range: range, fileKey: key, plaintextLength: Self.length,
                                           chunkSize: smallChunk)
            }
        }
    }

    @Test("range reads with the default chunk size")
    func defaultChunkSize() throws {
        let c = UInt64(ChunkLayout.defaultChunkSize)
        let length = 3 * c + 7
        let plaintext = ObjectTestData.random.bytes(Int(length))
        let key = try newFileKey()
        let file = try DataFileModel.seal(plaintext, fileKey: key, chunkSize: ChunkLayout.defaultChunkSize)
        for range in [(c - 3)..<(c + 3), (2 * c)..<(3 * c + 1), (3 * c + 6)..<length, 0..<length] {
            let (bytes, opened) = try DataFileModel.read(file.bytes, range: range, fileKey: key, plaintextLength: length,
                                                         chunkSize: ChunkLayout.defaultChunkSize)
            #expect(bytes == Array(plaintext[Int(range.lowerBound)..<Int(range.upperBound)]))
            #expect(opened == Array((range.lowerBound / c)...((range.upperBound - 1) / c)))
        }
    }
}

@Suite("Chunk stream: damage is always refused")
struct ChunkStreamDamageTests {
    /// A two-chunk object in 16 KiB chunks.
    static func twoChunks(_ kind: ObjectTestData) throws -> (plaintext: [UInt8], key: SecretBytes, file: SealedDataFile) {
        let plaintext = kind.bytes(Int(smallChunk) + Int(smallChunk) / 2)
        let key = try newFileKey()
        return (plaintext, key, try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk))
    }

    /// A four-chunk object (3 full chunks and 7 bytes).
    static func fourChunks(_ kind: ObjectTestData, key: SecretBytes? = nil) throws
        -> (plaintext: [UInt8], key: SecretBytes, file: SealedDataFile)
    {
        let plaintext = kind.bytes(3 * Int(smallChunk) + 7)
        let key = try key ?? newFileKey()
        return (plaintext, key, try DataFileModel.seal(plaintext, fileKey: key, chunkSize: smallChunk))
    }

    /// Opens `data` as the whole object of `length` bytes; the test fails
    /// unless that throws.
    static func expectRefused(_ data: [UInt8], key: SecretBytes, length: UInt64,
                              _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(throws: (any Error).self, comment, sourceLocation: sourceLocation) {
            _ = try DataFileModel.open(data, fileKey: key, plaintextLength: length, chunkSize: smallChunk)
        }
    }

    @Test("a flipped bit in any byte of a two-chunk file is refused", arguments: ObjectTestData.allCases)
    func bitFlipEveryByte(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.twoChunks(kind)
        #expect(file.records.count == 2)
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: key))
        let length = UInt64(plaintext.count)
        // Every byte, one bit each; for the small compressed file, all
        // eight bits of every byte.
        let bits = kind == .compressible ? Array(0..<8) : []
        var accepted: [(offset: Int, bit: Int, sameBytes: Bool)] = []
        for offset in file.bytes.indices {
            for bit in bits.isEmpty ? [offset % 8] : bits {
                let damaged = flipped(file.bytes, at: offset, bit: bit)
                if let out = try? DataFileModel.open(damaged, opener: opener, plaintextLength: length, chunkSize: smallChunk) {
                    accepted.append((offset, bit, out == plaintext))
                }
            }
        }
        #expect(accepted.isEmpty, "accepted flips (offset, bit, same bytes): \(accepted.prefix(10))")
        // The undamaged file still opens with the same opener.
        #expect(try DataFileModel.open(file.bytes, opener: opener, plaintextLength: length, chunkSize: smallChunk) == plaintext)
    }

    @Test("every truncation of a two-chunk file is refused")
    func everyTruncation() throws {
        let (plaintext, key, file) = try Self.twoChunks(.compressible)
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: key))
        let accepted = (0..<file.bytes.count).filter { n in
            (try? DataFileModel.open(Array(file.bytes[..<n]), opener: opener, plaintextLength: UInt64(plaintext.count),
                                     chunkSize: smallChunk)) != nil
        }
        #expect(accepted.isEmpty, "accepted prefixes: \(accepted.prefix(10))")
    }

    @Test("swapped records are refused", arguments: ObjectTestData.allCases)
    func swappedRecords(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let length = UInt64(plaintext.count)
        for (a, b) in [(0, 1), (1, 2), (0, 2), (2, 3), (0, 3)] {
            var records = file.records
            records.swapAt(a, b)
            // With an index that matches the new lengths, the structure
            // parses and only the records' own authentication can refuse.
            let index = try DataFileModel.sealIndex(records.map(\.count), fileKey: key)
            #expect(throws: CryptoError.authenticationFailure, "swap \(a) and \(b)") {
                _ = try DataFileModel.open(DataFileModel.assemble(records, index: index), fileKey: key,
                                           plaintextLength: length, chunkSize: smallChunk)
            }
            // And with the original index.
            Self.expectRefused(DataFileModel.assemble(records, index: file.index), key: key, length: length,
                               "swap \(a) and \(b), original index")
        }
    }

    @Test("duplicated records are refused", arguments: ObjectTestData.allCases)
    func duplicatedRecords(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let length = UInt64(plaintext.count)
        let c = UInt64(smallChunk)

        // Record 0 in place of record 1, index adjusted.
        var replaced = file.records
        replaced[1] = replaced[0]
        let replacedIndex = try DataFileModel.sealIndex(replaced.map(\.count), fileKey: key)
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try DataFileModel.open(DataFileModel.assemble(replaced, index: replacedIndex), fileKey: key,
                                       plaintextLength: length, chunkSize: smallChunk)
        }

        // Record 1 inserted a second time, with an index for five records:
        // refused under the real length, and under a length that claims
        // the extra chunk.
        var inserted = file.records
        inserted.insert(file.records[1], at: 2)
        let insertedIndex = try DataFileModel.sealIndex(inserted.map(\.count), fileKey: key)
        let insertedFile = DataFileModel.assemble(inserted, index: insertedIndex)
        Self.expectRefused(insertedFile, key: key, length: length, "inserted duplicate")
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try DataFileModel.open(insertedFile, fileKey: key, plaintextLength: length + c, chunkSize: smallChunk)
        }
        Self.expectRefused(DataFileModel.assemble(inserted, index: file.index), key: key, length: length,
                           "inserted duplicate, original index")

        // The final record duplicated: the same record at two positions.
        var finalTwice = file.records
        finalTwice[2] = finalTwice[3]
        let finalTwiceIndex = try DataFileModel.sealIndex(finalTwice.map(\.count), fileKey: key)
        Self.expectRefused(DataFileModel.assemble(finalTwice, index: finalTwiceIndex), key: key, length: length,
                           "final record twice")
    }

    @Test("a dropped record is refused", arguments: ObjectTestData.allCases)
    func droppedRecord(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let length = UInt64(plaintext.count)
        let c = UInt64(smallChunk)
        for dropped in 0..<3 {
            var records = file.records
            records.remove(at: dropped)
            let index = try DataFileModel.sealIndex(records.map(\.count), fileKey: key)
            let data = DataFileModel.assemble(records, index: index)
            // Under the real length the index no longer fits...
            Self.expectRefused(data, key: key, length: length, "record \(dropped) dropped")
            // ...and under a length one chunk shorter the records sit at
            // the wrong positions.
            #expect(throws: CryptoError.authenticationFailure, "record \(dropped) dropped, shorter length") {
                _ = try DataFileModel.open(data, fileKey: key, plaintextLength: length - c, chunkSize: smallChunk)
            }
            Self.expectRefused(DataFileModel.assemble(records, index: file.index), key: key, length: length,
                               "record \(dropped) dropped, original index")
        }
    }

    @Test("truncation at a chunk boundary is refused", arguments: ObjectTestData.allCases)
    func truncatedAtChunkBoundary(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let c = UInt64(smallChunk)
        // Drop the final record; what is left is three full chunks whose
        // last record was sealed as not final.
        let kept = Array(file.records.prefix(3))
        let index = try DataFileModel.sealIndex(kept.map(\.count), fileKey: key)
        let truncated = DataFileModel.assemble(kept, index: index)
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try DataFileModel.open(truncated, fileKey: key, plaintextLength: 3 * c, chunkSize: smallChunk)
        }
        // Reading only the first chunks of the truncated file still works:
        // truncation is caught exactly when the (now) final chunk is read.
        let (head, _) = try DataFileModel.read(truncated, range: 0..<(2 * c), fileKey: key, plaintextLength: 3 * c,
                                               chunkSize: smallChunk)
        #expect(head == Array(plaintext[..<Int(2 * c)]))
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try DataFileModel.read(truncated, range: (3 * c - 1)..<(3 * c), fileKey: key, plaintextLength: 3 * c,
                                       chunkSize: smallChunk)
        }
        // The record itself refuses to be final.
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try DataFileModel.openRecord(kept[2], index: 2, isFinal: true, plainLength: Int(c), fileKey: key)
        }
        // Without the final record and with the original index, or with no
        // index at all.
        Self.expectRefused(DataFileModel.assemble(kept, index: file.index), key: key, length: UInt64(plaintext.count),
                           "final record dropped, original index")
        Self.expectRefused(kept.flatMap { $0 }, key: key, length: 3 * c, "records only")
        Self.expectRefused(file.records.flatMap { $0 }, key: key, length: UInt64(plaintext.count), "index dropped")
    }

    @Test("a record opens only at its own index and finality", arguments: ObjectTestData.allCases)
    func wrongIndexOrFinality(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let length = UInt64(plaintext.count)
        let n = file.records.count
        for (i, record) in file.records.enumerated() {
            let plainLength = ChunkLayout.chunkLength(index: UInt64(i), plaintextLength: length, chunkSize: smallChunk)
            let isFinal = i == n - 1
            let expected = Array(plaintext[(i * Int(smallChunk))...].prefix(plainLength))
            #expect(try DataFileModel.openRecord(record, index: UInt64(i), isFinal: isFinal, plainLength: plainLength,
                                                 fileKey: key) == expected)
            #expect(throws: CryptoError.authenticationFailure, "record \(i), wrong finality") {
                _ = try DataFileModel.openRecord(record, index: UInt64(i), isFinal: !isFinal, plainLength: plainLength,
                                                 fileKey: key)
            }
            // Other positions, including ones that differ only in the high
            // bytes of the counter.
            let others: [UInt64] = (0..<UInt64(n + 1)).filter { $0 != UInt64(i) }
                + [UInt64(i) + (1 << 8), UInt64(i) + (1 << 32), UInt64(i) + (1 << 56), UInt64(i) | (1 << 63)]
            for j in others {
                for final in [false, true] {
                    #expect(throws: CryptoError.authenticationFailure, "record \(i) at \(j), final \(final)") {
                        _ = try DataFileModel.openRecord(record, index: j, isFinal: final, plainLength: plainLength,
                                                         fileKey: key)
                    }
                }
            }
        }
    }

    @Test("records and index from another object are refused", arguments: ObjectTestData.allCases)
    func otherObject(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let (_, _, other) = try Self.fourChunks(kind)  // same plaintext, its own key
        let length = UInt64(plaintext.count)
        #expect(other.recordLengths == file.recordLengths)
        for i in file.records.indices {
            var records = file.records
            records[i] = other.records[i]
            #expect(throws: CryptoError.authenticationFailure, "record \(i) from another object") {
                _ = try DataFileModel.open(DataFileModel.assemble(records, index: file.index), fileKey: key,
                                           plaintextLength: length, chunkSize: smallChunk)
            }
        }
        #expect(throws: CryptoError.authenticationFailure, "index from another object") {
            _ = try DataFileModel.open(DataFileModel.assemble(file.records, index: other.index), fileKey: key,
                                       plaintextLength: length, chunkSize: smallChunk)
        }
        #expect(throws: CryptoError.authenticationFailure, "the whole other file") {
            _ = try DataFileModel.open(other.bytes, fileKey: key, plaintextLength: length, chunkSize: smallChunk)
        }
        // The index of a one-record object opened as another's.
        let empty = try DataFileModel.seal([], fileKey: try newFileKey(), chunkSize: smallChunk)
        let opener = try ChunkOpener(chunkKey: try ChunkLayout.chunkKey(fileKey: key))
        #expect(throws: CryptoError.authenticationFailure) { _ = try opener.openIndex(empty.index, chunkCount: 1) }
    }

    @Test("an index sealed for another chunk count is refused")
    func indexForAnotherChunkCount() throws {
        let (plaintext, key, file) = try Self.fourChunks(.random)
        let chunkKey = try ChunkLayout.chunkKey(fileKey: key)
        let opener = try ChunkOpener(chunkKey: chunkKey)
        let n = UInt64(file.records.count)
        #expect(try opener.openIndex(file.index, chunkCount: n).map(Int.init) == file.recordLengths)
        for count in [0, 1, n - 1, n + 1, 1 << 32] {
            #expect(throws: CryptoError.authenticationFailure, "opened as \(count) chunks") {
                _ = try opener.openIndex(file.index, chunkCount: count)
            }
        }

        // The same four lengths, sealed by hand under other counters and
        // flags: only (4, 2) is this object's index.
        var plain: [UInt8] = []
        for length in file.recordLengths {
            plain += [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
        }
        #expect(try AESGCM.seal(plain, key: chunkKey, nonce: DataFileModel.nonce(counter: n, flag: 2)) == file.index)
        let nonces: [(UInt64, UInt8)] = [(n + 1, 2), (n - 1, 2), (0, 2), (n, 0), (n, 1), (n, 3), (n + (1 << 32), 2)]
        for (counter, flag) in nonces {
            let forged = try AESGCM.seal(plain, key: chunkKey, nonce: DataFileModel.nonce(counter: counter, flag: flag))
            #expect(throws: CryptoError.authenticationFailure, "index sealed at (\(counter), \(flag))") {
                _ = try opener.openIndex(forged, chunkCount: n)
            }
            #expect(throws: CryptoError.authenticationFailure, "file with index sealed at (\(counter), \(flag))") {
                _ = try DataFileModel.open(DataFileModel.assemble(file.records, index: forged), fileKey: key,
                                           plaintextLength: UInt64(plaintext.count), chunkSize: smallChunk)
            }
        }

        // An index for five records (one fake) in a four-chunk object.
        let longer = try DataFileModel.sealIndex(file.recordLengths + [17], fileKey: key)
        Self.expectRefused(DataFileModel.assemble(file.records, index: longer), key: key,
                           length: UInt64(plaintext.count), "index for five chunks")
        // An index for three.
        let shorter = try DataFileModel.sealIndex(Array(file.recordLengths.prefix(3)), fileKey: key)
        Self.expectRefused(DataFileModel.assemble(file.records, index: shorter), key: key,
                           length: UInt64(plaintext.count), "index for three chunks")
    }

    @Test("appended bytes are refused", arguments: ObjectTestData.allCases)
    func appendedBytes(kind: ObjectTestData) throws {
        let (plaintext, key, file) = try Self.fourChunks(kind)
        let length = UInt64(plaintext.count)
        let tails: [(String, [UInt8])] = [
            ("one zero byte", [0]), ("16 bytes", Array(repeating: 0xa5, count: 16)),
            ("17 bytes", Array(repeating: 0, count: 17)), ("the last record again", file.records[3]),
            ("the index again", file.index), ("the whole file again", file.bytes),
        ]
        for (label, tail) in tails {
            Self.expectRefused(file.bytes + tail, key: key, length: length, "appended \(label)")
        }
        // Bytes inserted between the records and the index.
        Self.expectRefused(file.records.flatMap { $0 } + [0] + file.index, key: key, length: length,
                           "a byte before the index")
    }

    @Test("authenticated records that do not decode are refused")
    func authenticatedButMalformed() throws {
        let key = try newFileKey()
        let chunkKey = try ChunkLayout.chunkKey(fileKey: key)
        func forge(_ body: [UInt8], index: UInt64 = 0, isFinal: Bool = true) throws -> [UInt8] {
            try AESGCM.seal(body, key: chunkKey, nonce: DataFileModel.nonce(counter: index, flag: isFinal ? 1 : 0))
        }
        func open(_ record: [UInt8], plainLength: Int) throws -> [UInt8] {
            try DataFileModel.openRecord(record, index: 0, isFinal: true, plainLength: plainLength, fileKey: key)
        }
        let chunk = ObjectTestData.compressible.bytes(1000)
        let compressed = try #require(LZ4Block.compress(chunk))

        // Controls: the forgeries are built right.
        #expect(try open(forge([0] + chunk), plainLength: 1000) == chunk)
        #expect(try open(forge([1] + compressed), plainLength: 1000) == chunk)
        #expect(try open(forge([0]), plainLength: 0) == [])

        for mode: UInt8 in [2, 3, 0x80, 0xff] {
            #expect(throws: FormatError.invalidField("chunk mode")) { _ = try open(forge([mode] + chunk), plainLength: 1000) }
        }
        #expect(throws: FormatError.invalidField("chunk mode")) { _ = try open(forge([2]), plainLength: 0) }
        // Raw payload of the wrong length.
        #expect(throws: FormatError.invalidField("chunk length")) { _ = try open(forge([0] + chunk), plainLength: 1001) }
        #expect(throws: FormatError.invalidField("chunk length")) { _ = try open(forge([0] + chunk.dropLast()), plainLength: 1000) }
        #expect(throws: FormatError.invalidField("chunk length")) { _ = try open(forge([0]), plainLength: 1) }
        // LZ4 payload that decodes to another length, or not at all.
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1] + compressed), plainLength: 1001) }
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1] + compressed), plainLength: 999) }
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1] + compressed.dropLast(3)), plainLength: 1000) }
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1, 0xff, 0xff, 0xff]), plainLength: 1000) }
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1]), plainLength: 1000) }
        #expect(throws: FormatError.corruptCompressedData) { _ = try open(forge([1]), plainLength: 0) }
        // LZ4 as long as the chunk: no writer here makes it (a payload is
        // compressed only when that makes it shorter), but it is authentic
        // and decodes, so it opens. Built by hand: 100 literals, a match of
        // 5 at offset 1, then 12 literals, 117 bytes for 117.
        let literals = ObjectTestData.random.bytes(112)
        let head = Array(literals[..<100])
        let tail = Array(literals[100...])
        let full: [UInt8] = head + [UInt8](repeating: literals[99], count: 5) + tail
        var block: [UInt8] = [0xF1, 100 - 15]
        block += head
        block += [1, 0, 0xC0]
        block += tail
        #expect(block.count == full.count)
        #expect(try LZ4Block.decompress(block, size: full.count) == full)
        #expect(try open(forge([1] + block), plainLength: full.count) == full)
        #expect(throws: CryptoError.authenticationFailure) {
            _ = try open(flipped(try forge([1] + block), at: 50, bit: 2), plainLength: full.count)
        }

        // A raw record that fails opens into the caller's buffer (no copy
        // through the record any more): what it wrote there is wiped.
        let raw = try forge([0] + chunk)
        for bad in [flipped(raw, at: 500, bit: 0), flipped(raw, at: 1016, bit: 7)] {
            let opener = try ChunkOpener(chunkKey: chunkKey)
            var record = bad
            var plain = [UInt8](repeating: 0xA5, count: 1000)
            #expect(throws: CryptoError.authenticationFailure) {
                try record.withUnsafeMutableBytes { r in
                    try plain.withUnsafeMutableBytes { try opener.open(r, index: 0, isFinal: true, into: $0) }
                }
            }
            #expect(plain.allSatisfy { $0 == 0 }, "unverified plaintext left in the output")
        }

        // A record longer than the chunk allows, or shorter than mode + tag.
        #expect(throws: CryptoError.authenticationFailure) { _ = try open(forge([0] + chunk), plainLength: 999) }
        #expect(throws: CryptoError.authenticationFailure) { _ = try open(forge([]), plainLength: 0) }
        #expect(throws: CryptoError.authenticationFailure) { _ = try open([], plainLength: 0) }
        #expect(throws: CryptoError.authenticationFailure) { _ = try open(Array(repeating: 0, count: 16), plainLength: 10) }
    }
}

@Suite("Chunk layout arithmetic")
struct ChunkLayoutTests {
    @Test("allowed chunk sizes are the powers of two from 16 KiB to 4 MiB")
    func allowedSizes() {
        #expect(ChunkLayout.allowedChunkSizes == Set([16, 32, 64, 128, 256, 512, 1024, 2048, 4096].map { UInt32($0) << 10 }))
        #expect(ChunkLayout.allowedChunkSizes.contains(ChunkLayout.defaultChunkSize))
        #expect(ChunkLayout.allowedChunkSizes.contains(smallChunk))
        #expect(ChunkLayout.recordOverhead == 17)
        #expect(ChunkLayout.maxPlaintextLength == 1 << 48)
    }

    @Test("chunk count", arguments: [smallChunk, ChunkLayout.defaultChunkSize, 4 << 20])
    func chunkCount(chunkSize: UInt32) {
        let c = UInt64(chunkSize)
        let table: [(UInt64, UInt64)] = [
            (0, 1), (1, 1), (c - 1, 1), (c, 1), (c + 1, 2), (2 * c, 2), (2 * c + 1, 3), (3 * c + 7, 4),
            (ChunkLayout.maxPlaintextLength, ChunkLayout.maxPlaintextLength / c),
            (ChunkLayout.maxPlaintextLength - 1, ChunkLayout.maxPlaintextLength / c),
            (ChunkLayout.maxPlaintextLength + 1, ChunkLayout.maxPlaintextLength / c + 1),
        ]
        for (length, count) in table {
            #expect(ChunkLayout.chunkCount(plaintextLength: length, chunkSize: chunkSize) == count, "length \(length)")
        }
    }

    @Test("chunk lengths", arguments: SizeCase.all)
    func chunkLengths(sizeCase: SizeCase) {
        let c = sizeCase.chunkSize
        let length = UInt64(sizeCase.size)
        let n = ChunkLayout.chunkCount(plaintextLength: length, chunkSize: c)
        let lengths = (0..<n).map { ChunkLayout.chunkLength(index: $0, plaintextLength: length, chunkSize: c) }
        #expect(lengths.reduce(0, +) == sizeCase.size)
        #expect(lengths.dropLast().allSatisfy { $0 == Int(c) })
        let last = lengths.last!
        #expect(sizeCase.size == 0 ? last == 0 : (1...Int(c)).contains(last))
        // Past the end: nothing.
        for index in [n, n + 1, n + 1000] {
            #expect(ChunkLayout.chunkLength(index: index, plaintextLength: length, chunkSize: c) == 0)
        }
    }

    @Test("chunk length at the extremes")
    func chunkLengthExtremes() {
        let max = ChunkLayout.maxPlaintextLength
        let c = smallChunk
        let n = ChunkLayout.chunkCount(plaintextLength: max, chunkSize: c)
        #expect(ChunkLayout.chunkLength(index: n - 1, plaintextLength: max, chunkSize: c) == Int(c))
        #expect(ChunkLayout.chunkLength(index: n, plaintextLength: max, chunkSize: c) == 0)
        #expect(ChunkLayout.chunkLength(index: n - 1, plaintextLength: max - 1, chunkSize: c) == Int(c) - 1)
        #expect(ChunkLayout.chunkLength(index: 0, plaintextLength: 0, chunkSize: c) == 0)
        #expect(ChunkLayout.chunkLength(index: 0, plaintextLength: 1, chunkSize: c) == 1)
    }

    @Test("record and index lengths")
    func recordAndIndexLengths() {
        for c in ChunkLayout.allowedChunkSizes {
            #expect(ChunkLayout.maxRecordLength(chunkSize: c) == Int(c) + 17)
        }
        #expect(ChunkLayout.indexLength(chunkCount: 1) == 20)
        #expect(ChunkLayout.indexLength(chunkCount: 4) == 32)
        #expect(ChunkLayout.indexLength(chunkCount: 1 << 34) == (1 << 36) + 16)
    }

    @Test("data length bounds contain every real data length", arguments: SizeCase.all, ObjectTestData.allCases)
    func boundsContainRealLength(sizeCase: SizeCase, kind: ObjectTestData) throws {
        let file = try DataFileModel.seal(kind.bytes(sizeCase.size), fileKey: try newFileKey(), chunkSize: sizeCase.chunkSize)
        let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: UInt64(sizeCase.size), chunkSize: sizeCase.chunkSize)
        #expect(bounds.contains(UInt64(file.bytes.count)))
    }

    @Test("data length bounds by formula and at the extremes")
    func boundsFormula() throws {
        let c = smallChunk
        #expect(try ChunkLayout.dataLengthBounds(plaintextLength: 0, chunkSize: c) == 37...37)
        #expect(try ChunkLayout.dataLengthBounds(plaintextLength: 1, chunkSize: c) == 37...38)
        let threeAndSeven = UInt64(3 * Int(c) + 7)
        #expect(try ChunkLayout.dataLengthBounds(plaintextLength: threeAndSeven, chunkSize: c)
            == (4 * 17 + 32)...(threeAndSeven + 4 * 17 + 32))
        for size in ChunkLayout.allowedChunkSizes {
            let max = ChunkLayout.maxPlaintextLength
            let n = max / UInt64(size)
            let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: max, chunkSize: size)
            #expect(bounds.lowerBound == n * 17 + n * 4 + 16)
            #expect(bounds.upperBound == max + n * 17 + n * 4 + 16)
        }
    }
}
