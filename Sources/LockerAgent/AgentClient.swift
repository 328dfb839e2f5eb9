internal import FoundationEssentials
internal import LockerIO
public import LockerCrypto
public import LockerDevice
public import LockerFormat
#if canImport(Glibc)
internal import Glibc
#endif

/// A ``KeyService`` whose device lives in the agent process, reached over
/// the agent's Unix socket. Same semantics and same ``DeviceError``s as an
/// in-process ``Device``.
///
/// Each request uses a fresh connection, so a client may be kept for as
/// long as needed and shared between threads; an agent that went away
/// (reboot, kill) is started again on the next request when the client
/// has a launcher.
public final class AgentClient: KeyService {
    public let paths: AgentPaths
    private let launcher: AgentLauncher?

    /// Seconds the client waits for an answer (scrypt under contention
    /// can be slow).
    static let replySeconds = 120
    /// How long a connect waits while the agent's queue is full, before
    /// ``AgentError/notAccepting(_:)``.
    public static let connectSeconds = SocketIO.connectSeconds
    /// Seconds a started agent has to answer.
    static let startSeconds = 5.0

    /// Connects to the agent for the device directory `devicePath`,
    /// starting one if none answers and `launcher` is non-nil. Throws
    /// ``DeviceError`` / ``AgentError``.
    public init(devicePath: String, launcher: AgentLauncher?) throws {
        paths = try AgentPaths(devicePath: devicePath)
        self.launcher = launcher
        _ = try ping()
    }

    /// The process ID of the agent that answers now.
    public func agentProcessID() throws -> Int32 {
        try ping().pid
    }

    private func ping() throws -> (version: UInt16, pid: Int32) {
        try call(.ping) { r in
            let version = try r.readUInt16()
            let pid = try r.readUInt32()
            guard version == WireFormat.version, pid > 0, pid <= UInt32(Int32.max) else { throw WireFormat.Malformed() }
            return (version, Int32(pid))
        }
    }

    // MARK: Life cycle

    /// Creates the device (it ends unlocked).
    public func initialize(passcode: SecretBytes?, options: Device.Options) throws {
        try Self.checkOptions(options)
        if let passcode { try Self.checkPasscode(passcode) }
        try callEmpty(.initialize(passcode: passcode, options: options))
    }

    /// Has the agent wipe every key and exit. Returns once the agent has
    /// acknowledged and closed the connection, or, when another client's
    /// reboot got there first, once that agent has wiped its keys (it
    /// removes `agent.pid` after the wipe) or ended. With no agent running
    /// there is nothing to wipe, and it returns at once. Throws
    /// ``AgentError/unavailable(_:)`` if an agent that is still running did
    /// not take the request (one at its connection limit), or neither
    /// answered nor ended within ``departSeconds``.
    public func reboot() throws {
        // The agent whose keys are to go, as its pid file names it.
        let departing = AgentPaths.pid(inFile: paths.pidPath)
        let deadline = SocketIO.monotonicNow() + Self.departSeconds
        var undelivered = 0
        while true {
            let connection: Connection
            do {
                connection = try connect(start: false)
            } catch AgentError.unavailable {
                // Nothing listens: no agent, one ending after another
                // client's reboot, or one still starting.
                if try departed(departing, by: deadline) { return }
                continue
            }
            defer { connection.close() }
            do {
                try connection.send(.reboot)
                try connection.receiveReply { _ in }
            } catch is Connection.NotDelivered {
                // Never read: an agent at its connection limit, or one
                // ending. Ask again; an agent that stays gives an error.
                undelivered += 1
                guard undelivered < 4 else {
                    throw AgentError.unavailable("the agent did not take the reboot request")
                }
                SocketIO.sleep(milliseconds: 50 * undelivered)
                continue
            } catch AgentError.unavailable {
                // Read, then the connection ended without an answer
                // (another reboot got there first): wait for that one.
                if try departed(departing, by: deadline) { return }
                continue
            }
            // The agent exits after the acknowledgement: wait for the end
            // of the stream so the next request finds it gone.
            _ = connection.waitForClose()
            return
        }
    }

