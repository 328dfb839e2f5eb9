import Foundation
import LockerStore
import LockerCrypto
import LockerDevice
import LockerFormat
import Testing
#if canImport(Glibc)
import Glibc
#endif

// The damage corpus (DamageCorpus/README.md): a fixed example device and
// store, and one scenario file per kind of damage. Every case of every
// scenario runs through the library; one case of each also runs through
// the `locker` binary.

/// The damage corpus's scenarios, through the library and the CLI, and the
/// unmodified example through both.
@Suite("Damage corpus")
struct DamageCorpusTests {
    /// How many scenario files there must be. A file added or removed
    /// changes this on purpose; a file that silently fails to list does
    /// not.
    static let expectedScenarioCount = 37

    static let corpusDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path + "/DamageCorpus"
    static let exampleDirectory = corpusDirectory + "/example"

    /// The scenario files, by name, in order.
    static let scenarioFiles: [String] = {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: corpusDirectory + "/scenarios")) ?? []
        return names.filter { $0.hasSuffix(".txt") }.sorted()
    }()

    @Test func everyScenarioFileParses() throws {
        let corpus = try Corpus.shared.get()
        #expect(Self.scenarioFiles.count == Self.expectedScenarioCount,
                "found \(Self.scenarioFiles.count) scenario files: \(Self.scenarioFiles)")
        #expect(corpus.scenarios.count == Self.expectedScenarioCount)
        // Numbered 001, 002, … with no gap and no repeat.
        #expect(corpus.scenarios.map(\.number) == Array(1...max(1, corpus.scenarios.count)))
        for scenario in corpus.scenarios {
            let sweep = try Sweep(scenario, corpus: corpus)
            #expect(sweep.count > 0, "\(scenario.file) has no case")
            #expect((scenario.cliCase ?? 0) < sweep.count, "\(scenario.file): cli-case \(scenario.cliCase ?? 0) of \(sweep.count)")
        }
    }

    /// The manifest agrees with the files: every file it names exists with
    /// the recorded size and record layout, and nothing else is in the
    /// store.
    @Test func manifestMatchesTheExample() throws {
        let corpus = try Corpus.shared.get()
        let example = Self.exampleDirectory
        for object in corpus.manifest.objects {
            let data = try Data(contentsOf: URL(fileURLWithPath: example + "/" + object.data))
            #expect(data.count == object.dataLength, "\(object.path)")
            #expect(object.records.count == object.chunks, "\(object.path)")
            #expect(object.records.reduce(0, +) + 4 * object.chunks + 16 == object.dataLength, "\(object.path)")
            #expect(FileManager.default.fileExists(atPath: example + "/" + object.header), "\(object.path)")
        }
        let dataFiles = try FileManager.default.contentsOfDirectory(atPath: example + "/store/data")
        #expect(Set(dataFiles.map { "store/data/" + $0 }) == Set(corpus.manifest.objects.map(\.data)))
        var headers = Set<String>()
        var records = Set<String>()
        let walker = FileManager.default.enumerator(atPath: example + "/store/ns")
        while let relative = walker?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: example + "/store/ns/" + relative, isDirectory: &isDirectory)
            if isDirectory.boolValue { continue }
            if relative.hasSuffix(".dir") { records.insert("store/ns/" + relative) } else { headers.insert("store/ns/" + relative) }
        }
        #expect(headers == Set(corpus.manifest.objects.map(\.header)))
        #expect(records == Set(corpus.manifest.directories.map(\.record)))
        for name in DeviceDirectory.fileNames {
            #expect(FileManager.default.fileExists(atPath: example + "/device/" + name), "device/\(name)")
        }
        #expect(FileManager.default.fileExists(atPath: example + "/keybag.old"))
    }

    /// Every object of the unmodified example reads back exactly through
    /// the library (`/old.txt` fails with `keyReset`): a change of the
    /// format that breaks the committed files fails here.
    @Test func unmodifiedExampleThroughTheLibrary() throws {
        let corpus = try Corpus.shared.get()
        let site = try Site.temporary()
        defer { site.remove() }
        let device = try Device.boot(at: DeviceDirectory(path: site.device), passcodeCost: .fixed(logN: 10))
        defer { device.shutdown() }
        #expect(device.state == .beforeFirstUnlock)
        let status = try device.status()
        #expect(status.keyGeneration == corpus.manifest.classKeyGeneration)
        try device.unlock(passcode: SecretBytes(copying: Array(corpus.manifest.passcode.utf8)))
        let store = try Store(path: site.store, keys: device, options: Store.Options(chunkSize: 16 << 10))
        var listed: [String] = []
        try store.walk(.root) { path, isDirectory in if !isDirectory { listed.append(path.description) } }
        #expect(listed.sorted() == corpus.manifest.objects.map(\.path).sorted())
        for object in corpus.manifest.objects {
            var out = Data()
            do {
                try store.read(StorePath(object.path)) { out.append(contentsOf: $0) }
                #expect(object.expected == "ok", "\(object.path) read, expected \(object.expected)")
                #expect(sha256(out) == object.sha256, "\(object.path): \(out.count) bytes, not the recorded plaintext")
            } catch DeviceError.keyReset {
                #expect(object.expected == "keyReset", "\(object.path): keyReset")
            }
        }
    }

    /// The same through the `locker` binary.
    @Test func unmodifiedExampleThroughTheCLI() throws {
        let corpus = try Corpus.shared.get()
        let fixture = try CLIFixture()
        defer { fixture.tearDown() }
        _ = try Site.copy(into: fixture)
        let unlock = try fixture.run(["unlock", "--passcode-stdin"], stdin: corpus.manifest.passcode + "\n", timeout: 30)
        #expect(unlock.status == 0, "\(unlock)")
        for object in corpus.manifest.objects {
            let r = try fixture.raw(["get", object.path], timeout: 30)
            if object.expected == "ok" {
                #expect(r.status == 0, "\(r)")
                #expect(sha256(r.stdout) == object.sha256, "\(object.path): \(r.stdout.count) bytes")
            } else {
                #expect(r.status == 69 && r.stdout.isEmpty, "\(r)")
            }
        }
    }

    /// Every case of the scenario, through the library: the typed error,
    /// and never a byte that is not the object's.
    @Test(.timeLimit(.minutes(2)), arguments: scenarioFiles)
    func library(_ file: String) throws {
        let corpus = try Corpus.shared.get()
        let scenario = try #require(corpus.scenarios.first { $0.file == file }, "\(file) did not parse")
        let sweep = try Sweep(scenario, corpus: corpus)
        let site = try Site.temporary()
        defer { site.remove() }
        let started = ContinuousClock.now

        // A booted, unlocked device shared by the cases that leave the
        // device directory alone; the others boot their own.
        let bootsEachCase = scenario.check == .boot || sweep.touchesDevice
        var shared: Device?
        if !bootsEachCase {
            shared = try Device.boot(at: DeviceDirectory(path: site.device), passcodeCost: .fixed(logN: 10))
            try shared!.unlock(passcode: corpus.passcode)
        }
        defer { shared?.shutdown() }

        var failures: [String] = []
        for index in 0..<sweep.count {
            let edits = try sweep.edits(index)
            try site.apply(edits)
            let outcome = LibraryCheck.run(scenario, site: site, device: shared, corpus: corpus)
            if let problem = outcome.problem(expecting: scenario, truth: corpus.truth(for: scenario)) {
                failures.append("case \(index) (\(sweep.label(index))): \(problem)")
            }
            if let formatError = scenario.formatError {
                if let problem = try Self.decoderProblem(scenario, formatError: formatError, site: site, corpus: corpus) {
                    failures.append("case \(index) (\(sweep.label(index))): \(problem)")
                }
            }
            try site.restore(edits.map(\.path) + (bootsEachCase ? Site.deviceFiles : []))
        }
        // After the sweep the example is intact again: the restore did its
        // job, so no case above ran on a leftover of another.
        try site.restore(Site.deviceFiles)
        switch LibraryCheck.run(scenario, site: site, device: shared, corpus: corpus) {
        case .succeeded(let output) where output == corpus.truth(for: scenario):
            break
        case .succeeded(let output):
            failures.append("the restored example reads \(output.count) wrong bytes")
        case .failed(DeviceError.keyReset, _) where corpus.expectsKeyReset(scenario):
            break
        case .failed(let error, _):
            failures.append("the restored example fails: \(error)")
        }
        scenario.reporting {
            for failure in failures.prefix(10) { Issue.record("\(file): \(failure)") }
            #expect(failures.isEmpty, "\(file): \(failures.count) of \(sweep.count) cases failed")
        }
        print("damage corpus: \(file): \(sweep.count) case\(sweep.count == 1 ? "" : "s") through the library in \(ContinuousClock.now - started)")
    }

    /// One case of the scenario, through the `locker` binary: the exit
    /// status, and stdout empty or a strict prefix of the plaintext.
    @Test(arguments: scenarioFiles)
    func cli(_ file: String) throws {
        let corpus = try Corpus.shared.get()
        let scenario = try #require(corpus.scenarios.first { $0.file == file }, "\(file) did not parse")
        let sweep = try Sweep(scenario, corpus: corpus)
        let index = scenario.cliCase ?? sweep.count / 2
        let fixture = try CLIFixture()
        defer { fixture.tearDown() }
        let site = try Site.copy(into: fixture)
        try site.apply(try sweep.edits(index))
        let label = "\(file) case \(index) (\(sweep.label(index)))"

        let unlock = try fixture.run(["unlock", "--passcode-stdin"], stdin: corpus.manifest.passcode + "\n", timeout: 30)
        let path: String
        switch scenario.check {
        case .boot: path = "/a.txt"
        case .get(let p): path = p
        }
        let get = try fixture.raw(["get", path], timeout: 30)
        print("damage corpus: \(label) through the CLI: unlock exit \(unlock.status), get \(path) exit \(get.status), \(get.stdout.count) bytes on stdout")
        let truth = corpus.truths[path] ?? Data()
        scenario.reporting {
            #expect(unlock.status == (scenario.check == .boot ? scenario.exit : 0), "\(label): \(unlock)")
            #expect(get.status == scenario.exit, "\(label): \(get)")
            #expect(get.stderr.hasPrefix("locker: error: "), "\(label): \(get)")
            #expect(get.stdout.isEmpty || (isPrefix(get.stdout, of: truth) && get.stdout.count < truth.count),
                    "\(label): stdout holds \(get.stdout.count) bytes that are not a strict prefix of \(path)")
        }
    }

    /// For `format-error:`, the decoder's own answer on the damaged file,
    /// or why it is wrong.
    static func decoderProblem(_ scenario: Scenario, formatError: FormatError, site: Site, corpus: Corpus) throws -> String? {
        let relative = try corpus.resolve(scenario.target)
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: site.path(relative))))
        do {
            if scenario.target.hasPrefix("header:") {
                _ = try ObjectHeader.open(bytes, with: corpus.metadata)
            } else if scenario.target.hasPrefix("dir:") {
                _ = try DirectoryRecord.open(bytes, with: corpus.metadata)
            } else if relative == "device/keybag" {
                // Any key: the version must be refused before the seal is
                // opened.
                _ = try Keybag.open(bytes, with: SecretBytes(randomCount: 32))
            } else {
                return "format-error: no decoder for \(relative)"
            }
            return "the decoder accepted it"
        } catch let error as FormatError {
            return error == formatError ? nil : "the decoder threw \(error), not \(formatError)"
        } catch {
            return "the decoder threw \(error), not \(formatError)"
        }
    }
}

