// Writes the fuzz targets' seed corpus: valid inputs made by Locker's own
// writers under the fixed keys of FuzzSupport, plus the LZ4 test vectors.
// Every seed is checked against the decoder it is for before it is written.
//
//     swift run --scratch-path .build-fuzz-normal fuzz-seeds [CORPUS_DIR]
//
// CORPUS_DIR defaults to Tools/fuzz/corpus (run from the package root).
// Only `seed-*` files are written; `regress-*` files (crashes kept as
// regression seeds) are left alone. The output is the same on every run.
internal import Foundation
internal import FuzzSupport
internal import LockerAgent
internal import LockerCrypto
internal import LockerFormat

let corpus = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "Tools/fuzz/corpus"
let vectors = "Tests/LockerFormatTests/Vectors/lz4"
var written = 0

@MainActor func write(_ target: String, _ name: String, _ bytes: [UInt8]) {
    let directory = "\(corpus)/\(target)"
    try! FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    guard FileManager.default.createFile(atPath: "\(directory)/seed-\(name)", contents: Data(bytes)) else {
        fatalError("cannot write \(directory)/seed-\(name)")
    }
    written += 1
}

func vector(_ path: String) -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: "\(vectors)/\(path)") else {
        fatalError("cannot read \(vectors)/\(path) (run from the package root)")
    }
    return Array(data)
}

