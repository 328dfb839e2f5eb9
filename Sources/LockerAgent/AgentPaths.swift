internal import LockerCrypto
internal import LockerFormat
internal import LockerIO
#if canImport(Glibc)
internal import Glibc
#endif

/// Where the agent of one device directory keeps its socket, lock files and
/// pid file. See docs/agent-protocol.md, "Socket location".
public struct AgentPaths: Sendable, Equatable {
    /// The device directory, absolute, with symbolic links resolved.
    public let deviceDirectory: String
    /// The agent's listening socket: `DEVICE/agent.sock`, or
    /// `/tmp/locker-<uid>/<hash>.sock` when that is too long for
    /// `sun_path`.
    public let socketPath: String

    /// Held (flock, exclusive) by the running agent for its lifetime.
    public var lockPath: String { deviceDirectory + "/agent.lock" }
    /// Held by a client while it starts an agent.
    public var startLockPath: String { deviceDirectory + "/agent.start.lock" }
    /// The running agent's process ID, in decimal.
    public var pidPath: String { deviceDirectory + "/agent.pid" }

    /// The process ID in the pid file at `path`: one decimal number above
    /// zero, with white space around it at most. Nil for anything else, or
    /// no file.
    static func pid(inFile path: String) -> Int32? {
        // Read as every device file is (no access time written).
        guard let bytes = try? FileSystem().readFile(path, limit: 64) else { return nil }
        let words = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard words.count == 1, let pid = Int32(words[0]), pid > 0 else { return nil }
        return pid
    }

    /// Resolves the paths for `devicePath`, creating the device directory
    /// (mode 0700) when it is missing, and the private socket directory
    /// under /tmp when the socket needs it. Refuses a device directory
    /// owned by another user or writable by group or others, and a socket
    /// directory that is not private to this user.
    public init(devicePath: String) throws {
        guard !devicePath.isEmpty, !devicePath.utf8.contains(0) else {
            throw AgentError.unavailable("empty device directory path")
        }
        try Self.makeDirectory(devicePath)
        guard let resolved = realpath(devicePath, nil) else {
            throw AgentError.unavailable("cannot resolve \(devicePath): \(ErrnoCode(errno).message)")
        }
        let absolute = String(cString: resolved)
        free(resolved)
        try Self.checkPrivate(absolute, requireOwnerOnly: false)
        deviceDirectory = absolute

        let local = absolute == "/" ? "/agent.sock" : absolute + "/agent.sock"
        if local.utf8.count <= SocketIO.maxPathBytes {
            socketPath = local
        } else {
            let digest = try Digest.hash(.sha256, Array(absolute.utf8))
            let hex = Hex.lowercase(Array(digest.prefix(16)))
            let directory = "/tmp/locker-\(geteuid())"
            if mkdir(directory, 0o700) != 0, errno != EEXIST {
                throw AgentError.unavailable("cannot create \(directory): \(ErrnoCode(errno).message)")
            }
            try Self.checkPrivate(directory, requireOwnerOnly: true)
            socketPath = directory + "/" + hex + ".sock"
            guard socketPath.utf8.count <= SocketIO.maxPathBytes else { throw AgentError.socketPathTooLong(socketPath) }
        }
    }

    /// Creates `path` and any missing parents, mode 0700.
    private static func makeDirectory(_ path: String) throws {
        var st = stat()
        if stat(path, &st) == 0 { return }
        var parent = path
        while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
        if let slash = parent.lastIndex(of: "/") {
            let up = String(parent[..<slash])
            if !up.isEmpty { try makeDirectory(up) }
        }
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            throw AgentError.unavailable("cannot create \(path): \(ErrnoCode(errno).message)")
        }
    }

    /// A directory the agent may trust: a real directory (not a link),
    /// owned by this user, not writable by anyone else; with
    /// `requireOwnerOnly`, mode 0700 exactly (fixed when it is ours).
    private static func checkPrivate(_ path: String, requireOwnerOnly: Bool) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw AgentError.unavailable("cannot inspect \(path): \(ErrnoCode(errno).message)")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw AgentError.unavailable("\(path) is not a directory") }
        guard st.st_uid == geteuid() else { throw AgentError.unavailable("\(path) is owned by another user") }
        if requireOwnerOnly {
            if st.st_mode & 0o077 != 0 {
                guard chmod(path, 0o700) == 0 else { throw AgentError.unavailable("\(path) is not private") }
            }
        } else if st.st_mode & 0o022 != 0 {
            throw AgentError.unavailable("\(path) is writable by other users")
        }
    }
}
