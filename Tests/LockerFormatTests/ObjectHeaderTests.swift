import LockerCrypto
import LockerFormat
import Testing

// ObjectHeader and DirectoryRecord: the sealed envelope, the body layout,
// the header MAC and validation.

func newMetadataKeys() throws -> MetadataKeys {
    try MetadataKeys(metadataKey: SecretBytes(randomCount: 32))
}

func sampleWrappedKey(_ protectionClass: ProtectionClass = .complete) throws -> WrappedFileKey {
    WrappedFileKey(protectionClass: protectionClass, keyID: try SecureRandom.bytes(16), keyGeneration: 7,
                   blob: try SecureRandom.bytes(WrappedFileKey.blobByteCount(for: protectionClass)))
}

/// A valid header with a correct MAC under `fileKey`.
func sampleHeader(fileKey: SecretBytes, name: String = "report.pdf", source: ProtectionSource = .explicit,
                  protectionClass: ProtectionClass = .complete, plaintextLength: UInt64 = 100_000,
                  chunkSize: UInt32 = 16 << 10, dataLength: UInt64? = nil) throws -> ObjectHeader {
    let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: plaintextLength, chunkSize: chunkSize)
    var header = ObjectHeader(
        parentID: try SecureRandom.bytes(16), name: name, protectionSource: source,
        wrappedKey: try sampleWrappedKey(protectionClass), objectID: try SecureRandom.bytes(16), chunkSize: chunkSize,
        plaintextLength: plaintextLength, dataLength: dataLength ?? bounds.upperBound,
        created: 1_700_000_000_123_456_789, modified: 1_700_000_001_000_000_000, headerMAC: [UInt8](repeating: 0, count: 32))
    header.headerMAC = try header.computeMAC(fileKey: fileKey)
    return header
}

/// Seals `body` in the documented envelope: magic, version 1, reserved 0,
/// then a 12-byte nonce and AES-256-GCM under the record key with the
/// 8-byte prefix as associated data. Independent of SealedRecord.
func envelope(_ body: [UInt8], magic: String, keys: MetadataKeys, version: UInt16 = 1, reserved: UInt16 = 0) throws -> [UInt8] {
    let prefix = Array(magic.utf8) + [UInt8(version >> 8), UInt8(version & 0xff), UInt8(reserved >> 8), UInt8(reserved & 0xff)]
    let nonce = try AESGCM.Nonce.random()
    return prefix + nonce.rawBytes + (try AESGCM.seal(body, key: keys.recordKey, nonce: nonce, authenticating: prefix))
}

extension ByteWriter {
    /// u16 length, then UTF-8 bytes (the records' string encoding).
    mutating func writeTestString(_ bytes: [UInt8]) {
        write(UInt16(bytes.count))
        write(bytes)
    }
}

/// The documented header body, field by field, from the parts of `h`.
func headerBody(_ h: ObjectHeader, sourceKind: UInt8? = nil, nameBytes: [UInt8]? = nil, classByte: UInt8? = nil,
                padding: [UInt8]? = nil, trailing: [UInt8] = []) -> [UInt8] {
    var w = ByteWriter()
    w.write(h.parentID)
    w.writeTestString(nameBytes ?? Array(h.name.utf8))
    switch h.protectionSource {
    case .explicit: w.write(sourceKind ?? 0); w.writeTestString([])
    case .inherited(let path): w.write(sourceKind ?? 1); w.writeTestString(Array(path.utf8))
    case .storeDefault: w.write(sourceKind ?? 2); w.writeTestString([])
    }
    w.write(classByte ?? h.wrappedKey.protectionClass.rawValue)
    w.write(h.wrappedKey.keyID)
    w.write(h.wrappedKey.keyGeneration)
    w.write(h.wrappedKey.blob)
    // Zero padding to the class B length.
    w.write(padding ?? [UInt8](repeating: 0, count: max(0, 72 - h.wrappedKey.blob.count)))
    w.write(h.objectID)
    w.write(h.chunkSize)
    w.write(h.plaintextLength)
    w.write(h.dataLength)
    w.write(h.compression)
    w.write(UInt64(bitPattern: h.created))
    w.write(UInt64(bitPattern: h.modified))
    w.write(h.headerMAC)
    w.write(trailing)
    return w.bytes
}

/// Every single-bit flip of `bytes` that `open` accepts (should be none).
func acceptedBitFlips(_ bytes: [UInt8], open: ([UInt8]) throws -> Void) -> [(offset: Int, bit: Int)] {
    var accepted: [(offset: Int, bit: Int)] = []
    for offset in bytes.indices {
        for bit in 0..<8 {
            if (try? open(flipped(bytes, at: offset, bit: bit))) != nil { accepted.append((offset, bit)) }
        }
    }
    return accepted
}

let sampleSources: [ProtectionSource] = [
    .explicit, .storeDefault, .inherited("/"), .inherited("/projects/2024"), .inherited("/ünïcødé/日本語"), .inherited(""),
]

