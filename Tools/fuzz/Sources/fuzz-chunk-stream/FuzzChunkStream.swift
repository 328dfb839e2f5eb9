// Fuzzes the chunk stream reader: `ChunkOpener.openIndex`, then
// `ChunkOpener.open` on every record, with the checks the store's
// `ObjectReader` makes between them.
//
// Input: a selector byte, a chunk-size byte (2^(14 + b % 9) bytes), the
// plaintext length (u32, at most 4 MiB), then the rest.
//   bit 0: 0 = the rest is a data file as stored;
//          1 = the rest is a list of records before sealing, which the
//              target seals as chunks 0, 1, ... (the last one final) and
//              follows with their sealed index. Each entry is
//              `[claimed length u32, if bit 1] length u16 || mode ||
//              payload`; with bit 1 the index holds the claimed lengths
//              instead of the real ones.
// Properties: a data file that opens gives exactly the plaintext length,
// and that plaintext, written again by `ChunkSealer`, reads back unchanged.
// With assembled records, each chunk is what its record says: the payload
// itself (mode 0) or the payload decompressed (mode 1).
internal import FuzzSupport
internal import LockerCrypto
internal import LockerFormat

/// The largest plaintext the target accepts, to keep runs fast.
let maxPlaintextLength: UInt64 = 4 << 20

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = FuzzInput(data, size)
    guard let selector = input.uint8(), let sizeByte = input.uint8(), let length = input.uint32() else { return 0 }
    let chunkSize = UInt32(1) << (14 + UInt32(sizeByte % 9))
    let plaintextLength = UInt64(length)
    guard plaintextLength <= maxPlaintextLength else { return 0 }
    let file: [UInt8]
    var records: [[UInt8]]?
    if selector & 1 == 0 {
        file = input.rest()
    } else {
        guard let assembled = try? assemble(&input, claimedLengths: selector & 2 != 0) else { return 0 }
        (file, records) = assembled
    }
    guard let plaintext = try? readAll(file, chunkSize: chunkSize, plaintextLength: plaintextLength) else { return 0 }
    fuzzCheck(UInt64(plaintext.count) == plaintextLength, "read \(plaintext.count) bytes of \(plaintextLength)")
    if let records {
        // The index authenticated with the record count as its counter, so
        // there is one record per chunk.
        fuzzCheck(UInt64(records.count) == ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize),
                  "\(records.count) records opened as another number of chunks")
        for (i, record) in records.enumerated() {
            let start = i * Int(chunkSize)
            let chunk = Array(plaintext[start..<min(start + Int(chunkSize), plaintext.count)])
            let mode = record.first ?? 0xFF
            let payload = Array(record.dropFirst())
            let expected: [UInt8]? = switch mode {
            case 0: payload
            case 1: try? LZ4Block.decompress(payload, size: chunk.count)
            default: nil
            }
            fuzzCheck(expected == chunk, "chunk \(i) is not what its record (mode \(mode)) holds")
        }
    }
    let rewritten = Result { try readAll(try writeAll(plaintext, chunkSize: chunkSize), chunkSize: chunkSize,
                                         plaintextLength: plaintextLength) }
    fuzzCheck((try? rewritten.get()) == plaintext, "plaintext does not round-trip through ChunkSealer: \(rewritten)")
    return 0
}

/// Seals the entries in `input` as records and appends the sealed index.
/// Returns the data file and the records before sealing.
func assemble(_ input: inout FuzzInput, claimedLengths: Bool) throws -> (file: [UInt8], records: [[UInt8]]) {
    var entries: [(claimed: UInt32?, plain: [UInt8])] = []
    while entries.count < 1024 {
        var claimed: UInt32?
        if claimedLengths {
            guard let c = input.uint32() else { break }
            claimed = c
        }
        guard let n = input.uint16(), let plain = input.take(Int(n)) else { break }
        entries.append((claimed, plain))
    }
    var file: [UInt8] = []
    var index = ByteWriter()
    for (i, entry) in entries.enumerated() {
        let isFinal = i == entries.count - 1
        let record = try FuzzSeal.chunkRecord(entry.plain, nonce: FuzzSeal.chunkNonce(counter: UInt64(i), flag: isFinal ? 1 : 0))
        file += record
        index.write(entry.claimed ?? UInt32(record.count))
    }
    file += try FuzzSeal.chunkRecord(index.bytes, nonce: FuzzSeal.chunkNonce(counter: UInt64(entries.count), flag: 2))
    return (file, entries.map(\.plain))
}

