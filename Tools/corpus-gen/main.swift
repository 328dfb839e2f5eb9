// Writes the example device and store of the damage corpus
// (Tests/LockerCLITests/DamageCorpus/README.md): the fixed input that every
// damage scenario mutates.
//
//     swift run --scratch-path .build-corpus corpus-gen [OUTPUT-DIRECTORY]
//
// OUTPUT-DIRECTORY defaults to Tests/LockerCLITests/DamageCorpus/example in
// this repository. It is removed and written again: device/ (uid,
// effaceable, keybag, record), store/ (ns/, data/, lock), keybag.old (the
// keybag from before the last passcode change) and objects.json (for each
// object its plaintext SHA-256, data file, header file and record lengths;
// for each directory its record file). The keys are random, so every run
// gives new bytes: commit the whole directory, and run the damage corpus
// tests (`swift test --filter DamageCorpusTests`) after regenerating.
//
// The device uses the passcode "corpus", scrypt logN 10 and 16 KiB chunks,
// so the files stay small and the tests fast. Its history:
//
// 1. init (class key generation 1, keybag generation 1); put /old.txt
//    (class C) under it;
// 2. reset to the passcode "corpus-0" (class key generation 2, keybag
//    generation 2), which makes /old.txt an object of an older key
//    generation (`keyReset`, exit 69); the keybag is saved as keybag.old;
// 3. passcode change "corpus-0" -> "corpus" (keybag generation 3), so
//    keybag.old is one rewrite behind the device record (`rollback`);
// 4. every other object.
import Foundation
import LockerStore
import LockerCrypto
import LockerDevice
import LockerFormat

/// What objects.json holds; DamageCorpusTests.swift decodes the same shape.
struct Manifest: Codable {
    struct Object: Codable {
        var path: String
        var protectionClass: String
        var size: Int
        var sha256: String
        /// Relative to the example directory.
        var data: String
        var header: String
        var chunkSize: Int
        var chunks: Int
        /// The length of each chunk record, in order; the sealed index
        /// follows them.
        var records: [Int]
        var dataLength: Int
        var keyGeneration: Int
        /// "ok", or "keyReset" for an object of an older class key
        /// generation.
        var expected: String
    }

    struct Directory: Codable {
        var path: String
        /// The directory's `.dir` record, relative to the example
        /// directory.
        var record: String
    }

    var passcode: String
    var oldKeybagPasscode: String
    var keybagGeneration: Int
    var oldKeybagGeneration: Int
    var classKeyGeneration: Int
    var chunkSize: Int
    var objects: [Object]
    var directories: [Directory]
}

let passcode = "corpus"
let oldPasscode = "corpus-0"
let chunkSize = 16 << 10

let repositoryRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let output = CommandLine.arguments.count > 1
    ? CommandLine.arguments[1] : repositoryRoot + "/Tests/LockerCLITests/DamageCorpus/example"

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("corpus-gen: \(message)\n".utf8))
    exit(1)
}

func secret(_ text: String) -> SecretBytes { SecretBytes(copying: Array(text.utf8)) }

/// Text from a fixed vocabulary (compressible, as text is), reproducible.
func textData(_ count: Int, seed: UInt64) -> [UInt8] {
    let words = ["protection", "class", "keybag", "device", "the", "a", "of", "unlock", "chunk", "object",
                 "store", "passcode", "grace", "period", "and", "to", "data", "file", "key", "wrap"]
    var state = seed
    var out: [UInt8] = []
    out.reserveCapacity(count + 16)
    while out.count < count {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        out.append(contentsOf: words[Int(state >> 59) % words.count].utf8)
        out.append(state & 0x700 == 0 ? 10 : 32)
    }
    return Array(out.prefix(count))
}

/// Bytes that do not compress (splitmix64), reproducible.
func noiseData(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed
    var out: [UInt8] = []
    out.reserveCapacity(count + 8)
    while out.count < count {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        withUnsafeBytes(of: z.littleEndian) { out.append(contentsOf: $0) }
    }
    return Array(out.prefix(count))
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// Regular files below `directory`, relative to `base`.
func files(under directory: String, relativeTo base: String) -> Set<String> {
    var found = Set<String>()
    guard let walker = FileManager.default.enumerator(atPath: directory) else { return found }
    while let relative = walker.nextObject() as? String {
        var isDirectory: ObjCBool = false
        let full = directory + "/" + relative
        guard FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
        found.insert(String(full.dropFirst(base.count + 1)))
    }
    return found
}

func readFile(_ relative: String) -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: output + "/" + relative) else { fail("cannot read \(relative)") }
    return [UInt8](data)
}

// MARK: Build

try? FileManager.default.removeItem(atPath: output)
do {
    try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
} catch {
    fail("cannot create \(output): \(error)")
}