// MARK: Corpus

/// What objects.json says (Tools/corpus-gen writes it).
struct CorpusManifest: Decodable, Sendable {
    struct Object: Decodable, Sendable {
        var path: String
        var protectionClass: String
        var size: Int
        var sha256: String
        var data: String
        var header: String
        var chunkSize: Int
        var chunks: Int
        var records: [Int]
        var dataLength: Int
        var keyGeneration: Int
        var expected: String
    }

    struct Directory: Decodable, Sendable {
        var path: String
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

/// The example, its manifest, the parsed scenarios, the metadata keys of
/// the example's device (for the mutations that seal headers again) and
/// the true plaintext of each object.
final class Corpus: Sendable {
    let manifest: CorpusManifest
    let scenarios: [Scenario]
    let metadata: MetadataKeys
    let truths: [String: Data]

    /// Loaded once for the whole suite.
    static let shared = Result { try Corpus() }

    var passcode: SecretBytes { SecretBytes(copying: Array(manifest.passcode.utf8)) }

    private init() throws {
        let example = DamageCorpusTests.exampleDirectory
        manifest = try JSONDecoder().decode(CorpusManifest.self,
                                            from: Data(contentsOf: URL(fileURLWithPath: example + "/objects.json")))
        scenarios = try DamageCorpusTests.scenarioFiles.map {
            try Scenario(file: $0, text: String(contentsOfFile: DamageCorpusTests.corpusDirectory + "/scenarios/" + $0, encoding: .utf8))
        }
        // The true plaintexts, read from a copy of the example and checked
        // against the recorded SHA-256 (an object that does not match is
        // left out, and unmodifiedExampleThroughTheLibrary says why).
        let site = try Site.temporary()
        defer { site.remove() }
        let device = try Device.boot(at: DeviceDirectory(path: site.device), passcodeCost: .fixed(logN: 10))
        defer { device.shutdown() }
        metadata = try MetadataKeys(metadataKey: device.metadataKey())
        var truths: [String: Data] = [:]
        if (try? device.unlock(passcode: SecretBytes(copying: Array(manifest.passcode.utf8)))) != nil,
           let store = try? Store(path: site.store, keys: device, options: Store.Options(chunkSize: 16 << 10)) {
            for object in manifest.objects where object.expected == "ok" {
                var out = Data()
                if (try? store.read(StorePath(object.path)) { out.append(contentsOf: $0) }) != nil, sha256(out) == object.sha256 {
                    truths[object.path] = out
                }
            }
        }
        self.truths = truths
    }

