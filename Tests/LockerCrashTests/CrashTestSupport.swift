import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

// Support for the crash tests: a fixture (device + store in a private
// temporary directory, with its agent), a runner that keeps output as
// bytes, a child process that is SIGKILLed after a delay, deterministic
// data, and a seeded random generator. Parts are copied from
// Tests/LockerCLITests (test targets cannot share files).

/// The store's chunk size (`ChunkLayout.defaultChunkSize`).
let storeChunk = 256 << 10

/// A failure of the harness itself (not of an assertion).
struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Thread-safe storage for values produced on other threads.
final class Box<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}

/// What one `locker` run produced, with standard output as bytes.
struct RawResult: CustomStringConvertible, Sendable {
    var arguments: [String]
    var status: Int32
    var stdout: Data
    var stderr: String

    var text: String { String(decoding: stdout, as: UTF8.self) }

    var description: String {
        let shown = stdout.count <= 2000 ? text : "(\(stdout.count) bytes)"
        return "locker \(arguments.joined(separator: " ")) → exit \(status)\n--- stdout:\n\(shown)\n--- stderr:\n\(stderr)---"
    }
}

/// The `locker` executable SwiftPM built next to this test bundle
/// (`$LOCKER_CLI` overrides).
let lockerPath: String = {
    if let path = ProcessInfo.processInfo.environment["LOCKER_CLI"], !path.isEmpty { return path }
    let bundle = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    return bundle.deletingLastPathComponent().appendingPathComponent("locker").path
}()

/// Runs the `locker` binary with `environment`, standard input from
/// `stdinPath` (else /dev/null), and returns its output as bytes. Kills it
/// and throws after `timeout`.
func runLocker(environment: [String: String], _ arguments: [String], stdinPath: String? = nil,
               timeout: Double = 60) throws -> RawResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: lockerPath)
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
    guard readers.wait(timeout: .now() + 30) == .success else {
        throw HarnessError("locker \(arguments.joined(separator: " ")) exited but its output pipes stayed open")
    }
    let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus
        : process.terminationStatus
    return RawResult(arguments: arguments, status: status, stdout: outData.value,
                     stderr: String(decoding: errData.value, as: UTF8.self))
}

// MARK: Killing a child

/// Monotonic time in seconds.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Sleeps until the monotonic clock reads `deadline`.
func sleepUntil(_ deadline: Double) {
    while true {
        let left = deadline - monotonicSeconds()
        if left <= 0 { return }
        var request = timespec(tv_sec: Int(left), tv_nsec: Int((left - Double(Int(left))) * 1e9))
        var remaining = timespec()
        _ = nanosleep(&request, &remaining)
    }
}

/// How a child started by ``KillableRun`` ended.
struct KillOutcome {
    /// The child ended on its own before the kill was due (nothing was
    /// killed).
    var exitedBeforeKill: Bool
    /// The exit code, or 128 + the signal.
    var status: Int32
    /// Seconds from spawn to exit.
    var elapsed: Double
    /// The delay after which the kill was sent (nil: no kill planned).
    var delay: Double?
}

/// Whom a ``KillableRun`` kills when the delay is up.
enum KillTarget {
    /// The `locker` command itself.
    case command
    /// The agent with this pid (the command is left to fail on its own).
    case agent(pid_t)
}