@Suite("Object header")
struct ObjectHeaderTests {
    @Test("sealed header opens to the same header",
          arguments: sampleSources, ProtectionClass.allCases)
    func roundTrip(source: ProtectionSource, protectionClass: ProtectionClass) throws {
        let keys = try newMetadataKeys()
        let fileKey = try newFileKey()
        let header = try sampleHeader(fileKey: fileKey, source: source, protectionClass: protectionClass)
        let sealed = try header.sealed(with: keys)
        #expect(Array(sealed.prefix(8)) == Array("LKOH".utf8) + [0, 1, 0, 0])
        let opened = try ObjectHeader.open(sealed, with: keys)
        #expect(opened == header)
        #expect(opened.protectionClass == protectionClass)
        #expect(opened.protectionSource == source)
        try opened.verifyMAC(fileKey: fileKey)
        // A fresh nonce each time; both open.
        let again = try header.sealed(with: keys)
        #expect(again != sealed)
        #expect(try ObjectHeader.open(again, with: keys) == header)
        // The same metadata key gives the same record key.
        #expect(try ObjectHeader.open(sealed, with: keys) == header)
    }

    @Test("names, lengths, times and chunk sizes survive the round trip")
    func roundTripFields() throws {
        let keys = try newMetadataKeys()
        let fileKey = try newFileKey()
        let longName = String(repeating: "é", count: 512)  // 1024 bytes
        #expect(longName.utf8.count == NameCodec.maxNameLength)
        for name in ["", "a", "with space and ünïcødé 🙂", longName] {
            let header = try sampleHeader(fileKey: fileKey, name: name)
            #expect(try ObjectHeader.open(header.sealed(with: keys), with: keys) == header, "name \(name.utf8.count) bytes")
        }
        for chunkSize in ChunkLayout.allowedChunkSizes {
            // The longest object the format takes at this chunk size.
            let longest = min(ChunkLayout.maxPlaintextLength, ChunkLayout.maxChunkCount * UInt64(chunkSize))
            for length: UInt64 in [0, 1, UInt64(chunkSize), longest] {
                let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: length, chunkSize: chunkSize)
                for dataLength in [bounds.lowerBound, bounds.upperBound] {
                    let header = try sampleHeader(fileKey: fileKey, plaintextLength: length, chunkSize: chunkSize,
                                                  dataLength: dataLength)
                    #expect(try ObjectHeader.open(header.sealed(with: keys), with: keys) == header)
                }
            }
        }
        for time in [Int64.min, -1, 0, 1, Int64.max] {
            var header = try sampleHeader(fileKey: fileKey)
            header.created = time
            header.modified = time == Int64.min ? Int64.max : time
            #expect(try ObjectHeader.open(header.sealed(with: keys), with: keys) == header)
        }
    }

    @Test("the header of a real data file opens it")
    func withDataFile() throws {
        let keys = try newMetadataKeys()
        let fileKey = try newFileKey()
        let plaintext = ObjectTestData.compressible.bytes(3 * Int(smallChunk) + 7)
        let file = try DataFileModel.seal(plaintext, fileKey: fileKey, chunkSize: smallChunk)
        let header = try sampleHeader(fileKey: fileKey, plaintextLength: UInt64(plaintext.count), chunkSize: smallChunk,
                                      dataLength: UInt64(file.bytes.count))
        let opened = try ObjectHeader.open(header.sealed(with: keys), with: keys)
        try opened.verifyMAC(fileKey: fileKey)
        #expect(opened.chunkCount == 4)
        #expect(UInt64(file.bytes.count) == opened.dataLength)
        #expect(try DataFileModel.open(file.bytes, fileKey: fileKey, plaintextLength: opened.plaintextLength,
                                       chunkSize: opened.chunkSize) == plaintext)
    }

    /// A header with a small object's data inline: the data file's bytes
    /// after the record, as DataFileModel (independent of the store's
    /// writer) seals them.
    func inlineSample(keys: MetadataKeys, plaintextLength: Int = 3000) throws -> (header: ObjectHeader, fileKey: SecretBytes, plaintext: [UInt8]) {
        let fileKey = try newFileKey()
        let plaintext = ObjectTestData.compressible.bytes(plaintextLength)
        let file = try DataFileModel.seal(plaintext, fileKey: fileKey, chunkSize: smallChunk)
        var header = try sampleHeader(fileKey: fileKey, plaintextLength: UInt64(plaintext.count), chunkSize: smallChunk,
                                      dataLength: UInt64(file.bytes.count))
        header.inlineData = file.bytes
        return (header, fileKey, plaintext)
    }

    @Test("a header sealed with a given nonce carries it at bytes 8-19 and opens, inline or not")
    func givenNonce() throws {
        let keys = try newMetadataKeys()
        let fileKey = try newFileKey()
        let nonce = try AESGCM.Nonce.random()
        let header = try sampleHeader(fileKey: fileKey)
        let sealed = try header.sealed(with: keys, nonce: nonce)
        #expect(Array(sealed[8..<20]) == nonce.rawBytes)
        #expect(try ObjectHeader.open(sealed, with: keys) == header)
        // The body sealed independently under the same nonce: the same bytes.
        let prefix = Array(sealed[..<8])
        #expect(sealed == prefix + nonce.rawBytes + (try AESGCM.seal(headerBody(header), key: keys.recordKey, nonce: nonce,
                                                                      authenticating: prefix)))
        let (inline, _, _) = try inlineSample(keys: keys)
        let inlineSealed = try inline.sealed(with: keys, nonce: nonce)
        #expect(Array(inlineSealed[8..<20]) == nonce.rawBytes)
        #expect(try ObjectHeader.open(inlineSealed, with: keys) == inline)
    }

    @Test("an inline header is the documented record (LKOI, its length in the prefix), then the data")
    func inlineLayout() throws {
        let keys = try newMetadataKeys()
        let (header, fileKey, plaintext) = try inlineSample(keys: keys)
        let sealed = try header.sealed(with: keys)
        let body = headerBody(header)
        let recordLength = 8 + 12 + body.count + 16
        #expect(Array(sealed[..<8]) == Array("LKOI".utf8) + [0, 1, UInt8(recordLength >> 8), UInt8(recordLength & 0xff)])
        #expect(sealed.count == recordLength + header.inlineData!.count)
        #expect(Array(sealed[recordLength...]) == header.inlineData!)
        // Built independently from the documented layout, it opens.
        let built = try envelope(body, magic: "LKOI", keys: keys, reserved: UInt16(recordLength)) + header.inlineData!
        let opened = try ObjectHeader.open(built, with: keys)
        #expect(opened == header)
        try opened.verifyMAC(fileKey: fileKey)
        #expect(try DataFileModel.open(opened.inlineData!, fileKey: fileKey, plaintextLength: opened.plaintextLength,
                                       chunkSize: opened.chunkSize) == plaintext)
        // Without inline data the same header is an LKOH record.
        var plain = header
        plain.inlineData = nil
        #expect(Array(try plain.sealed(with: keys)[..<4]) == Array("LKOH".utf8))
        #expect(try ObjectHeader.open(try plain.sealed(with: keys), with: keys).inlineData == nil)
    }

    @Test("inline headers: every bit flip of the record, a wrong length field, and data of another length are refused")
    func inlineRefusals() throws {
        let keys = try newMetadataKeys()
        let (header, _, _) = try inlineSample(keys: keys, plaintextLength: 200)
        let sealed = try header.sealed(with: keys)
        let recordLength = Int(sealed[6]) << 8 | Int(sealed[7])
        let record = Array(sealed[..<recordLength])
        let data = Array(sealed[recordLength...])
        let accepted = acceptedBitFlips(record) { _ = try ObjectHeader.open($0 + data, with: keys) }
        #expect(accepted.isEmpty, "accepted flips (offset, bit): \(accepted.prefix(10))")
        // The record as an LKOH record, or an LKOH record relabelled LKOI.
        var relabelled = record
        relabelled.replaceSubrange(0..<4, with: Array("LKOH".utf8))
        #expect(throws: (any Error).self) { _ = try ObjectHeader.open(relabelled + data, with: keys) }
        for length in [0, 35, recordLength - 1, recordLength + 1, sealed.count + 1, 8193, 0xffff] {
            var bad = sealed
            bad[6] = UInt8(length >> 8)
            bad[7] = UInt8(length & 0xff)
            #expect(throws: (any Error).self, "length field \(length)") { _ = try ObjectHeader.open(bad, with: keys) }
        }
        // Data shorter or longer than the header's data length.
        for cut in [0, 1, data.count - 1] {
            #expect(throws: FormatError.invalidField("inline data length")) { _ = try ObjectHeader.open(record + data.prefix(cut), with: keys) }
        }
        #expect(throws: FormatError.invalidField("inline data length")) { _ = try ObjectHeader.open(sealed + [0], with: keys) }
    }

    @Test("a header without its inline data in memory stays inline and cannot be sealed")
    func droppedInlineData() throws {
        let keys = try newMetadataKeys()
        let (header, _, _) = try inlineSample(keys: keys)
        #expect(header.isInline && !header.inlineDataDropped)
        let dropped = header.droppingInlineData()
        #expect(dropped.isInline && dropped.inlineDataDropped)
        #expect(dropped.inlineData == [])
        #expect(throws: FormatError.invalidField("inline data length")) { _ = try dropped.sealed(with: keys) }
        var plain = header
        plain.inlineData = nil
        #expect(plain.droppingInlineData() == plain)
        #expect(!plain.isInline && !plain.inlineDataDropped)
    }

    @Test("inline data is at most 56 KiB, and a header file at most 64 KiB")
    func inlineLimit() throws {
        let keys = try newMetadataKeys()
        #expect(ObjectHeader.maxInlineDataLength == 56 << 10 && ObjectHeader.maxFileLength == 64 << 10)
        // Data over 56 KiB cannot be inline: sealing refuses, and so does
        // opening a file built that way.
        let fileKey = try newFileKey()
        let plaintext = ObjectTestData.random.bytes(60_000)
        let file = try DataFileModel.seal(plaintext, fileKey: fileKey, chunkSize: smallChunk)
        #expect(file.bytes.count > 56 << 10)
        var header = try sampleHeader(fileKey: fileKey, plaintextLength: UInt64(plaintext.count), chunkSize: smallChunk,
                                      dataLength: UInt64(file.bytes.count))
        header.inlineData = file.bytes
        #expect(throws: FormatError.invalidField("inline data length")) { _ = try header.sealed(with: keys) }
        let body = headerBody(header)
        let built = try envelope(body, magic: "LKOI", keys: keys, reserved: UInt16(8 + 12 + body.count + 16)) + file.bytes
        #expect(throws: (any Error).self) { _ = try ObjectHeader.open(built, with: keys) }
    }

    @Test("the body follows the documented layout")
    func documentedLayout() throws {
        let keys = try newMetadataKeys()
        for source in sampleSources {
            for cls in ProtectionClass.allCases {
                let header = try sampleHeader(fileKey: try newFileKey(), source: source, protectionClass: cls)
                #expect(try ObjectHeader.open(envelope(headerBody(header), magic: "LKOH", keys: keys), with: keys) == header)
            }
        }
    }

    @Test("a sealed header's size does not depend on its class")
    func sizeHidesClass() throws {
        let keys = try newMetadataKeys()
        let fileKey = try newFileKey()
        let sizes = try Set(ProtectionClass.allCases.map {
            try sampleHeader(fileKey: fileKey, protectionClass: $0).sealed(with: keys).count
        })
        #expect(sizes.count == 1)
    }

    @Test("every single-bit flip of a sealed header is refused", arguments: [ProtectionClass.complete, .completeUnlessOpen])
    func bitFlips(protectionClass: ProtectionClass) throws {
        let keys = try newMetadataKeys()
        let header = try sampleHeader(fileKey: try newFileKey(), source: .inherited("/a/b"), protectionClass: protectionClass)
        let sealed = try header.sealed(with: keys)
        let accepted = acceptedBitFlips(sealed) { _ = try ObjectHeader.open($0, with: keys) }
        #expect(accepted.isEmpty, "accepted flips (offset, bit): \(accepted.prefix(10))")
    }

    @Test("truncated or extended sealed headers are refused")
    func truncatedOrExtended() throws {
        let keys = try newMetadataKeys()
        let sealed = try sampleHeader(fileKey: try newFileKey()).sealed(with: keys)
        let accepted = (0..<sealed.count).filter { (try? ObjectHeader.open(Array(sealed[..<$0]), with: keys)) != nil }
        #expect(accepted.isEmpty, "accepted prefixes: \(accepted)")
        for tail: [UInt8] in [[0], Array(repeating: 0, count: 16), sealed] {
            #expect(throws: (any Error).self) { _ = try ObjectHeader.open(sealed + tail, with: keys) }
        }
    }

    @Test("a header opens only with its own metadata keys")
    func otherMetadataKeys() throws {
        let metadataKey = try SecretBytes(randomCount: 32)
        let keys = try MetadataKeys(metadataKey: metadataKey)
        let header = try sampleHeader(fileKey: try newFileKey())
        let sealed = try header.sealed(with: keys)
        // Keys derived again from the same metadata key work.
        #expect(try ObjectHeader.open(sealed, with: MetadataKeys(metadataKey: metadataKey)) == header)
        for _ in 0..<4 {
            #expect(throws: CryptoError.authenticationFailure) { _ = try ObjectHeader.open(sealed, with: newMetadataKeys()) }
        }
        // The three derived keys are distinct.
        #expect(keys.recordKey != keys.nameKey)
        #expect(keys.recordKey != keys.nameNonceKey)
        #expect(keys.nameKey != keys.nameNonceKey)
        #expect(keys.recordKey != metadataKey)
    }

    @Test("headers and directory records cannot stand in for each other")
    func crossType() throws {
        let keys = try newMetadataKeys()
        let header = try sampleHeader(fileKey: try newFileKey())
        let sealedHeader = try header.sealed(with: keys)
        let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: try SecureRandom.bytes(16), name: "d",
                                     defaultClass: ProtectionClass.none, created: 5)
        let sealedRecord = try record.sealed(with: keys)
        #expect(throws: FormatError.badMagic) { _ = try DirectoryRecord.open(sealedHeader, with: keys) }
        #expect(throws: FormatError.badMagic) { _ = try ObjectHeader.open(sealedRecord, with: keys) }
        // Relabeling the magic breaks the tag: the prefix is authenticated.
        let relabeled = Array("LKDI".utf8) + sealedHeader[4...]
        #expect(throws: CryptoError.authenticationFailure) { _ = try DirectoryRecord.open(relabeled, with: keys) }
        let relabeledRecord = Array("LKOH".utf8) + sealedRecord[4...]
        #expect(throws: CryptoError.authenticationFailure) { _ = try ObjectHeader.open(relabeledRecord, with: keys) }
    }

    @Test("authenticated but malformed bodies and envelopes are refused")
    func malformedBodies() throws {
        let keys = try newMetadataKeys()
        let header = try sampleHeader(fileKey: try newFileKey(), source: .inherited("/x"))
        func open(_ body: [UInt8], version: UInt16 = 1, reserved: UInt16 = 0) throws {
            _ = try ObjectHeader.open(envelope(body, magic: "LKOH", keys: keys, version: version, reserved: reserved), with: keys)
        }
        try open(headerBody(header))  // control
        #expect(throws: FormatError.unsupportedVersion(2)) { try open(headerBody(header), version: 2) }
        #expect(throws: FormatError.unsupportedVersion(0)) { try open(headerBody(header), version: 0) }
        #expect(throws: FormatError.invalidField("reserved")) { try open(headerBody(header), reserved: 1) }
        #expect(throws: FormatError.invalidField("protection source")) { try open(headerBody(header, sourceKind: 3)) }
        #expect(throws: FormatError.invalidField("class")) { try open(headerBody(header, classByte: 0)) }
        #expect(throws: FormatError.invalidField("class")) { try open(headerBody(header, classByte: 5)) }
        #expect(throws: FormatError.trailingBytes) { try open(headerBody(header, trailing: [0])) }
        for position in [0, 15, 31] {
            var padding = [UInt8](repeating: 0, count: 32)
            padding[position] = 1
            #expect(throws: FormatError.invalidField("wrapped key padding")) { try open(headerBody(header, padding: padding)) }
        }
        // Class B keys fill the room: no padding.
        var classB = header
        classB.wrappedKey = try sampleWrappedKey(.completeUnlessOpen)
        try open(headerBody(classB, padding: []))
        #expect(throws: FormatError.trailingBytes) { try open(headerBody(classB, padding: [0])) }
        #expect(throws: FormatError.truncated) { try open(Array(headerBody(header).dropLast())) }
        #expect(throws: FormatError.truncated) { try open([]) }
        #expect(throws: FormatError.invalidField("utf-8")) { try open(headerBody(header, nameBytes: [0x66, 0xff])) }
        #expect(throws: FormatError.invalidField("string length")) {
            try open(headerBody(header, nameBytes: Array(repeating: 0x61, count: NameCodec.maxNameLength + 1)))
        }
        // A class-A key with a class-B-sized blob shifts everything after.
        var wrongBlob = header
        wrongBlob.wrappedKey.blob = try SecureRandom.bytes(72)
        #expect(throws: (any Error).self) { try open(headerBody(wrongBlob)) }
        // Fields that validate() refuses, even under a valid tag.
        var badChunk = header
        badChunk.chunkSize = 8 << 10
        #expect(throws: FormatError.invalidField("chunk size")) { try open(headerBody(badChunk)) }
        var badLength = header
        badLength.dataLength += 1
        #expect(throws: FormatError.invalidField("data length")) { try open(headerBody(badLength)) }
        var badCompression = header
        badCompression.compression = 0
        #expect(throws: FormatError.invalidField("compression")) { try open(headerBody(badCompression)) }
        // Larger than a record may be: refused before decryption.
        #expect(throws: FormatError.inputTooLarge) {
            try open(headerBody(header) + Array(repeating: 0, count: 8 << 10))
        }
        // Too short to hold a tag.
        #expect(throws: FormatError.truncated) { _ = try ObjectHeader.open(Array("LKOH".utf8) + [0, 1, 0, 0] + Array(repeating: 0, count: 12 + 15), with: keys) }
        #expect(throws: FormatError.badMagic) { _ = try ObjectHeader.open(Array("LKOX".utf8) + [0, 1, 0, 0], with: keys) }
    }

    @Test("header MAC: right file key passes, any other fails")
    func headerMAC() throws {
        let fileKey = try newFileKey()
        let header = try sampleHeader(fileKey: fileKey)
        #expect(header.headerMAC.count == 32)
        #expect(try header.computeMAC(fileKey: fileKey) == header.headerMAC)
        try header.verifyMAC(fileKey: fileKey)
        try header.verifyMAC(fileKey: SecretBytes(copying: fileKey.withUnsafeBytes { Array($0) }))
        for _ in 0..<4 {
            #expect(throws: CryptoError.authenticationFailure) { try header.verifyMAC(fileKey: newFileKey()) }
        }
        // The documented MAC input, by hand.
        var w = ByteWriter()
        w.write(Array("locker v1 header".utf8))
        w.write(header.objectID)
        w.write(header.chunkSize)
        w.write(header.plaintextLength)
        w.write(header.dataLength)
        w.write(header.compression)
        w.write(UInt64(bitPattern: header.created))
        #expect(header.macInput == w.bytes)
        #expect(try HMAC.authenticationCode(for: w.bytes, key: ChunkLayout.headerMACKey(fileKey: fileKey)) == header.headerMAC)
    }

    @Test("header MAC covers the fields that bind the data")
    func headerMACCoverage() throws {
        let fileKey = try newFileKey()
        let header = try sampleHeader(fileKey: fileKey)
        let changes: [(String, (inout ObjectHeader) -> Void)] = [
            ("objectID", { $0.objectID[15] ^= 1 }),
            ("chunkSize", { $0.chunkSize = 32 << 10 }),
            ("plaintextLength", { $0.plaintextLength += 1 }),
            ("dataLength", { $0.dataLength -= 1 }),
            ("compression", { $0.compression = 2 }),
            ("created", { $0.created += 1 }),
            ("headerMAC", { $0.headerMAC[0] ^= 0x80 }),
            ("headerMAC length", { $0.headerMAC.removeLast() }),
            ("headerMAC empty", { $0.headerMAC = [] }),
        ]
        for (label, change) in changes {
            var changed = header
            change(&changed)
            #expect(throws: CryptoError.authenticationFailure, "\(label)") { try changed.verifyMAC(fileKey: fileKey) }
        }
        // Fields outside the MAC (protected by the sealed record instead).
        var renamed = header
        renamed.name = "other"
        renamed.modified += 1
        renamed.protectionSource = .storeDefault
        try renamed.verifyMAC(fileKey: fileKey)
    }

    @Test("validate refuses a bad chunk size", arguments: [0, 1, 8 << 10, (16 << 10) - 1, (16 << 10) + 1, 48 << 10,
                                                            8 << 20, UInt32.max] as [UInt32])
    func validateChunkSize(chunkSize: UInt32) throws {
        var header = try sampleHeader(fileKey: try newFileKey())
        header.chunkSize = chunkSize
        #expect(throws: FormatError.invalidField("chunk size")) { try header.validate() }
        #expect(throws: FormatError.invalidField("chunk size")) { _ = try header.sealed(with: newMetadataKeys()) }
    }

    @Test("validate refuses a data length outside the bounds")
    func validateDataLength() throws {
        let fileKey = try newFileKey()
        // The longest object the chunk limit allows at this chunk size.
        let longest = ChunkLayout.maxChunkCount * UInt64(smallChunk)
        for length: UInt64 in [0, 1, 100_000, longest] {
            let bounds = try ChunkLayout.dataLengthBounds(plaintextLength: length, chunkSize: smallChunk)
            var header = try sampleHeader(fileKey: fileKey, plaintextLength: length)
            for good in [bounds.lowerBound, bounds.upperBound] {
                header.dataLength = good
                try header.validate()
            }
            for bad in [0, bounds.lowerBound - 1, bounds.upperBound + 1, UInt64.max] {
                header.dataLength = bad
                #expect(throws: FormatError.invalidField("data length"), "length \(length), data length \(bad)") {
                    try header.validate()
                }
                #expect(throws: FormatError.invalidField("data length")) { _ = try header.sealed(with: newMetadataKeys()) }
            }
        }
        // One chunk more than a reader takes: refused whatever the data
        // length says (format.md: a reader MUST refuse such a header).
        let tooManyChunks = try sampleHeader(fileKey: fileKey, plaintextLength: longest + 1)
        #expect(throws: FormatError.invalidField("chunk count")) { try tooManyChunks.validate() }
        #expect(throws: FormatError.invalidField("chunk count")) { _ = try tooManyChunks.sealed(with: newMetadataKeys()) }
        var tooLong = try sampleHeader(fileKey: fileKey)
        tooLong.plaintextLength = ChunkLayout.maxPlaintextLength + 1
        #expect(throws: FormatError.invalidField("length")) { try tooLong.validate() }
        tooLong.plaintextLength = .max
        #expect(throws: FormatError.invalidField("length")) { try tooLong.validate() }
    }

    @Test("validate refuses bad ids, MAC length and compression")
    func validateIDs() throws {
        let header = try sampleHeader(fileKey: try newFileKey())
        try header.validate()
        let changes: [(String, (inout ObjectHeader) -> Void)] = [
            ("parentID empty", { $0.parentID = [] }),
            ("parentID 15", { $0.parentID.removeLast() }),
            ("parentID 17", { $0.parentID.append(0) }),
            ("objectID empty", { $0.objectID = [] }),
            ("objectID 15", { $0.objectID.removeLast() }),
            ("objectID 17", { $0.objectID.append(0) }),
            ("headerMAC 31", { $0.headerMAC.removeLast() }),
            ("headerMAC 33", { $0.headerMAC.append(0) }),
        ]
        for (label, change) in changes {
            var changed = header
            change(&changed)
            #expect(throws: FormatError.invalidField("header ids"), "\(label)") { try changed.validate() }
            #expect(throws: FormatError.invalidField("header ids"), "\(label)") { _ = try changed.sealed(with: newMetadataKeys()) }
        }
        for compression: UInt8 in [0, 2, 0xff] {
            var changed = header
            changed.compression = compression
            #expect(throws: FormatError.invalidField("compression")) { try changed.validate() }
        }
    }

    @Test("whatever sealed(with:) accepts, open(_:with:) reads back")
    func sealedAlwaysOpens() throws {
        let keys = try newMetadataKeys()
        let header = try sampleHeader(fileKey: try newFileKey(), protectionClass: .complete)
        let changes: [(String, (inout ObjectHeader) -> Void)] = [
            ("keyID 15 bytes", { $0.wrappedKey.keyID.removeLast() }),
            ("keyID 17 bytes", { $0.wrappedKey.keyID.append(0) }),
            ("class A key with a 72-byte blob", { $0.wrappedKey.blob += [UInt8](repeating: 1, count: 32) }),
            ("class B key with a 40-byte blob", { $0.wrappedKey.protectionClass = .completeUnlessOpen }),
            ("blob 39 bytes", { $0.wrappedKey.blob.removeLast() }),
            ("name of 1025 bytes", { $0.name = String(repeating: "n", count: NameCodec.maxNameLength + 1) }),
            ("blob 73 bytes", { $0.wrappedKey.blob = [UInt8](repeating: 1, count: 73) }),
            ("inherited path of 8 KiB", { $0.protectionSource = .inherited(String(repeating: "p", count: 8 << 10)) }),
            ("inherited path of 70 000 bytes", { $0.protectionSource = .inherited(String(repeating: "p", count: 70_000)) }),
        ]
        for (label, change) in changes {
            var changed = header
            change(&changed)
            // Either refused when sealing, or read back unchanged: never a
            // header that can be written but not read.
            if let sealed = try? changed.sealed(with: keys) {
                do {
                    #expect(try ObjectHeader.open(sealed, with: keys) == changed, "\(label)")
                } catch {
                    Issue.record("\(label): sealed, but open throws \(error)")
                }
            }
        }
    }
}

