import Foundation
@testable import LockerAgent
import LockerCrypto
#if canImport(Glibc)
import Glibc
#endif

/// A connection to a fixture's agent that sends requests as any other
/// program of the user can: for filling the agent's limits without a
/// `locker` run per request.
final class RawAgentConnection {
    let fd: Int32

    /// Connects to the agent of `fixture`'s device, which must be running.
    init(_ fixture: CLIFixture) throws {
        let socketPath = try AgentPaths(devicePath: fixture.device).socketPath
        switch try SocketIO.connect(to: socketPath) {
        case .success(let fd): self.fd = fd
        case .failure(let e): throw HarnessError("cannot connect to \(socketPath): \(e.message)")
        }
        SocketIO.setTimeouts(fd, receive: 5, send: 5)
    }

    deinit { _ = Glibc.close(fd) }

    /// Sends the requests, a batch at a time, and reads each batch's
    /// replies before the next (the agent answers in order, and would wait
    /// on a full socket); returns the reply payloads.
    private func exchange(_ requests: [AgentRequest], batch: Int = 64) throws -> [[UInt8]] {
        var replies: [[UInt8]] = []
        for start in stride(from: 0, to: requests.count, by: batch) {
            let part = requests[start..<min(requests.count, start + batch)]
            for request in part {
                guard SocketIO.sendFrame(fd, request.encoded()) else { throw HarnessError("cannot send to the agent: errno \(errno)") }
            }
            for _ in part { replies.append(try reply()) }
        }
        return replies
    }

    /// The next reply frame's payload.
    func reply() throws -> [UInt8] {
        guard case .frame(let payload) = SocketIO.readFrame(fd) else { throw HarnessError("the agent sent no reply") }
        return payload
    }

    /// Registers each object ID as an open class D object, with a fixed
    /// file key; the replies in order.
    func registerOpen(_ objectIDs: [String]) throws -> [[UInt8]] {
        let fileKey = SecretBytes(copying: [UInt8](repeating: 0x5A, count: 32))
        return try exchange(objectIDs.map { .registerOpen(objectID: $0, fileKey: fileKey, protectionClass: .none) })
    }

    /// Asks to watch; the reply. After an OK (`[0]`), the agent sends its
    /// events on this connection for as long as it is open.
    func watch() throws -> [UInt8] {
        try exchange([.watch])[0]
    }

    /// Closes an object; the reply.
    func close(_ objectID: String) throws -> [UInt8] {
        try exchange([.close(objectID: objectID)])[0]
    }
}
