import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `Tools/decrypt.py`, a decryptor written in Python from docs/format.md
/// alone, must read back every object the real `locker` binary writes, and
/// must refuse a damaged one. This checks the Swift implementation against
/// the specification, not against itself.
@Suite("Tools/decrypt.py, an independent reader of the format")
struct IndependentDecryptorTests {
    /// The repository root: three levels above this file.
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let script = repositoryRoot + "/Tools/decrypt.py"

    /// What one decrypt.py run produced, with standard output as bytes.
    struct Decrypted {
        var result: CLIResult
        var output: Data
    }

    /// Runs a fresh fixture, failing at once (with the fix) unless python3
    /// and its `cryptography` and `lz4` modules are installed.
    func withFixture(_ body: (CLIFixture) throws -> Void) throws {
        let fixture = try CLIFixture()
        defer { fixture.tearDown() }
        let probe = try fixture.runProgram("/usr/bin/env", [
            "python3", "-c", "import cryptography.hazmat.primitives.ciphers.aead, lz4.block",
        ])
        try #require(probe.status == 0, """
            python3 with the cryptography and lz4 modules is missing: run 'bash Tools/setup.sh' \
            (it installs python3, python3-cryptography and python3-lz4). \(probe)
            """)
        try body(fixture)
    }

    /// Runs `decrypt.py` against the fixture's device and store. Its
    /// standard output goes to a file (the shared runner keeps output as
    /// text, and objects are binary) and is returned as bytes.
    func decrypt(_ f: CLIFixture, _ arguments: [String]) throws -> Decrypted {
        let outputPath = f.root + "/decrypted"
        let result = try f.runProgram("/bin/sh", [
            "-c", #"out=$1; shift; exec python3 "$@" > "$out""#, "sh", outputPath,
            Self.script, "--device", f.device, "--store", f.store,
        ] + arguments, timeout: 60)
        let output = try Data(contentsOf: URL(fileURLWithPath: outputPath))
        try FileManager.default.removeItem(atPath: outputPath)
        return Decrypted(result: result, output: output)
    }

    /// Writes `bytes` to a local file and stores it at `path`.
    func put(_ f: CLIFixture, _ path: String, _ bytes: Data, _ extra: [String] = []) throws {
        let local = f.root + "/local"
        try bytes.write(to: URL(fileURLWithPath: local))
        let r = try f.run(["put", local, path] + extra)
        try #require(r.status == 0, "\(r)")
    }

    @Test func readsEveryClassAndRefusesAFlippedBit() throws {
        try withFixture { f in
            try f.initialize(passcode: "correct horse")
            let passcodeFile = f.root + "/passcode"
            try Data("correct horse\n".utf8).write(to: URL(fileURLWithPath: passcodeFile))

            // Three chunks of 256 KiB (the last partial) that LZ4 shrinks.
            var text = Data()
            var line = 0
            while text.count < 700_000 {
                text.append(contentsOf: "line \(line): the quick brown fox jumps over the lazy dog\n".utf8)
                line += 1
            }
            // Two chunks that LZ4 cannot shrink: stored raw (mode 0).
            var generator = SystemRandomNumberGenerator()
            let noise = Data((0..<300_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let longName = String(repeating: "long-näme-", count: 27) + "end"
            #expect(longName.utf8.count == 300)

            let mkdir = try f.run(["mkdir", "--class", "A", "/inheriting"])
            try #require(mkdir.status == 0, "\(mkdir)")
            let objects: [(path: String, bytes: Data, protection: String)] = [
                ("/a/compressible", text, "complete"),
                ("/b/incompressible", noise, "completeUnlessOpen"),
                ("/c", Data("class C\n".utf8), "completeUntilFirstUserAuthentication"),
                ("/d", Data("class D, readable without the passcode\n".utf8), "none"),
                ("/empty", Data(), "none"),
                ("/inheriting/" + longName, Data("a long name\n".utf8), "complete"),
            ]
            let letters = ["complete": "A", "completeUnlessOpen": "B",
                           "completeUntilFirstUserAuthentication": "C", "none": "D"]
            for object in objects {
                let explicit = object.path.hasPrefix("/inheriting/") ? [] : ["--class", letters[object.protection]!]
                try put(f, object.path, object.bytes, explicit)
            }

            for object in objects {
                let d = try decrypt(f, ["--passcode-file", passcodeFile, object.path])
                #expect(d.result.status == 0, "\(d.result)")
                #expect(d.output == object.bytes, "\(object.path): \(d.output.count) bytes, expected \(object.bytes.count)")
            }

            let list = try decrypt(f, ["--list"])
            #expect(list.result.status == 0, "\(list.result)")
            let expectedList = objects.map { "\($0.path)\t\($0.protection)" }.sorted()
            #expect(String(decoding: list.output, as: UTF8.self).split(separator: "\n").map(String.init).sorted()
                    == expectedList)

            // Class D needs no passcode; the others refuse without it.
            #expect(try decrypt(f, ["--no-passcode", "/d"]).output == objects[3].bytes)
            let locked = try decrypt(f, ["--no-passcode", "/c"])
            #expect(locked.result.status == 1 && locked.result.stderr.contains("protected data unavailable"),
                    "\(locked.result)")
            let wrongFile = f.root + "/wrong"
            try Data("wrong horse\n".utf8).write(to: URL(fileURLWithPath: wrongFile))
            let wrong = try decrypt(f, ["--passcode-file", wrongFile, "/a/compressible"])
            #expect(wrong.result.status == 1 && wrong.result.stderr.contains("wrong passcode"), "\(wrong.result)")

            // The incompressible object's data file has a known length: two
            // raw records (17 bytes of overhead each) and the index.
            let dataDirectory = f.store + "/data"
            let dataFiles = try FileManager.default.contentsOfDirectory(atPath: dataDirectory)
            let noiseFile = try #require(dataFiles.first { name in
                let size = (try? FileManager.default.attributesOfItem(atPath: dataDirectory + "/" + name)[.size]) as? Int
                return size == 300_000 + 2 * 17 + 2 * 4 + 16
            }, "no data file of the incompressible object's length among \(dataFiles)")
            let handle = try #require(FileHandle(forUpdatingAtPath: dataDirectory + "/" + noiseFile))
            defer { try? handle.close() }
            func flip(at offset: UInt64) throws {
                try handle.seek(toOffset: offset)
                let byte = try #require(try handle.read(upToCount: 1)?.first)
                try handle.seek(toOffset: offset)
                try handle.write(contentsOf: [byte ^ 0x10])
            }
            try flip(at: 1000)
            let damaged = try decrypt(f, ["--passcode-file", passcodeFile, "/b/incompressible"])
            #expect(damaged.result.status == 1, "\(damaged.result)")
            #expect(damaged.result.stderr.contains("chunk 0 does not authenticate"), "\(damaged.result)")
            #expect(damaged.output.isEmpty, "plaintext of a damaged chunk was written")
            // The same file with the bit put back reads again.
            try flip(at: 1000)
            #expect(try decrypt(f, ["--passcode-file", passcodeFile, "/b/incompressible"]).output == noise)
        }
    }

    @Test func readsADeviceWithoutAPasscode() throws {
        try withFixture { f in
            let r = try f.run(["init", "--no-passcode"])
            try #require(r.status == 0, "\(r)")
            let bytes = Data("no passcode, class A\n".utf8)
            try put(f, "/x", bytes, ["--class", "A"])
            let d = try decrypt(f, ["--no-passcode", "/x"])
            #expect(d.result.status == 0, "\(d.result)")
            #expect(d.output == bytes)
        }
    }
}