/// Runs `locker` as a child with posix_spawn (stdin from a file, stdout and
/// stderr to a file) and SIGKILLs it, or the agent, after a delay.
enum KillableRun {
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    static func spawn(_ arguments: [String], environment: [String: String], stdinPath: String?,
                      outputPath: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        guard posix_spawn_file_actions_init(&actions) == 0 else { throw HarnessError("posix_spawn_file_actions_init") }
        defer { posix_spawn_file_actions_destroy(&actions) }
        _ = posix_spawn_file_actions_addopen(&actions, 0, stdinPath ?? "/dev/null", O_RDONLY, 0)
        _ = posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // No descriptor of the test process (pipes of other runs) leaks in.
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
        }
        var attributes = posix_spawnattr_t()
        guard posix_spawnattr_init(&attributes) == 0 else { throw HarnessError("posix_spawnattr_init") }
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        _ = posix_spawnattr_setsigmask(&attributes, &noSignals)
        _ = posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))

        let argv: [UnsafeMutablePointer<CChar>?] = ([lockerPath] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in envp { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, lockerPath, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw HarnessError("posix_spawn \(lockerPath): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Decodes a wait status: the exit code, or 128 + the signal.
    static func code(_ status: Int32) -> Int32 {
        status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    }

    /// Waits for `pid` without blocking forever; nil after `timeout`.
    static func waitForExit(_ pid: pid_t, timeout: Double) -> Int32? {
        let deadline = monotonicSeconds() + timeout
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return status }
            if r < 0 && errno != EINTR { return nil }
            if monotonicSeconds() > deadline { return nil }
            usleep(500)
        }
    }

    /// Runs `locker arguments`; after `delay` seconds (if given) SIGKILLs
    /// `target` unless the command has already ended. Throws if the command
    /// does not end within `timeout` (it is killed then).
    static func run(_ arguments: [String], environment: [String: String], stdinPath: String?, outputPath: String,
                    delay: Double?, target: KillTarget, timeout: Double = 60) throws -> KillOutcome {
        let start = monotonicSeconds()
        let pid = try spawn(arguments, environment: environment, stdinPath: stdinPath, outputPath: outputPath)
        var exitedBeforeKill = true
        var status: Int32?
        if let delay {
            sleepUntil(start + delay)
            var early: Int32 = 0
            if waitpid(pid, &early, WNOHANG) == pid {
                status = early
            } else {
                switch target {
                case .command:
                    kill(pid, SIGKILL)
                case .agent(let agent):
                    kill(agent, SIGKILL)
                }
                exitedBeforeKill = false
            }
        }
        if status == nil {
            status = waitForExit(pid, timeout: timeout)
        }
        let end = monotonicSeconds()
        guard let status else {
            kill(pid, SIGKILL)
            _ = waitForExit(pid, timeout: 5)
            throw HarnessError("locker \(arguments.joined(separator: " ")) did not end within \(timeout) s")
        }
        let code = code(status)
        if case .command = target, !exitedBeforeKill, code != 128 + SIGKILL {
            // The kill raced with a normal exit.
            exitedBeforeKill = true
        }
        return KillOutcome(exitedBeforeKill: exitedBeforeKill, status: code, elapsed: end - start, delay: delay)
    }
}

// MARK: Processes

func isZombie(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")")
    else { return false }
    let rest = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces)
    return rest.hasPrefix("Z") || rest.hasPrefix("X")
}

func isAlive(_ pid: Int32) -> Bool {
    kill(pid, 0) == 0 && !isZombie(pid)
}

/// Waits up to `seconds` for `pid` to be gone (or a zombie).
func waitUntilGone(_ pid: Int32, seconds: Double = 5) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if !isAlive(pid) { return true }
        usleep(2_000)
    }
    return !isAlive(pid)
}

// MARK: The fixture