extension ObjectHeaderTests {
    @Test("validate refuses wrapped keys, names and paths that open could not read back")
    func validateReadability() throws {
        let header = try sampleHeader(fileKey: try newFileKey(), protectionClass: .complete)
        let changes: [(String, FormatError, (inout ObjectHeader) -> Void)] = [
            ("keyID 15 bytes", .invalidField("wrapped key"), { $0.wrappedKey.keyID.removeLast() }),
            ("keyID 17 bytes", .invalidField("wrapped key"), { $0.wrappedKey.keyID.append(0) }),
            ("class A, 72-byte blob", .invalidField("wrapped key"), { $0.wrappedKey.blob += [UInt8](repeating: 1, count: 32) }),
            ("class B, 40-byte blob", .invalidField("wrapped key"), { $0.wrappedKey.protectionClass = .completeUnlessOpen }),
            ("blob 39 bytes", .invalidField("wrapped key"), { $0.wrappedKey.blob.removeLast() }),
            ("blob 73 bytes", .invalidField("wrapped key"), { $0.wrappedKey.blob = [UInt8](repeating: 1, count: 73) }),
            ("name 1025 bytes", .invalidField("name"), { $0.name = String(repeating: "n", count: NameCodec.maxNameLength + 1) }),
            ("path 8193 bytes", .invalidField("source path"), { $0.protectionSource = .inherited(String(repeating: "p", count: 8193)) }),
            ("path 70 000 bytes", .invalidField("source path"), { $0.protectionSource = .inherited(String(repeating: "p", count: 70_000)) }),
        ]
        for (label, error, change) in changes {
            var changed = header
            change(&changed)
            #expect(throws: error, "\(label)") { try changed.validate() }
            #expect(throws: error, "\(label)") { _ = try changed.sealed(with: newMetadataKeys()) }
        }
        // Every class with its own blob length is fine.
        for cls in ProtectionClass.allCases {
            var changed = header
            changed.wrappedKey = try sampleWrappedKey(cls)
            try changed.validate()
        }
    }