    func object(_ path: String) throws -> CorpusManifest.Object {
        guard let object = manifest.objects.first(where: { $0.path == path }) else {
            throw HarnessError("objects.json has no object \(path)")
        }
        return object
    }

    /// A target reference (`header:PATH`, `data:PATH`, `dir:PATH`, or a
    /// path relative to the example) as a path relative to the example.
    func resolve(_ reference: String) throws -> String {
        if reference.hasPrefix("header:") { return try object(String(reference.dropFirst(7))).header }
        if reference.hasPrefix("data:") { return try object(String(reference.dropFirst(5))).data }
        if reference.hasPrefix("dir:") {
            let path = String(reference.dropFirst(4))
            guard let directory = manifest.directories.first(where: { $0.path == path }) else {
                throw HarnessError("objects.json has no directory \(path)")
            }
            return directory.record
        }
        guard !reference.contains(":"), !reference.hasPrefix("/"), !reference.contains("..") else {
            throw HarnessError("not a target: \(reference)")
        }
        return reference
    }

    /// The bytes of the unmodified example's file.
    func pristine(_ relative: String) throws -> Data {
        try Data(contentsOf: URL(fileURLWithPath: DamageCorpusTests.exampleDirectory + "/" + relative))
    }

    /// Whether the scenario reads an object that the unmodified example
    /// already refuses with `keyReset`.
    func expectsKeyReset(_ scenario: Scenario) -> Bool {
        guard case .get(let path) = scenario.check else { return false }
        return manifest.objects.first { $0.path == path }?.expected == "keyReset"
    }

