import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The letters `--class` takes, and the canonical names `stat` prints.
let storeClassLetters = ["A", "B", "C", "D"]
let canonicalClassName = ["A": "complete", "B": "completeUnlessOpen", "C": "completeUntilFirstUserAuthentication", "D": "none"]

/// Distinct, deterministic content for `tag`: the tag, then bytes that do
/// not compress.
func sampleBytes(_ tag: String, size: Int = 3000) -> Data {
    var seed: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in tag.utf8 { seed = (seed ^ UInt64(byte)) &* 0x100_0000_01B3 }
    return Data(tag.utf8) + pseudoRandomBytes(size, seed: seed)
}

/// A refusal because of protection: exit 75, the message, nothing on stdout.
func expectProtectedDataUnavailable(_ r: RawResult, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(r.status == 75, "\(r)", sourceLocation: sourceLocation)
    #expect(r.stderr.contains("protected data unavailable"), "\(r)", sourceLocation: sourceLocation)
    #expect(r.stdout.isEmpty, "\(r)", sourceLocation: sourceLocation)
}

/// End-to-end tests of the store commands through the real `locker` binary
/// and agent: protection by class and device state, inheritance, names,
/// export, key reset and the namespace commands.
@Suite("locker store commands, end to end")
struct StoreCLITests {
    /// Whether a tmpfs can be mounted here (root, and a kernel that lets
    /// this namespace mount): tried once, on a directory of its own.
    static let canMountTmpfs: Bool = {
        let directory = NSTemporaryDirectory() + "lkc-mount-probe-" + UUID().uuidString.prefix(8)
        guard mkdir(directory, 0o700) == 0 else { return false }
        defer { rmdir(directory) }
        guard mount("tmpfs", directory, "tmpfs", 0, "size=64k") == 0 else { return false }
        return umount(directory) == 0
    }()

