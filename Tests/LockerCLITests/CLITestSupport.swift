import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What one `locker` run produced.
struct CLIResult: CustomStringConvertible {
    var program = "locker"
    var arguments: [String]
    var status: Int32
    var stdout: String
    var stderr: String
    /// How far the command moved its standard input's file offset: the
    /// bytes it read (stdin is a regular file; 0 for /dev/null).
    var stdinBytesRead: Int

    var description: String {
        "\(program) \(arguments.joined(separator: " ")) → exit \(status)\n--- stdout:\n\(stdout)--- stderr:\n\(stderr)---"
    }
}

/// A failure of the harness itself (not of an assertion).
struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What `status --json` prints (the fields the tests look at).
struct StatusJSON: Decodable {
    var state: String
    var passcodeSet: Bool
    var isProtectedDataAvailable: Bool
    var readableClasses: [String]
    var creatableClasses: [String]
    var graceSeconds: Int
    var graceRemainingSeconds: Double?
    var failedAttempts: Int
    var nextAttemptAllowedAt: String?
    var keyGeneration: Int
}

let allClasses = ["complete", "completeUnlessOpen", "completeUntilFirstUserAuthentication", "none"]

/// Thread-safe storage for values produced on other threads.
final class Box<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}

/// A private temporary directory with a short path (sun_path holds 108
/// bytes): the device is `<root>/d`, the store `<root>/s`, and HOME is the
/// root. `tearDown` reboots the agent, kills any agent left, and removes
/// the directory.
final class CLIFixture {
    let root: String
    var device: String { root + "/d" }
    var store: String { root + "/s" }
    private var stdinFiles = 0

    /// The `locker` executable SwiftPM built next to this test bundle
    /// (`$LOCKER_CLI` overrides).
    static let lockerPath: String = {
        if let path = ProcessInfo.processInfo.environment["LOCKER_CLI"], !path.isEmpty { return path }
        let bundle = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return bundle.deletingLastPathComponent().appendingPathComponent("locker").path
    }()

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.lockerPath) else {
            throw HarnessError("""
                the locker executable is missing at \(Self.lockerPath): build it with \
                'swift build --build-tests', or point LOCKER_CLI at it
                """)
        }
        var template = Array("/tmp/lkc-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw HarnessError("mkdtemp failed: errno \(errno)") }
        root = String(cString: made)
    }

    var environment: [String: String] {
        ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": root, "LOCKER_DEVICE": device, "LOCKER_STORE": store]
    }

    /// Runs `locker arguments` to completion, with `stdin` (if any) as its
    /// standard input, else /dev/null. Kills it and throws after `timeout`.
    @discardableResult
    func run(_ arguments: [String], stdin: String? = nil, timeout: Double = 30) throws -> CLIResult {
        try runProgram(Self.lockerPath, arguments, stdin: stdin, timeout: timeout)
    }

    /// Runs `executable` (not necessarily locker) with this fixture's
    /// environment.
    func runProgram(_ executable: String, _ arguments: [String], stdin: String? = nil,
                    timeout: Double = 30) throws -> CLIResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment

        // Standard input is a regular file, so that the offset afterwards
        // says how much the command read.
        let input: FileHandle
        if let stdin {
            stdinFiles += 1
            let path = root + "/stdin-\(stdinFiles)"
            guard FileManager.default.createFile(atPath: path, contents: Data(stdin.utf8)),
                  let handle = FileHandle(forReadingAtPath: path)
            else { throw HarnessError("cannot create \(path)") }
            input = handle
        } else {
            guard let handle = FileHandle(forReadingAtPath: "/dev/null") else { throw HarnessError("no /dev/null") }
            input = handle
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
                // Closed here, not when the handle is freed: the suite runs
                // thousands of commands, and a leaked descriptor each
                // pushes /proc/self/fd past the size that Foundation's
                // Process.run reads over the end of (a crash).
                try? handle.close()
                readers.leave()
            }
        }

        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        // The parent's copies of the write ends must go, or the readers
        // never see end of file.
        try? out.fileHandleForWriting.close()
        try? err.fileHandleForWriting.close()

        if exited.wait(timeout: .now() + timeout) == .timedOut {
            kill(process.processIdentifier, SIGKILL)
            _ = exited.wait(timeout: .now() + 5)
            _ = readers.wait(timeout: .now() + 5)
            let partial = CLIResult(program: executable, arguments: arguments, status: -1,
                                    stdout: String(decoding: outData.value, as: UTF8.self),
                                    stderr: String(decoding: errData.value, as: UTF8.self), stdinBytesRead: 0)
            throw HarnessError("timed out after \(timeout) s and was killed: \(partial)")
        }
        guard readers.wait(timeout: .now() + 10) == .success else {
            throw HarnessError("\(executable) exited but its output pipes stayed open")
        }
        let offset = lseek(input.fileDescriptor, 0, SEEK_CUR)
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus
            : process.terminationStatus
        return CLIResult(program: executable == Self.lockerPath ? "locker" : executable,
                         arguments: arguments, status: status,
                         stdout: String(decoding: outData.value, as: UTF8.self),
                         stderr: String(decoding: errData.value, as: UTF8.self),
                         stdinBytesRead: max(0, Int(offset)))
    }

    /// Runs `locker status --json` (expecting exit 0) and decodes it.
    func status() throws -> StatusJSON {
        let result = try run(["status", "--json"])
        guard result.status == 0 else { throw HarnessError("status --json failed: \(result)") }
        do {
            return try JSONDecoder().decode(StatusJSON.self, from: Data(result.stdout.utf8))
        } catch {
            throw HarnessError("status --json printed no valid status (\(error)): \(result)")
        }
    }

    /// `init --passcode-stdin` with `passcode` and `extra` options; throws
    /// unless it exits 0.
    func initialize(passcode: String = "1234", _ extra: [String] = []) throws {
        let result = try run(["init", "--passcode-stdin"] + extra, stdin: passcode + "\n")
        guard result.status == 0 else { throw HarnessError("init failed: \(result)") }
    }

    /// The pid in `<device>/agent.pid`, if the file is there.
    var agentPIDFromFile: Int32? {
        guard let text = try? String(contentsOfFile: device + "/agent.pid", encoding: .utf8) else { return nil }
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Live agents (`locker-agent`, or `locker agent`) for this fixture's device: the pid
    /// file's (if it really is such an agent) plus any found in /proc.
    func agentProcesses() -> Set<Int32> {
        var found = LockerCLITests.agentProcesses(serving: device)
        if let pid = agentPIDFromFile, isAgent(pid, serving: device) { found.insert(pid) }
        return found
    }

    /// Reboots the agent (which makes it exit), kills any agent still
    /// there, and removes the directory.
    func tearDown() {
        _ = try? run(["reboot"], timeout: 15)
        for pid in agentProcesses() {
            kill(pid, SIGKILL)
            _ = waitUntilGone(pid)
        }
        try? FileManager.default.removeItem(atPath: root)
    }
}