    /// The plaintext the scenario's read may show a prefix of.
    func truth(for scenario: Scenario) -> Data {
        if case .get(let path) = scenario.check { return truths[path] ?? Data() }
        return Data()
    }
}

// MARK: Scenario files

struct Scenario: Sendable {
    enum Check: Equatable, Sendable {
        case boot
        case get(String)
    }

    enum Expectation: String, Sendable {
        case ok
        case deviceIntegrity = "device-integrity"
        case rollback
        case storeIntegrity = "store-integrity"
        case foreignStore = "foreign-store"
        case keyReset = "key-reset"
    }

    var file: String
    var number: Int
    var description: String
    var target: String
    var mutation: [String]
    var check: Check
    var expect: Expectation
    var detail: String?
    var formatError: FormatError?
    var exit: Int32
    var cliCase: Int?
    /// A bug in Locker that this scenario shows: its failures are recorded
    /// as a known issue, and its passing is a failure (remove the key
    /// once the bug is fixed).
    var knownIssue: String?

    static let keys: Set<String> = [
        "description", "target", "mutation", "check", "expect", "detail", "format-error", "exit", "cli-case", "known-issue",
    ]
    static let required: Set<String> = ["description", "target", "mutation", "check", "expect", "exit"]

    init(file: String, text: String) throws {
        self.file = file
        guard file.count > 4, let number = Int(file.prefix(3)), file.dropFirst(3).hasPrefix("-") else {
            throw HarnessError("\(file): the name is not NNN-name.txt")
        }
        self.number = number
        var fields: [String: String] = [:]
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let colon = line.firstIndex(of: ":") else { throw HarnessError("\(file):\(i + 1): not 'key: value'") }
            let key = String(line[..<colon])
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            guard Self.keys.contains(key) else { throw HarnessError("\(file):\(i + 1): unknown key '\(key)'") }
            guard fields[key] == nil else { throw HarnessError("\(file):\(i + 1): '\(key)' given twice") }
            guard !value.isEmpty else { throw HarnessError("\(file):\(i + 1): '\(key)' is empty") }
            fields[key] = value
        }
        let missing = Self.required.subtracting(fields.keys)
        guard missing.isEmpty else { throw HarnessError("\(file): missing \(missing.sorted())") }
        description = fields["description"]!
        target = fields["target"]!
        mutation = fields["mutation"]!.split(separator: " ").map(String.init)
        let check = fields["check"]!
        if check == "boot" {
            self.check = .boot
        } else if check.hasPrefix("get /") {
            self.check = .get(String(check.dropFirst(4)))
        } else {
            throw HarnessError("\(file): check '\(check)' is not 'boot' or 'get PATH'")
        }
        guard let expect = Expectation(rawValue: fields["expect"]!) else {
            throw HarnessError("\(file): unknown expect '\(fields["expect"]!)'")
        }
        self.expect = expect
        detail = fields["detail"]
        if let text = fields["format-error"] {
            let parts = text.split(separator: " ")
            guard parts.count == 2, parts[0] == "unsupported-version", let version = UInt16(parts[1]) else {
                throw HarnessError("\(file): format-error '\(text)' is not 'unsupported-version N'")
            }
            formatError = .unsupportedVersion(version)
        }
        guard let exit = Int32(fields["exit"]!) else { throw HarnessError("\(file): exit is not a number") }
        self.exit = exit
        let expectedExit: Int32 = switch expect {
        case .ok: 0
        case .keyReset: 69
        default: 65
        }
        guard exit == expectedExit else { throw HarnessError("\(file): expect \(expect.rawValue) exits \(expectedExit), not \(exit)") }
        if let text = fields["cli-case"] {
            guard let n = Int(text), n >= 0 else { throw HarnessError("\(file): cli-case is not a number") }
            cliCase = n
        }
        knownIssue = fields["known-issue"]
    }

