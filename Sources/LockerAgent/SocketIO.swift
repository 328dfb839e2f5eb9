internal import LockerCrypto
#if canImport(Glibc)
internal import Glibc
#endif

/// `struct ucred` from <sys/socket.h>, which the Glibc module does not
/// export (it is a GNU extension).
struct PeerCredentials {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// Thin wrappers over the socket calls the agent and its client make. Each
/// one retries on EINTR and reports failure as an errno, never by trapping.
enum SocketIO {
    /// `sun_path`'s capacity, minus the terminating NUL.
    static let maxPathBytes = 107

    /// The outcome of reading one frame.
    enum FrameRead {
        /// A whole frame's payload.
        case frame([UInt8])
        /// End of stream before the first byte of a frame.
        case closed
        /// A length of 0 or over the limit.
        case malformed
        /// End of stream inside a frame: the peer went away while sending
        /// (an agent ending in a reboot), not a frame that says something
        /// wrong.
        case truncated
        /// The read failed; EAGAIN means the receive timeout or the frame
        /// deadline passed.
        case failed(Int32)
    }

    static func address(for path: String) throws -> sockaddr_un {
        let bytes = Array(path.utf8)
        guard bytes.count <= maxPathBytes, !bytes.contains(0) else { throw AgentError.socketPathTooLong(path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    static func makeSocket() -> Int32 {
        socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    /// How long a connect waits for room in the agent's queue.
    static let connectSeconds = 10

    /// Connects to `path`, waiting up to `timeoutSeconds` while the
    /// listener's queue is full (a stopped or stuck agent: a Unix socket's
    /// connect waits for room, bounded by SO_SNDTIMEO, and then fails with
    /// EAGAIN). Returns the descriptor, or the errno.
    static func connect(to path: String, timeoutSeconds: Int = connectSeconds) throws -> Result<Int32, ErrnoCode> {
        var address = try address(for: path)
        let fd = makeSocket()
        guard fd >= 0 else { return .failure(ErrnoCode(errno)) }
        var limit = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        while true {
            let rc = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if rc == 0 { return .success(fd) }
            let e = errno
            if e == EINTR { continue }
            _ = Glibc.close(fd)
            return .failure(ErrnoCode(e))
        }
    }

    /// The credentials of the process at the other end, as the kernel
    /// recorded them at connect (or listen) time.
    static func peerCredentials(_ fd: Int32) -> PeerCredentials? {
        var credentials = PeerCredentials()
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
              length == socklen_t(MemoryLayout<PeerCredentials>.size)
        else { return nil }
        return credentials
    }

    /// Sets SO_RCVTIMEO and SO_SNDTIMEO; 0 means no timeout.
    static func setTimeouts(_ fd: Int32, receive: Int, send: Int) {
        var r = timeval(tv_sec: receive, tv_usec: 0)
        var s = timeval(tv_sec: send, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes every byte, without raising SIGPIPE. False on any failure.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            if n == 0 { return false }
            offset += n
        }
        return true
    }

    /// Sends one frame: the big-endian length, then `payload`.
    static func sendFrame(_ fd: Int32, _ payload: [UInt8]) -> Bool {
        guard !payload.isEmpty, payload.count <= WireFormat.maxPayloadBytes else { return false }
        let n = UInt32(payload.count)
        let header: [UInt8] = [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)]
        guard header.withUnsafeBytes({ sendAll(fd, $0) }) else { return false }
        return payload.withUnsafeBytes { sendAll(fd, $0) }
    }

    /// Reads exactly `buffer.count` bytes. Returns the number read before
    /// end of stream, or the errno. `deadline` (monotonic seconds) bounds
    /// the whole read: past it, the read fails with EAGAIN.
    private static func readFully(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, deadline: Double?)
        -> Result<Int, ErrnoCode>
    {
        var offset = 0
        while offset < buffer.count {
            // A recv alone may block for the socket's whole receive timeout
            // after the deadline has passed, so wait only for what is left.
            if let deadline, !awaitInput(fd, until: deadline) { return .failure(ErrnoCode(EAGAIN)) }
            let n = recv(fd, buffer.baseAddress! + offset, buffer.count - offset, 0)
            if n < 0 {
                let e = errno
                if e == EINTR { continue }
                return .failure(ErrnoCode(e))
            }
            if n == 0 { return .success(offset) }
            offset += n
        }
        return .success(offset)
    }

    /// Waits until `fd` has input (or an end of stream, or an error) to
    /// read. False once `deadline` (monotonic seconds) has passed first.
    private static func awaitInput(_ fd: Int32, until deadline: Double) -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let remaining = deadline - monotonicNow()
            guard remaining > 0 else { return false }
            let milliseconds = Int32(min((remaining * 1000).rounded(.up), Double(Int32.max)))
            let rc = poll(&pfd, 1, milliseconds)
            if rc > 0 { return true }
            // A poll that fails for another reason than a signal leaves
            // the recv to report it.
            if rc < 0 && errno != EINTR { return true }
        }
    }

    /// Reads one frame whose payload is at most `maxPayload` bytes. With a
    /// `frameSeconds` budget, a frame must arrive whole within it once its
    /// first byte has arrived.
    static func readFrame(_ fd: Int32, maxPayload: Int = WireFormat.maxPayloadBytes, frameSeconds: Double? = nil)
        -> FrameRead
    {
        var header = [UInt8](repeating: 0, count: 4)
        // The first byte may take as long as the socket's timeout allows
        // (an idle connection); the rest of the frame has `frameSeconds`.
        switch header.withUnsafeMutableBytes({ readFully(fd, UnsafeMutableRawBufferPointer(rebasing: $0[0..<1]), deadline: nil) }) {
        case .failure(let e): return .failed(e.value)
        case .success(0): return .closed
        case .success: break
        }
        let deadline = frameSeconds.map { monotonicNow() + $0 }
        switch header.withUnsafeMutableBytes({ readFully(fd, UnsafeMutableRawBufferPointer(rebasing: $0[1...]), deadline: deadline) }) {
        case .failure(let e): return .failed(e.value)
        case .success(let n) where n < 3: return .truncated
        case .success: break
        }
        let length = Int(header[0]) << 24 | Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
        guard length >= 1, length <= maxPayload else { return .malformed }
        var payload = [UInt8](repeating: 0, count: length)
        let result = payload.withUnsafeMutableBytes { readFully(fd, $0, deadline: deadline) }
        switch result {
        case .failure(let e):
            SecretBytes.wipe(&payload)
            return .failed(e.value)
        case .success(let n) where n < length:
            SecretBytes.wipe(&payload)
            return .truncated
        case .success:
            return .frame(payload)
        }
    }

    static func monotonicNow() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func sleep(milliseconds: Int) {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

/// An errno value, as an Error so it can travel in a `Result`.
struct ErrnoCode: Error {
    let value: Int32
    init(_ value: Int32) { self.value = value }
    var message: String { String(cString: strerror(value)) }
}