/// A `locker` run left going in the background (for `watch`), its stdout
/// collected as it comes.
final class BackgroundRun {
    let process = Process()
    let output = Box(Data())
    private let exited = DispatchSemaphore(value: 0)
    private let finished = Box(false)
    /// Signalled once the reader has seen the end of standard output.
    private let drained = DispatchSemaphore(value: 0)

    /// `stderr`: a file to write its standard error to (else /dev/null);
    /// `stdin`: a file to read standard input from (else /dev/null);
    /// `launcher`: a program and its arguments that start `locker` (which
    /// follows them), such as `env --default-signal`.
    init(_ fixture: CLIFixture, _ arguments: [String], stderr: String? = nil, stdin: String? = nil,
         launcher: [String] = []) throws {
        if let program = launcher.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = launcher.dropFirst() + [CLIFixture.lockerPath] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: CLIFixture.lockerPath)
            process.arguments = arguments
        }
        process.environment = fixture.environment
        let input = FileHandle(forReadingAtPath: stdin ?? "/dev/null")
        process.standardInput = input
        if let stderr { _ = FileManager.default.createFile(atPath: stderr, contents: nil) }
        let errorOutput = FileHandle(forWritingAtPath: stderr ?? "/dev/null")
        process.standardError = errorOutput
        let pipe = Pipe()
        process.standardOutput = pipe
        let handle = pipe.fileHandleForReading
        let output = output
        let drained = drained
        Thread.detachNewThread {
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty {
                    try? handle.close()
                    drained.signal()
                    return
                }
                output.update { $0.append(chunk) }
            }
        }
        let exited = exited
        let finished = finished
        process.terminationHandler = { _ in
            finished.update { $0 = true }
            exited.signal()
        }
        try process.run()
        try? pipe.fileHandleForWriting.close()
        // The child has its own copies.
        try? input?.close()
        try? errorOutput?.close()
    }

    var text: String { String(decoding: output.value, as: UTF8.self) }

    /// Polls until `condition` holds on the output so far, for up to
    /// `seconds`.
    func waitForOutput(seconds: Double, _ condition: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(text) { return true }
            usleep(20_000)
        }
        return condition(text)
    }

    /// The signal that ended it, once it exits within `seconds`; 0 if it
    /// exited instead; nil if it still runs.
    func waitForSignal(seconds: Double) -> Int32? {
        guard let status = waitForExit(seconds: seconds) else { return nil }
        return process.terminationReason == .uncaughtSignal ? status : 0
    }

    /// The exit status once it exits within `seconds`, else nil. Once it
    /// has exited, ``text`` holds all it wrote: the reader is given up to
    /// 5 s more to reach the end of its output (a process it started could
    /// hold the pipe open past that).
    func waitForExit(seconds: Double) -> Int32? {
        if !finished.value {
            guard exited.wait(timeout: .now() + seconds) == .success else { return nil }
            exited.signal()
        }
        if drained.wait(timeout: .now() + 5) == .success { drained.signal() }
        return process.terminationStatus
    }

    /// Kills it if it still runs.
    func stop() {
        guard !finished.value else { return }
        kill(process.processIdentifier, SIGKILL)
        _ = waitForExit(seconds: 5)
    }
}