/// Reads a whole data file as the store does: the header's bounds on the
/// data length, the index, the record lengths, then every chunk in order.
func readAll(_ file: [UInt8], chunkSize: UInt32, plaintextLength: UInt64) throws -> [UInt8] {
    let opener = try ChunkOpener(chunkKey: FuzzKeys.chunkKey)
    let count = ChunkLayout.chunkCount(plaintextLength: plaintextLength, chunkSize: chunkSize)
    let dataLength = UInt64(file.count)
    // `ObjectHeader.validate` holds every header the store reads to these.
    guard try ChunkLayout.dataLengthBounds(plaintextLength: plaintextLength, chunkSize: chunkSize).contains(dataLength)
    else { throw FormatError.invalidField("data length") }
    // From here on, `ObjectReader`.
    let indexLength = ChunkLayout.indexLength(chunkCount: count)
    guard indexLength <= dataLength, indexLength <= 64 << 20 else { throw CryptoError.authenticationFailure }
    let lengths = try opener.openIndex(Array(file[Int(dataLength - indexLength)...]), chunkCount: count)
    var offsets: [Int] = []
    var offset: UInt64 = 0
    let maxRecord = UInt64(ChunkLayout.maxRecordLength(chunkSize: chunkSize))
    for length in lengths {
        guard UInt64(length) >= UInt64(ChunkLayout.recordOverhead), UInt64(length) <= maxRecord else {
            throw CryptoError.authenticationFailure
        }
        offsets.append(Int(offset))
        offset += UInt64(length)
    }
    guard offset == dataLength - indexLength else { throw CryptoError.authenticationFailure }

    var records = file
    var output = [UInt8](repeating: 0, count: Int(min(UInt64(chunkSize), plaintextLength)))
    var plaintext: [UInt8] = []
    plaintext.reserveCapacity(Int(plaintextLength))
    for chunk in 0..<count {
        let i = Int(chunk)
        let plainLength = ChunkLayout.chunkLength(index: chunk, plaintextLength: plaintextLength, chunkSize: chunkSize)
        try records.withUnsafeMutableBytes { r in
            try output.withUnsafeMutableBytes { o in
                try opener.open(UnsafeMutableRawBufferPointer(rebasing: r[offsets[i]..<(offsets[i] + Int(lengths[i]))]),
                                index: chunk, isFinal: chunk == count - 1,
                                into: UnsafeMutableRawBufferPointer(rebasing: o[..<plainLength]))
            }
        }
        plaintext += output[..<plainLength]
    }
    return plaintext
}

/// Writes `plaintext` as the store's `ObjectWriter` does: a record per
/// chunk, then the sealed index.
func writeAll(_ plaintext: [UInt8], chunkSize: UInt32) throws -> [UInt8] {
    let sealer = try ChunkSealer(chunkKey: FuzzKeys.chunkKey)
    let count = ChunkLayout.chunkCount(plaintextLength: UInt64(plaintext.count), chunkSize: chunkSize)
    var record = [UInt8](repeating: 0, count: ChunkLayout.maxRecordLength(chunkSize: chunkSize))
    var file: [UInt8] = []
    var lengths: [UInt32] = []
    for chunk in 0..<count {
        let start = Int(chunk) * Int(chunkSize)
        let end = min(start + Int(chunkSize), plaintext.count)
        let n = try plaintext.withUnsafeBytes { p in
            try record.withUnsafeMutableBytes { r in
                try sealer.seal(UnsafeRawBufferPointer(rebasing: p[start..<end]), index: chunk, isFinal: chunk == count - 1,
                                into: r)
            }
        }
        file += record[..<n]
        lengths.append(UInt32(n))
    }
    return file + (try sealer.sealIndex(lengths))
}
