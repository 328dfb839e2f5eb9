import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Ctrl-C (SIGINT) and SIGTERM in the middle of a command, as a user sends
/// them: the command ends by the signal, as a shell expects, and leaves
/// nothing under a temporary name: no partial plaintext beside DEST, no
/// data file or staged directory in the store, no terminal without echo.
@Suite("locker interrupted by a signal")
struct InterruptionCLITests {
    /// Starts `locker arguments` with every signal's default action, as
    /// from an interactive shell: the test runner may have been started
    /// with SIGINT ignored, which `locker` would keep.
    func start(_ f: CLIFixture, _ arguments: [String], stdin: String? = nil, ignoring: String? = nil) throws -> BackgroundRun {
        let launcher = ["/usr/bin/env", "--default-signal"] + (ignoring.map { ["--ignore-signal=" + $0] } ?? [])
        return try BackgroundRun(f, arguments, stdin: stdin, launcher: launcher)
    }

    /// Polls up to `seconds` for `found` to hold.
    func waitFor(seconds: Double, _ found: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if found() { return true }
            usleep(1_000)
        }
        return found()
    }

    /// Whether `pid`'s main thread waits in a system call other than a
    /// read of its standard input, and still does 20 ms later. Blocked
    /// outside any system call ("-1": a page fault that reads the binary
    /// from the disk, say) is not waiting elsewhere: the process may still
    /// be between two reads of its standard input.
    func isWaitingElsewhere(_ pid: Int32) -> Bool {
        func now() -> Bool {
            guard let call = try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8) else { return false }
            return !call.hasPrefix("running") && !call.hasPrefix("-1") && !isReadingStandardInput(pid)
        }
        guard now() else { return false }
        usleep(20_000)
        return now()
    }

    /// Names in `directory` that start with `prefix`.
    func entries(_ directory: String, prefix: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix(prefix) }
    }

    /// Stops `run` (SIGSTOP), checks it is still running, sends `signal`
    /// and lets it go on, so that the signal arrives in the middle of its
    /// work and not after it. Returns the signal that ended it.
    func interrupt(_ run: BackgroundRun, with signal: Int32) -> Int32? {
        let pid = run.process.processIdentifier
        kill(pid, SIGSTOP)
        #expect(isAlive(pid), "it finished before the signal")
        kill(pid, signal)
        kill(pid, SIGCONT)
        return run.waitForSignal(seconds: 10)
    }

    /// An impatient Ctrl-C twice: ``interrupt(_:with:)`` with SIGINT, and
    /// SIGINT again `pause` µs after `run` goes on, in the middle of its
    /// cleanup or before it. Returns the signal that ended it.
    func interruptTwice(_ run: BackgroundRun, pause: useconds_t) -> Int32? {
        let pid = run.process.processIdentifier
        kill(pid, SIGSTOP)
        #expect(isAlive(pid), "it finished before the signal")
        kill(pid, SIGINT)
        kill(pid, SIGCONT)
        usleep(pause)
        kill(pid, SIGINT)
        return run.waitForSignal(seconds: 15)
    }

    /// `verify` finds nothing left over in the store.
    func expectCleanStore(_ f: CLIFixture, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let verify = try f.raw(["verify"])
        #expect(verify.status == 0, "\(verify)", sourceLocation: sourceLocation)
    }

    /// Starts `locker init --passcode-stdin` with `arguments`, its
    /// standard input a FIFO, and waits until it reads its passcode there.
    /// Returns the run and the FIFO's writing end, which the caller closes.
    func startInitAtItsPrompt(_ f: CLIFixture, _ arguments: [String]) throws -> (BackgroundRun, Int32) {
        let fifo = f.root + "/passcode"
        try #require(mkfifo(fifo, 0o600) == 0)
        let writer = open(fifo, O_RDWR)
        try #require(writer >= 0)
        let run = try start(f, ["init", "--passcode-stdin"] + arguments, stdin: fifo)
        #expect(waitFor(seconds: 20) { isReadingStandardInput(run.process.processIdentifier) }, "the init is not waiting for its passcode")
        return (run, writer)
    }

    /// Ctrl-C while `init` waits for its passcode ends it by the signal
    /// and leaves nothing it made: the agent it started is stopped, and the
    /// device directory and the directories made on the way are removed.
    @Test func anInitInterruptedAtItsPromptLeavesNothing() throws {
        try withStoreFixture { f in
            let fresh = f.root + "/fresh"
            let device = fresh + "/a/device"
            let (run, writer) = try startInitAtItsPrompt(f, ["--device", device, "--store", fresh + "/store"])
            defer { close(writer) }
            #expect(FileManager.default.fileExists(atPath: device))
            let agents = agentProcesses(serving: device)
            #expect(!agents.isEmpty, "no agent was started")
            kill(run.process.processIdentifier, SIGINT)
            #expect(run.waitForSignal(seconds: 20) == SIGINT)
            #expect(!FileManager.default.fileExists(atPath: fresh))
            for pid in agents { #expect(waitUntilGone(pid), "the agent \(pid) still runs") }
        }
    }

    /// Ctrl-C once `init` has read its passcode and asked the agent to
    /// make the device: the agent makes it whatever the CLI does, so the
    /// init finishes (the store made) and says so, then ends by the
    /// signal. Ending at once left a device made with no word said.
    @Test func anInitInterruptedAfterItsPromptFinishesAndSaysSo() throws {
        try withStoreFixture { f in
            let (run, writer) = try startInitAtItsPrompt(f, [])
            defer { close(writer) }
            let pid = run.process.processIdentifier
            let line = Array("1234\n".utf8)
            #expect(write(writer, line, line.count) == line.count)
            // Past its prompt, the init waits for nothing but the agent.
            #expect(waitFor(seconds: 20) { isWaitingElsewhere(pid) }, "the init did not go past its prompt")
            kill(pid, SIGINT)
            #expect(run.waitForSignal(seconds: 20) == SIGINT)
            #expect(run.text.contains("Initialized device at \(f.device)"), "\(run.text)")
            #expect(FileManager.default.fileExists(atPath: f.store))
            let status = try f.raw(["status"])
            #expect(status.status == 0, "\(status)")
            #expect(String(decoding: status.stdout, as: UTF8.self).contains("unlocked"), "\(status)")
        }
    }

    @Test func aGetInterruptedLeavesNoPartialFile() throws {
        try withStoreFixture { f in
            try f.initialize()
            // 512 MiB of zeros: quick to store, long enough to fetch that
            // the signal lands in the middle.
            let zeros = f.root + "/zeros"
            #expect(FileManager.default.createFile(atPath: zeros, contents: nil))
            #expect(truncate(zeros, 512 << 20) == 0)
            try f.ok(["put", zeros, "/z", "--class", "C"])
            let out = f.root + "/out"
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
            let get = try start(f, ["get", "/z", out + "/z"])
            defer { get.stop() }
            #expect(waitFor(seconds: 30) { !entries(out, prefix: ".locker-").isEmpty }, "no temporary file appeared")
            #expect(interrupt(get, with: SIGINT) == SIGINT)
            #expect(entries(out, prefix: "").isEmpty, "left in DEST's directory: \(entries(out, prefix: ""))")
        }
    }

    @Test func aPutFromAPipeInterruptedStoresNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            let fifo = f.root + "/in"
            #expect(mkfifo(fifo, 0o600) == 0)
            // Held open for writing by the test: the put waits for more.
            let writer = open(fifo, O_RDWR)
            #expect(writer >= 0)
            defer { close(writer) }
            let put = try start(f, ["put", "-", "/p", "--class", "C"], stdin: fifo)
            defer { put.stop() }
            // More than one chunk, so that the put has a data file.
            let bytes = pseudoRandomBytes(3 << 20, seed: 7)
            let fed = DispatchSemaphore(value: 0)
            Thread {
                bytes.withUnsafeBytes { raw in
                    var done = 0
                    while done < raw.count {
                        let n = write(writer, raw.baseAddress! + done, raw.count - done)
                        if n <= 0 { break }
                        done += n
                    }
                }
                fed.signal()
            }.start()
            #expect(fed.wait(timeout: .now() + 30) == .success, "the put did not read its input")
            #expect(waitFor(seconds: 10) { !f.dataFiles().isEmpty }, "no data file appeared")
            // Blocked reading the pipe: the signal must end it all the same.
            kill(put.process.processIdentifier, SIGTERM)
            #expect(put.waitForSignal(seconds: 10) == SIGTERM)
            #expect(f.dataFiles().isEmpty, "left in the store: \(f.dataFiles())")
            #expect(try f.raw(["stat", "/p"]).status == 66)
            try expectCleanStore(f)
        }
    }

    @Test func treeTransfersInterruptedLeaveNothing() throws {
        try withStoreFixture { f in
            try f.initialize()
            let tree = f.root + "/tree"
            for d in 0..<40 {
                let dir = tree + "/d\(d)"
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
                for i in 0..<200 {
                    #expect(FileManager.default.createFile(atPath: dir + "/f\(i)", contents: sampleBytes("\(d)/\(i)", size: 1500 + i * 20)))
                }
            }
            let put = try start(f, ["put", "-r", tree, "/t"])
            defer { put.stop() }
            #expect(waitFor(seconds: 30) { !entries(f.store + "/ns", prefix: ".tmp-dir-").isEmpty }, "no staged directory appeared")
            #expect(interrupt(put, with: SIGINT) == SIGINT)
            #expect(entries(f.store + "/ns", prefix: ".tmp-dir-").isEmpty)
            #expect(try f.raw(["stat", "/t"]).status == 66)
            try expectCleanStore(f)

            try f.ok(["put", "-r", tree, "/t"], timeout: 120)
            // Into a new directory: built out of sight, and gone.
            let get = try start(f, ["get", "-r", "/t", f.root + "/new"])
            defer { get.stop() }
            #expect(waitFor(seconds: 30) { !entries(f.root, prefix: ".locker-").isEmpty }, "no temporary directory appeared")
            #expect(interrupt(get, with: SIGINT) == SIGINT)
            #expect(entries(f.root, prefix: ".locker-").isEmpty, "\(entries(f.root, prefix: ".locker-"))")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/new"))

            // An impatient second Ctrl-C, in the middle of the cleanup or
            // before it: still nothing left.
            for pause: useconds_t in [0, 2_000, 20_000] {
                let again = try start(f, ["get", "-r", "/t", f.root + "/new"])
                defer { again.stop() }
                #expect(waitFor(seconds: 30) { !entries(f.root, prefix: ".locker-").isEmpty }, "no temporary directory appeared")
                #expect(interruptTwice(again, pause: pause) == SIGINT)
                #expect(entries(f.root, prefix: ".locker-").isEmpty, "after \(pause) µs: \(entries(f.root, prefix: ".locker-"))")
                #expect(!FileManager.default.fileExists(atPath: f.root + "/new"))
            }

            // `export` into a new directory builds it out of sight too.
            let export = try start(f, ["export", f.root + "/exported"])
            defer { export.stop() }
            #expect(waitFor(seconds: 30) { !entries(f.root, prefix: ".locker-").isEmpty }, "no temporary directory appeared")
            #expect(interrupt(export, with: SIGINT) == SIGINT)
            #expect(entries(f.root, prefix: ".locker-").isEmpty, "\(entries(f.root, prefix: ".locker-"))")
            #expect(!FileManager.default.fileExists(atPath: f.root + "/exported"))
        }
    }

    /// `put -r` of a tree into a new store directory, interrupted at
    /// several moments, by one Ctrl-C or by two (the second ends it at
    /// once, unless it has begun to stop): while the new directories are
    /// staged, and while the larger files are stored into them once they
    /// have appeared. Each time `verify` finds nothing left over, and the
    /// store holds either nothing of the import or the new directories
    /// with every small file and some of the larger ones, each whole.
    @Test func aPutOfATreeInterruptedAnywhereLeavesNoTemporaries() throws {
        try withStoreFixture { f in
            try f.initialize()
            let tree = f.root + "/tree"
            var small: [String: Data] = [:]
            var larger: [String: Data] = [:]
            for d in ["a", "b"] {
                try FileManager.default.createDirectory(atPath: tree + "/" + d, withIntermediateDirectories: true)
                for i in 0..<300 { small["\(d)/f\(i)"] = sampleBytes("\(d)/\(i)", size: 1000 + i * 3) }
            }
            // Stored after the new directories appear: files with a data
            // file in batches, and files over 4 MiB one at a time.
            for i in 0..<3 { larger["b/mid\(i)"] = sampleBytes("mid\(i)", size: 100 << 10) }
            for i in 0..<3 { larger["b/big\(i)"] = pseudoRandomBytes((5 << 20) + i, seed: 40 + UInt64(i)) }
            for (relative, bytes) in small.merging(larger, uniquingKeysWith: { a, _ in a }) {
                try bytes.write(to: URL(fileURLWithPath: tree + "/" + relative))
            }

            enum Moment {
                /// Once the new directories are being built out of sight.
                case staged
                /// Once the larger files are being stored into them.
                case dataFile
                /// Once a file over 4 MiB has all its data written, before
                /// its header is.
                case written
                /// This long after the start.
                case after(useconds_t)
            }
            // When, and how long after the first Ctrl-C the second comes
            // (nil: none).
            let moments: [(Moment, useconds_t?)] = [
                (.staged, nil), (.staged, 500), (.staged, 5_000), (.staged, 20_000),
                (.dataFile, nil), (.dataFile, 500), (.dataFile, 5_000), (.dataFile, 20_000),
                (.written, nil), (.written, 200), (.written, 1_000), (.written, 3_000),
                (.after(150_000), 2_000), (.after(400_000), 10_000),
            ]
            for (round, (moment, pause)) in moments.enumerated() {
                let target = "/t\(round)"
                let before = f.dataFiles()
                let put = try start(f, ["put", "-r", tree, target])
                defer { put.stop() }
                let pid = put.process.processIdentifier
                switch moment {
                case .staged:
                    #expect(waitFor(seconds: 30) { !entries(f.store + "/ns", prefix: ".tmp-dir-").isEmpty }, "round \(round): nothing staged")
                case .dataFile:
                    #expect(waitFor(seconds: 30) { !f.dataFiles().subtracting(before).isEmpty }, "round \(round): no data file")
                case .written:
                    #expect(waitFor(seconds: 30) {
                        f.dataFiles().subtracting(before).contains { fileSize(f.store + "/data/" + $0) >= 5 << 20 }
                    }, "round \(round): no large data file")
                case .after(let delay):
                    usleep(delay)
                }
                kill(pid, SIGINT)
                if let pause {
                    usleep(pause)
                    if isAlive(pid) { kill(pid, SIGINT) }
                }
                // 0: it had finished before the signal came.
                let ended = put.waitForSignal(seconds: 15)
                #expect(ended == SIGINT || ended == 0, "round \(round): \(String(describing: ended))")
                #expect(entries(f.store + "/ns", prefix: ".tmp-dir-").isEmpty, "round \(round)")
                let verify = try f.raw(["verify"])
                #expect(verify.status == 0, "round \(round): \(verify.text)")
                // Each round on its own: what one left does not fail the next.
                if verify.status != 0 { _ = try f.raw(["verify", "--repair"]) }

                // Nothing of the import, or the new directories with every
                // small file and what was stored of the others, whole.
                let stat = try f.raw(["stat", target])
                if stat.status == 66 { continue }
                #expect(stat.status == 0, "round \(round): \(stat)")
                let out = f.root + "/out\(round)"
                try f.ok(["get", "-r", target, out], timeout: 60)
                let fetched = Set((FileManager.default.enumerator(atPath: out)?.allObjects as? [String] ?? []).filter {
                    var isDirectory: ObjCBool = false
                    return FileManager.default.fileExists(atPath: out + "/" + $0, isDirectory: &isDirectory) && !isDirectory.boolValue
                })
                #expect(fetched.isSuperset(of: small.keys), "round \(round): small files missing")
                if ended == 0 { #expect(fetched.isSuperset(of: larger.keys), "round \(round): finished, files missing") }
                for relative in fetched {
                    let bytes = small[relative] ?? larger[relative]
                    #expect(bytes != nil, "round \(round): \(relative) was not in the tree")
                    #expect(FileManager.default.contents(atPath: out + "/" + relative) == bytes, "round \(round): \(relative) not whole")
                }
                try? FileManager.default.removeItem(atPath: out)
            }
        }
    }

    /// A second Ctrl-C right after the first, before the fetch has begun
    /// to stop, ends `get -r` into an existing directory at once; what it
    /// had written under temporary names goes all the same: the files not
    /// yet renamed into place, and the temporary directory its new
    /// subdirectories were built in. Files already renamed stay, whole.
    @Test func aSecondCtrlCDuringAGetIntoAnExistingDirectoryLeavesNoTemporaries() throws {
        try withStoreFixture { f in
            try f.initialize()
            let tree = f.root + "/tree"
            var expected: [String: Data] = [:]
            func file(_ relative: String, size: Int) throws {
                let bytes = sampleBytes(relative, size: size)
                expected[relative] = bytes
                try bytes.write(to: URL(fileURLWithPath: tree + "/" + relative))
            }
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            // Files at the top go to temporary files beside their targets;
            // the subdirectories, missing locally, are built in a
            // temporary directory.
            for i in 0..<1500 { try file("top\(i)", size: 1000 + i * 7) }
            for d in 0..<20 {
                try FileManager.default.createDirectory(atPath: tree + "/d\(d)", withIntermediateDirectories: true)
                for i in 0..<100 { try file("d\(d)/f\(i)", size: 1500 + i * 20) }
            }
            try f.ok(["put", "-r", tree, "/t"], timeout: 120)

            func temporaries(under root: String) -> [String] {
                (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter { $0.contains(".locker-") }
            }
            for (round, pause) in ([0, 0, 0, 1_000] as [useconds_t]).enumerated() {
                let dest = f.root + "/existing\(round)"
                try FileManager.default.createDirectory(atPath: dest, withIntermediateDirectories: true)
                let get = try start(f, ["get", "-r", "/t", dest])
                defer { get.stop() }
                #expect(waitFor(seconds: 30) { !entries(dest, prefix: ".locker-").isEmpty }, "no temporary appeared")
                #expect(interruptTwice(get, pause: pause) == SIGINT)
                #expect(temporaries(under: dest).isEmpty, "after \(pause) µs: \(temporaries(under: dest).prefix(5))")
                // What is there is whole: fetched files renamed into place.
                let left = (FileManager.default.enumerator(atPath: dest)?.allObjects as? [String] ?? [])
                for relative in left where expected[relative] != nil {
                    #expect(FileManager.default.contents(atPath: dest + "/" + relative) == expected[relative], "\(relative)")
                }
                #expect(left.allSatisfy { expected[$0] != nil || $0.hasPrefix("d") }, "\(left.filter { expected[$0] == nil }.prefix(5))")
            }
        }
    }

    /// A signal ignored when `locker` starts (`nohup` ignores SIGHUP) stays
    /// ignored: the fetch goes on to the end.
    @Test func aSignalIgnoredAtTheStartStaysIgnored() throws {
        try withStoreFixture { f in
            try f.initialize()
            let bytes = pseudoRandomBytes(40 << 20, seed: 11)
            try f.put("/r", bytes, ["--class", "C"])
            let fifo = f.root + "/out"
            #expect(mkfifo(fifo, 0o600) == 0)
            let reader = open(fifo, O_RDWR)
            #expect(reader >= 0)
            defer { close(reader) }
            let get = try start(f, ["get", "/r", fifo], ignoring: "HUP")
            defer { get.stop() }
            // Blocked writing into the FIFO that nobody reads yet.
            usleep(300_000)
            kill(get.process.processIdentifier, SIGHUP)
            var received = Data()
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            // The test holds the FIFO's write end too: poll, so that a
            // fetch that died does not leave this read waiting for ever.
            let deadline = Date().addingTimeInterval(60)
            var entry = pollfd(fd: reader, events: Int16(POLLIN), revents: 0)
            while received.count < bytes.count, Date() < deadline {
                guard poll(&entry, 1, 100) > 0 else { continue }
                let n = read(reader, &buffer, buffer.count)
                if n <= 0 { break }
                received.append(contentsOf: buffer[..<n])
            }
            #expect(get.waitForSignal(seconds: 30) == 0)
            #expect(get.process.terminationStatus == 0)
            #expect(received == bytes)
        }
    }

    /// Ctrl-C at `unlock`'s passcode prompt, on a pseudo-terminal: echo is
    /// back on afterwards.
    @Test func ctrlCAtThePasscodePromptRestoresEcho() throws {
        try withStoreFixture { f in
            try f.initialize()
            try f.ok(["lock", "--now"])
            let script = f.root + "/prompt.py"
            try """
                import os, pty, select, sys, termios, time
                pid, master = pty.fork()
                if pid == 0:
                    os.execv(sys.argv[1], [sys.argv[1], "unlock"])
                seen = b""
                deadline = time.time() + 20
                while b"asscode" not in seen and time.time() < deadline:
                    if select.select([master], [], [], 0.5)[0]:
                        seen += os.read(master, 1024)
                time.sleep(0.3)
                during = termios.tcgetattr(master)[3] & termios.ECHO != 0
                os.write(master, b"\\x03")
                _, status = os.waitpid(pid, 0)
                after = termios.tcgetattr(master)[3] & termios.ECHO != 0
                signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
                print(f"prompt={b'asscode' in seen} during={during} after={after} signal={signal}")
                """.write(toFile: script, atomically: true, encoding: .utf8)
            let r = try f.runProgram("/usr/bin/env", ["--default-signal", "/usr/bin/python3", script, CLIFixture.lockerPath], timeout: 60)
            #expect(r.stdout.contains("prompt=True during=False after=True signal=\(SIGINT)"), "\(r)")
        }
    }
}
