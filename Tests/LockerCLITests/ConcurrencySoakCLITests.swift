import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A long soak: writers, readers, a lock/unlock cycler and a rebooter all
/// at once against one store, for `LOCKER_SOAK_SECONDS` (default 60). A
/// successful `get` always returns one whole written version; the only
/// failures allowed are "protected data unavailable" (75) and "not found"
/// (66) where they can legitimately happen; no command hangs.
@Suite("locker store soak: puts, gets, rm, mv, lock, unlock and reboot at once")
struct ConcurrencySoakCLITests {
    static let tagLength = 16
    static let sizes = [16, 4096, storeChunk - 16, storeChunk, storeChunk + 16, 2 * storeChunk - 16, 2 * storeChunk + 48]
    /// Every child gets this long; longer counts as a deadlock.
    static let childTimeout = 30.0
    static let passcode = "1234"

    static var seconds: Double {
        let text = ProcessInfo.processInfo.environment["LOCKER_SOAK_SECONDS"] ?? ""
        return Double(text).map { max(1, $0) } ?? 60
    }

    static func tag(writer: Int, version: Int) -> String {
        let digits = String(version)
        let text = "<s\(writer):" + String(repeating: "0", count: max(0, 7 - digits.count)) + digits + ">"
        return text + String(repeating: "=", count: tagLength - text.utf8.count)
    }

    static func content(tag: String, size: Int) -> Data {
        Data(String(repeating: tag, count: size / tagLength).utf8)
    }

    struct State: Sendable {
        /// Every version a writer started: tag → (path, size).
        var started: [String: (path: String, size: Int)] = [:]
        /// Versions whose put exited 0, by path.
        var stored: [String: [String]] = [:]
        var puts = 0, putsOK = 0
        var gets = 0, getsOK = 0
        var removes = 0, moves = 0
        var locks = 0, unlocks = 0, reboots = 0
        /// Non-zero exits that were allowed, by "command code".
        var allowed: [String: Int] = [:]
        /// Exit codes (or "timeout"/"error") that fail the test, by code.
        var failedCodes: [String: Int] = [:]
        var failures: [String] = []

        mutating func fail(_ code: String, _ message: String) {
            failedCodes[code, default: 0] += 1
            if failures.count < 50 { failures.append(message) }
        }
    }