/// A device and a store in a private temporary directory with a short path
/// (sun_path holds 108 bytes): the device is `<root>/d`, the store
/// `<root>/s`, HOME is the root. `tearDown` reboots the agent, kills any
/// agent left and removes the directory.
final class CrashFixture {
    let root: String
    var device: String { root + "/d" }
    var store: String { root + "/s" }
    private var files = 0

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: lockerPath) else {
            throw HarnessError("""
                the locker executable is missing at \(lockerPath): build it with \
                'swift build --build-tests', or point LOCKER_CLI at it
                """)
        }
        var template = Array("/tmp/lkk-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed: errno \(errno)") }
        root = String(cString: made)
    }

    var environment: [String: String] {
        ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": root, "LOCKER_DEVICE": device, "LOCKER_STORE": store]
    }

    /// A new path under the root for a scratch file.
    func scratchPath(_ stem: String) -> String {
        files += 1
        return root + "/\(stem)-\(files)"
    }

    /// Writes `text` to a scratch file for standard input and returns its
    /// path.
    func stdinFile(_ text: String) throws -> String {
        let path = scratchPath("stdin")
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else {
            throw HarnessError("cannot write \(path)")
        }
        return path
    }

    /// Runs `locker arguments` to completion.
    @discardableResult
    func raw(_ arguments: [String], stdin: String? = nil, timeout: Double = 60) throws -> RawResult {
        let input = try stdin.map(stdinFile)
        defer { if let input { unlink(input) } }
        return try runLocker(environment: environment, arguments, stdinPath: input, timeout: timeout)
    }

    /// Runs `locker arguments` and throws unless it exits 0.
    @discardableResult
    func ok(_ arguments: [String], stdin: String? = nil) throws -> RawResult {
        let result = try raw(arguments, stdin: stdin)
        guard result.status == 0 else { throw HarnessError("expected exit 0: \(result)") }
        return result
    }

    /// Stores `bytes` at `path` (through a local file); throws unless `put`
    /// exits 0.
    func put(_ path: String, _ bytes: Data, protection: String?) throws {
        let local = scratchPath("in")
        guard FileManager.default.createFile(atPath: local, contents: bytes) else { throw HarnessError("cannot write \(local)") }
        defer { unlink(local) }
        try ok(["put", local, path] + (protection.map { ["--class", $0] } ?? []))
    }

    /// The pid in `<device>/agent.pid`, if it names a live agent of this
    /// device.
    var agentPID: Int32? {
        guard let text = try? String(contentsOfFile: device + "/agent.pid", encoding: .utf8),
              let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), isAgent(pid)
        else { return nil }
        return pid
    }

    /// Live agents (`locker-agent`, or `locker agent`) for this fixture's
    /// device.
    func agentProcesses() -> Set<Int32> {
        var found = Set<Int32>()
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            if let pid = Int32(name), isAgent(pid) { found.insert(pid) }
        }
        return found
    }

    private func isAgent(_ pid: Int32) -> Bool {
        guard pid > 0, isAlive(pid),
              let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty
        else { return false }
        let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard arguments.contains(device) else { return false }
        return arguments[0].hasSuffix("/locker-agent") || (arguments.count >= 2 && arguments[1] == "agent")
    }

    /// Names of temporary files (`.tmp-`) in the device directory.
    func deviceTemporaries() -> Set<String> {
        Set(((try? FileManager.default.contentsOfDirectory(atPath: device)) ?? []).filter { $0.contains(".tmp-") })
    }

    /// Reboots the agent (which makes it exit), kills any agent still
    /// there, and removes the directory.
    func tearDown() {
        _ = try? raw(["reboot"], timeout: 15)
        for pid in agentProcesses() {
            kill(pid, SIGKILL)
            _ = waitUntilGone(pid)
        }
        try? FileManager.default.removeItem(atPath: root)
    }
}

// MARK: Data

/// A small, fast, seedable generator (splitmix64), so that a seed
/// reproduces every choice of a campaign.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// `count` deterministic bytes that do not compress (splitmix64 of `seed`).
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> Data {
    var data = Data(count: count)
    data.withUnsafeMutableBytes { (raw: UnsafeMutableRawBufferPointer) in
        guard let base = raw.baseAddress else { return }
        var generator = SplitMix64(seed: seed)
        var offset = 0
        while offset < count {
            let z = generator.next()
            let n = min(8, count - offset)
            withUnsafeBytes(of: z.littleEndian) { word in
                (base + offset).copyMemory(from: word.baseAddress!, byteCount: n)
            }
            offset += n
        }
    }
    return data
}

/// `count` deterministic bytes that compress well: numbered text lines.
func compressibleBytes(_ count: Int, seed: UInt64) -> Data {
    var data = Data(capacity: count + 64)
    var line = 0
    while data.count < count {
        data.append(contentsOf: Array("seed \(seed) line \(line) of a compressible object\n".utf8))
        line += 1
    }
    return data.prefix(count)
}