func isZombie(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")")
    else { return false }
    let rest = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces)
    return rest.hasPrefix("Z") || rest.hasPrefix("X")
}

/// Whether `pid`'s main thread is blocked reading its standard input
/// (`read` is system call 0 on x86_64 and 63 on arm64).
func isReadingStandardInput(_ pid: Int32) -> Bool {
    guard let call = try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8) else { return false }
    return call.hasPrefix("0 0x0 ") || call.hasPrefix("63 0x0 ")
}

func isAlive(_ pid: Int32) -> Bool {
    kill(pid, 0) == 0 && !isZombie(pid)
}

/// Waits up to `seconds` for `pid` to be gone (or a zombie).
func waitUntilGone(_ pid: Int32, seconds: Double = 5) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if !isAlive(pid) { return true }
        usleep(10_000)
    }
    return !isAlive(pid)
}

/// Live agents (`locker-agent`, or `locker agent`) serving the device directory `device`,
/// whoever runs them (found in /proc).
func agentProcesses(serving device: String) -> Set<Int32> {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return Set(entries.compactMap { Int32($0) }.filter { isAgent($0, serving: device) })
}

/// Whether `pid` is a live agent serving `device`: `locker-agent`, or
/// `locker agent`.
func isAgent(_ pid: Int32, serving device: String) -> Bool {
    guard pid > 0, isAlive(pid), let arguments = commandLine(of: pid), arguments.contains(device) else { return false }
    return arguments[0].hasSuffix("/locker-agent") || (arguments.count >= 2 && arguments[1] == "agent")
}

/// The arguments `pid` was started with (its program first), if it lives.
func commandLine(of pid: Int32) -> [String]? {
    guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty else { return nil }
    return data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
}

/// Where `setpriv` is, if installed.
let setprivPath: String? = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"]
    .first { FileManager.default.isExecutableFile(atPath: $0) }

/// Runs `body` with a new fixture and its ``OtherUser``, whose agent ends
/// with it.
func withOtherUser(_ body: (CLIFixture, OtherUser) throws -> Void) throws {
    try withStoreFixture { f in
        let other = try OtherUser(f)
        defer { other.stop() }
        try body(f, other)
    }
}

/// uid 65534, with a directory of its own in a fixture (`<root>/other`:
/// its HOME, which holds its device and store) and an initialized device:
/// for what root cannot show, since root reads every file whatever its
/// mode. Needs root and setpriv (``isPossible``). ``stop()`` ends its
/// agent.
final class OtherUser {
    /// Whether this process can run locker as the other user.
    static let isPossible = geteuid() == 0 && setprivPath != nil
    /// Why a test that needs the other user is skipped.
    static let needs: Comment = "needs root and setpriv (util-linux) to run locker as uid 65534"

    let uid: uid_t = 65534
    let home: String
    private let fixture: CLIFixture
    private let setpriv: String

    init(_ fixture: CLIFixture) throws {
        setpriv = try #require(setprivPath)
        self.fixture = fixture
        home = fixture.root + "/other"
        #expect(chmod(fixture.root, 0o711) == 0)
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try #require(chown(home, uid, uid) == 0)
        do {
            let made = try locker(["init", "--passcode-stdin"], stdin: "1234\n")
            try #require(made.status == 0, "uid 65534 cannot use locker here: \(made)")
        } catch {
            stop()
            throw error
        }
    }

    /// Runs `program` as the user, in the fixture's environment but with
    /// the user's HOME, device and store.
    func run(_ program: String, _ arguments: [String], stdin: String? = nil) throws -> CLIResult {
        try fixture.runProgram(setpriv, ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/env",
                                         "HOME=" + home, "LOCKER_DEVICE=" + home + "/device",
                                         "LOCKER_STORE=" + home + "/store", program] + arguments, stdin: stdin)
    }

    func locker(_ arguments: [String], stdin: String? = nil) throws -> CLIResult {
        try run(CLIFixture.lockerPath, arguments, stdin: stdin)
    }

    /// Creates each file (a path below ``home``, and its contents) and the
    /// directories on its way, all the user's.
    func files(_ files: [String: Data]) throws {
        for (path, data) in files {
            let full = home + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try #require(FileManager.default.createFile(atPath: full, contents: data))
            var owned = path
            while !owned.isEmpty {
                try #require(chown(home + "/" + owned, uid, uid) == 0)
                owned = (owned as NSString).deletingLastPathComponent
            }
        }
    }

    /// Ends the user's agent: with a reboot, or killed.
    func stop() {
        _ = try? locker(["reboot"])
        for pid in agentProcesses(serving: home + "/device") {
            kill(pid, SIGKILL)
            _ = waitUntilGone(pid)
        }
    }
}
