internal import Dispatch
internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat
internal import LockerIO
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// One accepted connection on the agent side: frames in, replies out, one
/// at a time, until the peer closes, stays silent too long, or sends
/// anything malformed (then this connection, and only it, is closed).
final class AgentConnection: @unchecked Sendable {
    let fd: Int32
    let core: AgentCore
    /// Guards writes and the close, which the watch pump and the
    /// connection thread share.
    private let writeLock = Lock()
    private var closed = false

    init(fd: Int32, core: AgentCore) {
        self.fd = fd
        self.core = core
    }

    func serve() {
        defer { closeOnce() }
        while true {
            guard case .frame(var payload) = SocketIO.readFrame(fd, frameSeconds: Double(AgentServer.receiveSeconds)) else {
                return
            }
            let decoded = Self.decode(payload)
            SecretBytes.wipe(&payload)
            guard let request = decoded else { return }
            switch request {
            case .watch:
                watch()
                return
            case .reboot:
                core.reboot { _ = self.send([WireFormat.ResponseKind.ok.rawValue]) }
            default:
                var sent = false
                let admitted = core.serve {
                    if case .status = request {
                        sent = sendStatus()
                    } else {
                        var reply = handle(request)
                        sent = send(reply)
                        SecretBytes.wipe(&reply)
                    }
                }
                guard admitted else {
                    // A reboot has begun: the request is not performed, and
                    // the client sends it to the next agent.
                    _ = send(WireFormat.encodeError(AgentRestarting()))
                    return
                }
                guard sent else { return }
            }
        }
    }

    /// Decodes in its own scope, so that the reader's reference to the
    /// payload is gone before the caller wipes it.
    private static func decode(_ payload: [UInt8]) -> AgentRequest? {
        try? AgentRequest.decode(payload)
    }

    private func send(_ payload: [UInt8]) -> Bool {
        writeLock.withLock { !closed && SocketIO.sendFrame(fd, payload) }
    }

    private func closeOnce() {
        writeLock.withLock {
            guard !closed else { return }
            closed = true
            _ = close(fd)
        }
    }

    // MARK: Requests

    /// The reply to one request: OK with its body, or the error.
    private func handle(_ request: AgentRequest) -> [UInt8] {
        do {
            // Room for the largest reply (256 keys), so that no file key is
            // left behind in a reallocated buffer.
            var w = ByteWriter(capacity: WireFormat.maxPayloadBytes)
            w.write(WireFormat.ResponseKind.ok.rawValue)
            try perform(request, into: &w)
            return w.bytes
        } catch {
            return WireFormat.encodeError(error)
        }
    }

    private func perform(_ request: AgentRequest, into w: inout ByteWriter) throws {
        switch request {
        case .ping:
            w.write(WireFormat.version)
            w.write(UInt32(getpid()))
        case .initialize(let passcode, let options):
            try core.initialize(passcode: passcode, options: options)
        case .unlock(let passcode):
            try core.device().unlock(passcode: passcode)
        case .lock(let immediately):
            try core.device().lock(immediately: immediately)
        case .changePasscode(let old, let new):
            try core.device().changePasscode(old: old, new: new)
        case .reset(let passcode):
            try core.device().reset(newPasscode: passcode)
        case .wipe:
            try core.device().wipe()
        case .metadataKey:
            WireFormat.writeSecret(&w, try core.device().metadataKey(), lengthPrefixed: false)
        case .classBPublicKey:
            let key = try core.device().classBPublicKey()
            guard key.keyID.count == Keybag.keyIDByteCount, key.publicKey.count == WireFormat.publicKeyBytes else {
                throw DeviceError.integrity("class B public key failed authentication")
            }
            w.write(key.keyID)
            w.write(key.keyGeneration)
            w.write(key.publicKey)
        case .wrap(let fileKey, let cls):
            try core.device().wrap(fileKey: fileKey, for: cls).encode(into: &w)
        case .unwrap(let wrapped):
            try writeFileKey(try core.device().unwrap(wrapped), into: &w)
        case .wrapMany(let fileKeys, let cls):
            for key in try core.device().wrap(fileKeys: fileKeys, for: cls) { key.encode(into: &w) }
        case .unwrapMany(let wrapped):
            // All or nothing: the first failure is the reply.
            for key in try core.device().unwrap(wrapped) { try writeFileKey(key, into: &w) }
        case .rewrap(let wrapped, let newClass):
            try core.device().rewrap(wrapped, to: newClass).encode(into: &w)
        case .open(let objectID, let wrapped):
            try writeFileKey(try core.device().open(objectID: objectID, wrapped: wrapped), into: &w)
        case .registerOpen(let objectID, let fileKey, let cls):
            try core.device().registerOpen(objectID: objectID, fileKey: fileKey, protectionClass: cls)
        case .openFileKey(let objectID):
            try writeFileKey(try core.device().openFileKey(objectID: objectID), into: &w)
        case .close(let objectID):
            try core.device().close(objectID: objectID)
        case .status, .watch, .reboot:
            preconditionFailure("handled by serve()")
        }
    }

    private func writeFileKey(_ key: SecretBytes, into w: inout ByteWriter) throws {
        guard key.count == WireFormat.fileKeyBytes else { throw DeviceError.integrity("file key has the wrong length") }
        WireFormat.writeSecret(&w, key, lengthPrefixed: false)
    }

    /// How many status documents are built, or sent over several frames,
    /// at once. A document reaches about 24 MiB (4096 open objects with
    /// the longest IDs), and 24 connections asking at once without reading
    /// their replies took the agent to 1.2 GiB; one frame's worth goes into
    /// the socket's buffer at once, so only large ones hold a slot while
    /// they are sent.
    private static let statusSlots = DispatchSemaphore(value: 2)