    /// Seconds ``reboot()`` waits for an agent that neither answers nor
    /// ends: one ending after another client's reboot (its drain, then the
    /// device operation under way, then the wipe), or one still starting.
    static let departSeconds = 15.0

    /// True at once if the agent is gone, else false after a short sleep;
    /// throws once `deadline` has passed.
    private func departed(_ pid: Int32?, by deadline: Double) throws -> Bool {
        if agentGone(pid) { return true }
        guard SocketIO.monotonicNow() < deadline else {
            let who = pid.map { "the agent (pid \($0))" } ?? "an agent"
            throw AgentError.unavailable("\(who) neither answered the reboot nor ended within \(Int(Self.departSeconds)) s")
        }
        SocketIO.sleep(milliseconds: 10)
        return false
    }

    /// No agent holds the keys `pid` held: no process holds `agent.lock`
    /// (an agent holds it for its whole life), or the agent `pid` has
    /// removed its pid file (after its wipe; a newer agent may have written
    /// its own, which it can only do once the old one has ended) or is no
    /// longer running.
    private func agentGone(_ pid: Int32?) -> Bool {
        if Self.isUnlocked(paths.lockPath) { return true }
        guard let pid else { return false }
        return AgentPaths.pid(inFile: paths.pidPath) != pid || !Self.isRunning(pid)
    }

    private static func isUnlocked(_ lockPath: String) -> Bool {
        let fd = Glibc.open(lockPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return errno == ENOENT }
        defer { _ = Glibc.close(fd) }
        guard flock(fd, LOCK_SH | LOCK_NB) == 0 else { return false }
        _ = flock(fd, LOCK_UN)
        return true
    }

    /// Alive and not a zombie (a zombie holds no memory, so no keys). A
    /// process of another user (EPERM) is not our agent.
    private static func isRunning(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 else { return false }
        guard let bytes = try? FileSystem().readFile("/proc/\(pid)/stat", limit: 4096),
              case let stat = String(decoding: bytes, as: UTF8.self),
              let close = stat.lastIndex(of: ")")
        else { return true }
        let state = stat[stat.index(after: close)...].first { $0 != " " }
        return state != "Z" && state != "X"
    }

    /// Streams protection events: blocks, calls `onEvent` per event until
    /// it returns false or the agent goes away.
    public func watch(_ onEvent: (ProtectionEvent) -> Bool) throws {
        let connection = try connect(start: true)
        defer { connection.close() }
        do {
            try connection.send(.watch)
            try connection.receiveReply { _ in }
        } catch let e as Connection.NotDelivered {
            throw AgentError.unavailable(e.reason)
        }
        connection.setReceiveTimeout(seconds: 0)
        while true {
            switch SocketIO.readFrame(connection.fd) {
            case .closed, .truncated:
                return
            case .failed(let e) where e == ECONNRESET:
                return
            case .failed(let e):
                throw AgentError.unavailable("reading from the agent: \(ErrnoCode(e).message)")
            case .malformed:
                throw AgentError.protocolViolation
            case .frame(let payload):
                var r = ByteReader(payload)
                let event: ProtectionEvent
                // The watch ends with the device's error when it is wiped;
                // no other error belongs here.
                if payload.first == WireFormat.ResponseKind.error.rawValue,
                   case .failure(let error) = Connection.decodeReply(payload, { _ in }) {
                    throw error as? DeviceError ?? AgentError.protocolViolation
                }
                do {
                    guard try r.readUInt8() == WireFormat.ResponseKind.event.rawValue else { throw WireFormat.Malformed() }
                    event = try WireFormat.event(code: try r.readUInt8())
                    try r.expectEnd()
                } catch {
                    throw AgentError.protocolViolation
                }
                if !onEvent(event) { return }
            }
        }
    }

    // MARK: KeyService