func u16(_ v: Int) -> [UInt8] { [UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
func u24(_ v: Int) -> [UInt8] { [UInt8(v >> 16 & 0xFF)] + u16(v) }
func u32(_ v: Int) -> [UInt8] { [UInt8(v >> 24 & 0xFF)] + u24(v) }
func u64(_ v: UInt64) -> [UInt8] { u32(Int(v >> 32)) + u32(Int(v & 0xFFFF_FFFF)) }
func bytes(_ count: Int, _ value: UInt8) -> [UInt8] { [UInt8](repeating: value, count: count) }
func string(_ s: String) -> [UInt8] { u16(s.utf8.count) + Array(s.utf8) }
/// `count` bytes that LZ4 cannot shrink.
func noise(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    return (0..<count).map { _ in
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        return UInt8(truncatingIfNeeded: state)
    }
}
/// `count` bytes of repeated text.
func text(_ count: Int) -> [UInt8] {
    let line = Array("0123456789 the quick brown fox jumps over the lazy dog\n".utf8)
    return (0..<count).map { line[$0 % line.count] }
}

/// The body inside an envelope (magic, version, reserved, nonce, sealed).
func envelopeBody(_ file: [UInt8], key: SecretBytes) -> [UInt8] {
    try! AESGCM.open(Array(file[20...]), key: key, nonce: AESGCM.Nonce(Array(file[8..<20])),
                     authenticating: Array(file[..<8]))
}

// MARK: fuzz-object-header

let keys = FuzzKeys.metadata
let keyID = Array((0..<16).map { UInt8(0xA0 + $0) })
func wrapped(_ cls: ProtectionClass) -> WrappedFileKey {
    WrappedFileKey(protectionClass: cls, keyID: keyID, keyGeneration: 3,
                   blob: bytes(WrappedFileKey.blobByteCount(for: cls), 0x77))
}
let headers: [(String, ObjectHeader)] = [
    ("empty-explicit-A", ObjectHeader(
        parentID: FuzzKeys.parentID, name: "empty", protectionSource: .explicit, wrappedKey: wrapped(.complete),
        objectID: bytes(16, 0x01), chunkSize: 16 << 10, plaintextLength: 0, dataLength: 37,
        created: 1_700_000_000_000_000_000, modified: 1_700_000_000_000_000_001, headerMAC: bytes(32, 0x02))),
    ("text-inherited-B", ObjectHeader(
        parentID: bytes(16, 0x22), name: "notes.txt", protectionSource: .inherited("/docs/private"),
        wrappedKey: wrapped(.completeUnlessOpen), objectID: bytes(16, 0x03), chunkSize: ChunkLayout.defaultChunkSize,
        plaintextLength: 100_000, dataLength: 5_000, created: 0, modified: -1, headerMAC: bytes(32, 0x04))),
    ("unicode-default-D", ObjectHeader(
        parentID: DirectoryRecord.rootParentID, name: "résumé 📄.pdf", protectionSource: .storeDefault,
        wrappedKey: wrapped(.none), objectID: bytes(16, 0x05), chunkSize: 4 << 20,
        plaintextLength: 9 << 20, dataLength: (9 << 20) + 3 * 17 + 28, created: 42, modified: 43,
        headerMAC: bytes(32, 0x06))),
    ("long-name-C", ObjectHeader(
        parentID: bytes(16, 0x33), name: String(repeating: "n", count: NameCodec.maxNameLength),
        protectionSource: .explicit, wrappedKey: wrapped(.completeUntilFirstUserAuthentication),
        objectID: bytes(16, 0x07), chunkSize: 1 << 20, plaintextLength: 1, dataLength: 38, created: 1, modified: 2,
        headerMAC: bytes(32, 0x08))),
]
for (name, header) in headers {
    let body = envelopeBody(try! header.sealed(with: keys), key: keys.recordKey)
    let file = try! FuzzSeal.envelope(magic: ObjectHeader.magic, body: body, key: keys.recordKey)
    precondition(try! ObjectHeader.open(file, with: keys) == header)
    write("fuzz-object-header", "header-\(name)", [0x00] + file)
    write("fuzz-object-header", "header-body-\(name)", [0x02] + body)
}
// Small objects: the same body sealed as LKOI, its length in the prefix,
// then the inline data (37 bytes: one empty chunk's record and the index).
do {
    var header = headers[0].1
    header.inlineData = bytes(Int(header.dataLength), 0x09)
    let sealed = try! header.sealed(with: keys)
    let length = Int(sealed[6]) << 8 | Int(sealed[7])
    let body = envelopeBody(Array(sealed[..<length]), key: keys.recordKey)
    let file = try! FuzzSeal.envelope(magic: ObjectHeader.inlineMagic, body: body, key: keys.recordKey, field: UInt16(length))
        + header.inlineData!
    precondition(try! ObjectHeader.open(file, with: keys) == header)
    write("fuzz-object-header", "header-inline-empty-explicit-A", [0x00] + file)
    write("fuzz-object-header", "header-body-inline-empty-explicit-A",
          [0x06, UInt8(body.count >> 8), UInt8(body.count & 0xff)] + body + header.inlineData!)
}
let directories: [(String, DirectoryRecord)] = [
    ("root", DirectoryRecord(directoryID: bytes(16, 0x10), parentID: DirectoryRecord.rootParentID, name: "",
                             defaultClass: nil, created: 7)),
    ("docs-A", DirectoryRecord(directoryID: bytes(16, 0x12), parentID: bytes(16, 0x10), name: "docs",
                               defaultClass: .complete, created: -7)),
    ("photos-D", DirectoryRecord(directoryID: bytes(16, 0x13), parentID: bytes(16, 0x12), name: "Фото",
                                 defaultClass: ProtectionClass.none, created: 1 << 62)),
    ("moving", DirectoryRecord(directoryID: bytes(16, 0x14), parentID: bytes(16, 0x12), name: "new",
                               defaultClass: nil, created: 1,
                               previous: .init(parentID: bytes(16, 0x10), name: "old"))),
]
for (name, record) in directories {
    let body = envelopeBody(try! record.sealed(with: keys), key: keys.recordKey)
    let file = try! FuzzSeal.envelope(magic: DirectoryRecord.magic, body: body, key: keys.recordKey)
    precondition(try! DirectoryRecord.open(file, with: keys) == record)
    write("fuzz-object-header", "directory-\(name)", [0x01] + file)
    write("fuzz-object-header", "directory-body-\(name)", [0x03] + body)
}

// MARK: fuzz-chunk-stream

/// A data file as the store writes it, and its records before sealing.
func dataFile(_ plaintext: [UInt8], chunkSize: UInt32) -> (file: [UInt8], plainRecords: [[UInt8]], lengths: [Int]) {
    let sealer = try! ChunkSealer(chunkKey: FuzzKeys.chunkKey)
    let count = ChunkLayout.chunkCount(plaintextLength: UInt64(plaintext.count), chunkSize: chunkSize)
    var buffer = [UInt8](repeating: 0, count: ChunkLayout.maxRecordLength(chunkSize: chunkSize))
    var file: [UInt8] = []
    var plainRecords: [[UInt8]] = []
    var lengths: [Int] = []
    for chunk in 0..<count {
        let start = Int(chunk) * Int(chunkSize)
        let end = min(start + Int(chunkSize), plaintext.count)
        let isFinal = chunk == count - 1
        let n = plaintext.withUnsafeBytes { p in
            buffer.withUnsafeMutableBytes { r in
                try! sealer.seal(UnsafeRawBufferPointer(rebasing: p[start..<end]), index: chunk, isFinal: isFinal, into: r)
            }
        }
        let record = Array(buffer[..<n])
        file += record
        lengths.append(n)
        plainRecords.append(try! AESGCM.open(record, key: FuzzKeys.chunkKey,
                                             nonce: FuzzSeal.chunkNonce(counter: chunk, flag: isFinal ? 1 : 0)))
    }
    return (file + (try! sealer.sealIndex(lengths.map { UInt32($0) })), plainRecords, lengths)
}
let streams: [(String, [UInt8], UInt32)] = [
    ("empty", [], 16 << 10),
    ("short-text", text(100), 16 << 10),
    ("one-byte", [0x61], 64 << 10),
    ("text-3-chunks", text(40_000), 16 << 10),
    ("exact-2-chunks", text(32 << 10), 16 << 10),
    ("noise-2-chunks", noise(20_000, seed: 1), 16 << 10),
    ("mixed-256K", text(3000) + noise(2000, seed: 2), 256 << 10),
]
for (name, plaintext, chunkSize) in streams {
    let (file, plainRecords, lengths) = dataFile(plaintext, chunkSize: chunkSize)
    let parameters = [UInt8(chunkSize.trailingZeroBitCount - 14)] + u32(plaintext.count)
    write("fuzz-chunk-stream", "file-\(name)", [0x00] + parameters + file)
    write("fuzz-chunk-stream", "records-\(name)", [0x01] + parameters + plainRecords.flatMap { u16($0.count) + $0 })
    write("fuzz-chunk-stream", "records-claimed-\(name)",
          [0x03] + parameters + zip(plainRecords, lengths).flatMap { u32($1) + u16($0.count) + $0 })
}

// MARK: fuzz-lz4

for (file, size) in [("repetitive_first_64KiB.block", 65_536), ("text_apache_license_2.0.txt.block", 11_357)] {
    let block = vector("blocks/\(file)")
    precondition((try? LZ4Block.decompress(block, size: size))?.count == size)
    write("fuzz-lz4", "block-\(file)", [0x00] + u24(size) + block)
}
for (name, input) in [("text-300", text(300)), ("zeros-16K", bytes(16 << 10, 0)), ("mixed-5000", text(3000) + noise(2000, seed: 3))] {
    let block = LZ4Block.compress(input)!
    write("fuzz-lz4", "block-\(name)", [0x00] + u24(input.count) + block)
    write("fuzz-lz4", "frame-\(name)", [0x01] + (try! LZ4Frame.compress(input)))
}
write("fuzz-lz4", "frame-empty", [0x01] + (try! LZ4Frame.compress([])))
let frames = ["concat_text_then_one_byte.lz4", "empty.bin.lz4", "one_byte.bin.lz4", "repetitive_1MiB.bin.B4-BD.lz4",
              "repetitive_1MiB.bin.B4-BI-BX.lz4", "repetitive_1MiB.bin.content-size.lz4", "skippable_then_text.lz4",
              "text_apache_license_2.0.txt.B4-BX-content-size.lz4", "text_apache_license_2.0.txt.hc.lz4"]
for file in frames {
    let frame = vector("frames/\(file)")
    precondition((try? LZ4Frame.decompress(frame)) != nil)
    write("fuzz-lz4", "frame-\(file)", [0x01] + frame)
}
for file in ["repetitive.bad-block-checksum.lz4", "text.bad-content-checksum.lz4", "text.truncated-mid-block.lz4"] {
    write("fuzz-lz4", "frame-invalid-\(file)", [0x01] + vector("invalid/\(file)"))
}

// MARK: fuzz-keybag

func keybag(hasPasscode: Bool, generation: UInt64) -> Keybag {
    let entries = ProtectionClass.allCases.map { cls in
        Keybag.Entry(protectionClass: cls, wrapType: cls == .none ? .device : .passcode,
                     keyID: bytes(16, 0xB0 + cls.rawValue), keyGeneration: cls == .none ? 0 : 5,
                     wrappedKey: bytes(40, 0xC0 + cls.rawValue),
                     publicKey: cls == .completeUnlessOpen ? bytes(32, 0xD2) : [])
    }
    return Keybag(uuid: bytes(16, 0xE0), generation: generation, classKeyGeneration: 5, hasPasscode: hasPasscode,
                  kdf: .init(logN: 15, r: 8, p: 1, salt: bytes(32, 0xF0)), graceSeconds: 10,
                  eraseAfter: hasPasscode ? 10 : 0, defaultClass: .completeUntilFirstUserAuthentication, entries: entries)
}
for (name, bag) in [("passcode", keybag(hasPasscode: true, generation: 9)), ("no-passcode", keybag(hasPasscode: false, generation: 1))] {
    let key = FuzzKeys.keybagSealKey
    let body = envelopeBody(try! bag.sealed(with: key), key: key)
    let file = try! FuzzSeal.envelope(magic: Keybag.magic, body: body, key: key)
    precondition(try! Keybag.open(file, with: key) == bag)
    write("fuzz-keybag", "keybag-\(name)", [0x00] + file)
    write("fuzz-keybag", "keybag-body-\(name)", [0x02] + body)
}
let deviceRecords: [(String, DeviceRecord)] = [
    ("fresh", DeviceRecord(keybagGeneration: 1)),
    ("failures", DeviceRecord(failedAttempts: 4, lastFailureTime: 1_700_000_000, lastWrongPasscodeTag: bytes(32, 0x99),
                              keybagGeneration: 12)),
    ("wiped", DeviceRecord(keybagGeneration: 3, wiped: true)),
]
for (name, record) in deviceRecords {
    let file = try! record.encoded(macKey: FuzzKeys.deviceMACKey)
    precondition(try! DeviceRecord.decode(file, macKey: FuzzKeys.deviceMACKey) == record)
    write("fuzz-keybag", "device-\(name)", [0x01] + file)
    write("fuzz-keybag", "device-body-\(name)", [0x03] + Array(file.dropLast(32)))
}

// MARK: fuzz-name

for (i, name) in ["hello.txt", "", "résumé 📄.pdf", String(repeating: "long-", count: 60), "a/b\u{0}c"].enumerated() {
    let encoded = try! NameCodec.encode(name, parentID: FuzzKeys.parentID, keys: keys)
    precondition(try! NameCodec.decode(encoded, parentID: FuzzKeys.parentID, keys: keys) == name)
    write("fuzz-name", "encoded-\(i)", [0x00] + Array(encoded.utf8))
}
write("fuzz-name", "plain-hello", [0x01, 16] + FuzzKeys.parentID + Array("hello.txt".utf8))
write("fuzz-name", "plain-no-parent", [0x01, 0] + Array("x".utf8))
write("fuzz-name", "plain-not-utf8", [0x01, 3, 1, 2, 3, 0x61, 0xFF, 0xFE, 0xC3])
for length in 0...5 {
    write("fuzz-name", "base64url-\(length)", [0x02] + Array(Base64URL.encode(noise(length, seed: UInt64(length + 9))).utf8))
}

// MARK: fuzz-agent-wire

let wrappedA = [UInt8(1)] + keyID + u32(3) + bytes(40, 0x77)
let wrappedB = [UInt8(2)] + keyID + u32(3) + bytes(72, 0x78)
let requests: [(String, [UInt8])] = [
    ("ping", [0x01]), ("status", [0x02]),
    ("initialize-passcode", [0x03, 1] + string("1234") + u32(10) + [0, 3, 1] + u32(100)),
    ("initialize-no-passcode", [0x03, 0] + u32(0) + [5, 4, 2] + u32(14)),
    ("unlock", [0x04] + string("correct horse")), ("lock", [0x05, 1]),
    ("change-passcode", [0x06] + string("old") + string("new")),
    ("reset", [0x07, 1] + string("pass")), ("reset-no-passcode", [0x07, 0]),
    ("wipe", [0x08]), ("metadata-key", [0x09]), ("class-b-public-key", [0x0A]),
    ("wrap", [0x0B, 3] + bytes(32, 0x55)),
    ("unwrap", [0x0C] + wrappedA), ("rewrap", [0x0D] + wrappedB + [1]),
    ("open", [0x0E] + string("object-1") + wrappedB),
    ("register-open", [0x0F] + string("object-2") + [2] + bytes(32, 0x66)),
    ("open-file-key", [0x10] + string("object-3")), ("close", [0x11] + string("object-4")),
    ("watch", [0x12]), ("reboot", [0x13]),
]
for (name, payload) in requests {
    precondition(try! AgentWire.decodeRequest(payload) == payload, name)
    write("fuzz-agent-wire", "request-\(name)", [0x00] + payload)
}
let replies: [(String, [UInt8])] = [
    ("ok-empty", [0x00]), ("ok-ping", [0x00] + u16(1) + u32(4242)), ("ok-key", [0x00] + bytes(32, 0x44)),
    ("continuation", [0x02] + Array("{\"state\":".utf8)),
    ("event-unavailable", [0x03, 1]), ("event-available", [0x03, 2]),
    ("error-not-initialized", [0x01, 0x01]), ("error-unavailable", [0x01, 0x04, 1]),
    ("error-key-reset", [0x01, 0x05, 3]),
    ("error-wrong-passcode", [0x01, 0x06] + u32(2) + [1] + u64((1_700_000_000.5).bitPattern)),
    ("error-wrong-passcode-no-wait", [0x01, 0x06] + u32(1) + [0]),
    ("error-locked-out", [0x01, 0x07] + u32(10) + u64((1_800_000_000.0).bitPattern)),
    ("error-integrity", [0x01, 0x09] + string("keybag")),
    ("error-too-many-open-objects", [0x01, 0x0E] + u32(4096)),
    ("error-io", [0x01, 0x0C] + string("open") + string("/tmp/x") + u32(2)),
    ("error-crypto", [0x01, 0x20]), ("error-bad-magic", [0x01, 0x33]),
    ("error-version", [0x01, 0x34] + u16(2)), ("error-field", [0x01, 0x35] + string("name")),
    ("error-too-many-watchers", [0x01, 0x41] + u32(16)),
    ("error-remote", [0x01, 0xFF] + string("DecodingError")),
]
for (name, payload) in replies {
    let again = try! AgentWire.decodeReply(payload)
    precondition(again == payload || payload[1] == 0xFF, name)
    write("fuzz-agent-wire", "reply-\(name)", [0x01] + payload)
}

print("wrote \(written) seeds under \(corpus)")