    /// Runs `body`, under `withKnownIssue` if the scenario has a known
    /// issue.
    func reporting(_ body: () throws -> Void) rethrows {
        if let knownIssue {
            withKnownIssue(Comment(rawValue: knownIssue)) { try body() }
        } else {
            try body()
        }
    }
}

// MARK: Mutations

/// One change to a file of the example: new contents, or removal.
struct Edit {
    var path: String
    var contents: Data?
}

/// The cases of a scenario's mutation, made one at a time.
struct Sweep {
    let count: Int
    let touchesDevice: Bool
    private let labelOf: (Int) -> String
    private let editsOf: (Int) throws -> [Edit]

    func label(_ index: Int) -> String { labelOf(index) }
    func edits(_ index: Int) throws -> [Edit] { try editsOf(index) }

    private init(count: Int, touches: [String], label: @escaping (Int) -> String, edits: @escaping (Int) throws -> [Edit]) {
        self.count = count
        touchesDevice = touches.contains { $0.hasPrefix("device/") }
        labelOf = label
        editsOf = edits
    }

    init(_ scenario: Scenario, corpus: Corpus) throws {
        let target = try corpus.resolve(scenario.target)
        let name = scenario.mutation[0]
        let arguments = Array(scenario.mutation.dropFirst())
        func argument(_ i: Int) throws -> Int {
            guard i < arguments.count else { throw HarnessError("\(scenario.file): \(name) needs \(i + 1) argument(s)") }
            let text = arguments[i]
            let value = text.hasPrefix("0x") ? Int(text.dropFirst(2), radix: 16) : Int(text)
            guard let value, value >= 0 else { throw HarnessError("\(scenario.file): '\(text)' is not a number") }
            return value
        }
        let expectedArguments: Int = switch name {
        case "flip-each-byte": min(1, arguments.count)
        case "zero-each-region", "append-bytes", "replace-with", "swap-wrapped-key": 1
        case "set-u16", "reseal": 2
        default: 0
        }
        guard arguments.count == expectedArguments else {
            throw HarnessError("\(scenario.file): \(name) takes \(expectedArguments) argument(s), not \(arguments.count)")
        }
        let exists = FileManager.default.fileExists(atPath: DamageCorpusTests.exampleDirectory + "/" + target)
        let bytes = exists ? try corpus.pristine(target) : Data()
        func one(_ label: String, _ edits: @escaping () throws -> [Edit]) -> Sweep {
            Sweep(count: 1, touches: [target], label: { _ in label }, edits: { _ in try edits() })
        }
        func each(_ count: Int, label: @escaping (Int) -> String, contents: @escaping (Int) throws -> Data?) -> Sweep {
            Sweep(count: count, touches: [target], label: label, edits: { [Edit(path: target, contents: try contents($0))] })
        }

        // Chunk records of a data file, from the manifest.
        func records() throws -> (starts: [Int], lengths: [Int], indexStart: Int) {
            guard scenario.target.hasPrefix("data:") else { throw HarnessError("\(scenario.file): \(name) needs a data: target") }
            let object = try corpus.object(String(scenario.target.dropFirst(5)))
            var starts: [Int] = []
            var offset = 0
            for length in object.records {
                starts.append(offset)
                offset += length
            }
            guard offset + 4 * object.chunks + 16 == bytes.count else {
                throw HarnessError("\(scenario.file): the records of \(object.path) do not add up to its data file")
            }
            return (starts, object.records, offset)
        }
        func record(_ i: Int, _ r: (starts: [Int], lengths: [Int], indexStart: Int)) -> Data {
            bytes.subdata(in: r.starts[i]..<(r.starts[i] + r.lengths[i]))
        }
        func equalPairs(ordered: Bool) throws -> [(Int, Int)] {
            let r = try records()
            var pairs: [(Int, Int)] = []
            for i in r.lengths.indices {
                for j in r.lengths.indices where j != i && (ordered || j > i) && r.lengths[i] == r.lengths[j] {
                    pairs.append((i, j))
                }
            }
            guard !pairs.isEmpty else { throw HarnessError("\(scenario.file): no two records have the same length") }
            return pairs
        }

        switch name {
        case "none":
            self = Sweep(count: 1, touches: [], label: { _ in "unchanged" }, edits: { _ in [] })
        case "flip-each-byte":
            let masks: [UInt8] = arguments.isEmpty ? [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff] : [UInt8(try argument(0))]
            self = each(bytes.count * masks.count, label: { "byte \($0 / masks.count) ^ 0x\(String(masks[$0 % masks.count], radix: 16))" }) { i in
                var copy = bytes
                copy[i / masks.count] ^= masks[i % masks.count]
                return copy
            }
        case "truncate-each-length":
            self = each(bytes.count, label: { "cut to \($0) bytes" }) { bytes.prefix($0) }
        case "zero-file":
            self = one("all zero") { [Edit(path: target, contents: Data(count: bytes.count))] }
        case "zero-each-region":
            let size = try argument(0)
            self = each((bytes.count + size - 1) / size, label: { "bytes \($0 * size)..<\(min(bytes.count, ($0 + 1) * size)) zeroed" }) { i in
                var copy = bytes
                copy.resetBytes(in: (i * size)..<min(bytes.count, (i + 1) * size))
                return copy
            }
        case "set-u16":
            let offset = try argument(0)
            let value = try argument(1)
            self = one("u16 at \(offset) = \(value)") {
                var copy = bytes
                copy[offset] = UInt8(value >> 8)
                copy[offset + 1] = UInt8(value & 0xff)
                return [Edit(path: target, contents: copy)]
            }
        case "append-bytes":
            let n = try argument(0)
            self = one("\(n) bytes appended") { [Edit(path: target, contents: bytes + Data(repeating: 0xa5, count: n))] }
        case "remove":
            self = one("removed") { [Edit(path: target, contents: nil)] }
        case "replace-with":
            let source = try corpus.resolve(arguments[0])
            self = one("replaced with \(source)") { [Edit(path: target, contents: try corpus.pristine(source))] }
        case "truncate-at-record-boundaries":
            let r = try records()
            let cuts = [0] + r.starts.dropFirst() + [r.indexStart]
            self = each(cuts.count, label: { "cut to \(cuts[$0]) bytes (a record boundary)" }) { bytes.prefix(cuts[$0]) }
        case "truncate-between-record-boundaries":
            let r = try records()
            let cuts = r.starts.indices.map { r.starts[$0] + r.lengths[$0] / 2 } + [(r.indexStart + bytes.count) / 2, bytes.count - 1]
            self = each(cuts.count, label: { "cut to \(cuts[$0]) bytes" }) { bytes.prefix(cuts[$0]) }
        case "swap-each-equal-pair":
            let r = try records()
            let pairs = try equalPairs(ordered: false)
            self = each(pairs.count, label: { "records \(pairs[$0].0) and \(pairs[$0].1) swapped" }) { k in
                let (i, j) = pairs[k]
                var copy = bytes
                copy.replaceSubrange(r.starts[i]..<(r.starts[i] + r.lengths[i]), with: record(j, r))
                copy.replaceSubrange(r.starts[j]..<(r.starts[j] + r.lengths[j]), with: record(i, r))
                return copy
            }
        case "copy-each-equal-record-over-another":
            let r = try records()
            let pairs = try equalPairs(ordered: true)
            self = each(pairs.count, label: { "record \(pairs[$0].0) copied over record \(pairs[$0].1)" }) { k in
                let (i, j) = pairs[k]
                var copy = bytes
                copy.replaceSubrange(r.starts[j]..<(r.starts[j] + r.lengths[j]), with: record(i, r))
                return copy
            }
        case "duplicate-each-record":
            let r = try records()
            self = each(r.lengths.count, label: { "record \($0) duplicated" }) { i in
                var copy = bytes
                copy.insert(contentsOf: record(i, r), at: r.starts[i] + r.lengths[i])
                return copy
            }
        case "drop-each-record":
            let r = try records()
            self = each(r.lengths.count, label: { "record \($0) dropped" }) { i in
                var copy = bytes
                copy.removeSubrange(r.starts[i]..<(r.starts[i] + r.lengths[i]))
                return copy
            }
        case "swap-wrapped-key":
            guard scenario.target.hasPrefix("header:") else { throw HarnessError("\(scenario.file): \(name) needs a header: target") }
            let other = try corpus.object(arguments[0]).header
            let keys = corpus.metadata
            self = Sweep(count: 1, touches: [target, other], label: { _ in "wrapped keys swapped with \(arguments[0])" }) { _ in
                var mine = try ObjectHeader.open([UInt8](bytes), with: keys)
                var theirs = try ObjectHeader.open([UInt8](try corpus.pristine(other)), with: keys)
                swap(&mine.wrappedKey, &theirs.wrappedKey)
                return [Edit(path: target, contents: Data(try mine.sealed(with: keys))),
                        Edit(path: other, contents: Data(try theirs.sealed(with: keys)))]
            }
        case "reseal":
            guard scenario.target.hasPrefix("header:") else { throw HarnessError("\(scenario.file): \(name) needs a header: target") }
            let field = arguments[0]
            let value = arguments[1]
            let keys = corpus.metadata
            var change: (inout ObjectHeader) throws -> Void
            switch field {
            case "key-generation":
                let generation = UInt32(try argument(1))
                change = { $0.wrappedKey.keyGeneration = generation }
            case "plaintext-length":
                let length = UInt64(try argument(1))
                change = { $0.plaintextLength = length }
            case "object-id-of":
                let other = try corpus.object(value).header
                change = { $0.objectID = try ObjectHeader.open([UInt8](try corpus.pristine(other)), with: keys).objectID }
            default:
                throw HarnessError("\(scenario.file): reseal cannot set '\(field)'")
            }
            self = one("sealed again with \(field) \(value)") {
                var header = try ObjectHeader.open([UInt8](bytes), with: keys)
                try change(&header)
                return [Edit(path: target, contents: Data(try header.sealed(with: keys)))]
            }
        default:
            throw HarnessError("\(scenario.file): unknown mutation '\(name)'")
        }
        if name != "none", !exists { throw HarnessError("\(scenario.file): \(target) is not in the example") }
    }
}

// MARK: A copy of the example

/// A working copy of the example: its device directory, its store, and
/// keybag.old beside them.
struct Site {
    let root: String
    let device: String
    let store: String
    /// Whether `remove()` deletes `root` (a fixture removes its own).
    let ownsRoot: Bool