    // Runs when LOCKER_SOAK_SECONDS is set: Tools/test.sh runs it on its own
    // after the suite (60 s), or by hand, e.g.
    // `LOCKER_SOAK_SECONDS=60 swift test --filter ConcurrencySoakCLITests`.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["LOCKER_SOAK_SECONDS"] != nil,
                   "set LOCKER_SOAK_SECONDS to run the soak"))
    func soakNeverTearsNorHangs() throws {
        try withStoreFixture { f in
            try f.initialize(passcode: Self.passcode, ["--grace", "0"])
            let environment = f.environment
            let root = f.root
            let passcodeFile = try f.localFile(Data((Self.passcode + "\n").utf8), name: "passcode")
            let seconds = Self.seconds
            let writers = 3
            let readers = 3
            // Class C (readable once unlocked after boot) and class D.
            let sharedPaths = ["/shared-c", "/shared-d"]
            let pathClass = ["/shared-c": "C", "/shared-d": "D"]
            let ownPaths = (0..<writers).map { "/own/w\($0)" }
            let movedPaths = (0..<writers).map { "/own/w\($0)-moved" }
            let ownClass = (0..<writers).map { $0 % 2 == 0 ? "C" : "D" }
            let state = Box(State())
            let deadline = Date().addingTimeInterval(seconds)
            let done = DispatchGroup()
            let processes = writers + readers + 2

            /// Runs one child; nil (after recording the failure) if it
            /// timed out or could not start.
            @Sendable func run(_ arguments: [String], stdin: String? = nil) -> RawResult? {
                do {
                    return try runLocker(environment: environment, arguments, stdinPath: stdin, timeout: Self.childTimeout)
                } catch {
                    let timedOut = "\(error)".contains("timed out")
                    state.update { $0.fail(timedOut ? "timeout" : "error", "\(arguments.first ?? ""): \(error)") }
                    return nil
                }
            }

            /// Records `r`: fine if 0 or in `allowed`, a failure otherwise.
            @Sendable func judge(_ r: RawResult, allowed: Set<Int32>) {
                let name = r.arguments.first ?? ""
                state.update {
                    if r.status == 0 { return }
                    if allowed.contains(r.status) {
                        $0.allowed["\(name) \(r.status)", default: 0] += 1
                    } else {
                        $0.fail(String(r.status), "\(r)")
                    }
                }
            }

            // Writers: whole versions to the shared paths and their own,
            // now and then rm or mv of their own path.
            for w in 0..<writers {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    var version = 0
                    while Date() < deadline {
                        version += 1
                        if version % 7 == 0 {
                            // rm the own path, or move it aside (replacing
                            // any earlier moved copy).
                            if version % 14 == 0 {
                                guard let r = run(["rm", ownPaths[w]]) else { continue }
                                judge(r, allowed: [66, 75])
                                state.update { $0.removes += 1 }
                            } else {
                                if let r = run(["rm", movedPaths[w]]) { judge(r, allowed: [66, 75]) }
                                guard let r = run(["mv", ownPaths[w], movedPaths[w]]) else { continue }
                                judge(r, allowed: [66, 73, 75])
                                state.update { $0.moves += 1 }
                            }
                            continue
                        }
                        let path = version % 3 == 0 ? ownPaths[w] : sharedPaths[(version + w) % 2]
                        let cls = pathClass[path] ?? ownClass[w]
                        let size = Self.sizes[(version * 5 + w) % Self.sizes.count]
                        let tag = Self.tag(writer: w, version: version)
                        let local = root + "/put-\(w)-\(version)"
                        guard FileManager.default.createFile(atPath: local, contents: Self.content(tag: tag, size: size)) else {
                            state.update { $0.fail("error", "cannot write \(local)") }
                            return
                        }
                        state.update { $0.started[tag] = (path, size) }
                        if let r = run(["put", "--class", cls, local, path]) {
                            // 75: class C cannot be created before the first
                            // unlock after a reboot.
                            judge(r, allowed: cls == "C" ? [75] : [])
                            state.update {
                                $0.puts += 1
                                if r.status == 0 {
                                    $0.putsOK += 1
                                    $0.stored[path, default: []].append(tag)
                                }
                            }
                        }
                        try? FileManager.default.removeItem(atPath: local)
                    }
                }
            }

            // Readers: gets of the shared paths and of others' paths.
            for reader in 0..<readers {
                done.enter()
                Thread.detachNewThread {
                    defer { done.leave() }
                    let paths = sharedPaths + ownPaths.enumerated().filter { $0.offset != reader }.map(\.element)
                        + movedPaths.enumerated().filter { $0.offset != reader }.map(\.element)
                    var n = 0
                    while Date() < deadline {
                        n += 1
                        let path = paths[(n * 7 + reader) % paths.count]
                        let storedBefore = state.value.stored[path] != nil
                        guard let r = run(["get", path]) else { continue }
                        let problem = Self.check(r, path: path, shared: sharedPaths.contains(path),
                                                 storedBefore: storedBefore, started: state.value.started)
                        state.update {
                            $0.gets += 1
                            if r.status == 0 {
                                $0.getsOK += 1
                            } else if problem == nil {
                                $0.allowed["get \(r.status)", default: 0] += 1
                            }
                            if let problem { $0.fail(String(r.status), problem) }
                        }
                    }
                }
            }

            // Lock cycler: lock --now, unlock with the passcode.
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                while Date() < deadline {
                    if let r = run(["lock", "--now"]) {
                        judge(r, allowed: [])
                        state.update { $0.locks += 1 }
                    }
                    usleep(useconds_t(200_000 + Int.random(in: 0..<300_000)))
                    if let r = run(["unlock", "--passcode-stdin"], stdin: passcodeFile) {
                        judge(r, allowed: [])
                        state.update { $0.unlocks += 1 }
                    }
                    usleep(useconds_t(200_000 + Int.random(in: 0..<500_000)))
                }
            }

            // Rebooter: reboot, leave it before first unlock a moment, unlock.
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                while Date() < deadline {
                    usleep(useconds_t(1_500_000 + Int.random(in: 0..<1_500_000)))
                    if let r = run(["reboot"]) {
                        judge(r, allowed: [])
                        state.update { $0.reboots += 1 }
                    }
                    usleep(useconds_t(300_000 + Int.random(in: 0..<700_000)))
                    if let r = run(["unlock", "--passcode-stdin"], stdin: passcodeFile) {
                        judge(r, allowed: [])
                        state.update { $0.unlocks += 1 }
                    }
                }
            }

            let finished = done.wait(timeout: .now() + seconds + 4 * Self.childTimeout) == .success
            #expect(finished, "the workers did not finish")

            // At rest: unlock, verify (repairing garbage if needed), and
            // each shared path holds one complete stored version.
            let unlock = try f.raw(["unlock", "--passcode-stdin"], stdinPath: passcodeFile, timeout: Self.childTimeout)
            #expect(unlock.status == 0, "\(unlock)")
            var verify = try f.raw(["verify", "--read-data"], timeout: 120)
            var repaired = false
            if verify.status != 0 {
                repaired = true
                let repair = try f.raw(["verify", "--repair"], timeout: 120)
                print("soak: verify --read-data exited \(verify.status) before repair; repair: \(repair)")
                verify = try f.raw(["verify", "--read-data"], timeout: 120)
            }
            #expect(verify.status == 0, "verify --read-data after the soak\(repaired ? " and --repair" : ""): \(verify)")

            let final = state.value
            for path in sharedPaths {
                let r = try f.raw(["get", path], timeout: Self.childTimeout)
                let versions = final.stored[path] ?? []
                guard !versions.isEmpty else {
                    #expect(r.status == 66, "\(r)")
                    continue
                }
                #expect(r.status == 0, "\(r)")
                let tag = String(decoding: r.stdout.prefix(Self.tagLength), as: UTF8.self)
                #expect(versions.contains(tag), "\(path) holds \(tag.debugDescription), which was never stored there")
                if let size = final.started[tag]?.size {
                    #expect(r.stdout == Self.content(tag: tag, size: size), "\(path) holds a torn \(tag)")
                }
            }

            let failedCodes = final.failedCodes.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: ",")
            let allowedCodes = final.allowed.sorted { $0.key < $1.key }.map { "\($0.key)×\($0.value)" }.joined(separator: ",")
            print("soak summary: processes=\(processes) seconds=\(Int(seconds)) puts=\(final.putsOK)/\(final.puts) gets=\(final.getsOK)/\(final.gets) rm=\(final.removes) mv=\(final.moves) locks=\(final.locks) unlocks=\(final.unlocks) reboots=\(final.reboots) failures=[\(failedCodes)] allowed=[\(allowedCodes)] verify=\(verify.status)\(repaired ? "(after repair)" : "")")

            #expect(final.failures.isEmpty, "\(final.failures.count) failures, first: \(final.failures.prefix(5).joined(separator: "\n"))")
            #expect(final.putsOK >= 10, "only \(final.putsOK) of \(final.puts) puts succeeded")
            #expect(final.getsOK >= 10, "only \(final.getsOK) of \(final.gets) gets succeeded")
            #expect(final.locks > 0 && final.reboots > 0, "locks \(final.locks), reboots \(final.reboots)")
        }
    }

    /// What is wrong with a `get` result, if anything. Exit 0 must give one
    /// whole version written for that path (or, for a moved path, for the
    /// path it was moved from); 75 is always allowed (locked class or before first unlock);
    /// 66 on a shared path only before its first stored put.
    static func check(_ r: RawResult, path: String, shared: Bool, storedBefore: Bool,
                      started: [String: (path: String, size: Int)]) -> String? {
        switch r.status {
        case 0:
            let tag = String(decoding: r.stdout.prefix(tagLength), as: UTF8.self)
            // A moved path holds a version put at the path it was moved from.
            guard let version = started[tag], version.path == path || version.path + "-moved" == path else {
                return "get \(path) returned \(r.stdout.count) bytes starting \(tag.debugDescription): no such version"
            }
            guard r.stdout == content(tag: tag, size: version.size) else {
                return "get \(path) returned a torn or wrong-sized \(tag): \(r.stdout.count) bytes, expected \(version.size)"
            }
            return nil
        case 75:
            return nil
        case 66 where !shared || !storedBefore:
            return nil
        default:
            return "get \(path) (stored before: \(storedBefore)): \(r)"
        }
    }
}
