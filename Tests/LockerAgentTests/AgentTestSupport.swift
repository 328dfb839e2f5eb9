import Foundation
@testable import LockerAgent
import LockerCrypto
import LockerDevice
#if canImport(Glibc)
import Glibc
#endif

/// The options every agent test initializes with: scrypt kept cheap.
let fastOptions = Device.Options(passcodeCost: .fixed(logN: 10))

func secret(_ text: String) -> SecretBytes { SecretBytes(copying: Array(text.utf8)) }

/// A private temporary directory under /tmp with a short name (sun_path
/// is 108 bytes), a device directory inside it, and a launcher that starts
/// locker-agent-host for it. `tearDown` ends every agent it started.
final class AgentFixture: Sendable {
    let root: String
    let device: String
    let launcher: AgentLauncher

    /// locker-agent-host, built next to the test bundle.
    static let hostPath: String = {
        if let path = ProcessInfo.processInfo.environment["LOCKER_AGENT_HOST"] { return path }
        let bundle = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        return bundle.appendingPathComponent("locker-agent-host").path
    }()

    init(deviceName: String = "d") throws {
        var template = Array("/tmp/lkXXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        root = String(cString: made)
        device = root + "/" + deviceName
        launcher = AgentLauncher(executable: Self.hostPath, arguments: [device])
    }

    func client() throws -> AgentClient {
        try AgentClient(devicePath: device, launcher: launcher)
    }

    /// A client of an agent (started for it) whose device it has just
    /// made with the passcode "1234" at ``fastOptions``.
    func initializedClient() throws -> AgentClient {
        let client = try client()
        try client.initialize(passcode: secret("1234"), options: fastOptions)
        return client
    }

    /// A client that never starts an agent.
    func passiveClient() throws -> AgentClient {
        try AgentClient(devicePath: device, launcher: nil)
    }

    var socketPath: String {
        get throws { try AgentPaths(devicePath: device).socketPath }
    }

    /// The pid the running agent wrote, if any.
    var pidFromFile: Int32? {
        guard let text = try? String(contentsOfFile: device + "/agent.pid", encoding: .utf8) else { return nil }
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Reboots the agent if one answers, kills any left, removes the files.
    func tearDown() {
        if let client = try? passiveClient() { try? client.reboot() }
        for pid in agentProcesses(serving: device) {
            kill(pid, SIGKILL)
            _ = waitUntilGone(pid)
        }
        try? FileManager.default.removeItem(atPath: root)
    }
}

/// The live agent processes for `device` (by command line).
func agentProcesses(serving device: String) -> [Int32] {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    return entries.compactMap { name -> Int32? in
        guard let pid = Int32(name),
              let data = FileManager.default.contents(atPath: "/proc/\(name)/cmdline"), !data.isEmpty
        else { return nil }
        let arguments = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard arguments.count == 2, arguments[0].hasSuffix("locker-agent-host"), arguments[1] == device,
              !isZombie(pid)
        else { return nil }
        return pid
    }
}

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
        usleep(10_000)
    }
    return !isAlive(pid)
}

/// Runs a program to completion; returns its exit status and stdout.
func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    try? pipe.fileHandleForReading.close()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// What a raw connection got back.
struct RawOutcome {
    var received: [UInt8]
    /// The read timed out: the agent neither answered nor closed.
    var timedOut: Bool
}

/// A connected Unix socket to `socketPath`, with a 5 s receive timeout.
func rawConnect(_ socketPath: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let path = Array(socketPath.utf8)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: path)
        raw[path.count] = 0
    }
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else {
        let e = errno
        close(fd)
        throw POSIXError(POSIXErrorCode(rawValue: e) ?? .EIO)
    }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return fd
}

/// Connects to `socketPath` and sends a watch request. Returns the
/// connection, whether the agent took the watch (its answer began with an
/// OK frame, and events follow), and the answer's first bytes, as many as
/// an OK frame has.
func requestWatch(_ socketPath: String) throws -> (fd: Int32, accepted: Bool, answer: [UInt8]) {
    let fd = try rawConnect(socketPath)
    sendRaw(fd, frame(AgentRequest.watch.encoded()))
    let ok = frame([WireFormat.ResponseKind.ok.rawValue])
    var answer = [UInt8](repeating: 0, count: ok.count)
    let n = answer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_WAITALL)) }
    answer = Array(answer.prefix(max(0, n)))
    return (fd, answer == ok, answer)
}

/// Reads until the agent closes the connection or the receive timeout.
func readToEnd(_ fd: Int32) -> RawOutcome {
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n > 0 {
            received += buffer[..<n]
            continue
        }
        if n == 0 { return RawOutcome(received: received, timedOut: false) }
        if errno == EINTR { continue }
        return RawOutcome(received: received, timedOut: errno == EAGAIN || errno == EWOULDBLOCK)
    }
}

func sendRaw(_ fd: Int32, _ bytes: [UInt8]) {
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
}