    @Test("protection sources print as stat shows them")
    func sourceDescriptions() {
        #expect(ProtectionSource.explicit.description == "explicit")
        #expect(ProtectionSource.storeDefault.description == "storeDefault")
        #expect(ProtectionSource.inherited("/a/b").description == "inherited:/a/b")
        #expect(ProtectionSource.inherited("/a") != .inherited("/b"))
    }

    @Test("a header of exactly 8192 bytes is written and read; one byte more is refused")
    func recordSizeLimit() throws {
        let keys = try newMetadataKeys()
        var header = try sampleHeader(fileKey: try newFileKey(), source: .inherited(""))
        let base = try header.sealed(with: keys).count
        header.protectionSource = .inherited(String(repeating: "p", count: 8192 - base))
        let sealed = try header.sealed(with: keys)
        #expect(sealed.count == 8192)
        #expect(try ObjectHeader.open(sealed, with: keys) == header)
        header.protectionSource = .inherited(String(repeating: "p", count: 8192 - base + 1))
        #expect(throws: FormatError.inputTooLarge) { _ = try header.sealed(with: keys) }
    }
}

@Suite("Directory record")
struct DirectoryRecordTests {
    static let classes: [ProtectionClass?] = [nil] + ProtectionClass.allCases.map { $0 }

