import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

// Helpers for the store command tests: a runner that keeps standard output
// as bytes (objects are binary), deterministic test data, and a look at the
// store directory from outside (which data file and header belong to which
// object), for the damage tests.

/// The store's chunk size (`ChunkLayout.defaultChunkSize`).
let storeChunk = 256 << 10

/// What one `locker` run produced, with standard output as bytes.
struct RawResult: CustomStringConvertible, Sendable {
    var arguments: [String]
    var status: Int32
    var stdout: Data
    var stderr: String

    var text: String { String(decoding: stdout, as: UTF8.self) }

    var description: String {
        let shown = stdout.count <= 400 ? text : "(\(stdout.count) bytes)"
        return "locker \(arguments.map { $0.count > 80 ? String($0.prefix(40)) + "…(\($0.utf8.count) bytes)" : $0 }.joined(separator: " ")) → exit \(status)\n--- stdout:\n\(shown)\n--- stderr:\n\(stderr)---"
    }
}

/// Runs the `locker` binary with `environment`, standard input from
/// `stdinPath` (else /dev/null), and returns its output as bytes. Safe to
/// call from several threads at once. Kills it and throws after `timeout`.
func runLocker(environment: [String: String], _ arguments: [String], stdinPath: String? = nil,
               timeout: Double = 60) throws -> RawResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CLIFixture.lockerPath)
    process.arguments = arguments
    process.environment = environment
    guard let input = FileHandle(forReadingAtPath: stdinPath ?? "/dev/null") else {
        throw HarnessError("cannot open \(stdinPath ?? "/dev/null")")
    }
    defer { try? input.close() }
    process.standardInput = input

    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let outData = Box(Data())
    let errData = Box(Data())
    let readers = DispatchGroup()
    for (pipe, box) in [(out, outData), (err, errData)] {
        readers.enter()
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread {
            let data = handle.readDataToEndOfFile()
            box.update { $0 = data }
            try? handle.close()
            readers.leave()
        }
    }
    let exited = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in exited.signal() }
    try process.run()
    try? out.fileHandleForWriting.close()
    try? err.fileHandleForWriting.close()

    if exited.wait(timeout: .now() + timeout) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        _ = exited.wait(timeout: .now() + 5)
        _ = readers.wait(timeout: .now() + 5)
        throw HarnessError("locker \(arguments.joined(separator: " ")) timed out after \(timeout) s and was killed; stderr: \(String(decoding: errData.value, as: UTF8.self))")
    }
    // Another thread's child may briefly hold a copy of a pipe's write end.
    guard readers.wait(timeout: .now() + 30) == .success else {
        throw HarnessError("locker \(arguments.joined(separator: " ")) exited but its output pipes stayed open")
    }
    let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus
        : process.terminationStatus
    return RawResult(arguments: arguments, status: status, stdout: outData.value,
                     stderr: String(decoding: errData.value, as: UTF8.self))
}

extension CLIFixture {
    /// Runs `locker arguments` and keeps stdout as bytes.
    @discardableResult
    func raw(_ arguments: [String], stdinPath: String? = nil, timeout: Double = 60) throws -> RawResult {
        try runLocker(environment: environment, arguments, stdinPath: stdinPath, timeout: timeout)
    }

    /// Runs `locker arguments` and throws unless it exits 0.
    @discardableResult
    func ok(_ arguments: [String], stdin: String? = nil, timeout: Double = 60) throws -> CLIResult {
        let result = try run(arguments, stdin: stdin, timeout: timeout)
        guard result.status == 0 else { throw HarnessError("expected exit 0: \(result)") }
        return result
    }

    /// Writes `bytes` to a new local file under the fixture's root and
    /// returns its path.
    func localFile(_ bytes: Data, name: String? = nil) throws -> String {
        let path = root + "/" + (name ?? "in-" + UUID().uuidString)
        guard FileManager.default.createFile(atPath: path, contents: bytes) else {
            throw HarnessError("cannot write \(path)")
        }
        return path
    }

    /// Stores `bytes` at `path` (through a local file) and throws unless
    /// `put` exits 0.
    @discardableResult
    func put(_ path: String, _ bytes: Data, _ extra: [String] = []) throws -> CLIResult {
        let local = try localFile(bytes)
        defer { try? FileManager.default.removeItem(atPath: local) }
        return try ok(["put", local, path] + extra)
    }

    /// `locker stat --json PATH`, decoded; throws unless it exits 0.
    func stat(_ path: String) throws -> StatJSON {
        let result = try ok(["stat", "--json", path])
        return try JSONDecoder().decode(StatJSON.self, from: Data(result.stdout.utf8))
    }

    /// The store's data files (`<store>/data/<hex>`), by name.
    func dataFiles() -> Set<String> {
        Set((try? FileManager.default.contentsOfDirectory(atPath: store + "/data")) ?? [])
    }

    /// Every header file: regular files under `<store>/ns` not named `.dir`.
    func headerFiles() -> Set<String> {
        var found = Set<String>()
        let base = store + "/ns"
        guard let walker = FileManager.default.enumerator(atPath: base) else { return found }
        while let relative = walker.nextObject() as? String {
            let full = base + "/" + relative
            var st = Glibc.stat()
            guard lstat(full, &st) == 0, st.st_mode & S_IFMT == S_IFREG, (relative as NSString).lastPathComponent != ".dir"
            else { continue }
            found.insert(full)
        }
        return found
    }