/// Connects to `socketPath` as this process, sends `bytes` as they are
/// (no framing added), half-closes, and reads until the agent closes the
/// connection (or 5 s pass).
func rawExchange(_ socketPath: String, _ bytes: [UInt8]) throws -> RawOutcome {
    let fd = try rawConnect(socketPath)
    defer { close(fd) }
    sendRaw(fd, bytes)
    shutdown(fd, Int32(SHUT_WR))
    return readToEnd(fd)
}

/// A frame: big-endian length, then the payload.
func frame(_ payload: [UInt8]) -> [UInt8] {
    let n = UInt32(payload.count)
    return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + payload
}

/// Thread-safe accumulator for values produced on other threads.
final class Box<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value { lock.withLock { stored } }
    func update(_ body: (inout Value) -> Void) { lock.withLock { body(&stored) } }
}

/// A stand-in agent listening on a device's socket: it treats each
/// connection as its script says (then answers every later one) and
/// records the opcode of every request it read whole. It answers ping
/// with version and pid, and every other request with an empty OK.
final class ScriptedAgent: @unchecked Sendable {
    enum Step: Sendable {
        /// Read the request and answer it.
        case answer
        /// Wait until the request has arrived, then close without reading
        /// it: the client reads ECONNRESET.
        case closeUnread
        /// Read the request whole, then close without answering: the
        /// client reads the end of the stream.
        case closeAfterReading
        /// Read the request whole and answer that a reboot has begun (the
        /// request was not performed).
        case answerRestarting
    }

    private let listener: Int32
    private let script: Box<[Step]>
    let requests = Box<[UInt8]>([])
    /// Connections accepted, the stop's own one left out.
    let connections = Box(0)
    private let socketPath: String
    private let stopping = Box(false)
    private let finished = DispatchSemaphore(value: 0)

    init(socketPath: String, script: [Step]) throws {
        self.script = Box(script)
        self.socketPath = socketPath
        var address = try SocketIO.address(for: socketPath)
        _ = unlink(socketPath)
        listener = SocketIO.makeSocket()
        guard listener >= 0 else { throw POSIXError(.EIO) }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0, listen(listener, 16) == 0 else {
            close(listener)
            throw POSIXError(.EIO)
        }
        Thread.detachNewThread { [self] in
            serve()
            finished.signal()
        }
    }

    private func serve() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            if stopping.value {
                close(fd)
                return
            }
            connections.update { $0 += 1 }
            var step = Step.answer
            script.update { steps in if !steps.isEmpty { step = steps.removeFirst() } }
            handle(fd, step)
            close(fd)
        }
    }

    private func handle(_ fd: Int32, _ step: Step) {
        if step == .closeUnread {
            // Until the whole frame has arrived (the client sends its
            // header and payload in two calls), so that the client is
            // reading when the close comes: it reads ECONNRESET, not a
            // failed send.
            var peek = [UInt8](repeating: 0, count: WireFormat.maxPayloadBytes + 4)
            let deadline = Date().addingTimeInterval(5)
            while Date() < deadline {
                let n = peek.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_PEEK | MSG_DONTWAIT)) }
                if n >= 4 {
                    let length = Int(peek[0]) << 24 | Int(peek[1]) << 16 | Int(peek[2]) << 8 | Int(peek[3])
                    if n >= 4 + length { return }
                } else if n == 0 {
                    return
                }
                usleep(1_000)
            }
            return
        }
        guard case .frame(let payload) = SocketIO.readFrame(fd), let opcode = payload.first else { return }
        requests.update { $0.append(opcode) }
        if step == .answerRestarting { _ = SocketIO.sendFrame(fd, WireFormat.encodeError(AgentRestarting())) }
        guard step == .answer else { return }
        var reply: [UInt8] = [WireFormat.ResponseKind.ok.rawValue]
        if opcode == WireFormat.Opcode.ping.rawValue {
            let pid = UInt32(getpid())
            reply += [UInt8(WireFormat.version >> 8), UInt8(WireFormat.version & 0xFF),
                      UInt8(pid >> 24), UInt8(pid >> 16 & 0xFF), UInt8(pid >> 8 & 0xFF), UInt8(pid & 0xFF)]
        }
        _ = SocketIO.sendFrame(fd, reply)
    }

    /// Stops accepting and waits for the serving thread to end.
    func stop() {
        stopping.update { $0 = true }
        if let fd = try? rawConnect(socketPath) { close(fd) }
        finished.wait()
        close(listener)
    }
}

/// Sends each payload as a frame on `fd`, `batch` at a time, reading a
/// batch's replies before sending the next (an agent that answers into a
/// full socket would otherwise wait for the reader), and returns the
/// replies' payloads in order; an empty one for a reply that never came.
func pipelined(_ fd: Int32, _ payloads: [[UInt8]], batch: Int = 64) -> [[UInt8]] {
    var replies: [[UInt8]] = []
    for start in stride(from: 0, to: payloads.count, by: batch) {
        let part = payloads[start..<min(payloads.count, start + batch)]
        sendRaw(fd, part.flatMap(frame))
        for _ in part {
            guard case .frame(let reply) = SocketIO.readFrame(fd) else { return replies + [[]] }
            replies.append(reply)
        }
    }
    return replies
}