    @Test("sealed record opens to the same record", arguments: classes)
    func roundTrip(defaultClass: ProtectionClass?) throws {
        let keys = try newMetadataKeys()
        let longName = String(repeating: "ü", count: 512)
        let previousPlaces: [DirectoryRecord.Place?] = [nil, .init(parentID: try SecureRandom.bytes(16), name: "old ü")]
        for name in ["", "docs", "ünïcødé 🙂", longName] {
            for (created, previous) in zip([Int64.min, 0, 1_700_000_000_000_000_000, Int64.max], previousPlaces + previousPlaces) {
                let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: try SecureRandom.bytes(16),
                                             name: name, defaultClass: defaultClass, created: created, previous: previous)
                let sealed = try record.sealed(with: keys)
                #expect(Array(sealed.prefix(8)) == Array("LKDI".utf8) + [0, 1, 0, 0])
                let opened = try DirectoryRecord.open(sealed, with: keys)
                #expect(opened == record)
                #expect(opened.defaultClass == defaultClass)
                #expect(opened.places == [record.place] + (previous.map { [$0] } ?? []))
            }
        }
        let root = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: DirectoryRecord.rootParentID, name: "",
                                   defaultClass: defaultClass, created: 0)
        #expect(try DirectoryRecord.open(root.sealed(with: keys), with: keys) == root)
    }

    @Test("the directory record body follows the documented layout")
    func documentedLayout() throws {
        let keys = try newMetadataKeys()
        for cls in Self.classes {
            var record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: try SecureRandom.bytes(16),
                                         name: "photos", defaultClass: cls, created: -42)
            var w = ByteWriter()
            w.write(record.directoryID)
            w.write(record.parentID)
            w.writeTestString(Array(record.name.utf8))
            w.write(cls?.rawValue ?? 0)
            w.write(UInt64(bitPattern: record.created))
            #expect(try DirectoryRecord.open(envelope(w.bytes, magic: "LKDI", keys: keys), with: keys) == record)
            // During a move: the place it moves from follows.
            record.previous = .init(parentID: try SecureRandom.bytes(16), name: "pictures")
            w.write(record.previous!.parentID)
            w.writeTestString(Array("pictures".utf8))
            #expect(try DirectoryRecord.open(envelope(w.bytes, magic: "LKDI", keys: keys), with: keys) == record)
        }
    }

    @Test("every single-bit flip of a sealed record is refused", arguments: [nil, ProtectionClass.completeUnlessOpen])
    func bitFlips(defaultClass: ProtectionClass?) throws {
        let keys = try newMetadataKeys()
        let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: try SecureRandom.bytes(16), name: "docs",
                                     defaultClass: defaultClass, created: 1_700_000_000,
                                     previous: .init(parentID: try SecureRandom.bytes(16), name: "old"))
        let sealed = try record.sealed(with: keys)
        let accepted = acceptedBitFlips(sealed) { _ = try DirectoryRecord.open($0, with: keys) }
        #expect(accepted.isEmpty, "accepted flips (offset, bit): \(accepted.prefix(10))")
        let prefixes = (0..<sealed.count).filter { (try? DirectoryRecord.open(Array(sealed[..<$0]), with: keys)) != nil }
        #expect(prefixes.isEmpty)
        #expect(throws: (any Error).self) { _ = try DirectoryRecord.open(sealed + [0], with: keys) }
    }

    @Test("a record opens only with its own metadata keys")
    func otherMetadataKeys() throws {
        let keys = try newMetadataKeys()
        let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: DirectoryRecord.rootParentID, name: "docs",
                                     defaultClass: .complete, created: 1)
        let sealed = try record.sealed(with: keys)
        for _ in 0..<4 {
            #expect(throws: CryptoError.authenticationFailure) { _ = try DirectoryRecord.open(sealed, with: newMetadataKeys()) }
        }
    }

    @Test("authenticated but malformed bodies are refused")
    func malformedBodies() throws {
        let keys = try newMetadataKeys()
        let parent = [UInt8](repeating: 8, count: 16)
        func body(id: [UInt8] = Array(repeating: 7, count: 16), parent: [UInt8] = parent, name: [UInt8] = Array("d".utf8),
                  cls: UInt8 = 1, trailing: [UInt8] = []) -> [UInt8] {
            var w = ByteWriter()
            w.write(id)
            w.write(parent)
            w.writeTestString(name)
            w.write(cls)
            w.write(UInt64(9))
            w.write(trailing)
            return w.bytes
        }
        func open(_ body: [UInt8]) throws -> DirectoryRecord {
            try DirectoryRecord.open(envelope(body, magic: "LKDI", keys: keys), with: keys)
        }
        #expect(try open(body()).defaultClass == .complete)
        #expect(try open(body(cls: 0)).defaultClass == nil)
        for cls: UInt8 in [5, 0x80, 0xff] {
            #expect(throws: FormatError.invalidField("default class")) { _ = try open(body(cls: cls)) }
        }
        #expect(try open(body()).place == .init(parentID: parent, name: "d"))
        // After `created` may come only a previous place, a parent ID and
        // a non-empty name (a move in progress), and nothing after it.
        let other = [UInt8](repeating: 9, count: 16)
        #expect(throws: FormatError.truncated) { _ = try open(body(trailing: [0])) }
        #expect(throws: FormatError.truncated) { _ = try open(body(trailing: other)) }
        #expect(throws: FormatError.truncated) { _ = try open(body(trailing: other + [0])) }
        #expect(throws: FormatError.invalidField("previous name")) { _ = try open(body(trailing: other + [0, 0])) }
        let moving = try open(body(trailing: other + [0, 1, 0x61]))
        #expect(moving.previous == .init(parentID: other, name: "a"))
        #expect(moving.names(in: parent) == ["d"] && moving.names(in: other) == ["a"] && moving.names(in: [UInt8](repeating: 0, count: 16)).isEmpty)
        #expect(throws: FormatError.trailingBytes) { _ = try open(body(trailing: other + [0, 1, 0x61, 0])) }
        #expect(throws: FormatError.truncated) { _ = try open(Array(body().dropLast())) }
        #expect(throws: FormatError.truncated) { _ = try open(Array(body().prefix(31))) }
        #expect(throws: FormatError.truncated) { _ = try open([]) }
        #expect(throws: FormatError.invalidField("utf-8")) { _ = try open(body(name: [0xc3])) }
        #expect(throws: FormatError.invalidField("string length")) {
            _ = try open(body(name: Array(repeating: 0x61, count: NameCodec.maxNameLength + 1)))
        }
    }

    @Test("a directory name over 1024 bytes is refused when sealing")
    func sealedAlwaysOpens() throws {
        let keys = try newMetadataKeys()
        let record = DirectoryRecord(directoryID: try SecureRandom.bytes(16), parentID: DirectoryRecord.rootParentID,
                                     name: String(repeating: "n", count: NameCodec.maxNameLength + 1),
                                     defaultClass: nil, created: 0)
        if let sealed = try? record.sealed(with: keys) {
            do {
                #expect(try DirectoryRecord.open(sealed, with: keys) == record)
            } catch {
                Issue.record("a 1025-byte name: sealed, but open throws \(error)")
            }
        }
        #expect(throws: FormatError.invalidField("name")) { _ = try record.sealed(with: keys) }
    }
}
