/// Why talking to the agent failed, apart from the device's own answers
/// (those arrive as the identical ``LockerDevice/DeviceError``).
public enum AgentError: Error, Equatable, Sendable {
    /// No agent answers for the device directory and none could be
    /// started. The string says what went wrong (never a secret).
    case unavailable(String)
    /// The agent sent bytes that do not follow docs/agent-protocol.md.
    case protocolViolation
    /// The process at the other end of the socket runs as another user.
    case peerRefused
    /// The agent listening at this socket path took no connection within
    /// the connect timeout: its queue is full (stopped, or overloaded). Not
    /// retried, as ``unavailable(_:)`` is: a retry would wait as long again.
    case notAccepting(String)
    /// No socket path short enough for `sun_path` could be made for this
    /// device directory.
    case socketPathTooLong(String)
    /// An argument cannot be carried by the protocol (for example a file
    /// key that is not 32 bytes, or an empty object ID).
    case invalidArgument(String)
    /// The agent failed with an error that has no wire encoding. The string
    /// names the error's type only.
    case remote(String)
    /// The agent already streams events to `limit` watchers, and takes no
    /// other `watch` until one ends.
    case tooManyWatchers(limit: Int)
}

/// The agent's answer to a request that arrived after a reboot began: the
/// request was not performed. The client sends it again to the next agent
/// and never shows this error.
struct AgentRestarting: Error {}
