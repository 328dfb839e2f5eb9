import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// End-to-end: the real `locker` binary, each test with its own device,
/// store and agent under a fresh /tmp/lkc-XXXXXX.
@Suite("locker CLI, end to end")
struct CLITests {
    /// Runs `body` with a fresh fixture and always tears it down.
    func withFixture(_ body: (CLIFixture) throws -> Void) throws {
        let fixture = try CLIFixture()
        defer { fixture.tearDown() }
        try body(fixture)
        #expect(fixture.agentProcesses().count <= 1, "more than one agent serves \(fixture.device)")
    }

    // 1
    @Test func statusBeforeInitFailsWithHint() throws {
        try withFixture { f in
            let r = try f.run(["status"])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr.contains("locker: error:"), "\(r)")
            #expect(r.stderr.contains("locker: hint: run 'locker init'"), "\(r)")
            #expect(r.stdout.isEmpty, "\(r)")
        }
    }

    // 2
    /// A device whose socket is served by a process of another user (the
    /// socket replaced while its agent was down) is refused before anything
    /// is sent to it, with exit 1, as an unavailable agent, not 77 (a wrong
    /// passcode).
    @Test(.enabled(if: OtherUser.isPossible, OtherUser.needs))
    func anAgentSocketOfAnotherUserIsRefused() throws {
        try withOtherUser { f, other in
            try f.initialize()
            try f.ok(["reboot"])
            // uid 65534 listens on a socket in its home, which is then put
            // where the device's agent listens.
            let foreign = other.home + "/foreign.sock"
            let listener = Process()
            listener.executableURL = URL(fileURLWithPath: try #require(setprivPath))
            listener.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                                  "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8); time.sleep(30)",
                                  foreign]
            try listener.run()
            defer {
                kill(listener.processIdentifier, SIGKILL)
                listener.waitUntilExit()
            }
            var st = stat()
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline && lstat(foreign, &st) != 0 { usleep(10_000) }
            try #require(rename(foreign, f.device + "/agent.sock") == 0, "errno \(errno)")
            let r = try f.run(["status"])
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr == """
                locker: error: the agent's socket is served by a process of another user; nothing was sent to it
                locker: hint: a device is usable only by the user who owns it; check --device and $LOCKER_DEVICE

                """, "\(r)")
            try? FileManager.default.removeItem(atPath: f.device + "/agent.sock")
        }
    }

    @Test func initUnlocksAndRefusesASecondInit() throws {
        try withFixture { f in
            let r = try f.run(["init", "--passcode-stdin"], stdin: "1234\n")
            #expect(r.status == 0, "\(r)")
            #expect(r.stderr.isEmpty, "\(r)")
            #expect(!r.stdout.contains("1234"), "the passcode was echoed: \(r)")
            let s = try f.status()
            #expect(s.state == "unlocked")
            #expect(s.passcodeSet)
            #expect(s.isProtectedDataAvailable)
            #expect(s.readableClasses == allClasses)
            #expect(s.creatableClasses == allClasses)
            #expect(s.failedAttempts == 0)
            #expect(s.keyGeneration == 1)

            let again = try f.run(["init", "--passcode-stdin"], stdin: "5678\n")
            #expect(again.status == 73, "\(again)")
            #expect(again.stderr.contains("locker: error: a device is already initialized here"), "\(again)")
            #expect(try f.status().state == "unlocked")
        }
    }

    // 3
    @Test func lockNowEvictsClassesAAndB() throws {
        try withFixture { f in
            try f.initialize()
            let r = try f.run(["lock", "--now"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("Locked."), "\(r)")
            let s = try f.status()
            #expect(s.state == "locked")
            #expect(s.readableClasses == ["completeUntilFirstUserAuthentication", "none"])
            #expect(s.creatableClasses == ["completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"])
            #expect(!s.isProtectedDataAvailable)
            #expect(s.graceRemainingSeconds == nil)
        }
    }

    // 4
    @Test func rebootComesBackBeforeFirstUnlockWithANewAgent() throws {
        try withFixture { f in
            try f.initialize()
            let before = try #require(f.agentPIDFromFile, "no agent.pid after init")
            let r = try f.run(["reboot"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("Rebooted"), "\(r)")
            #expect(waitUntilGone(before), "the old agent \(before) still runs after reboot")
            let s = try f.status()
            #expect(s.state == "beforeFirstUnlock")
            #expect(s.readableClasses == ["none"])
            #expect(s.creatableClasses == ["completeUnlessOpen", "none"])
            #expect(!s.isProtectedDataAvailable)
            let after = try #require(f.agentPIDFromFile, "no agent.pid after the reboot")
            #expect(after != before)
        }
    }

    /// `locker agent` run by hand while an agent serves says so and exits
    /// 1, without waiting out the lock (it used to wait 4 s, then exit 0
    /// with nothing said); the serving agent goes on, keys and all.
    @Test func aSecondAgentSaysTheFirstServes() throws {
        try withFixture { f in
            try f.initialize()
            let pid = try #require(f.agentPIDFromFile, "no agent.pid after init")
            let started = Date()
            let second = try f.run(["agent"], timeout: 20)
            let took = Date().timeIntervalSince(started)
            #expect(second.status == 1, "\(second)")
            #expect(second.stderr == "locker: error: an agent already serves \(f.device) (pid \(pid))\n"
                    + "locker: hint: commands use it as it is; 'locker reboot' ends it\n", "\(second)")
            // Well below the 4 s a departing agent is given.
            #expect(took < 3.5, "took \(took) s")
            #expect(f.agentPIDFromFile == pid)
            #expect(try f.status().state == "unlocked")
        }
    }

    /// Commands start `locker-agent` from beside `locker`: the agent alone,
    /// without the command line's parser and Foundation. Run by hand with
    /// anything but `--device DIR`, it says how it is used.
    @Test func commandsStartTheAgentBesideLocker() throws {
        try withFixture { f in
            try f.initialize()
            let pid = try #require(f.agentPIDFromFile, "no agent.pid after init")
            let beside = URL(fileURLWithPath: CLIFixture.lockerPath).resolvingSymlinksInPath()
                .deletingLastPathComponent().appendingPathComponent("locker-agent").path
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") == beside)
            #expect(commandLine(of: pid) == [beside, "--device", f.device])
            #expect(try f.status().state == "unlocked")

            for arguments in [[], ["--device"], ["agent", "--device", f.device], ["--device", ""]] {
                let r = try f.runProgram(beside, arguments, timeout: 10)
                #expect(r.status == 64, "\(r)")
                #expect(r.stderr.hasPrefix("locker-agent: error: usage: locker-agent --device DIR"), "\(r)")
                #expect(r.stderr.filter { $0 == "\n" }.count == 1, "\(r)")
            }
            #expect(f.agentPIDFromFile == pid)
        }
    }

    /// Neither binary links the whole of Foundation (with ICU and
    /// CoreFoundation), only FoundationEssentials: a shared build names no
    /// `libFoundation.so`, and a static one holds no type of Foundation's
    /// own module, whose mangled names begin `10Foundation` and a digit.
    /// (The module `Locker`, which apps import, does link it, for
    /// `NSNumber`; the command line uses `LockerStore` beneath it.)
    @Test func neitherBinaryLinksTheWholeOfFoundation() throws {
        let locker = URL(fileURLWithPath: CLIFixture.lockerPath).resolvingSymlinksInPath()
        for url in [locker, locker.deletingLastPathComponent().appendingPathComponent("locker-agent")] {
            let bytes = [UInt8](try Data(contentsOf: url))
            #expect(bytes.count > 1 << 20, "\(url.path) is not the binary")
            /// The offsets at which `text` occurs in the binary.
            func occurrences(of text: String) -> [Int] {
                let needle = Array(text.utf8)
                return bytes.withUnsafeBytes { haystack in
                    var found: [Int] = [], from = 0
                    let base = haystack.baseAddress!
                    while from + needle.count <= haystack.count,
                          let hit = memchr(base + from, Int32(needle[0]), haystack.count - from - needle.count + 1) {
                        let offset = UnsafeRawPointer(hit) - base
                        if memcmp(hit, needle, needle.count) == 0 { found.append(offset) }
                        from = offset + 1
                    }
                    return found
                }
            }
            #expect(occurrences(of: "libFoundation.so").isEmpty, "\(url.path) loads libFoundation.so")
            let mangled = occurrences(of: "10Foundation").filter { start in
                start + 12 < bytes.count && (0x30...0x39).contains(bytes[start + 12])
            }
            #expect(mangled.count == 0, "\(url.path) holds \(mangled.count) names of Foundation's types")
            // The check can see Foundation where it is: the binary does
            // name the part of it that it links.
            #expect(!occurrences(of: "FoundationEssentials").isEmpty, "\(url.path)")
        }
    }

    /// What may stand beside a `locker` copied alone in place of its
    /// `locker-agent`. Each is passed over (never run: it would leave a
    /// mark) for `locker`'s own `locker agent`, except the last, which is
    /// run, ends at start with a failure, and is replaced by it.
    enum Sibling: String, CaseIterable {
        case none, notExecutable, writableByGroup, writableByOthers, ownedByAnotherUser, aLink, failsAtStart
    }

    /// Without a `locker-agent` it may trust beside it (one that is a
    /// regular file, not a link, that this user may run, owned by the
    /// owner of `locker` or by root and writable by no one else), `locker`
    /// starts its own `agent` command; and if the one it trusts ends at
    /// start with a failure, it starts its own instead. Either way the
    /// commands of both binaries share that agent.
    @Test(arguments: Sibling.allCases)
    func withoutATrustedAgentBesideItLockerRunsItsOwn(_ sibling: Sibling) throws {
        if sibling == .ownedByAnotherUser, geteuid() != 0 { return }  // chown needs root
        try withFixture { f in
            let alone = f.root + "/bin", program = alone + "/locker-agent", mark = f.root + "/ran"
            try FileManager.default.createDirectory(atPath: alone, withIntermediateDirectories: false)
            try FileManager.default.copyItem(atPath: CLIFixture.lockerPath, toPath: alone + "/locker")
            let script = Data("#!/bin/sh\n: > '\(mark)'\nexit 3\n".utf8)
            switch sibling {
            case .none:
                break
            case .aLink:
                #expect(FileManager.default.createFile(atPath: f.root + "/target", contents: script))
                #expect(chmod(f.root + "/target", 0o755) == 0)
                try FileManager.default.createSymbolicLink(atPath: program, withDestinationPath: f.root + "/target")
            default:
                #expect(FileManager.default.createFile(atPath: program, contents: script))
                let mode: mode_t = switch sibling {
                case .notExecutable: 0o644
                case .writableByGroup: 0o775
                case .writableByOthers: 0o757
                default: 0o755
                }
                #expect(chmod(program, mode) == 0)
                if sibling == .ownedByAnotherUser { #expect(chown(program, 65534, 65534) == 0) }
            }
            let made = try f.runProgram(alone + "/locker", ["init", "--passcode-stdin"], stdin: "1234\n")
            #expect(made.status == 0, "\(made)")
            #expect(FileManager.default.fileExists(atPath: mark) == (sibling == .failsAtStart))
            let pid = try #require(f.agentPIDFromFile, "no agent.pid after init")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") == alone + "/locker")
            #expect(commandLine(of: pid) == [alone + "/locker", "agent", "--device", f.device])
            #expect(try f.status().state == "unlocked")
            #expect(f.agentPIDFromFile == pid)
        }
    }

    // 5
    @Test func wrongThenRightPasscode() throws {
        try withFixture { f in
            try f.initialize()
            try f.run(["lock", "--now"])
            let wrong = try f.run(["unlock", "--passcode-stdin"], stdin: "0000\n")
            #expect(wrong.status == 77, "\(wrong)")
            #expect(wrong.stderr.contains("locker: error: wrong passcode (1 failed attempt)"), "\(wrong)")
            #expect(!wrong.stderr.contains("0000"), "the passcode was echoed: \(wrong)")
            #expect(try f.status().failedAttempts == 1)

            let right = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(right.status == 0, "\(right)")
            #expect(right.stdout.contains("Unlocked."), "\(right)")
            let s = try f.status()
            #expect(s.state == "unlocked")
            #expect(s.failedAttempts == 0)
            #expect(s.nextAttemptAllowedAt == nil)
        }
    }

    // 6
    @Test func delayAfterTheFifthFailureSurvivesReboot() throws {
        try withFixture { f in
            try f.initialize()
            try f.run(["lock", "--now"])

            // The same wrong passcode twice in a row counts once.
            for _ in 0..<2 {
                let r = try f.run(["unlock", "--passcode-stdin"], stdin: "1111\n")
                #expect(r.status == 77, "\(r)")
                #expect(r.stderr.contains("wrong passcode (1 failed attempt)"), "\(r)")
            }
            #expect(try f.status().failedAttempts == 1)

            for (index, guess) in ["2222", "3333", "4444"].enumerated() {
                let r = try f.run(["unlock", "--passcode-stdin"], stdin: guess + "\n")
                #expect(r.status == 77, "\(r)")
                #expect(r.stderr.contains("wrong passcode (\(index + 2) failed attempts)"), "\(r)")
                #expect(!r.stderr.contains("next attempt allowed at"), "no delay before the 5th failure: \(r)")
            }
            let fifth = try f.run(["unlock", "--passcode-stdin"], stdin: "5555\n")
            #expect(fifth.status == 77, "\(fifth)")
            #expect(fifth.stderr.contains("wrong passcode (5 failed attempts)"), "\(fifth)")
            #expect(fifth.stderr.contains("next attempt allowed at"), "\(fifth)")

            // Even the right passcode must wait.
            let sixth = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(sixth.status == 77, "\(sixth)")
            #expect(sixth.stderr.contains("locked out after 5 failed attempts"), "\(sixth)")
            #expect(sixth.stderr.contains("next attempt allowed at"), "\(sixth)")

            var s = try f.status()
            #expect(s.state == "locked")
            #expect(s.failedAttempts == 5)
            #expect(s.nextAttemptAllowedAt != nil)

            let reboot = try f.run(["reboot"])
            #expect(reboot.status == 0, "\(reboot)")
            s = try f.status()
            #expect(s.state == "beforeFirstUnlock")
            #expect(s.failedAttempts == 5)
            #expect(s.nextAttemptAllowedAt != nil)
            let afterReboot = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(afterReboot.status == 77, "\(afterReboot)")
            #expect(afterReboot.stderr.contains("locked out after 5 failed attempts"), "\(afterReboot)")
        }
    }

    // 7
    @Test func graceExpires() throws {
        try withFixture { f in
            try f.initialize(passcode: "1234", ["--grace", "1"])
            // lock --json reports the state in the same run, so a slow
            // machine cannot eat the one-second grace between two runs.
            let r = try f.run(["lock", "--json"])
            let lockedAt = Date()
            #expect(r.status == 0, "\(r)")
            let s = try JSONDecoder().decode(StatusJSON.self, from: Data(r.stdout.utf8))
            #expect(s.state == "locking")
            #expect(s.graceSeconds == 1)
            #expect((s.graceRemainingSeconds ?? 0) > 0)
            #expect(s.readableClasses.contains("complete"))
            #expect(s.isProtectedDataAvailable)

            Thread.sleep(until: lockedAt.addingTimeInterval(1.5))
            let later = try f.status()
            #expect(later.state == "locked")
            #expect(!later.readableClasses.contains("complete"))
            #expect(!later.readableClasses.contains("completeUnlessOpen"))
            #expect(later.graceRemainingSeconds == nil)
            #expect(!later.isProtectedDataAvailable)
        }
    }

    // 8
    @Test func passwdChangesThePasscode() throws {
        try withFixture { f in
            try f.initialize()
            let r = try f.run(["passwd"], stdin: "1234\n5678\n")
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("Passcode changed."), "\(r)")
            try f.run(["lock", "--now"])
            let old = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(old.status == 77, "\(old)")
            let new = try f.run(["unlock", "--passcode-stdin"], stdin: "5678\n")
            #expect(new.status == 0, "\(new)")
            #expect(try f.status().state == "unlocked")
        }
    }

    // 9
    @Test func resetStartsANewKeyGeneration() throws {
        try withFixture { f in
            try f.initialize()
            // Without --yes, refused before a passcode is read: nothing
            // changes.
            let unconfirmed = try f.run(["reset"], stdin: "9999\n")
            #expect(unconfirmed.status == 64, "\(unconfirmed)")
            #expect(unconfirmed.stderr.contains("pass --yes to confirm"), "\(unconfirmed)")
            #expect(try f.status().keyGeneration == 1)
            let r = try f.run(["reset", "--yes"], stdin: "9999\n")
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("generation 2"), "\(r)")
            #expect(try f.status().keyGeneration == 2)
            try f.run(["lock", "--now"])
            let unlock = try f.run(["unlock", "--passcode-stdin"], stdin: "9999\n")
            #expect(unlock.status == 0, "\(unlock)")
            let s = try f.status()
            #expect(s.state == "unlocked")
            #expect(s.keyGeneration == 2)
        }
    }

    // 10
    @Test func wipeNeedsYesAndIsForever() throws {
        try withFixture { f in
            try f.initialize()
            let unconfirmed = try f.run(["wipe"])
            #expect(unconfirmed.status == 64, "\(unconfirmed)")
            #expect(unconfirmed.stderr.contains("--yes"), "\(unconfirmed)")
            #expect(try f.status().state == "unlocked")

            let wipe = try f.run(["wipe", "--yes"])
            #expect(wipe.status == 0, "\(wipe)")
            let unlock = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(unlock.status != 0, "\(unlock)")
            #expect(unlock.stderr.contains("wiped"), "\(unlock)")
            #expect(try f.status().state == "wiped")

            let reboot = try f.run(["reboot"])
            #expect(reboot.status == 0, "\(reboot)")
            let s = try f.status()
            #expect(s.state == "wiped")
            #expect(s.readableClasses.isEmpty)
        }
    }

    /// The attempt that reaches `--erase-after` is a wrong passcode (77)
    /// that says the device was wiped, and the hint it gives is one that
    /// `init` then accepts.
    @Test func theAttemptThatErasesSaysSoAndTheHintWorks() throws {
        try withFixture { f in
            try f.initialize(passcode: "1234", ["--erase-after", "2"])
            let put = try f.run(["put", "-", "/note", "--class", "none"], stdin: "kept\n")
            #expect(put.status == 0, "\(put)")
            #expect(try f.run(["lock", "--now"]).status == 0)

            let first = try f.run(["unlock", "--passcode-stdin"], stdin: "0000\n")
            #expect(first.status == 77, "\(first)")
            #expect(first.stderr.contains("wrong passcode (1 failed attempt)"), "\(first)")
            #expect(!first.stderr.contains("wiped"), "\(first)")
            #expect(try f.status().state == "locked")

            let second = try f.run(["unlock", "--passcode-stdin"], stdin: "1111\n")
            #expect(second.status == 77, "\(second)")
            #expect(second.stderr.hasPrefix("locker: error: wrong passcode (2 failed attempts): the erase-after limit was reached and the device was wiped"), "\(second)")
            #expect(second.stderr.contains("locker: hint: to start again, delete the store's directory, or give 'locker init' a new --store"), "\(second)")
            #expect(try f.status().state == "wiped")

            // Afterwards the device says only that it is wiped (exit 1).
            let after = try f.run(["get", "/note", "-"])
            #expect(after.status == 1, "\(after)")
            #expect(after.stderr.contains("this device was wiped"), "\(after)")
            #expect(after.stderr.contains("give 'locker init' a new --store"), "\(after)")

            // Both ways the hint names lead to a working device.
            let newStore = f.root + "/s2"
            let again = try f.run(["--store", newStore, "init", "--passcode-stdin"], stdin: "5678\n")
            #expect(again.status == 0, "\(again)")
            let put2 = try f.run(["--store", newStore, "put", "-", "/x"], stdin: "new\n")
            #expect(put2.status == 0, "\(put2)")
            #expect(try f.run(["wipe", "--yes"]).status == 0)
            let refused = try f.run(["init", "--passcode-stdin"], stdin: "5678\n")
            #expect(refused.status == 73, "\(refused)")
            try FileManager.default.removeItem(atPath: f.store)
            let fresh = try f.run(["init", "--passcode-stdin"], stdin: "5678\n")
            #expect(fresh.status == 0, "\(fresh)")
            #expect(try f.status().state == "unlocked")
        }
    }

    @Test func resetRefusesADeviceWithoutAPasscodeAndKeepsItsObjects() throws {
        try withFixture { f in
            try f.ok(["init", "--no-passcode"])
            for cls in ["complete", "completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"] {
                try f.ok(["put", "-", "/\(cls)", "--class", cls], stdin: "kept \(cls)\n")
            }
            // Refused before any passcode is read: nothing of stdin is taken.
            let reset = try f.run(["reset", "--yes"], stdin: "9999\n9999\n")
            #expect(reset.status == 1, "\(reset)")
            #expect(reset.stdout.isEmpty, "\(reset)")
            #expect(reset.stderr == """
                locker: error: this device has no passcode, so there is none to reset; reset would only make class A, B and C objects unreadable
                locker: hint: 'locker passwd' sets a passcode and keeps every object readable; 'locker wipe --yes' erases everything

                """, "\(reset)")
            #expect(reset.stdinBytesRead == 0, "reset read \(reset.stdinBytesRead) bytes of stdin")
            let s = try f.status()
            #expect(s.keyGeneration == 1)
            #expect(!s.passcodeSet)
            for cls in ["complete", "completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"] {
                let get = try f.run(["get", "/\(cls)"])
                #expect(get.status == 0 && get.stdout == "kept \(cls)\n", "\(get)")
            }
            // The way the hint points keeps them, and a reset works after it.
            try f.ok(["passwd"], stdin: "4321\n")
            try f.ok(["reset", "--yes"], stdin: "9999\n")
            #expect(try f.status().keyGeneration == 2)
            #expect(try f.run(["get", "/complete"]).status == 69)
            #expect(try f.run(["get", "/none"]).stdout == "kept none\n")
        }
    }

    // 11
    @Test func noPasscodeDeviceIgnoresLock() throws {
        try withFixture { f in
            let initResult = try f.run(["init", "--no-passcode"])
            #expect(initResult.status == 0, "\(initResult)")
            let lock = try f.run(["lock", "--now"])
            #expect(lock.status == 0, "\(lock)")
            #expect(lock.stdout.contains("no passcode"), "\(lock)")
            let s = try f.status()
            #expect(!s.passcodeSet)
            #expect(s.readableClasses == allClasses)
            #expect(s.isProtectedDataAvailable)

            let text = try f.run(["status"])
            #expect(text.status == 0, "\(text)")
            #expect(text.stdout.contains("locking changes nothing for data"), "\(text)")
            #expect(text.stdout.contains("\nDefault class:     completeUntilFirstUserAuthentication (where no directory sets one)\n"), "\(text)")
            #expect(text.stdout.contains("none"), "\(text)")

            let unlock = try f.run(["unlock"], stdin: "sentinel\n")
            #expect(unlock.status == 0, "\(unlock)")
            #expect(unlock.stdinBytesRead == 0, "unlock read \(unlock.stdinBytesRead) bytes of stdin")
            #expect(unlock.stdout.contains("no passcode"), "\(unlock)")
            #expect(try f.status().state == "unlocked")

            // A lock with the grace period of init locks at once: there is
            // nothing to evict, so no grace to count down.
            let graceful = try f.run(["lock"])
            #expect(graceful.status == 0, "\(graceful)")
            let afterGrace = try f.status()
            #expect(afterGrace.state == "locked")
            #expect(afterGrace.isProtectedDataAvailable)
            #expect(try f.run(["unlock"]).status == 0)
            #expect(try f.status().state == "unlocked")
        }
    }

    /// A missing or empty passcode line gets an error and hint that fit
    /// the command: passwd names the line it lacked and says it reads two;
    /// "make a device without a passcode" is offered only where a passcode
    /// is being set.
    @Test func missingAndEmptyPasscodeLinesGetTheirCommandsHint() throws {
        try withFixture { f in
            let emptyInit = try f.run(["init", "--passcode-stdin"], stdin: "\n")
            #expect(emptyInit.status == 64, "\(emptyInit)")
            #expect(emptyInit.stderr == "locker: error: the passcode is empty\nlocker: hint: use --no-passcode for a device without one\n",
                    "\(emptyInit)")
            try f.initialize()
            let oneLine = try f.run(["passwd", "--passcode-stdin"], stdin: "1234\n")
            #expect(oneLine.status == 64, "\(oneLine)")
            #expect(oneLine.stderr == "locker: error: expected the new passcode on standard input\n"
                    + "locker: hint: pass two lines on stdin, the current passcode then the new one, or run on a terminal\n", "\(oneLine)")
            let none = try f.run(["passwd", "--passcode-stdin"], stdin: "")
            #expect(none.stderr.hasPrefix("locker: error: expected the current passcode on standard input\n"), "\(none)")
            // passwd and reset cannot make a device without a passcode:
            // no hint that they could.
            let emptyNew = try f.run(["passwd", "--passcode-stdin"], stdin: "1234\n\n")
            #expect(emptyNew.status == 64, "\(emptyNew)")
            #expect(emptyNew.stderr == "locker: error: the passcode is empty\n", "\(emptyNew)")
            let emptyUnlock = try f.run(["unlock", "--passcode-stdin"], stdin: "\n")
            #expect(emptyUnlock.status == 64, "\(emptyUnlock)")
            #expect(emptyUnlock.stderr == "locker: error: the passcode is empty\n", "\(emptyUnlock)")
            // Nothing counted: the passcode still works at the first try.
            #expect(try f.status().failedAttempts == 0)
        }
    }

    /// Two inits on new paths at once: the one that finds the device made
    /// by the other (exit 73) leaves the other's device, agent and store
    /// alone. Before, having found the paths missing when it started, it
    /// removed them as its own. The first init waits at its passcode (a
    /// FIFO) after it found the paths missing and started the agent.
    @Test func anInitThatLosesARaceLeavesTheWinnersDevice() throws {
        try withFixture { f in
            let fifo = f.root + "/passcode"
            #expect(mkfifo(fifo, 0o600) == 0)
            // Held open for writing so the init's open does not block.
            let writer = open(fifo, O_RDWR)
            #expect(writer >= 0)
            defer { close(writer) }
            let first = try BackgroundRun(f, ["init", "--passcode-stdin"], stdin: fifo)
            defer { first.stop() }
            let deadline = Date().addingTimeInterval(20)
            while !FileManager.default.fileExists(atPath: f.device + "/agent.pid"), Date() < deadline { usleep(20_000) }
            try #require(FileManager.default.fileExists(atPath: f.device + "/agent.pid"), "the first init started no agent")

            let second = try f.run(["init", "--passcode-stdin"], stdin: "5678\n")
            #expect(second.status == 0, "\(second)")
            #expect(write(writer, "1234\n", 5) == 5)
            #expect(first.waitForExit(seconds: 20) == 73)

            // The winner's device and store are whole, with its passcode.
            #expect(try f.status().state == "unlocked")
            try f.run(["put", "-", "/x"], stdin: "kept")
            #expect(try f.run(["get", "/x"]).stdout == "kept")
            #expect(try f.run(["lock", "--now"]).status == 0)
            #expect(try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n").status == 77)
            #expect(try f.run(["unlock", "--passcode-stdin"], stdin: "5678\n").status == 0)
        }
    }

    @Test func lockOnAWipedDeviceIsRefused() throws {
        try withFixture { f in
            try f.initialize()
            #expect(try f.run(["wipe", "--yes"]).status == 0)
            let lock = try f.run(["lock"])
            #expect(lock.status == 1, "\(lock)")
            #expect(lock.stderr.hasPrefix("locker: error: "), "\(lock)")
            #expect(lock.stderr.contains("wiped"), "\(lock)")
            #expect(!lock.stdout.contains("no passcode"), "\(lock)")
        }
    }

    // 12
    @Test func aKilledAgentIsReplacedSilently() throws {
        try withFixture { f in
            try f.initialize()
            let pid = try #require(f.agentPIDFromFile, "no agent.pid after init")
            #expect(kill(pid, SIGKILL) == 0)
            #expect(waitUntilGone(pid), "agent \(pid) survived SIGKILL")

            let r = try f.run(["status", "--json"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stderr.isEmpty, "\(r)")
            let s = try JSONDecoder().decode(StatusJSON.self, from: Data(r.stdout.utf8))
            #expect(s.state == "beforeFirstUnlock")
            let fresh = try #require(f.agentPIDFromFile)
            #expect(fresh != pid)
        }
    }

    /// `kill` (SIGTERM) ends the agent as `locker reboot` does: it wipes
    /// the keys and removes its socket and agent.pid; the next command
    /// starts a new one, before first unlock.
    @Test func aTerminatedAgentCleansUpAfterItself() throws {
        try withFixture { f in
            try f.initialize()
            #expect(try f.put("/c", Data("class C".utf8), ["--class", "C"]).status == 0)
            let pid = try #require(f.agentPIDFromFile, "no agent.pid after init")
            #expect(kill(pid, SIGTERM) == 0)
            #expect(waitUntilGone(pid), "agent \(pid) survived SIGTERM")
            let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: f.device))?.filter { $0.hasPrefix("agent.sock") || $0 == "agent.pid" }
            #expect(leftovers == [], "left behind: \(leftovers ?? [])")

            let r = try f.run(["get", "/c"])
            #expect(r.status == 75, "\(r)")
            let s = try JSONDecoder().decode(StatusJSON.self, from: Data(try f.run(["status", "--json"]).stdout.utf8))
            #expect(s.state == "beforeFirstUnlock")
            #expect(try #require(f.agentPIDFromFile) != pid)
        }
    }

    // 13
    @Test(.enabled(if: geteuid() == 0, "needs root to run locker as uid 65534"),
          .enabled(if: setprivPath != nil, "needs setpriv (util-linux) to run locker as uid 65534"))
    func anotherUserIsRefused() throws {
        let setpriv = try #require(setprivPath)
        try withFixture { f in
            try f.initialize()
            let pid = try #require(f.agentPIDFromFile)
            // Let the other user reach the device directory: it still must
            // not get through (the socket is 0600, the agent checks peers).
            #expect(chmod(f.root, 0o711) == 0)
            #expect(chmod(f.device, 0o711) == 0)
            defer { _ = chmod(f.device, 0o700) }
            // The binary must be runnable by that user, or the test proves
            // nothing.
            var st = stat()
            #expect(stat(f.device + "/agent.sock", &st) == 0)
            #expect(st.st_mode & 0o777 == 0o600, "agent.sock mode \(String(st.st_mode & 0o777, radix: 8))")
            #expect(st.st_uid == 0)
            let probe = try f.runProgram(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                   CLIFixture.lockerPath, "--version"])
            try #require(probe.status == 0, "uid 65534 cannot run locker at all: \(probe)")

            let r = try f.runProgram(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups",
                                               CLIFixture.lockerPath, "status"])
            #expect(r.status != 0, "\(r)")
            #expect(!r.stdout.contains("unlocked"), "\(r)")
            #expect(r.stderr.contains("locker: error:"), "\(r)")

            // A device directory the user may not search is not "no
            // device" (whose hint would send them to 'locker init').
            _ = chmod(f.device, 0o700)
            let hidden = try f.runProgram(setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                    CLIFixture.lockerPath, "status", "--device", f.device])
            #expect(hidden.status == 1, "\(hidden)")
            #expect(hidden.stderr.hasPrefix("locker: error: cannot look into the device directory: "), "\(hidden)")
            #expect(hidden.stderr.contains("Permission denied"), "\(hidden)")
            #expect(!hidden.stderr.contains("locker init"), "\(hidden)")

            let s = try f.status()
            #expect(s.state == "unlocked")
            #expect(f.agentPIDFromFile == pid)
            #expect(isAlive(pid))
        }
    }

    /// `--store` and `--device` work before the subcommand as after it.
    @Test func globalOptionsBeforeTheSubcommand() throws {
        try withFixture { f in
            try f.initialize()
            let other = f.root + "/other"
            let made = try f.run(["--store", other, "mkdir", "/before"])
            #expect(made.status == 0, "\(made)")
            let listed = try f.run(["--device=\(f.device)", "--store=\(other)", "ls", "/"])
            #expect(listed.status == 0, "\(listed)")
            #expect(listed.stdout == "before/\n", "\(listed)")
            let after = try f.run(["ls", "/", "--store", other])
            #expect(after.stdout == listed.stdout, "\(after)")
            // The default store was not touched.
            let home = try f.run(["ls", "/"])
            #expect(home.status == 0 && home.stdout.isEmpty, "\(home)")
            let help = try f.run(["--store", other, "help", "ls"])
            #expect(help.status == 0 && help.stdout.contains("USAGE: locker ls"), "\(help)")
            let wrong = try f.run(["--device", f.root + "/nowhere", "status"])
            #expect(wrong.status == 1, "\(wrong)")
            #expect(wrong.stderr.contains("no device at \(f.root)/nowhere"), "\(wrong)")
            // Global options alone, or one without its value, say what is
            // missing; an option in the subcommand's place is named.
            let alone = try f.run(["--store", other])
            #expect(alone.status == 64, "\(alone)")
            #expect(alone.stderr.hasPrefix("locker: error: no subcommand after --store\n"), "\(alone)")
            let both = try f.run(["--store=\(other)", "--device", f.device])
            #expect(both.stderr.hasPrefix("locker: error: no subcommand after --store and --device\n"), "\(both)")
            let bare = try f.run(["ls", "/", "--store", other, "--device"])
            #expect(bare.status == 64, "\(bare)")
            let last = try f.run(["--store"])
            #expect(last.status == 64, "\(last)")
            #expect(last.stderr.hasPrefix("locker: error: missing value for '--store <DIR>'\n"), "\(last)")
            let typo = try f.run(["--store", other, "--lsit"])
            #expect(typo.status == 64, "\(typo)")
            #expect(typo.stderr.hasPrefix("locker: error: Unknown option '--lsit'\n"), "\(typo)")
            #expect(typo.stdout.isEmpty, "\(typo)")
        }
    }

    // 14
    @Test(arguments: [
        ["frobnicate"],
        ["init", "--grace", "999999"],
        ["init", "--no-passcode", "--passcode-stdin"],
        ["init", "--default-class", "X"],
        ["init", "--erase-after", "0", "--passcode-stdin"],
    ])
    func usageErrors(arguments: [String]) throws {
        try withFixture { f in
            let r = try f.run(arguments, stdin: "1234\n")
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.hasPrefix("locker: error: "), "\(r)")
            #expect(r.stdout.isEmpty, "\(r)")
            // Nothing was created.
            #expect(!FileManager.default.fileExists(atPath: f.device + "/agent.pid"), "\(r)")
        }
    }

    /// Out-of-range numbers name the range, however far out they are.
    @Test(arguments: [
        (["init", "--erase-after", "300", "--passcode-stdin"], "--erase-after must be between 1 and 100"),
        (["init", "--erase-after", "0", "--passcode-stdin"], "--erase-after must be between 1 and 100"),
        (["init", "--grace", "86401"], "--grace must be between 0 and 86400 seconds"),
        (["init", "--grace", "5000000000"], "--grace must be between 0 and 86400 seconds"),
        // A negative number is a value out of range, not a missing one.
        (["init", "--grace", "-1"], "--grace must be between 0 and 86400 seconds"),
        (["init", "--erase-after", "-5", "--passcode-stdin"], "--erase-after must be between 1 and 100"),
    ])
    func outOfRangeNumbersNameTheirRange(arguments: [String], message: String) throws {
        try withFixture { f in
            let r = try f.run(arguments, stdin: "1234\n")
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.hasPrefix("locker: error: \(message)\n"), "\(r)")
            #expect(!FileManager.default.fileExists(atPath: f.device + "/agent.pid"), "\(r)")
        }
    }

    // 14
    @Test func helpListsTheExitCodes() throws {
        try withFixture { f in
            let r = try f.run(["--help"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("Exit codes:"), "\(r)")
            #expect(r.stdout.contains("75"), "\(r)")
            #expect(r.stdout.contains("77"), "\(r)")
            #expect(r.stderr.isEmpty, "\(r)")
        }
    }

    // 15
    @Test func watchReportsLockAndUnlockAndEndsOnReboot() throws {
        try withFixture { f in
            try f.initialize()
            let watch = try BackgroundRun(f, ["watch"])
            defer { watch.stop() }
            let will = "protectedDataWillBecomeUnavailable"
            let did = "protectedDataDidBecomeAvailable"
            try Self.lockUntilWatched(f, watch)

            let unlock = try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            #expect(unlock.status == 0, "\(unlock)")
            let ordered = watch.waitForOutput(seconds: 5) { text in
                guard let w = text.range(of: will) else { return false }
                return text[w.upperBound...].contains(did)
            }
            #expect(ordered, "no \(did) after \(will): \(watch.text)")
            for line in watch.text.split(separator: "\n") {
                #expect(line.hasSuffix(will) || line.hasSuffix(did), "odd watch line: \(line)")
            }

            let reboot = try f.run(["reboot"])
            #expect(reboot.status == 0, "\(reboot)")
            let status = watch.waitForExit(seconds: 10)
            #expect(status == 0, "watch did not end cleanly on reboot (status \(String(describing: status)))")
        }
    }

    /// watch prints nothing until an event, so it cannot say when it has
    /// subscribed: locks (and unlocks again) until an event shows up.
    /// Leaves the device locked.
    static func lockUntilWatched(_ f: CLIFixture, _ watch: BackgroundRun) throws {
        let will = "protectedDataWillBecomeUnavailable"
        var seen = false
        for _ in 0..<10 where !seen {
            let lock = try f.run(["lock", "--now"])
            #expect(lock.status == 0, "\(lock)")
            seen = watch.waitForOutput(seconds: 1) { $0.contains(will) }
            if !seen { try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n") }
        }
        #expect(seen, "watch printed no \(will): \(watch.text)")
    }

    /// A wiped device has no event to come: a watch running when it is
    /// wiped prints the wipe's event and ends with the wiped error
    /// (exit 1), and a watch started on a wiped device ends at once with
    /// it, where it waited for ever.
    @Test func watchEndsWhenTheDeviceIsWiped() throws {
        try withFixture { f in
            try f.initialize()
            let errors = f.root + "/watch-errors"
            let watch = try BackgroundRun(f, ["watch"], stderr: errors)
            defer { watch.stop() }
            try Self.lockUntilWatched(f, watch)
            try f.run(["unlock", "--passcode-stdin"], stdin: "1234\n")
            let wipe = try f.run(["wipe", "--yes"])
            #expect(wipe.status == 0, "\(wipe)")
            #expect(watch.waitForExit(seconds: 10) == 1, "watch did not end with 1 on the wipe: \(watch.text)")
            #expect(watch.text.split(separator: "\n").last?.hasSuffix("protectedDataWillBecomeUnavailable") == true, "\(watch.text)")
            let stderr = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            #expect(stderr.hasPrefix("locker: error: this device was wiped"), "\(stderr)")

            let again = try f.run(["watch"], timeout: 10)
            #expect(again.status == 1, "\(again)")
            #expect(again.stderr.hasPrefix("locker: error: this device was wiped"), "\(again)")
            #expect(again.stdout.isEmpty, "\(again)")
            let json = try f.run(["watch", "--json"], timeout: 10)
            #expect(json.status == 1, "\(json)")
        }
    }

    /// The agent streams events to at most 16 watchers at once: while
    /// another program of the user holds them all, `watch` fails at once
    /// with one line and a hint, and other commands still get through.
    @Test func watchBeyondTheAgentsLimitSaysSo() throws {
        try withFixture { f in
            try f.initialize()
            let watchers = try (0..<16).map { _ in try RawAgentConnection(f) }
            for watcher in watchers { #expect(try watcher.watch() == [0x00]) }
            let r = try f.run(["watch"], timeout: 10)
            #expect(r.status == 1, "\(r)")
            #expect(r.stderr == """
                locker: error: the agent already serves 16 watchers
                locker: hint: stop one of the running 'locker watch' commands, then try again

                """, "\(r)")
            #expect(r.stdout.isEmpty, "\(r)")
            let lock = try f.run(["lock", "--now"])
            #expect(lock.status == 0, "\(lock)")
            #expect(try f.status().state == "locked")
        }
    }

    // 16
    @Test func passcodesAreNeverTakenFromArgv() throws {
        try withFixture { f in
            try f.initialize()
            try f.run(["lock", "--now"])
            let r = try f.run(["unlock", "1234"])
            #expect(r.status == 64, "\(r)")
            #expect(r.stderr.hasPrefix("locker: error: "), "\(r)")
            #expect(r.stderr.contains("never read from the command line"), "\(r)")
            // Nothing secret is printed, not even a passcode misplaced in argv.
            #expect(!r.stderr.contains("1234") && !r.stdout.contains("1234"), "\(r)")
            for command in [["init", "--passcode-stdin"], ["passwd"], ["reset"], ["unlock", "--passcode-stdin"]] {
                let other = try f.run(command + ["4321"], stdin: "1234\n")
                #expect(other.status == 64, "\(other)")
                #expect(!other.stderr.contains("4321"), "\(other)")
            }
            let s = try f.status()
            #expect(s.state == "locked")
            #expect(s.failedAttempts == 0)
        }
    }
}