    static let deviceFiles = DeviceDirectory.fileNames.map { "device/" + $0 }

    /// A copy in a new temporary directory.
    static func temporary() throws -> Site {
        var template = Array("/tmp/lkdc-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed: errno \(errno)") }
        let root = String(cString: made)
        let site = Site(root: root, device: root + "/device", store: root + "/store", ownsRoot: true)
        try site.populate()
        return site
    }

    /// A copy at a CLI fixture's device and store directories.
    static func copy(into fixture: CLIFixture) throws -> Site {
        let site = Site(root: fixture.root, device: fixture.device, store: fixture.store, ownsRoot: false)
        try site.populate()
        return site
    }

    private func populate() throws {
        let example = DamageCorpusTests.exampleDirectory
        let fm = FileManager.default
        try fm.copyItem(atPath: example + "/device", toPath: device)
        try fm.copyItem(atPath: example + "/store", toPath: store)
        try fm.copyItem(atPath: example + "/keybag.old", toPath: path("keybag.old"))
        // Git keeps no modes: make them what Locker writes.
        for top in [device, store] {
            chmod(top, 0o700)
            let walker = fm.enumerator(atPath: top)
            while let relative = walker?.nextObject() as? String {
                var isDirectory: ObjCBool = false
                _ = fm.fileExists(atPath: top + "/" + relative, isDirectory: &isDirectory)
                chmod(top + "/" + relative, isDirectory.boolValue ? 0o700 : 0o600)
            }
        }
    }