    /// Whether the header file at `path` holds its object's data inline
    /// (magic `LKOI`, docs/format.md).
    func isInlineHeader(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        return (try? handle.read(upToCount: 4)) == Data("LKOI".utf8)
    }

    /// Where every stored object's data is: its data file (`data/<hex>`),
    /// or its header file's path when the data is inline.
    func storedData() -> Set<String> {
        Set(dataFiles().map { "data/" + $0 }).union(headerFiles().filter(isInlineHeader))
    }

    /// Stores `bytes` (too large to be inline) at `path` and returns the
    /// object's new data file and header file (found by comparing the
    /// store before and after).
    func putTracked(_ path: String, _ bytes: Data, _ extra: [String] = []) throws -> (data: String, header: String) {
        let dataBefore = dataFiles()
        let headersBefore = headerFiles()
        try put(path, bytes, extra)
        let newData = dataFiles().subtracting(dataBefore)
        let newHeaders = headerFiles().subtracting(headersBefore)
        guard newData.count == 1, newHeaders.count == 1, !isInlineHeader(newHeaders.first!) else {
            throw HarnessError("put \(path) made \(newData.count) data files and \(newHeaders.count) headers")
        }
        return (store + "/data/" + newData.first!, newHeaders.first!)
    }

    /// Stores `bytes` (small enough to be inline) at `path` and returns
    /// its header file, which must hold the data: no data file is made.
    func putInline(_ path: String, _ bytes: Data, _ extra: [String] = []) throws -> String {
        let dataBefore = dataFiles()
        let headersBefore = headerFiles()
        try put(path, bytes, extra)
        let newData = dataFiles().subtracting(dataBefore)
        let newHeaders = headerFiles().subtracting(headersBefore)
        guard newData.isEmpty, newHeaders.count == 1, isInlineHeader(newHeaders.first!) else {
            throw HarnessError("put \(path) made \(newData.count) data files and \(newHeaders.count) headers, not one inline header")
        }
        return newHeaders.first!
    }
}

/// What `stat --json` prints for an object or a directory.
struct StatJSON: Decodable {
    var path: String
    var type: String
    var protection: String?
    var protectionSource: String?
    var accessible: Bool?
    var reason: String?
    var size: UInt64?
    var storedSize: UInt64?
    var chunks: UInt64?
    var chunkSize: UInt64?
    var compression: String?
    var keyGeneration: Int?
    var id: String?
    var defaultClass: String?
    var effectiveDefault: String?
    var defaultSource: String?
    var created: String?
    var damaged: String?
}

/// What `status --json` prints about open objects.
struct OpenObjectsJSON: Decodable {
    struct OpenObject: Decodable {
        var id: String
        var protection: String
    }
    var state: String
    var openObjects: [OpenObject]
}

/// Runs `body` with a fresh fixture and always tears it down (agent
/// stopped, directory removed).
func withStoreFixture(_ body: (CLIFixture) throws -> Void) throws {
    let fixture = try CLIFixture()
    defer { fixture.tearDown() }
    try body(fixture)
    #expect(fixture.agentProcesses().count <= 1, "more than one agent serves \(fixture.device)")
}

/// `count` deterministic bytes that do not compress (splitmix64 of `seed`).
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> Data {
    var data = Data(count: count)
    data.withUnsafeMutableBytes { (raw: UnsafeMutableRawBufferPointer) in
        guard let base = raw.baseAddress else { return }
        var state = seed
        var offset = 0
        while offset < count {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            let n = min(8, count - offset)
            withUnsafeBytes(of: z.littleEndian) { word in
                (base + offset).copyMemory(from: word.baseAddress!, byteCount: n)
            }
            offset += n
        }
    }
    return data
}

/// Flips one bit of the file at `path`, at byte `offset`.
func flipBit(_ path: String, at offset: Int, bit: UInt8 = 0x10) throws {
    guard let handle = FileHandle(forUpdatingAtPath: path) else { throw HarnessError("cannot open \(path)") }
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(offset))
    guard let byte = try handle.read(upToCount: 1), byte.count == 1 else { throw HarnessError("\(path) has no byte \(offset)") }
    try handle.seek(toOffset: UInt64(offset))
    try handle.write(contentsOf: Data([byte[byte.startIndex] ^ bit]))
}

func fileBytes(_ path: String) throws -> Data {
    try Data(contentsOf: URL(fileURLWithPath: path))
}

func writeBytes(_ bytes: Data, to path: String) throws {
    try bytes.write(to: URL(fileURLWithPath: path))
}

func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.intValue ?? -1
}

/// Whether `part` is a prefix of `whole`.
func isPrefix(_ part: Data, of whole: Data) -> Bool {
    part.count <= whole.count && whole.prefix(part.count) == part
}

/// `data` as a short description for failure messages.
func brief(_ data: Data) -> String {
    "\(data.count) bytes" + (data.count <= 64 ? ": " + String(decoding: data, as: UTF8.self) : "")
}