    public func status() throws -> DeviceStatus {
        let json = try exchange(.status) { connection in
            var total = 0
            var json: [UInt8] = []
            try connection.receiveReply { r in
                let declared = Int(try r.readUInt32())
                guard declared >= 1, declared <= WireFormat.maxStatusBytes else { throw WireFormat.Malformed() }
                total = declared
                json = try r.read(r.remaining)
                guard json.count <= total else { throw WireFormat.Malformed() }
            }
            while json.count < total {
                let payload: [UInt8]
                switch SocketIO.readFrame(connection.fd) {
                case .frame(let bytes): payload = bytes
                // Ended between frames (a reboot): status is asked again.
                case .closed, .truncated: throw AgentError.unavailable("the agent closed the connection in the middle of its reply")
                case .failed(let e): throw AgentError.unavailable("reading from the agent: \(ErrnoCode(e).message)")
                case .malformed: throw AgentError.protocolViolation
                }
                guard payload.first == WireFormat.ResponseKind.continuation.rawValue,
                      payload.count > 1, json.count + payload.count - 1 <= total
                else { throw AgentError.protocolViolation }
                json.append(contentsOf: payload[1...])
            }
            return json
        }
        do {
            return try JSONDecoder().decode(DeviceStatus.self, from: Data(json))
        } catch {
            throw AgentError.protocolViolation
        }
    }

    public func unlock(passcode: SecretBytes) throws {
        try Self.checkPasscode(passcode)
        try callEmpty(.unlock(passcode: passcode))
    }

    public func lock(immediately: Bool) throws {
        try callEmpty(.lock(immediately: immediately))
    }

    public func changePasscode(old: SecretBytes, new: SecretBytes) throws {
        try Self.checkPasscode(old)
        try Self.checkPasscode(new)
        try callEmpty(.changePasscode(old: old, new: new))
    }

    public func reset(newPasscode: SecretBytes?) throws {
        if let newPasscode { try Self.checkPasscode(newPasscode) }
        try callEmpty(.reset(newPasscode: newPasscode))
    }

    public func wipe() throws {
        try callEmpty(.wipe)
    }