    func remove() {
        if ownsRoot { try? FileManager.default.removeItem(atPath: root) }
    }

    /// The file at `relative` (a path inside the example) in this copy.
    func path(_ relative: String) -> String {
        if relative.hasPrefix("device/") { return device + "/" + relative.dropFirst(7) }
        if relative.hasPrefix("store/") { return store + "/" + relative.dropFirst(6) }
        return root + "/" + relative
    }

    func apply(_ edits: [Edit]) throws {
        for edit in edits {
            if let contents = edit.contents {
                try write(contents, to: path(edit.path))
            } else {
                try FileManager.default.removeItem(atPath: path(edit.path))
            }
        }
    }

    /// Puts these files back as in the example. When the device's files
    /// are among them, anything else in the device directory (a temporary
    /// file a write left) goes.
    func restore(_ relatives: [String]) throws {
        for relative in Set(relatives) {
            let original = DamageCorpusTests.exampleDirectory + "/" + relative
            if FileManager.default.fileExists(atPath: original) {
                try write(try Data(contentsOf: URL(fileURLWithPath: original)), to: path(relative))
            } else {
                try? FileManager.default.removeItem(atPath: path(relative))
            }
        }
        if relatives.contains(where: { $0.hasPrefix("device/") }) {
            for name in try FileManager.default.contentsOfDirectory(atPath: device) where !DeviceDirectory.fileNames.contains(name) {
                try FileManager.default.removeItem(atPath: device + "/" + name)
            }
        }
    }