    /// Status as JSON, split over continuation frames if it outgrows one.
    private func sendStatus() -> Bool {
        Self.statusSlots.wait()
        var holding = true
        defer { if holding { Self.statusSlots.signal() } }
        let json: [UInt8]
        do {
            json = try Self.statusDocument(try core.device().status())
        } catch {
            return send(WireFormat.encodeError(error))
        }
        let firstRoom = WireFormat.maxPayloadBytes - 5
        if json.count <= firstRoom {
            holding = false
            Self.statusSlots.signal()
        }
        var w = ByteWriter(capacity: min(json.count, firstRoom) + 5)
        w.write(WireFormat.ResponseKind.ok.rawValue)
        w.write(UInt32(json.count))
        w.write(Array(json.prefix(firstRoom)))
        guard send(w.bytes) else { return false }
        var offset = min(json.count, firstRoom)
        while offset < json.count {
            let end = min(json.count, offset + WireFormat.maxPayloadBytes - 1)
            guard send([WireFormat.ResponseKind.continuation.rawValue] + json[offset..<end]) else { return false }
            offset = end
        }
        return true
    }

    /// `status` as the JSON document a status reply carries: sorted keys,
    /// at most ``WireFormat/maxStatusBytes``.
    static func statusDocument(_ status: DeviceStatus) throws -> [UInt8] {
        let json = try StatusDocument.encode(status)
        // Unreachable while the open-object table and object IDs stay
        // within their limits (a test checks the largest table).
        guard !json.isEmpty, json.count <= WireFormat.maxStatusBytes else {
            throw DeviceError.integrity("status reply is too large")
        }
        return json
    }

    // MARK: Watch

    /// Streams protection events until the client closes, sends anything,
    /// or the device shuts down. A wiped device, which has no event to
    /// come, is refused (`DeviceError.wiped`), and a wipe during the watch
    /// ends it with that error after its last event. Beyond
    /// ``AgentServer/maxWatchers`` at once, it is refused
    /// (``AgentError/tooManyWatchers(limit:)``).
    ///
    /// The events are sent from this connection's own thread: a send
    /// blocks for up to the send timeout when the client stops reading,
    /// and that must hold up neither another watcher nor a thread of the
    /// shared pool, which the task that reads the device's stream runs on.
    private func watch() {
        guard core.admitWatcher() else {
            _ = send(WireFormat.encodeError(AgentError.tooManyWatchers(limit: AgentServer.maxWatchers)))
            return
        }
        defer { core.releaseWatcher() }
        let stream: AsyncStream<ProtectionEvent>
        let device: Device
        let pending: PendingEvents
        do {
            device = try core.device()
            if device.state == .wiped { throw DeviceError.wiped }
            pending = try PendingEvents()
            stream = device.events()
        } catch {
            _ = send(WireFormat.encodeError(error))
            return
        }
        guard send([WireFormat.ResponseKind.ok.rawValue]) else { return }
        // Only hands the events over: it never waits on the socket.
        let pump = Task {
            for await event in stream { pending.post(event) }
            pending.finish()
        }
        defer { pump.cancel() }
        var watched = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: pending.readyFD, events: Int16(POLLIN), revents: 0)]
        while true {
            guard poll(&watched, 2, -1) >= 0 else {
                if errno == EINTR { continue }
                return
            }
            // A watching client sends nothing more: any byte, end of
            // stream or error ends the watch.
            if watched[0].revents != 0 { return }
            let (events, finished) = pending.take()
            for event in events {
                guard send([WireFormat.ResponseKind.event.rawValue, WireFormat.eventCode(event)]) else { return }
            }
            if finished {
                // The stream is over: a shutdown, or a wipe, which says so.
                if device.state == .wiped { _ = send(WireFormat.encodeError(DeviceError.wiped)) }
                return
            }
        }
    }
}

/// The events a watch connection has yet to send, handed over from the
/// task that reads the device's event stream to the connection's thread,
/// which sends them. Bounded as the device's stream is: past
/// ``capacity`` waiting events, the oldest is dropped.
final class PendingEvents: Sendable {
    static let capacity = 64

    /// The read end of a pipe that holds a byte while events, or the end
    /// of the stream, wait to be taken.
    let readyFD: Int32
    private let signalFD: Int32
    private let waiting = Mutex((events: [ProtectionEvent](), finished: false))

    /// Throws ``DeviceError/io(_:)`` when no pipe can be made.
    init() throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw DeviceError.io(IOError("pipe", path: "", errno: errno)) }
        // Neither end may block: the task posting must never wait, and the
        // thread taking reads until the pipe is empty.
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        (readyFD, signalFD) = (ends[0], ends[1])
    }

    deinit {
        _ = close(readyFD)
        _ = close(signalFD)
    }

    func post(_ event: ProtectionEvent) {
        waiting.withLock { state in
            if state.events.count == Self.capacity { state.events.removeFirst() }
            state.events.append(event)
        }
        signal()
    }

    /// No event follows.
    func finish() {
        waiting.withLock { $0.finished = true }
        signal()
    }

    /// The events waiting, in order, and whether the stream has ended.
    func take() -> (events: [ProtectionEvent], finished: Bool) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ read(readyFD, $0.baseAddress, $0.count) }) > 0 {}
        return waiting.withLock { state in
            defer { state.events.removeAll() }
            return (state.events, state.finished)
        }
    }

    /// A full pipe fails the write, and is readable already.
    private func signal() {
        var byte: UInt8 = 1
        _ = write(signalFD, &byte, 1)
    }
}