    public func metadataKey() throws -> SecretBytes {
        try call(.metadataKey) { r in try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes) }
    }

    /// Class B's public key now, asked of the agent on every call: kept
    /// between calls, it would outlive a `reset` or `wipe` by another
    /// client, and objects wrapped with it would be written under a key
    /// generation that is already gone (unreadable, with no error when
    /// written).
    public func classBPublicKey() throws -> ClassPublicKey {
        try call(.classBPublicKey) { r in
            let keyID = try r.read(Keybag.keyIDByteCount)
            let generation = try r.readUInt32()
            let publicKey = try r.read(WireFormat.publicKeyBytes)
            return ClassPublicKey(keyID: keyID, keyGeneration: generation, publicKey: publicKey)
        }
    }

    /// Class B is wrapped here with the public key, fetched once for the
    /// call: the agent's private key is never needed to create a class B
    /// object.
    public func wrap(fileKey: SecretBytes, for protectionClass: ProtectionClass) throws -> WrappedFileKey {
        try Self.checkFileKey(fileKey)
        // Class B is wrapped here, without the agent's private key.
        if protectionClass == .completeUnlessOpen { return try wrap(fileKeys: [fileKey], for: protectionClass)[0] }
        return try call(.wrap(fileKey: fileKey, protectionClass: protectionClass)) { r in
            try Self.readWrapped(&r, expecting: protectionClass)
        }
    }

    public func unwrap(_ wrapped: WrappedFileKey) throws -> SecretBytes {
        try Self.checkWrapped(wrapped)
        return try call(.unwrap(wrapped)) { r in try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes) }
    }

    /// One request per ``WireFormat/maxKeysPerRequest`` keys; class B is
    /// wrapped here, with one fetch of its public key.
    public func wrap(fileKeys: [SecretBytes], for protectionClass: ProtectionClass) throws -> [WrappedFileKey] {
        for key in fileKeys { try Self.checkFileKey(key) }
        if protectionClass == .completeUnlessOpen {
            guard !fileKeys.isEmpty else { return [] }
            let key = try classBPublicKey()
            return try fileKeys.map {
                WrappedFileKey(protectionClass: .completeUnlessOpen, keyID: key.keyID, keyGeneration: key.keyGeneration,
                               blob: try FileKeyWrap.wrapAsymmetric($0, classPublicKey: key.publicKey))
            }
        }
        var out: [WrappedFileKey] = []
        out.reserveCapacity(fileKeys.count)
        for start in stride(from: 0, to: fileKeys.count, by: WireFormat.maxKeysPerRequest) {
            let part = Array(fileKeys[start..<min(fileKeys.count, start + WireFormat.maxKeysPerRequest)])
            out += try call(.wrapMany(fileKeys: part, protectionClass: protectionClass)) { r in
                try part.map { _ in try Self.readWrapped(&r, expecting: protectionClass) }
            }
        }
        return out
    }

    /// One request per ``WireFormat/maxKeysPerRequest`` keys.
    public func unwrap(_ wrapped: [WrappedFileKey]) throws -> [SecretBytes] {
        for key in wrapped { try Self.checkWrapped(key) }
        var out: [SecretBytes] = []
        out.reserveCapacity(wrapped.count)
        for start in stride(from: 0, to: wrapped.count, by: WireFormat.maxKeysPerRequest) {
            let part = Array(wrapped[start..<min(wrapped.count, start + WireFormat.maxKeysPerRequest)])
            out += try call(.unwrapMany(part)) { r in
                try part.map { _ in try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes) }
            }
        }
        return out
    }

    public func rewrap(_ wrapped: WrappedFileKey, to newClass: ProtectionClass) throws -> WrappedFileKey {
        try Self.checkWrapped(wrapped)
        return try call(.rewrap(wrapped, newClass: newClass)) { r in try Self.readWrapped(&r, expecting: newClass) }
    }

    public func open(objectID: String, wrapped: WrappedFileKey) throws -> SecretBytes {
        try Self.checkObjectID(objectID)
        try Self.checkWrapped(wrapped)
        return try call(.open(objectID: objectID, wrapped: wrapped)) { r in
            try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes)
        }
    }

    public func registerOpen(objectID: String, fileKey: SecretBytes, protectionClass: ProtectionClass) throws {
        try Self.checkObjectID(objectID)
        try Self.checkFileKey(fileKey)
        try callEmpty(.registerOpen(objectID: objectID, fileKey: fileKey, protectionClass: protectionClass))
    }

    public func openFileKey(objectID: String) throws -> SecretBytes {
        try Self.checkObjectID(objectID)
        return try call(.openFileKey(objectID: objectID)) { r in
            try WireFormat.readFixedSecret(&r, count: WireFormat.fileKeyBytes)
        }
    }

    public func close(objectID: String) throws {
        try Self.checkObjectID(objectID)
        try callEmpty(.close(objectID: objectID))
    }

    // MARK: Argument checks (what the wire format cannot carry)

    private static func checkPasscode(_ passcode: SecretBytes) throws {
        guard passcode.count <= WireFormat.maxPasscodeBytes else {
            throw AgentError.invalidArgument("passcode longer than \(WireFormat.maxPasscodeBytes) bytes")
        }
    }

    /// The agent refuses options a device cannot be made with as
    /// malformed, so they are not sent.
    private static func checkOptions(_ options: Device.Options) throws {
        do {
            try options.validate()
        } catch FormatError.invalidField(let option) {
            throw AgentError.invalidArgument("\(option) out of range")
        }
    }

    private static func checkFileKey(_ key: SecretBytes) throws {
        guard key.count == WireFormat.fileKeyBytes else {
            throw AgentError.invalidArgument("file key must be \(WireFormat.fileKeyBytes) bytes")
        }
    }

    private static func checkObjectID(_ objectID: String) throws {
        let count = objectID.utf8.count
        guard count >= 1, count <= WireFormat.maxObjectIDBytes else {
            throw AgentError.invalidArgument("object ID must be 1 to \(WireFormat.maxObjectIDBytes) bytes of UTF-8")
        }
    }

    /// A wrapped key of the wrong shape is what the device itself calls a
    /// bad wrapped key.
    private static func checkWrapped(_ wrapped: WrappedFileKey) throws {
        guard WireFormat.isEncodable(wrapped) else { throw DeviceError.integrity("wrapped key failed authentication") }
    }

    private static func readWrapped(_ r: inout ByteReader, expecting cls: ProtectionClass) throws -> WrappedFileKey {
        let wrapped = try WireFormat.readWrapped(&r)
        guard wrapped.protectionClass == cls else { throw WireFormat.Malformed() }
        return wrapped
    }

    // MARK: Requests

    private func callEmpty(_ request: AgentRequest) throws {
        try call(request) { _ in }
    }

    /// Sends `request` on a new connection and decodes the OK body with
    /// `body`, which must consume it whole.
    private func call<T>(_ request: AgentRequest, _ body: (inout ByteReader) throws -> T) throws -> T {
        try exchange(request) { connection in
            var result: T?
            try connection.receiveReply { r in result = try body(&r) }
            return result!
        }
    }

    /// Sends `request` on a new connection and reads the reply with
    /// `receive`. Every request, status included, goes through here.
    private func exchange<T>(_ request: AgentRequest, _ receive: (Connection) throws -> T) throws -> T {
        // The agent may go away before answering (a reboot, or a kill). A
        // request it never read is sent again, whatever it asks; one it may
        // have acted on is asked again only if repeating it changes nothing
        // twice. The next agent answers for the state it boots into.
        // Reboots can follow each other, so a few times.
        var attempt = 0
        while true {
            attempt += 1
            do {
                let connection = try connect(start: true)
                defer { connection.close() }
                try connection.send(request)
                return try receive(connection)
            } catch let e as Connection.NotDelivered {
                guard attempt < 4 else { throw AgentError.unavailable(e.reason) }
                SocketIO.sleep(milliseconds: 50 * attempt)
            } catch AgentError.unavailable where request.isSafeToRepeat && attempt < 4 {
                SocketIO.sleep(milliseconds: 50 * attempt)
            }
        }
    }

    /// A connection to the agent, starting one first if none listens and
    /// `start` is set and there is a launcher.
    private func connect(start: Bool) throws -> Connection {
        switch try Connection.open(paths.socketPath) {
        case .connected(let connection):
            return connection
        case .notListening(let reason):
            guard start, let launcher else {
                throw AgentError.unavailable("no agent for \(paths.deviceDirectory) (\(reason))")
            }
            return try startAgent(launcher)
        }
    }

    /// Starts an agent under the start lock, so that racing clients start
    /// one between them, and waits for it to answer.
    private func startAgent(_ launcher: AgentLauncher) throws -> Connection {
        let lockFD = Glibc.open(paths.startLockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lockFD >= 0 else {
            throw AgentError.unavailable("cannot open \(paths.startLockPath): \(ErrnoCode(errno).message)")
        }
        defer { _ = Glibc.close(lockFD) }
        let lockDeadline = SocketIO.monotonicNow() + 2 * Self.startSeconds
        while flock(lockFD, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            guard e == EWOULDBLOCK || e == EINTR else {
                throw AgentError.unavailable("cannot lock \(paths.startLockPath): \(ErrnoCode(e).message)")
            }
            guard SocketIO.monotonicNow() < lockDeadline else {
                throw AgentError.unavailable("another client is starting the agent and has not finished")
            }
            SocketIO.sleep(milliseconds: 10)
        }
        defer { _ = flock(lockFD, LOCK_UN) }

        // Another client may have started one while we waited.
        if case .connected(let connection) = try Connection.open(paths.socketPath) { return connection }

        var agent = try launcher.spawn()
        var fallbacks = launcher.fallbacks
        var deadline = SocketIO.monotonicNow() + Self.startSeconds
        var lastReason = "no answer"
        while SocketIO.monotonicNow() < deadline {
            switch try Connection.open(paths.socketPath) {
            case .connected(let connection):
                return connection
            case .notListening(let reason):
                lastReason = reason
            }
            if let status = agent.exitStatus.withLock({ $0 }), status != 0 {
                if !fallbacks.isEmpty {
                    agent = try fallbacks.removeFirst().spawn()
                    deadline = SocketIO.monotonicNow() + Self.startSeconds
                    continue
                }
                let how = status & 0x7F == 0 ? "exit status \(status >> 8 & 0xFF)" : "signal \(status & 0x7F)"
                throw AgentError.unavailable("the agent ended at start (\(how))")
            }
            SocketIO.sleep(milliseconds: 10)
        }
        throw AgentError.unavailable("the agent did not answer within \(Int(Self.startSeconds)) s (\(lastReason))")
    }
}