    /// A store on a full file system: `put` fails with the system's
    /// reason and a hint, and leaves nothing of the object; `verify`
    /// finds the store clean.
    @Test(.enabled(if: canMountTmpfs, "needs to mount a small tmpfs"))
    func aFullStoreFileSystemGetsAHintAndLeavesNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            let small = f.root + "/small"
            #expect(mkdir(small, 0o700) == 0)
            #expect(mount("tmpfs", small, "tmpfs", 0, "size=2m") == 0)
            defer { umount(small) }
            let big = f.root + "/big"
            try pseudoRandomBytes(5 << 20, seed: 9).write(to: URL(fileURLWithPath: big))
            let put = try f.run(["put", "--store", small + "/store", big, "/big"])
            #expect(put.status == 1, "\(put)")
            #expect(put.stderr.hasPrefix("locker: error: write \(small)/store/data/"), "\(put)")
            #expect(put.stderr.hasSuffix(": No space left on device\n"
                    + "locker: hint: free some space on that file system, then run the command again; nothing half-written was left\n"),
                    "\(put)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: small + "/store/data").isEmpty)
            let verify = try f.run(["verify", "--store", small + "/store"])
            #expect(verify.status == 0, "\(verify)")
        }
    }

    // MARK: Class × state

    /// Every cell of the class × state table: read an existing object and
    /// create a new one, for A–D, before first unlock, unlocked, locking
    /// and locked.
    @Test func classStateTable() throws {
        try withStoreFixture { f in
            try f.initialize(passcode: "1234", ["--grace", "30"])
            for c in storeClassLetters { try f.put("/pre/\(c)", sampleBytes("pre-\(c)"), ["--class", c]) }
            var created: [(path: String, bytes: Data)] = storeClassLetters.map { ("/pre/\($0)", sampleBytes("pre-\($0)")) }

            func check(_ state: String, readable: Set<String>, creatable: Set<String>) throws {
                #expect(try f.status().state == state)
                for c in storeClassLetters {
                    let read = try f.raw(["get", "/pre/\(c)"])
                    if readable.contains(c) {
                        #expect(read.status == 0, "\(state): read \(c): \(read)")
                        #expect(read.stdout == sampleBytes("pre-\(c)"), "\(state): read \(c) returned \(brief(read.stdout))")
                    } else {
                        expectProtectedDataUnavailable(read)
                    }
                    let path = "/\(state)/\(c)"
                    let bytes = sampleBytes("\(state)-\(c)")
                    let local = try f.localFile(bytes)
                    let put = try f.raw(["put", local, path, "--class", c])
                    if creatable.contains(c) {
                        #expect(put.status == 0, "\(state): create \(c): \(put)")
                        created.append((path, bytes))
                    } else {
                        expectProtectedDataUnavailable(put)
                        let stat = try f.raw(["stat", path])
                        #expect(stat.status == 66, "a refused put left an object: \(stat)")
                    }
                }
            }

            let all = Set(storeClassLetters)
            try check("unlocked", readable: all, creatable: all)
            try f.ok(["lock"])
            try check("locking", readable: all, creatable: all)
            try f.ok(["lock", "--now"])
            try check("locked", readable: ["C", "D"], creatable: ["B", "C", "D"])

            // A class B object created while locked cannot be read until
            // unlock.
            expectProtectedDataUnavailable(try f.raw(["get", "/locked/B"]))

            try f.ok(["reboot"])
            try check("beforeFirstUnlock", readable: ["D"], creatable: ["B", "D"])
            expectProtectedDataUnavailable(try f.raw(["get", "/beforeFirstUnlock/B"]))
            expectProtectedDataUnavailable(try f.raw(["get", "/locked/B"]))

            // After unlock every object created in any state reads back
            // exactly, and no refused put left a data file behind.
            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            for (path, bytes) in created {
                let r = try f.raw(["get", path])
                #expect(r.status == 0, "\(r)")
                #expect(r.stdout == bytes, "\(path) returned \(brief(r.stdout))")
            }
            #expect(f.storedData().count == created.count)
        }
    }

    /// `passwd` on a device made without a passcode sets its first one:
    /// every object stays readable, and from then on the classes lock.
    @Test func passwdSetsAFirstPasscodeAndKeepsEveryObject() throws {
        try withStoreFixture { f in
            try f.ok(["init", "--no-passcode"])
            let bytes = sampleBytes("first-passcode", size: 5000)
            let classes = ["A", "B", "C", "D"]
            for c in classes { try f.put("/p/\(c)", bytes, ["--class", c]) }
            let set = try f.ok(["passwd"], stdin: "5678\n")
            #expect(set.stdout.contains("Passcode set"), "\(set)")
            for c in classes { #expect(try f.raw(["get", "/p/\(c)"]).stdout == bytes, "class \(c)") }

            try f.ok(["lock", "--now"])
            expectProtectedDataUnavailable(try f.raw(["get", "/p/A"]))
            #expect(try f.raw(["get", "/p/C"]).stdout == bytes)
            try f.ok(["reboot"])
            expectProtectedDataUnavailable(try f.raw(["get", "/p/C"]))
            #expect(try f.raw(["get", "/p/D"]).stdout == bytes)
            try f.ok(["unlock", "--passcode-stdin"], stdin: "5678\n")
            for c in classes { #expect(try f.raw(["get", "/p/\(c)"]).stdout == bytes, "class \(c) after unlock") }

            // Now an ordinary device: passwd wants the current passcode.
            let changed = try f.ok(["passwd"], stdin: "5678\n9012\n")
            #expect(changed.stdout.contains("Passcode changed"), "\(changed)")
            try f.ok(["reboot"])
            try f.ok(["unlock", "--passcode-stdin"], stdin: "9012\n")
            #expect(try f.raw(["get", "/p/A"]).stdout == bytes)
        }
    }

    /// Arguments that are not what the command takes get a usage error
    /// (64) that says what is wrong; a range is checked before the store is read.
    /// Every name is stored encrypted and longer, so paths nest only as
    /// deep as the file system can open them again (docs/format.md: 3,967
    /// bytes of file-system path): the deepest place allowed works, and one
    /// level more is a usage error, with nothing created, for `mkdir -p`,
    /// `put`, `put -r` and `mv` of a directory with what is below it.
    @Test func pathsNestOnlyAsDeepAsTheStoreCanOpenThem() throws {
        try withStoreFixture { f in
            try f.initialize()
            let ns = f.store + "/ns"
            // A one-byte name is stored as 39 bytes (base64url of a 12-byte
            // nonce, the name and a 16-byte tag), after a "/".
            let deepest = (3967 - ns.utf8.count) / 40
            func path(_ levels: Int) -> String { String(repeating: "/d", count: levels) }
            func expectTooDeep(_ r: RawResult, _ named: String, sourceLocation: SourceLocation = #_sourceLocation) {
                #expect(r.status == 64, "\(r)", sourceLocation: sourceLocation)
                #expect(r.stderr.hasPrefix("locker: error: \(named) is nested too deeply for this store: stored, it would need a file-system path of "),
                        "\(r)", sourceLocation: sourceLocation)
                #expect(!r.stderr.contains(ns), "the store's own paths: \(r)", sourceLocation: sourceLocation)
            }

            // At the limit, an object and a directory work.
            let bytes = sampleBytes("deep", size: 5000)
            try f.put(path(deepest - 1) + "/x", bytes)
            #expect(try f.raw(["get", path(deepest - 1) + "/x", "-"]).stdout == bytes)
            try f.ok(["mkdir", "-p", path(deepest - 1) + "/e"])

            // One level more.
            let tooDeep = path(deepest) + "/x"
            expectTooDeep(try f.raw(["mkdir", "-p", tooDeep]), tooDeep)
            expectTooDeep(try f.raw(["put", try f.localFile(Data("x".utf8)), tooDeep]), tooDeep)
            // Far past what the kernel takes: still refused as a whole,
            // not after every level that fits was made.
            expectTooDeep(try f.raw(["mkdir", "-p", path(deepest + 30)]), path(deepest + 30))
            #expect(try f.raw(["stat", path(deepest)]).status == 66)

            let local = f.root + "/local" + String(repeating: "/d", count: deepest - 1)
            try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: local + "/x"))
            let tree = try f.raw(["put", "-r", f.root + "/local", "/t"])
            #expect(tree.status == 64, "\(tree)")
            #expect(tree.stderr.hasPrefix("locker: error: /t/d/") && tree.stderr.contains(" is nested too deeply for this store"), "\(tree)")
            #expect(try f.raw(["stat", "/t"]).status == 66)

            // A directory with three levels below it moves only where
            // they fit.
            try f.ok(["mkdir", "-p", "/m/d/d/d"])
            expectTooDeep(try f.raw(["mv", "/m", path(deepest - 3)]), path(deepest - 3) + "/m")
            #expect(try f.stat("/m/d/d/d").type == "directory")
            try f.ok(["mv", "/m", path(deepest - 4)])
            #expect(try f.stat(path(deepest - 4) + "/m/d/d/d").type == "directory")
            #expect(try f.raw(["verify"]).status == 0)
        }
    }

    @Test func oddArgumentsGetTheirOwnUsageErrors() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/x", Data("0123456789".utf8))
            let cases: [([String], String)] = [
                (["get", "/x", ""], "locker: error: DEST cannot be empty; give a local path, or '-' for standard output"),
                (["export", ""], "locker: error: DEST cannot be empty; give a local directory"),
                (["get", "/x", "-", "--range", "-3"], "locker: error: --range -3: START is missing; a range is START-END or START-"),
                (["get", "/x", "-", "--range=-3"], "locker: error: --range -3: START is missing"),
                (["mv", "/x", "/"], "locker: error: /x is already at /x"),
                // A forgotten value: the next argument is not a range.
                (["get", "/x", "--range", "-r"], "locker: error: --range needs a value: START-END or START-"),
                (["get", "/missing", "-", "--range", "-3"], "locker: error: --range -3: START is missing"),
                // Digits only: Swift's integer parse takes a sign.
                (["get", "/x", "-", "--range", "+1-2"], "locker: error: --range takes START-END, for example 0-1023"),
                (["get", "/x", "-", "--range", "1-+2"], "locker: error: --range takes START-END, for example 0-1023"),
                // More digits than 64 bits hold: past the end, as it is.
                (["get", "/x", "-", "--range", "0-99999999999999999999999"],
                 "locker: error: --range 0-99999999999999999999999 is past the end (the object has 10 bytes, 0 to 9)\n"),
                (["get", "/x", "-", "--range", "99999999999999999999999-"],
                 "locker: error: --range 99999999999999999999999- starts past the end (the object has 10 bytes, 0 to 9)\n"),
                (["get", "/x", "-", "--range", "99999999999999999999999-3"], "locker: error: --range 99999999999999999999999-3: START is after END\n"),
                // A word that names no command, and one a typo away from one.
                (["nosuch"], "locker: error: no command named 'nosuch'\nlocker: hint: run 'locker help' for the list of commands\n"),
                (["stauts"], "locker: error: no command named 'stauts'\nlocker: hint: did you mean 'locker status'?\n"),
                (["x"], "locker: error: no command named 'x'\nlocker: hint: run 'locker help' for the list of commands\n"),
                (["--store", f.store, "lss", "/"], "locker: error: no command named 'lss'\nlocker: hint: did you mean 'locker ls'?\n"),
                // A value holding a newline is shown escaped, whole, on the
                // error's one line.
                (["put", "--class", "a\nb", "/etc/hostname", "/y"], "locker: error: The value 'a\\nb' is invalid for '--class <CLASS>'"),
                (["setclass", "/x", "a\nb"], "locker: error: unknown class 'a\\nb'\n"),
                // Every spelling --class takes is listed.
                (["mkdir", "/d", "--class", "Q"], "locker: error: The value 'Q' is invalid for '--class <CLASS>': use complete, completeUnlessOpen, completeUntilFirstUserAuthentication, none, A–D or untilFirstAuth\nlocker: hint: run 'locker help' for usage\n"),
            ]
            for (arguments, message) in cases {
                let result = try f.raw(arguments)
                #expect(result.status == 64, "\(result)")
                #expect(result.stderr.hasPrefix(message), "\(result)")
                // One error line, and at most one hint.
                #expect(result.stderr.split(separator: "\n").count <= 2, "\(result)")
                #expect(result.stdout.isEmpty, "\(result)")
            }
            #expect(try f.raw(["get", "/x", "-", "--range", "3-"]).stdout == Data("3456789".utf8))
            #expect(try f.raw(["get", "/x", "-"]).stdout == Data("0123456789".utf8))
            // A full device as DEST is written in order, so a prefix may
            // have gone out: no hint says nothing half-written was left.
            let full = try f.raw(["get", "/x", "/dev/full"])
            #expect(full.status == 1, "\(full)")
            #expect(full.stderr == "locker: error: cannot write /dev/full: No space left on device\n", "\(full)")
            // A missing parent: the hint gives the command that makes it.
            let noParent = try f.raw(["mkdir", "/p/q/r"])
            #expect(noParent.status == 66, "\(noParent)")
            #expect(noParent.stderr == "locker: error: /p: no such directory\nlocker: hint: 'locker mkdir -p /p/q/r' makes it with its parents\n",
                    "\(noParent)")
            // A DEST ending in "." is not run into the full stop.
            try FileManager.default.createDirectory(atPath: f.root + "/out", withIntermediateDirectories: false)
            let here = try f.raw(["get", "-r", "/", f.root + "/out/."])
            #expect(here.status == 0, "\(here)")
            #expect(here.stdout == Data("Fetched 1 object into \(f.root)/out/./.\n".utf8), "\(here)")
        }
    }

    /// `-r` and `--recursive` are one flag on every command that takes
    /// either; `passwd` and `reset` take `--passcode-stdin` as `init` and
    /// `unlock` do; `get -r` refuses `--range` rather than fetch the whole
    /// tree.
    @Test func flagsAreSpelledAlikeAcrossCommands() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = f.root + "/tree"
            try FileManager.default.createDirectory(atPath: local + "/sub", withIntermediateDirectories: true)
            try Data("x".utf8).write(to: URL(fileURLWithPath: local + "/sub/x"))
            try f.ok(["put", "--recursive", local, "/t"])
            try f.ok(["put", "-r", local, "/u"])
            try f.ok(["setclass", "/t", "D", "-r"])
            #expect(try f.stat("/t/sub/x").protection == "none")
            try f.ok(["setclass", "/u", "D", "--recursive"])
            #expect(try f.stat("/u/sub/x").protection == "none")

            let ranged = try f.raw(["get", "-r", "/t", f.root + "/ranged", "--range", "0-0"])
            #expect(ranged.status == 64, "\(ranged)")
            #expect(ranged.stderr.contains("--range applies to one object"), "\(ranged)")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/ranged"))
            try f.ok(["get", "--recursive", "/t", f.root + "/out"])
            #expect(FileManager.default.contents(atPath: f.root + "/out/sub/x") == Data("x".utf8))
            try f.ok(["rm", "--recursive", "/t"])
            try f.ok(["rm", "-r", "/u"])
            #expect(try f.ok(["ls", "/"]).stdout.isEmpty)

            try f.ok(["passwd", "--passcode-stdin"], stdin: "1234\n5678\n")
            try f.ok(["reboot"])
            #expect(try f.raw(["unlock", "--passcode-stdin"], stdinPath: f.localFile(Data("1234\n".utf8))).status == 77)
            try f.ok(["unlock", "--passcode-stdin"], stdin: "5678\n")
            try f.ok(["reset", "--yes", "--passcode-stdin"], stdin: "9012\n")
            try f.ok(["reboot"])
            try f.ok(["unlock", "--passcode-stdin"], stdin: "9012\n")
        }
    }

    /// A FIFO or a device at DEST is written into, never replaced by a
    /// file (which, for /dev/null, would have put the plaintext in /dev).
    @Test func getIntoAFIFOOrADeviceWritesIntoIt() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = sampleBytes("into-a-fifo", size: 300_000)
            try f.put("/o", bytes, ["--class", "C"])
            let fifo = f.root + "/pipe"
            #expect(mkfifo(fifo, 0o600) == 0)
            final class Received: @unchecked Sendable { var data = Data() }
            let received = Received()
            let done = DispatchSemaphore(value: 0)
            Thread {
                if let reader = FileHandle(forReadingAtPath: fifo) { received.data = reader.readDataToEndOfFile() }
                done.signal()
            }.start()
            let r = try f.raw(["get", "/o", fifo])
            #expect(r.status == 0, "\(r)")
            #expect(done.wait(timeout: .now() + 30) == .success, "nothing wrote into the FIFO")
            #expect(received.data == bytes)
            var st = stat()
            #expect(lstat(fifo, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO, "the FIFO was replaced")

            if geteuid() == 0 {
                // A node of /dev/null's numbers (1, 3), made here.
                let null = f.root + "/null"
                #expect(mknod(null, S_IFCHR | 0o666, dev_t((1 << 8) | 3)) == 0)
                let n = try f.raw(["get", "/o", null])
                #expect(n.status == 0, "\(n)")
                #expect(lstat(null, &st) == 0 && st.st_mode & S_IFMT == S_IFCHR, "the device node was replaced")
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: f.root).filter { $0.hasPrefix(".locker-") }
            #expect(left.isEmpty, "\(left)")
        }
    }

    /// `mkdir -p` makes sure a directory exists; it never changes the
    /// default class of one that does (that could lower the protection of
    /// everything stored there later, under a "Created" line).
    @Test func mkdirPNeverChangesAnExistingDefault() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/d", "--class", "A"])
            let lower = try f.run(["mkdir", "-p", "/d", "--class", "D"])
            #expect(lower.status == 73, "\(lower)")
            #expect(lower.stderr.contains("/d already exists, with default class complete"), "\(lower)")
            #expect(lower.stderr.contains("locker: hint: 'locker setclass /d none'"), "\(lower)")
            #expect(try f.stat("/d").defaultClass == "complete")

            let same = try f.ok(["mkdir", "-p", "/d", "--class", "complete"])
            #expect(same.stdout == "/d (default class complete) already exists.\n", "\(same)")
            let plain = try f.ok(["mkdir", "-p", "/d"])
            #expect(plain.stdout.contains("already exists"), "\(plain)")
            #expect(try f.stat("/d").defaultClass == "complete")

            // A directory without a default of its own is not given one.
            try f.ok(["mkdir", "/e"])
            #expect(try f.run(["mkdir", "-p", "/e", "--class", "B"]).status == 73)
            #expect(try f.stat("/e").defaultClass == nil)

            let made = try f.ok(["mkdir", "-p", "/n/m", "--class", "B"])
            #expect(made.stdout == "Created /n/m (default class completeUnlessOpen).\n", "\(made)")
        }
    }

    /// `setclass DIR X --recursive` with an object below in a locked class
    /// changes nothing: not the directory's default, not the objects it
    /// could have rewrapped.
    @Test func recursiveSetclassWithALockedClassChangesNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/t"])
            // Listed before the locked one, so a rewrap in walk order would
            // have changed it first.
            try f.put("/t/a", Data("c".utf8), ["--class", "C"])
            try f.put("/t/b", Data("a".utf8), ["--class", "A"])
            try f.ok(["lock", "--now"])
            let r = try f.run(["setclass", "/t", "D", "--recursive"])
            #expect(r.status == 75, "\(r)")
            #expect(r.stderr.contains("class complete is locked, and rewrapping the objects below /t needs it; nothing was changed"), "\(r)")
            #expect(try f.stat("/t").defaultClass == nil)
            #expect(try f.stat("/t/a").protection == "completeUntilFirstUserAuthentication")
            #expect(try f.stat("/t/a").protectionSource == "explicit")
            // The class asked for is the one locked.
            try f.ok(["rm", "/t/b"])
            let target = try f.run(["setclass", "/t", "A", "--recursive"])
            #expect(target.status == 75, "\(target)")
            #expect(target.stderr.contains("class complete is locked"), "\(target)")
            #expect(try f.stat("/t").defaultClass == nil)
            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            try f.put("/t/b", Data("a".utf8), ["--class", "A"])
            #expect(try f.stat("/t/b").protection == "complete")

            try f.ok(["setclass", "/t", "D", "--recursive"])
            #expect(try f.stat("/t").defaultClass == "none")
            for name in ["a", "b"] { #expect(try f.stat("/t/" + name).protection == "none") }
            #expect(try f.raw(["get", "/t/b"]).stdout == Data("a".utf8))
        }
    }

    /// After a wipe, the old store can never be read. `init` refuses to
    /// make a new device over it (every later command would fail on it)
    /// and says what to do; with the store deleted, it starts again.
    @Test func initAfterWipeRefusesTheOldStore() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/x", Data("before".utf8), ["--class", "D"])
            let wipe = try f.ok(["wipe", "--yes"])
            #expect(wipe.stdout.contains("The store \(f.store) can only be deleted now"), "\(wipe)")
            let again = try f.run(["init", "--passcode-stdin"], stdin: "1234\n")
            #expect(again.status == 73, "\(again)")
            #expect(again.stderr.contains("holds objects of another device, or of one wiped since"), "\(again)")
            #expect(again.stderr.contains("locker: hint: delete it ('rm -r \(f.store)')"), "\(again)")
            #expect(try f.status().state == "wiped", "the refused init made a device")

            try FileManager.default.removeItem(atPath: f.store)
            try f.initialize()
            try f.put("/y", Data("after".utf8), ["--class", "C"])
            #expect(try f.raw(["get", "/y"]).stdout == Data("after".utf8))
            #expect(try f.raw(["stat", "/x"]).status == 66)
        }
    }

    /// A mistyped `--device` or `--store` fails and creates nothing: no
    /// directory chain, no agent, no empty store shown as if it were the
    /// user's, and nothing written into a directory of other files.
    /// `get`, `get -r` and `export` refuse a destination in the store or
    /// the device directory, also through a link: plaintext must not land
    /// beside the ciphertext.
    @Test func fetchingIntoTheStoreOrDeviceIsRefused() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/x", Data("plain".utf8), ["--class", "D"])
            try #require(symlink(f.store + "/ns", f.root + "/into-store") == 0)
            let attempts: [[String]] = [
                ["get", "/x", f.store + "/x"], ["get", "/x", f.store + "/"], ["get", "-r", "/", f.store + "/tree"],
                ["export", f.store + "/exported"], ["get", "/x", f.root + "/into-store/x"],
                ["get", "/x", f.device + "/x"], ["export", f.device + "/new/deeper"],
            ]
            for arguments in attempts {
                let r = try f.run(arguments)
                #expect(r.status == 64, "\(r)")
                #expect(r.stderr.contains("fetched plaintext must not be written there"), "\(r)")
            }
            #expect(!FileManager.default.fileExists(atPath: f.store + "/x"))
            #expect(!FileManager.default.fileExists(atPath: f.store + "/tree"))
            #expect(!FileManager.default.fileExists(atPath: f.store + "/exported"))
            #expect(!FileManager.default.fileExists(atPath: f.store + "/ns/x"))
            #expect(!FileManager.default.fileExists(atPath: f.device + "/x"))
            #expect(!FileManager.default.fileExists(atPath: f.device + "/new"))
            #expect(try f.run(["verify"]).status == 0)
            // Beside the store is fine.
            try f.ok(["get", "/x", f.root + "/beside"])
            #expect(FileManager.default.contents(atPath: f.root + "/beside") == Data("plain".utf8))
        }
    }

    /// An `init` that is refused leaves nothing it made: no device
    /// directory, no agent, no store directory.
    @Test func aRefusedInitLeavesNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/x", Data("mine".utf8), ["--class", "D"])
            // The store of another device.
            let other = f.root + "/other-device"
            let foreign = try f.run(["init", "--no-passcode", "--device", other])
            #expect(foreign.status == 73, "\(foreign)")
            #expect(!FileManager.default.fileExists(atPath: other), "\(foreign)")
            #expect(agentProcesses(serving: other).isEmpty)
            // A store refused only after the device was made (a link to
            // a directory holding the device).
            let real = f.root + "/real"
            try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false)
            try #require(symlink(real, f.root + "/link") == 0)
            let inside = real + "/device"
            let linked = try f.run(["init", "--no-passcode", "--device", inside, "--store", f.root + "/link"])
            #expect(linked.status != 0, "\(linked)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: real) == [], "\(linked)")
            #expect(agentProcesses(serving: inside).isEmpty)
            // No passcode given: nothing made, not the store nor the
            // directories on the way to either.
            let fresh = f.root + "/fresh"
            let none = try f.run(["init", "--passcode-stdin", "--device", fresh + "/a/device", "--store", fresh + "/b/store"], stdin: "")
            #expect(none.status == 64, "\(none)")
            #expect(!FileManager.default.fileExists(atPath: fresh), "\(none)")
            #expect(agentProcesses(serving: fresh + "/a/device").isEmpty)
            // The first device is untouched.
            #expect(try f.ok(["get", "/x"]).stdout == "mine")
        }
    }

    /// An `init` that fails at its passcode prompt removes only what is
    /// still its own: not a device, store and objects another `init`
    /// made meanwhile through the agent it started, nor a file put
    /// meanwhile in a directory it made on the way.
    @Test func aFailedInitRemovesNothingMadeWhileItWaited() throws {
        try withStoreFixture { f in
            // The passcode comes from a FIFO that this test holds open, so
            // that the init waits until the test closes it.
            func waitingInit(_ extra: [String]) throws -> (BackgroundRun, Int32) {
                let fifo = f.root + "/passcode-\(UUID().uuidString.prefix(8))"
                try #require(mkfifo(fifo, 0o600) == 0)
                let writer = open(fifo, O_RDWR)
                try #require(writer >= 0)
                let run = try BackgroundRun(f, ["init", "--passcode-stdin"] + extra, stdin: fifo)
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline && !isReadingStandardInput(run.process.processIdentifier) { usleep(5_000) }
                #expect(isReadingStandardInput(run.process.processIdentifier), "the init is not waiting for its passcode")
                return (run, writer)
            }

            let (first, writer) = try waitingInit([])
            #expect(FileManager.default.fileExists(atPath: f.device), "the waiting init has made the device directory")
            // Another init makes the device, the store and an object.
            try f.ok(["init", "--passcode-stdin"], stdin: "5678\n")
            try f.put("/precious", Data("keep".utf8), ["--class", "C"])
            close(writer)
            #expect(first.waitForExit(seconds: 20) == 64)
            #expect(try f.ok(["get", "/precious"]).stdout == "keep")
            #expect(try f.ok(["verify"]).status == 0)

            // Directories made on the way go only if nothing was put in them.
            let fresh = f.root + "/fresh"
            let (second, secondWriter) = try waitingInit(["--device", fresh + "/a/device", "--store", fresh + "/b/store"])
            #expect(FileManager.default.fileExists(atPath: fresh + "/a/device"))
            try Data("mine".utf8).write(to: URL(fileURLWithPath: fresh + "/note"))
            close(secondWriter)
            #expect(second.waitForExit(seconds: 20) == 64)
            #expect(FileManager.default.contents(atPath: fresh + "/note") == Data("mine".utf8))
            #expect(try FileManager.default.contentsOfDirectory(atPath: fresh) == ["note"])
            #expect(agentProcesses(serving: fresh + "/a/device").isEmpty)
        }
    }

    /// `close` of a complete object whose open ended with the grace period
    /// says why it is not open, not only that it is not.
    @Test func closingACompleteObjectAfterGraceSaysItsOpenEnded() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/a", Data("secret".utf8), ["--class", "A"])
            try f.ok(["open", "/a"])
            try f.ok(["lock", "--now"])
            let r = try f.run(["close", "/a"])
            #expect(r.status == 66, "\(r)")
            #expect(r.stderr == """
                locker: error: /a is not open
                locker: hint: a complete object's open ends when the grace period after a lock ends; open it again once unlocked

                """, "\(r)")
        }
    }

    /// A class A object written over without `--class` stays class A: it
    /// used to take its directory's default, or the store's, without a
    /// word, so that a secret became readable while locked. While locked,
    /// it cannot be written over at all, as a new class A object cannot.
    @Test func writingOverAnObjectKeepsItsExplicitClass() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/sec", Data("v1".utf8), ["--class", "A"])
            let r = try f.put("/sec", Data("v2".utf8))
            #expect(r.stdout.contains("complete, explicit"), "\(r)")
            #expect(try f.ok(["stat", "/sec"]).stdout.contains("complete"))
            try f.ok(["lock", "--now"])
            let locked = try f.run(["put", try f.localFile(Data("v3".utf8)), "/sec"])
            #expect(locked.status == 75, "\(locked)")
            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(try f.ok(["get", "/sec"]).stdout == "v2")
        }
    }

    /// `put -r` of a tree that holds the store and the device directory
    /// (a home directory holds both by default) skips both, with a warning
    /// each: the store is not stored into itself, nor the device's secret
    /// into the store. A tree inside either is refused.
    @Test func putTreeSkipsTheStoreAndTheDevice() throws {
        try withStoreFixture { f in
            try f.initialize()
            try Data("mine".utf8).write(to: URL(fileURLWithPath: f.root + "/own.txt"))
            let r = try f.run(["put", "-r", f.root, "/home", "--class", "C"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stderr.contains("locker: warning: skipped \(f.root)/s: the store \(f.store), not stored\n"), "\(r)")
            #expect(r.stderr.contains("locker: warning: skipped \(f.root)/d: the device directory \(f.device), not stored\n"), "\(r)")
            let listed = try f.ok(["ls", "/home"]).stdout.split(separator: "\n").map(String.init)
            #expect(listed.contains("own.txt"), "\(listed)")
            #expect(!listed.contains("s/") && !listed.contains("d/"), "\(listed)")
            #expect(try f.ok(["get", "/home/own.txt"]).stdout == "mine")
            for inside in [f.store, f.store + "/ns", f.device] {
                let refused = try f.run(["put", "-r", inside, "/x"])
                #expect(refused.status == 64, "\(inside): \(refused)")
                #expect(refused.stderr.hasPrefix("locker: error: \(inside) is inside the "), "\(inside): \(refused)")
            }
            #expect(try f.run(["stat", "/x"]).status == 66)
            #expect(try f.ok(["verify"]).status == 0)
        }
    }

    /// A local file's name is stored as it is: a leading "~" is not a home
    /// directory (URL would expand "~root" to "/root", so two files would
    /// land on one object, or a name would be "/").
    @Test func aLocalNameWithATildeIsStoredAsItIs() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/u"])
            let local = f.root + "/tilde"
            try FileManager.default.createDirectory(atPath: local, withIntermediateDirectories: false)
            let names = ["~", "~root", "~nobody", "~nosuchuser"]
            for name in names {
                try Data(name.utf8).write(to: URL(fileURLWithPath: local + "/" + name))
                let shell = "cd '\(local)' && exec '\(CLIFixture.lockerPath)' put '\(name)' /u/"
                let r = try f.runProgram("/bin/sh", ["-c", shell])
                #expect(r.status == 0, "\(name): \(r)")
                #expect(r.stdout.hasPrefix("Stored /u/\(name) ("), "\(name): \(r)")
            }
            #expect(try f.ok(["ls", "/u"]).stdout == names.sorted().map { $0 + "\n" }.joined())
            for name in names { #expect(try f.ok(["get", "/u/" + name]).stdout == name) }
            #expect(try f.ok(["verify"]).status == 0)
        }
    }

    @Test func aMistypedDeviceOrStoreCreatesNothing() throws {
        try withStoreFixture { f in
            let typo = f.root + "/typo/a/b"
            for command in [["status"], ["unlock"], ["lock"], ["ls"], ["get", "/x"], ["put", "-", "/x"]] {
                let r = try f.run(command + ["--device", typo], stdin: "data")
                #expect(r.status == 1, "\(r)")
                #expect(r.stderr.contains("locker: error: no device at \(typo)"), "\(r)")
                #expect(r.stderr.contains("hint: run 'locker init' to create one, or check --device"), "\(r)")
            }
            #expect(!FileManager.default.fileExists(atPath: f.root + "/typo"), "a command made the mistyped device's directories")
            #expect(agentProcesses(serving: typo).isEmpty, "an agent was started on the mistyped device")

            try f.initialize()
            try f.put("/x", Data("mine".utf8), ["--class", "D"])
            let missing = f.root + "/typo/store"
            for command in [["ls"], ["ls", "-l", "/"], ["get", "/x", f.root + "/out"], ["stat", "/x"], ["rm", "/x"],
                            ["mv", "/x", "/y"], ["setclass", "/x", "C"], ["verify"], ["purge", "--key-reset"]] {
                let r = try f.run(command + ["--store", missing])
                #expect(r.status == 66, "\(r)")
                #expect(r.stderr.contains("locker: error: no store at \(missing)"), "\(r)")
            }
            #expect(!FileManager.default.fileExists(atPath: f.root + "/typo"), "a reading command made a store")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/out"))

            // A directory of other files is not a store, for any command.
            let documents = f.root + "/documents"
            try FileManager.default.createDirectory(atPath: documents, withIntermediateDirectories: false)
            try Data("notes".utf8).write(to: URL(fileURLWithPath: documents + "/notes.txt"))
            let newDevice = f.root + "/new-device"
            for command in [["ls"], ["put", "-", "/x"], ["mkdir", "/d"], ["init", "--no-passcode", "--device", newDevice]] {
                let r = try f.run(command + ["--store", documents], stdin: "data")
                #expect(r.status == 1, "\(r)")
                #expect(r.stderr.contains("locker: error: \(documents) is not a Locker store: it holds other files"), "\(r)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: documents) == ["notes.txt"])
            #expect(!FileManager.default.fileExists(atPath: newDevice), "init made the device before refusing the store")
            let notDirectory = try f.run(["ls", "--store", documents + "/notes.txt"])
            #expect(notDirectory.stderr.contains("notes.txt is not a Locker store: it is not a directory"), "\(notDirectory)")

            // An empty directory holds no store: reading it makes none.
            let empty = f.root + "/empty"
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
            for command in [["ls"], ["verify"], ["stat", "/x"]] {
                let r = try f.run(command + ["--store", empty])
                #expect(r.status == 66, "\(r)")
                #expect(r.stderr.contains("no store at \(empty)"), "\(r)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: empty).isEmpty)

            // put and mkdir refused for their arguments make no store.
            let unmade = f.root + "/unmade/store"
            for (command, status) in [(["put", f.root + "/no-such-file", "/x"], Int32(66)), (["put", f.root, "/x"], 64),
                                      (["put", "-", "/a/../b"], 64), (["mkdir", "/a//b"], 64)] {
                let r = try f.run(command + ["--store", unmade], stdin: "data")
                #expect(r.status == status, "\(r)")
            }
            #expect(!FileManager.default.fileExists(atPath: f.root + "/unmade"))
            let blank = try f.run(["ls", "--store", ""])
            #expect(blank.status == 64 && blank.stderr.contains("--store needs a directory"), "\(blank)")

            // The device directory and the store stay apart.
            for (store, device) in [(f.root + "/S", f.root + "/S/dev"), (f.root + "/T", f.root + "/T"), (f.root + "/U/s", f.root + "/U")] {
                let r = try f.run(["init", "--no-passcode", "--store", store, "--device", device])
                #expect(r.status == 64, "\(r)")
                #expect(r.stderr.contains("must be apart"), "\(r)")
            }
            for made in ["S", "T", "U"] { #expect(!FileManager.default.fileExists(atPath: f.root + "/" + made)) }
            // Nor is a store made, or opened, inside the device directory
            // (or the other way round) by a store command.
            let deviceEntries = try FileManager.default.contentsOfDirectory(atPath: f.device)
            for (command, store) in [(["put", "-", "/x"], f.device + "/sub"), (["mkdir", "/m"], f.device + "/sub"), (["ls", "/"], f.device),
                                     (["put", "-", "/x"], f.root)] {
                let r = try f.run(command + ["--store", store], stdin: "data")
                #expect(r.status == 64, "\(command) \(store): \(r)")
                #expect(r.stderr == "locker: error: the device directory \(f.device) and the store \(store) must be apart, neither inside the other\n"
                        + "locker: hint: give --device and --store separate directories\n", "\(r)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: f.device) == deviceEntries)

            // put and mkdir make a new store; then everything reads it.
            let second = f.root + "/second/store"
            try f.ok(["mkdir", "/m", "--store", second])
            try f.ok(["put", "-", "/m/y", "--store", second], stdin: "two")
            #expect(try f.raw(["get", "/m/y", "--store", second]).stdout == Data("two".utf8))
            #expect(try f.raw(["get", "/x"]).stdout == Data("mine".utf8), "the first store changed")
        }
    }

    /// `put -r` of a file stores it, as `cp -r` copies one; a missing
    /// source fails as it does without -r.
    @Test func putRecursiveOfAFileStoresIt() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = try f.localFile(Data("one file".utf8))
            let stored = try f.ok(["put", "-r", local, "/x", "--class", "D"])
            #expect(stored.stdout.hasPrefix("Stored /x (8 bytes, none, explicit)"), "\(stored)")
            #expect(try f.raw(["get", "/x"]).stdout == Data("one file".utf8))
            let json = try f.ok(["put", "-r", "--json", local, "/d/"])
            #expect(json.stdout.contains("\"imported\" : 1"), "\(json)")
            #expect(json.stdout.contains("\"skipped\" : 0"), "\(json)")
            #expect(try f.raw(["get", "/d/" + URL(fileURLWithPath: local).lastPathComponent]).stdout == Data("one file".utf8))
            let missing = try f.run(["put", "-r", f.root + "/no-such", "/y"])
            #expect(missing.status == 66, "\(missing)")
            #expect(missing.stderr.contains("cannot read \(f.root)/no-such: No such file or directory"), "\(missing)")
            #expect(try f.raw(["stat", "/y"]).status == 66)
        }
    }

    /// `mkdir` of a name an object holds says it exists (exit 73), as
    /// mkdir(1) does, with or without -p; an object on the way is not a
    /// directory (exit 1). The object is left alone.
    @Test func mkdirOverAnObjectSaysItExists() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/obj", Data("kept".utf8), ["--class", "D"])
            for arguments in [["mkdir", "/obj"], ["mkdir", "-p", "/obj"], ["mkdir", "-p", "/obj", "--class", "A"]] {
                let r = try f.run(arguments)
                #expect(r.status == 73, "\(r)")
                #expect(r.stderr == "locker: error: /obj already exists\n", "\(r)")
            }
            let below = try f.run(["mkdir", "-p", "/obj/sub"])
            #expect(below.status == 1, "\(below)")
            #expect(below.stderr.contains("/obj is an object, not a directory"), "\(below)")
            #expect(try f.raw(["get", "/obj"]).stdout == Data("kept".utf8))
            #expect(try f.stat("/obj").protection == "none")
        }
    }

    /// `get OBJ DIR/` needs DIR to exist, as cp(1) does: the error says so,
    /// and nothing is made.
    @Test func getIntoAMissingDirectoryNamesTheReason() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/obj", Data("data".utf8), ["--class", "D"])
            let missing = try f.run(["get", "/obj", f.root + "/nodir/"])
            #expect(missing.status == 1, "\(missing)")
            #expect(missing.stderr == "locker: error: cannot write into \(f.root)/nodir/: No such file or directory\n", "\(missing)")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/nodir"))
            let file = try f.localFile(Data("mine".utf8))
            let notDirectory = try f.run(["get", "/obj", file + "/"])
            #expect(notDirectory.stderr == "locker: error: cannot write into \(file)/: Not a directory\n", "\(notDirectory)")
            #expect(try fileBytes(file) == Data("mine".utf8))
            try FileManager.default.createDirectory(atPath: f.root + "/dir", withIntermediateDirectories: false)
            try f.ok(["get", "/obj", f.root + "/dir/"])
            #expect(try fileBytes(f.root + "/dir/obj") == Data("data".utf8))
            // A directory where the object would go: its path is named once,
            // with one slash.
            try FileManager.default.createDirectory(atPath: f.root + "/dir/sub/obj", withIntermediateDirectories: true)
            let occupied = try f.run(["get", "/obj", f.root + "/dir/sub/"])
            #expect(occupied.status == 1, "\(occupied)")
            #expect(occupied.stderr == "locker: error: cannot write \(f.root)/dir/sub/obj: Is a directory\n", "\(occupied)")
            let doubled = try f.run(["get", "/obj", f.root + "/dir/sub//"])
            #expect(doubled.stderr == "locker: error: cannot write \(f.root)/dir/sub/obj: Is a directory\n", "\(doubled)")
        }
    }

    /// `--json` into a pipe nobody reads any more is a one-line error
    /// (exit 1), not a crash with a backtrace; and mkdir, setclass, purge
    /// and export print JSON.
    @Test func jsonOutput() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/x", Data("x".utf8), ["--class", "D"])
            // The read end is closed before locker starts: its write fails.
            let script = """
                import os, subprocess, sys
                r, w = os.pipe()
                os.close(r)
                p = subprocess.run(sys.argv[1:], stdout=w, stderr=subprocess.PIPE)
                sys.stdout.write("%d\\n%s" % (p.returncode, p.stderr.decode()))
                """
            let closed = try f.runProgram("/usr/bin/python3", ["-c", script, CLIFixture.lockerPath, "stat", "--json", "/x"])
            #expect(closed.stdout == "1\nlocker: error: cannot write standard output: Broken pipe\n", "\(closed)")
            // Plain output too: a result that went nowhere is no success.
            for arguments in [["ls", "/"], ["stat", "/x"], ["status"]] {
                let plain = try f.runProgram("/usr/bin/python3", ["-c", script, CLIFixture.lockerPath] + arguments)
                #expect(plain.stdout == "1\nlocker: error: cannot write standard output: Broken pipe\n", "\(arguments): \(plain)")
                let full = try f.runProgram("/bin/sh", ["-c", "\"$0\" \"$@\" > /dev/full", CLIFixture.lockerPath] + arguments)
                #expect(full.status == 1, "\(arguments): \(full)")
                #expect(full.stderr == "locker: error: cannot write standard output: No space left on device\n", "\(arguments): \(full)")
            }

            let made = try f.ok(["mkdir", "--json", "/d", "--class", "B"])
            let directory = try #require(try JSONSerialization.jsonObject(with: Data(made.stdout.utf8)) as? [String: Any])
            #expect(directory["path"] as? String == "/d" && directory["defaultClass"] as? String == "completeUnlessOpen", "\(made)")
            let again = try f.ok(["mkdir", "-p", "--json", "/d"])
            #expect(again.stdout == made.stdout, "\(again)")
            let changed = try f.ok(["setclass", "--json", "/x", "C"])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(changed.stdout.utf8)) as? [String: Any])
            #expect(object["protection"] as? String == "completeUntilFirstUserAuthentication", "\(changed)")
            try f.ok(["lock", "--now"])
            let exported = try f.run(["export", "--json", "--skip-unavailable", f.root + "/ex"])
            #expect(exported.status == 0, "\(exported)")
            let summary = try #require(try JSONSerialization.jsonObject(with: Data(exported.stdout.utf8)) as? [String: Any])
            #expect(summary["objects"] as? Int == 1 && summary["exported"] as? Int == 1, "\(exported)")
            #expect(summary["manifest"] as? String == f.root + "/ex/manifest.json", "\(exported)")
            let purged = try f.ok(["purge", "--key-reset", "--json"])
            let list = try #require(try JSONSerialization.jsonObject(with: Data(purged.stdout.utf8)) as? [String: Any])
            #expect((list["purged"] as? [String])?.isEmpty == true, "\(purged)")
        }
    }

    /// `open`, `close`, `mv` and `rm` with `--json` print one document:
    /// the item as `stat --json` shows it afterwards, or what was removed;
    /// `reboot`, `passwd`, `reset` and `wipe` print the device's status
    /// afterwards, as `status --json` does.
    @Test func changingCommandsPrintJSON() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/a", Data("alpha".utf8), ["--class", "B"])
            try f.ok(["mkdir", "/dir"])
            func document(_ arguments: [String], stdin: String? = nil) throws -> [String: Any] {
                let r = try f.ok(arguments, stdin: stdin)
                return try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "\(r)")
            }
            func status(_ arguments: [String], stdin: String? = nil) throws -> StatusJSON {
                try JSONDecoder().decode(StatusJSON.self, from: Data(try f.ok(arguments, stdin: stdin).stdout.utf8))
            }

            let opened = try document(["open", "--json", "/a"])
            #expect(opened["path"] as? String == "/a" && opened["type"] as? String == "object", "\(opened)")
            #expect(opened["protection"] as? String == "completeUnlessOpen", "\(opened)")
            let open = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(open.openObjects.count == 1)
            // The open object is listed by the ID that stat shows.
            let id = try #require(opened["id"] as? String, "\(opened)")
            #expect(id.count == 32 && id.allSatisfy(\.isHexDigit), "\(opened)")
            #expect(open.openObjects.first?.id == id, "\(open.openObjects)")
            #expect(try f.stat("/a").id == id)
            #expect(try f.ok(["stat", "/a"]).stdout.contains("Object ID:         \(id)\n"))
            #expect(try f.ok(["status"]).stdout.contains("\(id)  completeUnlessOpen"))
            let closed = try document(["close", "--json", "/a"])
            #expect(closed["path"] as? String == "/a" && closed["size"] as? Int == 5, "\(closed)")
            let none = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(none.openObjects.isEmpty)

            // Into an existing directory: the path it is at now.
            let moved = try document(["mv", "--json", "/a", "/dir"])
            #expect(moved["path"] as? String == "/dir/a" && moved["protection"] as? String == "completeUnlessOpen", "\(moved)")
            let renamed = try document(["mv", "--json", "/dir", "/folder"])
            #expect(renamed["path"] as? String == "/folder" && renamed["type"] as? String == "directory", "\(renamed)")
            let removed = try document(["rm", "--json", "/folder/a"])
            #expect(removed as? [String: String] == ["removed": "/folder/a"], "\(removed)")
            #expect(try f.raw(["stat", "/folder/a"]).status == 66)
            let removedTree = try document(["rm", "-r", "--json", "/folder"])
            #expect(removedTree as? [String: String] == ["removed": "/folder"], "\(removedTree)")

            let rebooted = try status(["reboot", "--json"])
            #expect(rebooted.state == "beforeFirstUnlock" && rebooted.readableClasses == ["none"], "\(rebooted)")
            #expect(try status(["unlock", "--passcode-stdin", "--json"], stdin: "1234\n").state == "unlocked")
            let changed = try status(["passwd", "--json"], stdin: "1234\n5678\n")
            #expect(changed.state == "unlocked" && changed.passcodeSet && changed.keyGeneration == 1, "\(changed)")
            let reset = try status(["reset", "--yes", "--json"], stdin: "9999\n")
            #expect(reset.keyGeneration == 2, "\(reset)")
            let wiped = try status(["wipe", "--yes", "--json"])
            #expect(wiped.state == "wiped" && wiped.readableClasses.isEmpty, "\(wiped)")
        }
    }

    /// A trailing "/" means a directory, as it does to rm(1): an object
    /// named that way is an error, and `rm /k/D/` leaves the object alone.
    @Test func aTrailingSlashNeverNamesAnObject() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.put("/k/D", Data("keep me".utf8), ["--class", "D"])
            for command in [["rm", "/k/D/"], ["get", "/k/D/"], ["stat", "/k/D/"], ["ls", "/k/D/"],
                            ["setclass", "/k/D/", "C"], ["mv", "/k/D/", "/moved"]] {
                let r = try f.raw(command)
                #expect(r.status == 1, "\(r)")
                #expect(r.stderr.contains("/k/D is an object, not a directory"), "\(r)")
            }
            #expect(try f.raw(["get", "/k/D"]).stdout == Data("keep me".utf8))
            #expect(try f.stat("/k/D").protection == "none")
            // As a destination, "E/" is a directory that must exist.
            #expect(try f.raw(["mv", "/k/D", "/k/E/"]).status == 66)
            #expect(try f.raw(["stat", "/k/E"]).status == 66)
            try f.ok(["mkdir", "/k/sub"])
            try f.ok(["mv", "/k/D", "/k/sub/"])
            #expect(try f.raw(["get", "/k/sub/D"]).stdout == Data("keep me".utf8))
            try f.ok(["mv", "/k/sub/D", "/k/D"])
            // A directory may be written either way.
            #expect(try f.ok(["ls", "/k/"]).stdout.contains("D"))
            try f.ok(["rm", "-r", "/k/"])
            #expect(try f.raw(["stat", "/k"]).status == 66)
        }
    }

    /// Names may hold control characters; output shows them escaped, so
    /// that one name is one line and no name reaches the terminal as a
    /// command. `--json` keeps the name exact.
    @Test func controlCharactersInNamesAreShownEscaped() throws {
        try withStoreFixture { f in
            try f.initialize()
            let name = "two\nlines\u{1b}[31mred\u{9b}"
            let stored = try f.put("/" + name, Data("x".utf8), ["--class", "D"])
            #expect(stored.stdout.hasPrefix("Stored /two\\nlines\\x1b[31mred\\u{9b} ("), "\(stored)")
            let made = try f.ok(["mkdir", "/rtl\u{202e}txt.exe"])
            #expect(made.stdout == "Created /rtl\\u{202e}txt.exe.\n", "\(made)")
            for arguments in [["ls", "/"], ["ls", "-l", "/"]] {
                let listed = try f.ok(arguments)
                #expect(listed.stdout.split(separator: "\n").count == 2, "two names, two lines: \(listed)")
                #expect(listed.stdout.contains("two\\nlines\\x1b[31mred\\u{9b}"), "\(listed)")
                #expect(!listed.stdout.contains("\u{1b}"), "\(listed)")
            }
            let stat = try f.ok(["stat", "/" + name])
            #expect(stat.stdout.contains("Path:              /two\\nlines\\x1b[31mred\\u{9b}\n"), "\(stat)")
            #expect(try f.stat("/" + name).path == "/" + name)
            let missing = try f.run(["get", "/gone\u{1b}]0;title\u{07}"])
            #expect(missing.status == 66, "\(missing)")
            #expect(missing.stderr.contains("/gone\\x1b]0;title\\x07: no such object"), "\(missing)")
            #expect(!missing.stderr.contains("\u{1b}"), "\(missing)")
            #expect(try f.raw(["get", "/" + name]).stdout == Data("x".utf8))
            // A name with a backslash and "n" must not look like one with a
            // newline: the backslash is doubled.
            try f.put("/literal\\nname", Data("y".utf8), ["--class", "D"])
            try f.put("/literal\nname", Data("z".utf8), ["--class", "D"])
            let both = try f.ok(["ls", "/"])
            #expect(both.stdout.contains("literal\\\\nname\n"), "\(both)")
            #expect(both.stdout.contains("literal\\nname\n"), "\(both)")
        }
    }

    /// A `put` refused because its class is locked changes nothing: not
    /// even the missing parent directories appear.
    @Test func aRefusedPutMakesNoDirectories() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["mkdir", "/locked", "--class", "A"])
            try f.ok(["lock", "--now"])
            let local = try f.localFile(Data("secret".utf8))
            expectProtectedDataUnavailable(try f.raw(["put", local, "/a/b/c", "--class", "A"]))
            #expect(try f.raw(["stat", "/a"]).status == 66)
            // Inherited from a locked directory, through missing ones.
            expectProtectedDataUnavailable(try f.raw(["put", local, "/locked/x/y/z"]))
            #expect(try f.raw(["stat", "/locked/x"]).status == 66)
            // An available class still makes them.
            try f.ok(["put", local, "/a/b/c", "--class", "C"])
            #expect(try f.stat("/a/b/c").protection == "completeUntilFirstUserAuthentication")
        }
    }

    /// A class B object opened before a lock stays readable until closed.
    @Test func openCompleteUnlessOpenObjectSurvivesLockUntilClosed() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = sampleBytes("open-B", size: 700_000)
            let (data, _) = try f.putTracked("/docs/b", bytes, ["--class", "B"])
            let open = try f.ok(["open", "/docs/b"])
            #expect(open.stdout.contains("Opened /docs/b (completeUnlessOpen)"), "\(open)")

            let status = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(status.openObjects.count == 1)
            #expect(status.openObjects.first?.protection == "completeUnlessOpen")
            #expect(status.openObjects.first?.id == (data as NSString).lastPathComponent)

            let lock = try f.ok(["lock", "--now"])
            #expect(lock.stdout.contains("Still open:"), "\(lock)")
            let read = try f.raw(["get", "/docs/b"])
            #expect(read.status == 0, "\(read)")
            #expect(read.stdout == bytes)
            let ranged = try f.raw(["get", "/docs/b", "--range", "\(storeChunk - 2)-\(storeChunk + 1)"])
            #expect(ranged.stdout == bytes[(storeChunk - 2)...(storeChunk + 1)], "\(ranged)")
            let stat = try f.stat("/docs/b")
            #expect(stat.accessible == true)
            #expect(stat.reason == "open")

            let closed = try f.ok(["close", "/docs/b"])
            #expect(closed.stdout == "Closed /docs/b.\n", "\(closed)")
            // Closing what is not open is an error (66), not a silent success.
            let again = try f.raw(["close", "/docs/b"])
            #expect(again.status == 66, "\(again)")
            #expect(again.stderr == "locker: error: /docs/b is not open\nlocker: hint: open it with 'locker open'\n", "\(again)")
            let after = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(after.openObjects.isEmpty)
            expectProtectedDataUnavailable(try f.raw(["get", "/docs/b"]))
            #expect(try f.stat("/docs/b").accessible == false)
            let out = f.root + "/b.out"
            expectProtectedDataUnavailable(try f.raw(["get", "/docs/b", out]))
            #expect(!FileManager.default.fileExists(atPath: out), "a refused get wrote \(out)")

            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(try f.raw(["get", "/docs/b"]).stdout == bytes)
        }
    }

    /// The agent keeps at most 4096 objects open, so another program of
    /// the user that fills its table makes `open` and `put --open` fail
    /// with one line and a hint, and store nothing, until some are closed.
    @Test func openBeyondTheAgentsLimitSaysSoAndOpensNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = sampleBytes("limit")
            try f.put("/a", bytes, ["--class", "B"])
            let agent = try RawAgentConnection(f)
            let replies = try agent.registerOpen((0..<4096).map { "filler-\($0)" })
            #expect(replies.allSatisfy { $0 == [0x00] }, "\(replies.first { $0 != [0x00] } ?? [])")

            let expected = """
                locker: error: too many open objects (4096 are open)
                locker: hint: close the objects no longer needed with 'locker close PATH', then try again

                """
            let open = try f.raw(["open", "/a"])
            #expect(open.status == 1 && open.stderr == expected && open.stdout.isEmpty, "\(open)")
            let local = try f.localFile(bytes)
            let put = try f.raw(["put", local, "/b", "--open"])
            #expect(put.status == 1 && put.stderr == expected, "\(put)")
            #expect(try f.raw(["stat", "/b"]).status == 66, "a refused put --open stored its object")
            let status = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(status.openObjects.count == 4096)
            #expect(!status.openObjects.contains { !$0.id.hasPrefix("filler-") }, "an object of the store was opened")

            // Once one is closed, the store's object opens.
            #expect(try agent.close("filler-0") == [0x00])
            let opened = try f.ok(["open", "/a"])
            #expect(opened.stdout.contains("Opened /a (completeUnlessOpen)"), "\(opened)")
        }
    }

    /// A class B object stored while locked with `put --open` is readable
    /// until `close`, then not again until unlock; the same put without
    /// `--open` is not readable at all. `--open` with a tree is a usage
    /// error, and class A cannot be stored while locked, with or without.
    @Test func classBStoredWhileLockedWithOpenIsReadableUntilClosed() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["lock", "--now"])
            let bytes = sampleBytes("put-open", size: 300_000)
            let local = try f.localFile(bytes)
            let put = try f.ok(["put", local, "/b", "--class", "B", "--open"])
            #expect(put.stdout.hasSuffix("It is open until 'locker close /b'.\n"), "\(put)")
            try f.ok(["put", local, "/plain", "--class", "B"])
            #expect(try f.raw(["get", "/b"]).stdout == bytes)
            let stat = try f.stat("/b")
            #expect(stat.accessible == true && stat.reason == "open")
            let status = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(status.openObjects.map(\.protection) == ["completeUnlessOpen"])
            expectProtectedDataUnavailable(try f.raw(["get", "/plain"]))
            // Protection before the range: one past the end is still 75.
            let size = bytes.count
            for range in ["0-9", "\(size)-\(size + 1)", "\(size + 5)-"] {
                expectProtectedDataUnavailable(try f.raw(["get", "/plain", "--range", range]))
            }
            let pastTheEnd = try f.raw(["get", "/b", "--range", "\(size)-\(size + 1)"])
            #expect(pastTheEnd.status == 64 && pastTheEnd.stderr.contains("is past the end"), "\(pastTheEnd)")
            #expect(try f.raw(["get", "/b", "--range", "\(size - 2)-"]).stdout == bytes.suffix(2))

            let tree = f.root + "/tree"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: false)
            let refused = try f.raw(["put", "-r", tree, "/t", "--open"])
            #expect(refused.status == 64 && refused.stderr.hasPrefix("locker: error: --open keeps one object open, not a tree"), "\(refused)")
            expectProtectedDataUnavailable(try f.raw(["put", local, "/a", "--class", "A", "--open"]))
            #expect(try f.raw(["stat", "/a"]).status == 66)

            try f.ok(["close", "/b"])
            expectProtectedDataUnavailable(try f.raw(["get", "/b"]))
            expectProtectedDataUnavailable(try f.raw(["open", "/b"]))
            let after = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(after.openObjects.isEmpty)
            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(try f.raw(["get", "/b"]).stdout == bytes)
            #expect(try f.raw(["get", "/plain"]).stdout == bytes)
        }
    }

    /// "Unless open" holds only for the class B object that was opened: an
    /// open object changed to class A is not readable once locked, and an
    /// open object removed or replaced leaves no key behind in the device.
    @Test func openObjectLosesItsExceptionWhenChangedRemovedOrReplaced() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = sampleBytes("open-then-A")
            try f.put("/secret", bytes, ["--class", "B"])
            try f.put("/stays", bytes, ["--class", "B"])
            try f.ok(["open", "/secret"])
            try f.ok(["open", "/stays"])
            try f.ok(["setclass", "/secret", "A"])
            // Back to the same class keeps it open.
            try f.ok(["setclass", "/stays", "B"])
            let opened = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(opened.openObjects.count == 1, "\(opened.openObjects)")
            try f.ok(["lock", "--now"])
            expectProtectedDataUnavailable(try f.raw(["get", "/secret"]))
            let stat = try f.stat("/secret")
            #expect(stat.accessible == false && stat.reason != "open", "\(stat)")
            let exported = f.root + "/exported"
            let export = try f.raw(["export", exported])
            #expect(!FileManager.default.fileExists(atPath: exported + "/secret"), "\(export)")
            #expect(try f.raw(["get", "/stays"]).stdout == bytes)

            try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
            try f.put("/gone", bytes, ["--class", "B"])
            try f.put("/replaced", bytes, ["--class", "B"])
            try f.put("/tree/replaced", bytes, ["--class", "B"])
            try f.put("/bulk/a", bytes, ["--class", "B"])
            try f.put("/bulk/deeper/b", bytes, ["--class", "B"])
            for path in ["/gone", "/replaced", "/tree/replaced", "/bulk/a", "/bulk/deeper/b"] { try f.ok(["open", path]) }
            try f.ok(["rm", "/gone"])
            try f.ok(["rm", "-r", "/bulk"])
            try f.put("/replaced", bytes, ["--class", "B"])
            let tree = f.root + "/tree"
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try bytes.write(to: URL(fileURLWithPath: tree + "/replaced"))
            try f.ok(["put", "-r", tree, "/tree", "--class", "B"])
            let after = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(after.openObjects.count == 1, "\(after.openObjects)")
            let lock = try f.ok(["lock", "--now"])
            #expect(lock.stdout.components(separatedBy: "completeUnlessOpen").count == 2, "\(lock)")
            // The new versions were never opened.
            expectProtectedDataUnavailable(try f.raw(["get", "/replaced"]))
            expectProtectedDataUnavailable(try f.raw(["get", "/tree/replaced"]))
            // A directory cannot be opened, and the error offers no -r.
            for command in ["open", "close"] {
                let r = try f.run([command, "/tree"])
                #expect(r.status == 1, "\(r)")
                #expect(r.stderr == "locker: error: /tree is a directory; only an object can be opened or closed\n", "\(r)")
            }
        }
    }

    /// An open class A object is readable during the grace period and not
    /// after it, open or not.
    @Test func openCompleteObjectFailsOnceGraceEnds() throws {
        try withStoreFixture { f in
            try f.initialize(passcode: "1234", ["--grace", "1"])
            let bytes = sampleBytes("open-A")
            try f.put("/a", bytes, ["--class", "A"])
            try f.ok(["open", "/a"])
            let opened = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(opened.openObjects.map(\.protection) == ["complete"])

            // The read must land inside the one-second grace; on a machine
            // too busy for that, try again rather than fail.
            var lockedAt = Date()
            var readInGrace = false
            for _ in 0..<4 where !readInGrace {
                lockedAt = Date()
                let lock = try f.ok(["lock", "--json"])
                #expect(lock.stdout.contains("\"locking\""), "\(lock)")
                let read = try f.raw(["get", "/a"])
                let elapsed = Date().timeIntervalSince(lockedAt)
                if read.status == 0 {
                    #expect(read.stdout == bytes)
                    readInGrace = true
                } else if elapsed < 1 {
                    Issue.record("refused inside the grace period: \(read)")
                    break
                } else {
                    try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n")
                }
            }
            #expect(readInGrace, "never managed to read inside the grace period")

            Thread.sleep(until: lockedAt.addingTimeInterval(1.5))
            let status = try JSONDecoder().decode(OpenObjectsJSON.self, from: Data(try f.ok(["status", "--json"]).stdout.utf8))
            #expect(status.state == "locked")
            // Its file key went with the class A key (the contract: "so are
            // the file keys of open class A objects"); it was never closed.
            expectProtectedDataUnavailable(try f.raw(["get", "/a"]))
            #expect(try f.stat("/a").accessible == false)
        }
    }

    /// A `get` already under way when the grace period ends stops for a
    /// class A object (exit 75) and goes on for a class C one. The get
    /// writes into a pipe nobody reads, so it waits in its first batch
    /// while the device locks; the pipe is drained after the recheck
    /// interval has passed.
    @Test func aGetUnderWayStopsWhenGraceEnds() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = sampleBytes("long read", size: 8 << 20)
            try f.put("/a", bytes, ["--class", "A"])
            try f.put("/c", bytes, ["--class", "C"])
            for name in ["a", "c"] {
                if try f.status().state != "unlocked" { try f.ok(["unlock", "--passcode-stdin"], stdin: "1234\n") }
                let process = Process()
                process.executableURL = URL(fileURLWithPath: CLIFixture.lockerPath)
                process.arguments = ["get", "/\(name)", "-"]
                process.environment = f.environment
                process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
                let errors = Pipe()
                let out = Pipe()
                process.standardOutput = out
                process.standardError = errors
                try process.run()
                try? out.fileHandleForWriting.close()
                try? errors.fileHandleForWriting.close()
                // The first bytes show the read has its key; the pipe
                // (64 KiB) is then full until it is read again.
                let first = try #require(try out.fileHandleForReading.read(upToCount: 1))
                try f.ok(["lock", "--now"])
                Thread.sleep(forTimeInterval: 0.8)
                let rest = out.fileHandleForReading.readDataToEndOfFile()
                let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                try? out.fileHandleForReading.close()
                try? errors.fileHandleForReading.close()
                let got = first + rest
                if name == "a" {
                    #expect(process.terminationStatus == 75, "\(message)")
                    #expect(message.hasPrefix("locker: error: ") && message.contains("protected data unavailable"), "\(message)")
                    #expect(got.count < bytes.count, "\(got.count) bytes")
                    #expect(got == bytes.prefix(got.count))
                } else {
                    #expect(process.terminationStatus == 0, "\(message)")
                    #expect(got == bytes)
                }
            }
        }
    }

    // MARK: Inheritance

    @Test func classesAreInheritedFromTheNearestDirectory() throws {
        try withStoreFixture { f in
            try f.initialize(passcode: "1234", ["--default-class", "D"])
            try f.ok(["mkdir", "/a", "--class", "A"])
            try f.ok(["mkdir", "/a/b", "--class", "D"])
            try f.ok(["mkdir", "/plain"])
            let x = sampleBytes("a/x"), y = sampleBytes("a/b/y"), z = sampleBytes("a/z"), top = sampleBytes("top"), p = sampleBytes("plain/p")
            try f.put("/a/x", x)
            try f.put("/a/b/y", y)
            try f.put("/a/z", z, ["--class", "C"])
            try f.put("/top", top)
            try f.put("/plain/p", p)

            func expectClass(_ path: String, _ protection: String, _ source: String?,
                             sourceLocation: SourceLocation = #_sourceLocation) throws {
                let s = try f.stat(path)
                #expect(s.protection == protection, "\(path): \(String(describing: s.protection))", sourceLocation: sourceLocation)
                if let source {
                    #expect(s.protectionSource == source, "\(path): \(String(describing: s.protectionSource))",
                            sourceLocation: sourceLocation)
                }
            }
            try expectClass("/a/x", "complete", "inherited:/a")
            try expectClass("/a/b/y", "none", "inherited:/a/b")
            try expectClass("/a/z", "completeUntilFirstUserAuthentication", "explicit")
            try expectClass("/top", "none", "storeDefault")
            try expectClass("/plain/p", "none", "storeDefault")
            let dir = try f.stat("/a")
            #expect(dir.type == "directory")
            #expect(dir.defaultClass == "complete")
            // A directory's creation time, as an object's is given.
            let made = try #require(dir.created.flatMap { ISO8601DateFormatter().date(from: $0) }, "\(dir)")
            #expect(abs(made.timeIntervalSinceNow) < 600, "\(dir)")
            let plain = try f.stat("/plain")
            #expect(plain.defaultClass == nil)
            #expect(plain.effectiveDefault == "none")
            #expect(plain.defaultSource == "storeDefault")

            // A new default applies to new objects only.
            try f.ok(["setclass", "/a", "B"])
            try expectClass("/a/x", "complete", "inherited:/a")
            try f.put("/a/new", sampleBytes("a/new"))
            try expectClass("/a/new", "completeUnlessOpen", "inherited:/a")
            try expectClass("/a/b/y", "none", "inherited:/a/b")

            // --recursive rewraps everything below, content untouched.
            let recursive = try f.ok(["setclass", "/a", "C", "--recursive"])
            #expect(recursive.stdout.contains("rewrapped"), "\(recursive)")
            for path in ["/a/x", "/a/new", "/a/z", "/a/b/y"] {
                try expectClass(path, "completeUntilFirstUserAuthentication", nil)
            }
            try expectClass("/a/x", "completeUntilFirstUserAuthentication", "inherited:/a")
            #expect(try f.raw(["get", "/a/x"]).stdout == x)
            #expect(try f.raw(["get", "/a/b/y"]).stdout == y)
            #expect(try f.raw(["get", "/a/new"]).stdout == sampleBytes("a/new"))
            try expectClass("/top", "none", "storeDefault")

            // A move keeps the class and where it came from.
            try f.ok(["mv", "/a/x", "/plain/x-moved"])
            try expectClass("/plain/x-moved", "completeUntilFirstUserAuthentication", "inherited:/a")
            #expect(try f.raw(["get", "/plain/x-moved"]).stdout == x)
            try f.ok(["mv", "/a/b", "/plain/b-moved"])
            try expectClass("/plain/b-moved/y", "completeUntilFirstUserAuthentication", nil)

            // setclass on an object: new class, explicit, same bytes.
            let stored = try f.stat("/top")
            try f.ok(["setclass", "/top", "A"])
            try expectClass("/top", "complete", "explicit")
            let after = try f.stat("/top")
            #expect(after.size == stored.size)
            #expect(after.storedSize == stored.storedSize, "setclass should rewrap the key only")
            #expect(try f.raw(["get", "/top"]).stdout == top)
            try f.ok(["lock", "--now"])
            expectProtectedDataUnavailable(try f.raw(["get", "/top"]))
            #expect(try f.raw(["get", "/plain/p"]).stdout == p)
        }
    }

    /// `put`, `put -r`, `get` and `ls` leave access times alone: of the
    /// local files and directories they store, and of the store's header
    /// and data files and directories they read. Each access time is first
    /// set an hour before the modification, which a read or listing would
    /// update (relatime); a plain read of a file and a plain listing of a
    /// directory show that they do here.
    @Test func storingAndFetchingLeaveAccessTimesAlone() throws {
        try withStoreFixture { f in
            try f.initialize()
            func aged(_ path: String) throws -> Int {
                var st = Glibc.stat()
                try #require(lstat(path, &st) == 0)
                var times = [timespec(tv_sec: st.st_mtim.tv_sec - 3600, tv_nsec: 0), st.st_mtim]
                try #require(utimensat(AT_FDCWD, path, &times, 0) == 0)
                return st.st_mtim.tv_sec - 3600
            }
            func accessTime(_ path: String) -> Int {
                var st = Glibc.stat()
                return lstat(path, &st) == 0 ? st.st_atim.tv_sec : -1
            }
            let control = try f.localFile(Data("control".utf8))
            let controlAged = try aged(control)
            _ = FileManager.default.contents(atPath: control)
            try #require(accessTime(control) != controlAged, "this file system does not update access times on read")

            let local = try f.localFile(Data("a local file".utf8))
            let localAged = try aged(local)
            try f.ok(["put", local, "/one"])
            try FileManager.default.createDirectory(atPath: f.root + "/listed", withIntermediateDirectories: true)
            let listedAged = try aged(f.root + "/listed")
            _ = try FileManager.default.contentsOfDirectory(atPath: f.root + "/listed")
            try #require(accessTime(f.root + "/listed") != listedAged, "this file system does not update access times on listing")

            try FileManager.default.createDirectory(atPath: f.root + "/tree/sub", withIntermediateDirectories: true)
            let treeFile = try f.localFile(Data("in a tree".utf8), name: "tree/t")
            _ = try f.localFile(Data("deeper".utf8), name: "tree/sub/u")
            let treeAged = try [treeFile, f.root + "/tree", f.root + "/tree/sub"].map { try aged($0) }
            try f.ok(["put", "-r", f.root + "/tree", "/tree"])
            #expect(accessTime(local) == localAged, "put read \(local) with its access time updated")
            #expect([treeFile, f.root + "/tree", f.root + "/tree/sub"].map(accessTime) == treeAged,
                    "put -r read \(treeFile) or listed its directories with their access times updated")

            let header = try f.putInline("/small", Data("small".utf8))
            let (data, bigHeader) = try f.putTracked("/big", sampleBytes("big", size: 300_000))
            let before = try [header, data, bigHeader].map { try aged($0) }
            var storeDirectories: [String] = []
            let walk = FileManager.default.enumerator(atPath: f.store)!
            while let name = walk.nextObject() as? String {
                if walk.fileAttributes?[.type] as? FileAttributeType == .typeDirectory { storeDirectories.append(f.store + "/" + name) }
            }
            try #require(storeDirectories.count >= 3, "\(storeDirectories)")
            let directoriesBefore = try storeDirectories.map { try aged($0) }
            #expect(try f.raw(["get", "/small"]).stdout == Data("small".utf8))
            #expect(try f.raw(["get", "/big"]).status == 0)
            try f.ok(["get", "-r", "/tree", f.root + "/out"])
            #expect(try f.ok(["ls", "/tree"]).stdout.contains("sub"))
            #expect(FileManager.default.contents(atPath: f.root + "/out/sub/u") == Data("deeper".utf8))
            #expect([header, data, bigHeader].map(accessTime) == before, "get read store files with their access times updated")
            #expect(storeDirectories.map(accessTime) == directoriesBefore, "get -r or ls listed store directories with their access times updated")
        }
    }

    /// The bytes of the file at `path` in the page cache, as `fincore`
    /// (util-linux) reports them.
    static func bytesInPageCache(_ path: String) throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/fincore")
        process.arguments = ["--bytes", "--noheadings", "--output", "RES", path]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        try? out.fileHandleForReading.close()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus == 0, let bytes = Int(text) else { throw HarnessError("fincore \(path): \(text)") }
        return bytes
    }

    /// `put` writes a large object's data file, and `get` and `get -r` its
    /// output, past the page cache (all of it but the last, partial page),
    /// and it reads back exactly; a small object's output is in the page
    /// cache, so the check can fail here. Ranges come out exact whether
    /// aligned or not.
    @Test func largeObjectsGoPastThePageCache() throws {
        try withStoreFixture { f in
            try f.initialize()
            let big = sampleBytes("large", size: 5 << 20 | 1234)
            let small = sampleBytes("small", size: 200_000)
            let (data, _) = try f.putTracked("/tree/big", big)
            try f.put("/tree/small", small)
            let dataCached = try Self.bytesInPageCache(data)
            #expect(dataCached <= 4096, "\(dataCached) bytes of the data file in the page cache")

            try f.ok(["get", "/tree/small", f.root + "/small.out"])
            try #require(try Self.bytesInPageCache(f.root + "/small.out") >= small.count, "a plain write is cached here")
            #expect(FileManager.default.contents(atPath: f.root + "/small.out") == small)

            for output in ["/big.out", "/tree.out/big"] {
                if output == "/big.out" {
                    try f.ok(["get", "/tree/big", f.root + output])
                } else {
                    try f.ok(["get", "-r", "/tree", f.root + "/tree.out"])
                }
                // Looked at before it is read back, which brings it in.
                let cached = try Self.bytesInPageCache(f.root + output)
                #expect(cached <= 4096, "\(output): \(cached) of \(big.count) bytes in the page cache")
                #expect(FileManager.default.contents(atPath: f.root + output) == big, "\(output)")
            }
            #expect(FileManager.default.contents(atPath: f.root + "/tree.out/small") == small)

            for (start, end) in [(0, big.count - 1), (4096, (4 << 20) + 8191), (1001, big.count - 1)] {
                try f.ok(["get", "/tree/big", f.root + "/range.out", "--range", "\(start)-\(end)"])
                #expect(FileManager.default.contents(atPath: f.root + "/range.out") == big[start...end], "\(start)-\(end)")
                try FileManager.default.removeItem(atPath: f.root + "/range.out")
            }
        }
    }

    // MARK: Names

    /// Nothing under the store directory shows a name, a content or a
    /// class.
    @Test func storeDirectoryRevealsNoNamesContentsOrClasses() throws {
        try withStoreFixture { f in
            try f.initialize()
            let content = Data(String(repeating: "CONTENT-MARKER-123 ", count: 50).utf8)
            try f.ok(["mkdir", "/private-dir-QRS", "--class", "A"])
            try f.ok(["mkdir", "/private-dir-QRS/inner-private-dir-QRS", "--class", "B"])
            for c in storeClassLetters {
                try f.put("/private-dir-QRS/secret-name-XYZ-\(c)", content, ["--class", c])
                try f.put("/private-dir-QRS/inner-private-dir-QRS/secret-name-XYZ-\(c)", content, ["--class", c])
                try f.put("/secret-name-XYZ-root-\(c)", content, ["--class", c])
            }
            try f.put("/private-dir-QRS/secret-name-XYZ-inherited", content)
            try f.put("/" + String(repeating: "secret-name-XYZ-long-", count: 30), content)
            let ls = try f.ok(["ls", "/private-dir-QRS"])
            #expect(ls.stdout.contains("secret-name-XYZ-A"), "\(ls)")

            let markers = ["secret-name-XYZ", "private-dir-QRS", "CONTENT-MARKER-123", "complete", "Unless",
                           "UntilFirst", "untilFirstAuth", "none"]
            var scanned = 0
            let walker = try #require(FileManager.default.enumerator(atPath: f.store))
            while let relative = walker.nextObject() as? String {
                for marker in markers {
                    #expect(!relative.contains(marker), "a file name shows \(marker): \(relative)")
                }
                let full = f.store + "/" + relative
                var st = Glibc.stat()
                guard lstat(full, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
                let bytes = try fileBytes(full)
                scanned += 1
                for marker in markers {
                    #expect(bytes.range(of: Data(marker.utf8)) == nil, "\(relative) contains \(marker)")
                }
            }
            #expect(scanned >= 14, "only \(scanned) files scanned")
        }
    }

    /// A 600-byte name is stored, fetched, listed, stat'ed and moved.
    @Test func namesLongerThan255Bytes() throws {
        try withStoreFixture { f in
            try f.initialize()
            let long = String(repeating: "long-name-", count: 60)
            let longDir = String(repeating: "dir-", count: 150)
            #expect(long.utf8.count == 600)
            let bytes = sampleBytes("long")
            try f.put("/\(longDir)/\(long)", bytes)
            #expect(try f.raw(["get", "/\(longDir)/\(long)"]).stdout == bytes)
            let ls = try f.ok(["ls", "/\(longDir)"])
            #expect(ls.stdout == long + "\n", "\(ls)")
            let root = try f.ok(["ls", "/"])
            #expect(root.stdout == longDir + "/\n", "\(root)")
            let stat = try f.stat("/\(longDir)/\(long)")
            #expect(stat.path == "/\(longDir)/\(long)")
            #expect(stat.size == UInt64(bytes.count))

            let renamed = "renamed-" + long
            try f.ok(["mv", "/\(longDir)/\(long)", "/\(longDir)/\(renamed)"])
            try f.ok(["mv", "/\(longDir)/\(renamed)", "/"])
            #expect(try f.raw(["get", "/\(renamed)"]).stdout == bytes)
            #expect(try f.ok(["ls", "/\(longDir)"]).stdout.isEmpty)
            let json = try f.ok(["ls", "--json", "/"])
            let items = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
            #expect(Set(items?.compactMap { $0["path"] as? String } ?? []) == ["/\(longDir)", "/\(renamed)"])

            let tooLong = String(repeating: "x", count: 1025)
            let r = try f.raw(["put", "-", "/\(tooLong)"])
            #expect(r.status == 64, "\(r)")
        }
    }

    @Test func invalidPathsAreUsageErrors() throws {
        try withStoreFixture { f in
            try f.initialize()
            let local = try f.localFile(Data("x".utf8))
            try f.put("/a/b", Data("b".utf8))
            for bad in ["/a/../b", "a//b", "/a/./b", "..", ""] {
                for arguments in [["get", bad], ["put", local, bad], ["stat", bad], ["mkdir", bad], ["rm", bad],
                                  ["mv", "/a/b", bad], ["mv", bad, "/c"], ["ls", bad], ["setclass", bad, "A"]] {
                    let r = try f.raw(arguments)
                    #expect(r.status == 64, "\(r)")
                    #expect(r.stderr.hasPrefix("locker: error: "), "\(r)")
                }
            }
            #expect(try f.raw(["get", "/a/b"]).stdout == Data("b".utf8))
            #expect(f.storedData().count == 1)
        }
    }

    // MARK: Export

    @Test func exportRoundTripsAndSkipsLockedObjects() throws {
        try withStoreFixture { f in
            try f.initialize()
            var objects: [String: (cls: String, bytes: Data)] = [:]
            for (i, c) in storeClassLetters.enumerated() {
                objects["/\(c).bin"] = (c, sampleBytes("export-\(c)", size: 100 + i * 300_000))
                objects["/dir/sub/\(c)"] = (c, sampleBytes("export-sub-\(c)"))
            }
            objects["/dir/empty"] = ("D", Data())
            // After /dir by name: listed after everything below it.
            objects["/e.txt"] = ("D", sampleBytes("export-e"))
            for (path, object) in objects { try f.put(path, object.bytes, ["--class", object.cls]) }

            struct Manifest: Decodable {
                struct Entry: Decodable {
                    var path: String
                    var protection: String
                    var protectionSource: String
                    var size: UInt64
                    var exported: Bool
                    var skipped: String?
                }
                var objects: [Entry]
            }
            // Each object once, in the store's order: a directory's entries
            // by name, a directory's contents right after it.
            let order = storeClassLetters.map { "/\($0).bin" } + ["/dir/empty"] + storeClassLetters.map { "/dir/sub/\($0)" } + ["/e.txt"]
            #expect(Set(order) == Set(objects.keys))
            func manifest(_ dest: String) throws -> [String: Manifest.Entry] {
                let decoded = try JSONDecoder().decode(Manifest.self, from: fileBytes(dest + "/manifest.json"))
                #expect(decoded.objects.map(\.path) == order)
                return Dictionary(decoded.objects.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
            }

            let all = f.root + "/export-all"
            let r = try f.raw(["export", all])
            #expect(r.status == 0, "\(r)")
            let m = try manifest(all)
            #expect(Set(m.keys) == Set(objects.keys))
            for (path, object) in objects {
                #expect(try fileBytes(all + path) == object.bytes, "\(path)")
                #expect(m[path]?.protection == canonicalClassName[object.cls])
                #expect(m[path]?.exported == true)
                #expect(m[path]?.size == UInt64(object.bytes.count))
            }

            try f.ok(["lock", "--now"])
            let locked = f.root + "/export-locked"
            let refused = try f.raw(["export", locked])
            #expect(refused.status == 75, "\(refused)")
            #expect(refused.stderr.contains("--skip-unavailable"), "\(refused)")
            let lm = try manifest(locked)
            #expect(Set(lm.keys) == Set(objects.keys))
            for (path, object) in objects {
                let unavailable = object.cls == "A" || object.cls == "B"
                #expect(lm[path]?.exported == !unavailable, "\(path)")
                if unavailable {
                    #expect(lm[path]?.skipped?.contains("locked") == true, "\(path): \(String(describing: lm[path]?.skipped))")
                    #expect(refused.text.contains("skipped \(path)"), "\(refused)")
                    #expect(!FileManager.default.fileExists(atPath: locked + path), "\(path) was written")
                } else {
                    #expect(lm[path]?.skipped == nil)
                    #expect(try fileBytes(locked + path) == object.bytes, "\(path)")
                }
            }

            let skipping = f.root + "/export-skip"
            let skipped = try f.raw(["export", skipping, "--skip-unavailable"])
            #expect(skipped.status == 0, "\(skipped)")
            #expect(try manifest(skipping).values.filter { !$0.exported }.count == 4)
            let leftovers = try FileManager.default.subpathsOfDirectory(atPath: skipping).filter { $0.contains(".locker-") }
            #expect(leftovers.isEmpty, "temporary files left: \(leftovers)")

            // Into an existing DEST, with one of the tree's directories
            // there already and a file of the user's: the same objects are
            // written, the locked ones are not, nothing temporary is left,
            // and the user's file stays.
            let existing = f.root + "/export-existing"
            try FileManager.default.createDirectory(atPath: existing + "/dir", withIntermediateDirectories: true)
            try Data("mine".utf8).write(to: URL(fileURLWithPath: existing + "/dir/mine"))
            let into = try f.raw(["export", existing, "--skip-unavailable"])
            #expect(into.status == 0, "\(into)")
            let em = try manifest(existing)
            for (path, object) in objects {
                let unavailable = object.cls == "A" || object.cls == "B"
                #expect(em[path]?.exported == !unavailable, "\(path)")
                #expect(FileManager.default.contents(atPath: existing + path) == (unavailable ? nil : object.bytes), "\(path)")
            }
            #expect(try fileBytes(existing + "/dir/mine") == Data("mine".utf8))
            let left = try FileManager.default.subpathsOfDirectory(atPath: existing).filter { $0.contains(".locker-") }
            #expect(left.isEmpty, "temporary files left: \(left)")

            // An object named like the manifest would be overwritten by it:
            // refused before anything is written.
            try f.put("/manifest.json", Data("not the manifest".utf8), ["--class", "D"])
            let clash = f.root + "/export-clash"
            let collides = try f.raw(["export", clash, "--skip-unavailable"])
            #expect(collides.status == 73, "\(collides)")
            #expect(collides.stderr.contains("/manifest.json"), "\(collides)")
            #expect(!FileManager.default.fileExists(atPath: clash))
            try f.ok(["mv", "/manifest.json", "/dir/manifest.json"])
            let moved = try f.raw(["export", clash, "--skip-unavailable"])
            #expect(moved.status == 0, "\(moved)")
            #expect(try fileBytes(clash + "/dir/manifest.json") == Data("not the manifest".utf8))
        }
    }

    // MARK: Key reset

    @Test func keyResetMakesOldObjectsFailUntilPurged() throws {
        try withStoreFixture { f in
            try f.initialize()
            for c in storeClassLetters {
                try f.put("/old/\(c)", sampleBytes("old-\(c)"), ["--class", c])
                try f.put("/old/nested/\(c)", sampleBytes("old-nested-\(c)"), ["--class", c])
            }
            let reset = try f.ok(["reset", "--yes"], stdin: "9999\n")
            #expect(reset.stdout.contains("generation 2"), "\(reset)")
            for c in ["A", "B", "C"] {
                let r = try f.raw(["get", "/old/\(c)"])
                #expect(r.status == 69, "\(r)")
                #expect(r.stdout.isEmpty)
                #expect(r.stderr.contains("locker purge --key-reset"), "\(r)")
                #expect(try f.stat("/old/\(c)").reason == "keyReset")
            }
            #expect(try f.raw(["get", "/old/D"]).stdout == sampleBytes("old-D"))
            #expect(try f.raw(["get", "/old/nested/D"]).stdout == sampleBytes("old-nested-D"))
            // ls -l tells a reset key from a lock, and export sends the
            // user to purge, not to unlock.
            let long = try f.ok(["ls", "-l", "/old"]).stdout
            for c in ["A", "B", "C"] { #expect(long.contains("\(c) key-reset "), "\(long)") }
            #expect(long.contains("D readable "), "\(long)")
            let exported = try f.run(["export", f.root + "/after-reset"])
            #expect(exported.status == 69, "\(exported)")
            #expect(exported.stderr.contains("6 objects were not exported: their class keys were reset"), "\(exported)")
            #expect(exported.stderr.contains("hint: they can never be read: remove them with 'locker purge --key-reset'"), "\(exported)")
            for c in storeClassLetters { try f.put("/new/\(c)", sampleBytes("new-\(c)"), ["--class", c]) }
            // With locked objects too, unlocking helps some of them.
            try f.ok(["lock", "--now"])
            let lockedToo = try f.run(["export", f.root + "/after-reset-locked"])
            #expect(lockedToo.status == 75, "\(lockedToo)")
            #expect(lockedToo.stderr.contains(" of them for good: their class key was reset)"), "\(lockedToo)")
            #expect(lockedToo.stderr.contains("hint: unlock and export again"), "\(lockedToo)")
            try f.ok(["unlock", "--passcode-stdin"], stdin: "9999\n")
            let dataBefore = f.storedData()

            let purge = try f.ok(["purge", "--key-reset"])
            #expect(purge.stdout.contains("Purged 6 objects"), "\(purge)")
            #expect(f.storedData().count == dataBefore.count - 6)
            #expect(f.storedData().isSubset(of: dataBefore))
            #expect(try f.ok(["ls", "/old"]).stdout == "D\nnested/\n")
            #expect(try f.ok(["ls", "/old/nested"]).stdout == "D\n")
            for c in storeClassLetters {
                #expect(try f.raw(["get", "/new/\(c)"]).stdout == sampleBytes("new-\(c)"))
            }
            #expect(try f.raw(["get", "/old/nested/D"]).stdout == sampleBytes("old-nested-D"))
            let again = try f.ok(["purge", "--key-reset"])
            #expect(again.stdout.contains("Purged 0 objects"), "\(again)")
            #expect(f.storedData().count == dataBefore.count - 6)
        }
    }

    // MARK: ls, stat, rm, mv

    @Test func namespaceBasics() throws {
        try withStoreFixture { f in
            try f.initialize()
            for c in storeClassLetters { try f.put("/d/\(c)", sampleBytes("basic-\(c)"), ["--class", c]) }
            try f.put("/d/sub/deep", sampleBytes("deep"))
            try f.put("/other", sampleBytes("other"))

            let rm = try f.raw(["rm", "/d"])
            #expect(rm.status != 0, "\(rm)")
            #expect(rm.stderr.contains("not empty"), "\(rm)")
            #expect(try f.raw(["get", "/d/A"]).stdout == sampleBytes("basic-A"))

            let long = try f.ok(["ls", "-l", "/d"])
            let lines = long.stdout.split(separator: "\n")
            #expect(lines.count == 5, "\(long)")
            for c in storeClassLetters {
                #expect(lines.contains { $0.hasPrefix("\(c) ") && $0.hasSuffix(" \(c)") }, "no line for \(c): \(long)")
            }
            #expect(lines.contains { $0.hasPrefix("d ") && $0.hasSuffix("sub/") }, "\(long)")

            let json = try f.ok(["ls", "--json", "/d"])
            let items = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]])
            #expect(items.count == 5)
            #expect(Set(items.compactMap { $0["protection"] as? String }) == Set(canonicalClassName.values))
            #expect(items.contains { $0["path"] as? String == "/d/sub" && $0["type"] as? String == "directory" })

            let missing = try f.raw(["get", "/d/nothing"])
            #expect(missing.status == 66, "\(missing)")
            #expect(missing.stdout.isEmpty)
            #expect(try f.raw(["stat", "/nothing/here"]).status == 66)
            #expect(try f.raw(["rm", "/nothing"]).status == 66)
            #expect(try f.raw(["mv", "/nothing", "/x"]).status == 66)
            #expect(try f.raw(["ls", "/nothing"]).status == 66)

            let onto = try f.raw(["mv", "/other", "/d/A"])
            #expect(onto.status == 73, "\(onto)")
            #expect(try f.raw(["get", "/d/A"]).stdout == sampleBytes("basic-A"))
            #expect(try f.raw(["get", "/other"]).stdout == sampleBytes("other"))
            let mkdirAgain = try f.raw(["mkdir", "/d"])
            #expect(mkdirAgain.status == 73, "\(mkdirAgain)")

            // Into a directory, under its own name; then a rename.
            try f.ok(["mv", "/other", "/d/sub"])
            #expect(try f.raw(["get", "/d/sub/other"]).stdout == sampleBytes("other"))
            try f.ok(["mv", "/d/sub/other", "/renamed"])
            #expect(try f.raw(["get", "/renamed"]).stdout == sampleBytes("other"))
            #expect(try f.raw(["get", "/d/sub/other"]).status == 66)
            let intoItself = try f.raw(["mv", "/d", "/d/sub"])
            #expect(intoItself.status != 0, "\(intoItself)")

            let getDir = try f.raw(["get", "/d"])
            #expect(getDir.status != 0 && getDir.stdout.isEmpty, "\(getDir)")

            let before = f.storedData().count
            try f.ok(["rm", "/renamed"])
            #expect(f.storedData().count == before - 1)
            try f.ok(["rm", "-r", "/d"])
            #expect(f.storedData().isEmpty, "data left: \(f.storedData())")
            #expect(f.headerFiles().isEmpty)
            #expect(try f.ok(["ls"]).stdout.isEmpty)
            #expect(try f.raw(["get", "/d/A"]).status == 66)
        }
    }
}