do {
    let store = try Store.embedded(
        storeDirectory: output + "/store", deviceDirectory: output + "/device", passcode: secret(passcode),
        options: Device.Options(passcodeCost: .fixed(logN: 10)), storeOptions: Store.Options(chunkSize: UInt32(chunkSize)))
    guard let device = store.device else { fail("the embedded store has no device") }
    let metadata = try MetadataKeys(metadataKey: device.metadataKey())
    var objects: [Manifest.Object] = []
    var directories = [Manifest.Directory(path: "/", record: "store/ns/.dir")]

    /// Stores `bytes` at `path` and records what it wrote.
    func put(_ path: String, _ bytes: [UInt8], _ cls: ProtectionClass?, expected: String = "ok") throws {
        let before = files(under: output + "/store", relativeTo: output)
        var offset = 0
        try store.put(StorePath(path), protection: cls) { buffer in
            let n = min(buffer.count, bytes.count - offset)
            if n > 0 {
                bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + n)])) }
                offset += n
            }
            return n
        }
        let new = files(under: output + "/store", relativeTo: output).subtracting(before)
        let data = new.filter { $0.hasPrefix("store/data/") }
        let headers = new.filter { $0.hasPrefix("store/ns/") && !$0.hasSuffix("/.dir") }
        guard data.count == 1, headers.count == 1 else { fail("put \(path) wrote \(new.sorted())") }
        for record in new where record.hasSuffix("/.dir") {
            directories.append(.init(path: String(path[..<path.lastIndex(of: "/")!]), record: record))
        }
        let header = try ObjectHeader.open(readFile(headers.first!), with: metadata)
        // The record lengths, from the sealed index (the generator holds
        // the file key; the tests take them from here).
        let fileKey = try device.unwrap(header.wrappedKey)
        let dataBytes = readFile(data.first!)
        let indexLength = Int(ChunkLayout.indexLength(chunkCount: header.chunkCount))
        let lengths = try ChunkOpener(chunkKey: ChunkLayout.chunkKey(fileKey: fileKey))
            .openIndex(Array(dataBytes.suffix(indexLength)), chunkCount: header.chunkCount)
        objects.append(Manifest.Object(
            path: path, protectionClass: header.protectionClass.canonicalName, size: bytes.count,
            sha256: hex(try Digest.hash(.sha256, bytes)), data: data.first!, header: headers.first!,
            chunkSize: Int(header.chunkSize), chunks: Int(header.chunkCount), records: lengths.map { Int($0) },
            dataLength: dataBytes.count, keyGeneration: Int(header.wrappedKey.keyGeneration), expected: expected))
    }

    // 1. Under class key generation 1.
    try put("/old.txt", textData(3000, seed: 7), .completeUntilFirstUserAuthentication, expected: "keyReset")
    // 2. Reset, keeping that keybag.
    try device.reset(newPasscode: secret(oldPasscode))
    try FileManager.default.copyItem(atPath: output + "/device/keybag", toPath: output + "/keybag.old")
    // 3. Passcode change: the current keybag is one generation ahead.
    try device.changePasscode(old: secret(oldPasscode), new: secret(passcode))
    // 4. The rest. /a.txt is compressible text of 3 chunks and a tail,
    // /e.bin incompressible (its full records have equal lengths, so they
    // can be reordered without changing the index), /docs inherits A.
    try put("/a.txt", textData(3 * chunkSize + 1000, seed: 1), .completeUntilFirstUserAuthentication)
    try put("/b.bin", noiseData(2 * chunkSize, seed: 2), ProtectionClass.none)
    let before = files(under: output + "/store", relativeTo: output)
    try store.makeDirectory(StorePath("/docs"), defaultClass: .complete)
    let docs = files(under: output + "/store", relativeTo: output).subtracting(before)
    guard docs.count == 1, let docsRecord = docs.first else { fail("mkdir /docs wrote \(docs.sorted())") }
    directories.append(.init(path: "/docs", record: docsRecord))
    try put("/docs/c.txt", textData(5000, seed: 3), nil)
    try put("/d", textData(20000, seed: 4), .completeUnlessOpen)
    try put("/empty", [], nil)
    try put("/e.bin", noiseData(4 * chunkSize + 100, seed: 5), .completeUntilFirstUserAuthentication)

    // Read everything back as the tests will.
    for object in objects {
        var back: [UInt8] = []
        do {
            try store.read(StorePath(object.path)) { back.append(contentsOf: $0) }
            guard object.expected == "ok", hex(try Digest.hash(.sha256, back)) == object.sha256 else {
                fail("\(object.path) did not read back")
            }
        } catch DeviceError.keyReset {
            guard object.expected == "keyReset" else { fail("\(object.path): unexpected keyReset") }
        }
    }
    let status = try device.status()
    // Keybag generations: 1 at init, +1 at the reset (keybag.old), +1 at
    // the passcode change.
    let manifest = Manifest(
        passcode: passcode, oldKeybagPasscode: oldPasscode, keybagGeneration: 3, oldKeybagGeneration: 2,
        classKeyGeneration: status.keyGeneration, chunkSize: chunkSize, objects: objects,
        directories: directories.sorted { $0.path < $1.path })
    device.shutdown()

    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    try (encoder.encode(manifest) + Data("\n".utf8)).write(to: URL(fileURLWithPath: output + "/objects.json"))
    print("wrote \(output): \(objects.count) objects, \(directories.count) directories")
} catch {
    fail("\(error)")
}