    /// Writes `data` over the file in place (no truncation to zero first,
    /// which makes ext4 flush on close), unless it holds it already.
    private func write(_ data: Data, to path: String) throws {
        if let current = FileManager.default.contents(atPath: path), current == data { return }
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw HarnessError("cannot write \(path): errno \(errno)") }
        defer { close(fd) }
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = pwrite(fd, raw.baseAddress! + offset, raw.count - offset, off_t(offset))
                guard n > 0 else { throw HarnessError("cannot write \(path): errno \(errno)") }
                offset += n
            }
        }
        guard ftruncate(fd, off_t(data.count)) == 0 else { throw HarnessError("cannot truncate \(path): errno \(errno)") }
    }
}

// MARK: The library check

enum LibraryCheck {
    case succeeded(Data)
    case failed(any Error, partial: Data)

    /// Runs the scenario's check on `site`: with `device` if given (booted
    /// and unlocked), else on a device booted now.
    static func run(_ scenario: Scenario, site: Site, device shared: Device?, corpus: Corpus) -> LibraryCheck {
        var output = Data()
        do {
            let device: Device
            if let shared {
                device = shared
            } else {
                device = try Device.boot(at: DeviceDirectory(path: site.device), passcodeCost: .fixed(logN: 10))
                try device.unlock(passcode: corpus.passcode)
            }
            defer { if shared == nil { device.shutdown() } }
            if case .get(let path) = scenario.check {
                let store = try Store(path: site.store, keys: device, options: Store.Options(chunkSize: 16 << 10))
                try store.read(StorePath(path)) { output.append(contentsOf: $0) }
            }
            return .succeeded(output)
        } catch {
            return .failed(error, partial: output)
        }
    }

    /// Why this outcome is wrong for the scenario, or nil.
    func problem(expecting scenario: Scenario, truth: Data) -> String? {
        switch self {
        case .succeeded(let output):
            if scenario.expect == .ok { return output == truth ? nil : "wrong plaintext: \(output.count) bytes" }
            if case .get = scenario.check, output != truth {
                return "no error, and WRONG PLAINTEXT (\(output.count) bytes)"
            }
            return "no error: the damage was not detected"
        case .failed(let error, let partial):
            guard partial.isEmpty || (isPrefix(partial, of: truth) && partial.count < truth.count) else {
                return "threw \(error) after \(partial.count) bytes that are not a strict prefix of the plaintext"
            }
            let (kind, detail) = Self.classify(error)
            guard kind == scenario.expect else { return "threw \(error), expected \(scenario.expect.rawValue)" }
            if let expected = scenario.detail, detail != expected {
                return "threw \(error), expected the detail '\(expected)'"
            }
            return nil
        }
    }

    static func classify(_ error: any Error) -> (Scenario.Expectation?, String?) {
        switch error {
        case DeviceError.integrity(let what): (.deviceIntegrity, what)
        case DeviceError.rollback: (.rollback, nil)
        case DeviceError.keyReset: (.keyReset, nil)
        case StoreError.integrity(_, let what): (.storeIntegrity, what)
        case StoreError.foreignStore: (.foreignStore, nil)
        default: (nil, nil)
        }
    }
}

func sha256(_ data: Data) -> String {
    ((try? Digest.hash(.sha256, [UInt8](data))) ?? []).map { String(format: "%02x", $0) }.joined()
}
