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

    /// Directories moved with `mv` (one under a name long enough to be
    /// stored hashed) read back at their new paths only; two directories
    /// swapped on disk, each under the other's stored name, are refused.
    @Test func readsMovedDirectoriesAndRefusesSwappedOnes() throws {
        try withFixture { f in
            try f.initialize(passcode: "pc")
            let passcodeFile = f.root + "/passcode"
            try Data("pc\n".utf8).write(to: URL(fileURLWithPath: passcodeFile))
            let longName = String(repeating: "long-name-", count: 30)
            let contents: [(path: String, bytes: Data)] = [
                ("/a/x", Data("in a\n".utf8)),
                ("/b/y", Data("in b\n".utf8)),
                ("/\(longName)/z", Data("in the long-named one\n".utf8)),
            ]
            for (path, bytes) in contents { try put(f, path, bytes) }
            for arguments in [["mkdir", "/m"], ["mv", "/a", "/m/a"], ["mv", "/" + longName, "/m/" + longName]] {
                let r = try f.run(arguments)
                try #require(r.status == 0, "\(arguments): \(r)")
            }
            let moved = [("/m/a/x", contents[0].bytes), ("/b/y", contents[1].bytes), ("/m/\(longName)/z", contents[2].bytes)]
            for (path, bytes) in moved {
                let d = try decrypt(f, ["--passcode-file", passcodeFile, path])
                #expect(d.result.status == 0 && d.output == bytes, "\(path): \(d.result)")
            }
            for path in ["/a/x", "/\(longName)/z"] {
                let d = try decrypt(f, ["--passcode-file", passcodeFile, path])
                #expect(d.result.status != 0 && d.output.isEmpty, "\(path) read at the place it left: \(d.result)")
            }
            let list = try decrypt(f, ["--list"])
            #expect(list.result.status == 0, "\(list.result)")
            #expect(String(decoding: list.output, as: UTF8.self).split(separator: "\n").map { String($0.split(separator: "\t")[0]) }.sorted()
                    == moved.map(\.0).sorted())

            // /b and one of /m's two swapped on disk, each under the other's
            // name: b is the root's directory without subdirectories.
            let fm = FileManager.default
            let ns = f.store + "/ns"
            func subdirectories(_ path: String) throws -> [String] {
                try fm.contentsOfDirectory(atPath: path).filter { name in
                    var isDirectory: ObjCBool = false
                    return fm.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory) && isDirectory.boolValue
                }
            }
            let top = try subdirectories(ns)
            try #require(top.count == 2, "\(top)")
            let b = try #require(try top.first { try subdirectories(ns + "/" + $0).isEmpty })
            let m = try #require(top.first { $0 != b })
            let inM = try subdirectories(ns + "/" + m)
            try #require(inM.count == 2, "\(inM)")
            try fm.moveItem(atPath: ns + "/" + b, toPath: f.root + "/swap")
            try fm.moveItem(atPath: ns + "/" + m + "/" + inM[0], toPath: ns + "/" + b)
            try fm.moveItem(atPath: f.root + "/swap", toPath: ns + "/" + m + "/" + inM[0])
            for path in ["/b/x", "/b/y", "/b/z", "/m/a/y", "/m/\(longName)/y"] {
                let d = try decrypt(f, ["--passcode-file", passcodeFile, path])
                #expect(d.result.status != 0 && d.output.isEmpty, "\(path) read after the swap: \(d.result)")
            }
            // The one of /m's not swapped still reads.
            let untouched = try ["/m/a/x", "/m/\(longName)/z"].filter { path in
                try decrypt(f, ["--passcode-file", passcodeFile, path]).result.status == 0
            }
            #expect(untouched.count == 1, "\(untouched)")
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