/// One client connection: a request out, a reply in.
final class Connection {
    let fd: Int32
    private var closed = false

    enum Outcome {
        case connected(Connection)
        /// Nothing listens there: no socket file, or a stale one.
        case notListening(String)
    }

    private init(fd: Int32) { self.fd = fd }

    deinit { close() }

    /// Connects and checks that the agent runs as this user. ENOENT and
    /// ECONNREFUSED mean no agent; other failures throw.
    static func open(_ path: String) throws -> Outcome {
        switch try SocketIO.connect(to: path) {
        case .failure(let e) where e.value == ENOENT || e.value == ECONNREFUSED:
            return .notListening(e.message)
        case .failure(let e) where e.value == EAGAIN:
            throw AgentError.notAccepting(path)
        case .failure(let e):
            throw AgentError.unavailable("cannot connect to \(path): \(e.message)")
        case .success(let fd):
            let connection = Connection(fd: fd)
            guard let peer = SocketIO.peerCredentials(fd), peer.uid == geteuid() else { throw AgentError.peerRefused }
            SocketIO.setTimeouts(fd, receive: AgentClient.replySeconds, send: 10)
            return .connected(connection)
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        _ = Glibc.close(fd)
    }

    func setReceiveTimeout(seconds: Int) {
        var t = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The request never reached the agent whole: the agent cannot have
    /// acted on it, so any request may be sent again.
    struct NotDelivered: Error {
        let reason: String
    }

    /// Sends one request. Throws ``NotDelivered`` when the agent is gone
    /// before the frame is out: an agent acts only on a whole frame.
    func send(_ request: AgentRequest) throws {
        var payload = request.encoded()
        defer { SecretBytes.wipe(&payload) }
        guard payload.count <= WireFormat.maxPayloadBytes else { throw AgentError.invalidArgument("request too large") }
        guard SocketIO.sendFrame(fd, payload) else {
            throw NotDelivered(reason: "the agent closed the connection")
        }
    }

    /// Reads the reply frame. An OK reply's body goes to `body`, which
    /// must consume it whole; an error reply is rethrown as the error the
    /// agent's device threw.
    func receiveReply(_ body: (inout ByteReader) throws -> Void) throws {
        var payload: [UInt8]
        switch SocketIO.readFrame(fd) {
        case .frame(let bytes): payload = bytes
        case .closed: throw AgentError.unavailable("the agent closed the connection")
        // The agent ended while answering (a reboot): a request that is
        // safe to repeat is asked again of the next agent.
        case .truncated: throw AgentError.unavailable("the agent closed the connection in the middle of its reply")
        case .malformed: throw AgentError.protocolViolation
        // A Unix stream socket reads ECONNRESET only when its peer closed
        // with bytes still unread (our request) or before accepting the
        // connection at all: the agent never acted on the request.
        case .failed(let e) where e == ECONNRESET: throw NotDelivered(reason: "the agent ended before reading the request")
        case .failed(let e): throw AgentError.unavailable("reading from the agent: \(ErrnoCode(e).message)")
        }
        defer { SecretBytes.wipe(&payload) }
        let outcome = Self.decodeReply(payload, body)
        switch outcome {
        case .success: return
        case .failure(let error) where error is AgentRestarting:
            throw NotDelivered(reason: "the agent was restarting")
        case .failure(let error): throw error
        }
    }

    /// Decodes in its own scope so that the reader's reference to the
    /// payload is gone before the caller wipes it.
    static func decodeReply(_ payload: [UInt8], _ body: (inout ByteReader) throws -> Void) -> Result<Void, any Error> {
        var r = ByteReader(payload)
        do {
            switch try r.readUInt8() {
            case WireFormat.ResponseKind.ok.rawValue:
                try body(&r)
                try r.expectEnd()
                return .success(())
            case WireFormat.ResponseKind.error.rawValue:
                return .failure(try WireFormat.decodeError(&r))
            default:
                return .failure(AgentError.protocolViolation)
            }
        } catch {
            return .failure(AgentError.protocolViolation)
        }
    }

    /// Reads until the agent closes the connection (or the timeout).
    /// True on a clean end of stream.
    func waitForClose() -> Bool {
        var scratch = [UInt8](repeating: 0, count: 64)
        while true {
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 {
                if errno == EINTR { continue }
                return errno == ECONNRESET
            }
        }
    }
}
