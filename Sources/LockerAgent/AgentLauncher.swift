internal import LockerIO
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// How a client starts an agent when none answers: the program to run and
/// its arguments (argv[1...]). The program must end up calling
/// ``AgentServer/run(devicePath:)`` for the same device directory.
public struct AgentLauncher: Sendable {
    public var executable: String
    public var arguments: [String]
    /// Started in turn, in place of this one, each time the one started
    /// last ends at start with a failure (it cannot load, say).
    public var fallbacks: [AgentLauncher]

    public init(executable: String, arguments: [String], fallbacks: [AgentLauncher] = []) {
        self.executable = executable
        self.arguments = arguments
        self.fallbacks = fallbacks
    }

    /// Starts the agent detached: a new session, stdin, stdout and stderr
    /// on /dev/null, every other descriptor closed, default signal
    /// dispositions. A thread reaps it when it exits, so a long-lived
    /// client leaves no zombie; the returned box reports its wait status.
    func spawn() throws -> SpawnedAgent {
        var actions = posix_spawn_file_actions_t()
        guard posix_spawn_file_actions_init(&actions) == 0 else { throw AgentError.unavailable("posix_spawn setup failed") }
        defer { posix_spawn_file_actions_destroy(&actions) }
        _ = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        _ = posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        _ = posix_spawn_file_actions_adddup2(&actions, 1, 2)
        Self.closeInheritedDescriptors(&actions)

        var attributes = posix_spawnattr_t()
        guard posix_spawnattr_init(&attributes) == 0 else { throw AgentError.unavailable("posix_spawn setup failed") }
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        _ = posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2] { sigaddset(&defaults, signal) }
        _ = posix_spawnattr_setsigdefault(&attributes, &defaults)
        let flags = Self.spawnSetSID | Int32(POSIX_SPAWN_SETSIGMASK) | Int32(POSIX_SPAWN_SETSIGDEF)
        _ = posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard rc == 0 else {
            throw AgentError.unavailable("cannot start the agent \(executable): \(ErrnoCode(rc).message)")
        }
        let childPID = pid
        let agent = SpawnedAgent(pid: childPID)
        // Without a reaper the agent stays a zombie once it ends, which
        // `isRunning` tells from a live one; nothing else depends on it.
        DetachedThread.start(stackSize: 64 << 10) {
            var status: Int32 = 0
            while waitpid(childPID, &status, 0) < 0 {
                if errno != EINTR { return }
            }
            agent.exitStatus.withLock { $0 = status }
        }
        return agent
    }

    /// glibc's POSIX_SPAWN_SETSID (not exported to Swift).
    private static let spawnSetSID: Int32 = 0x80

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// Asks the child to close every descriptor from 3 up, so it never
    /// holds one of the client's pipes open. Uses glibc's
    /// posix_spawn_file_actions_addclosefrom_np where present, else closes
    /// what /proc/self/fd lists now.
    private static func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) {
        if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
            let addCloseFrom = unsafeBitCast(symbol, to: AddCloseFrom.self)
            if addCloseFrom(&actions, 3) == 0 { return }
        }
        guard let directory = opendir("/proc/self/fd") else { return }
        var descriptors: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let fd = Int32(name), fd > 2, fd != dirfd(directory) { descriptors.append(fd) }
        }
        closedir(directory)
        for fd in descriptors where fcntl(fd, F_GETFD) >= 0 && fcntl(fd, F_GETFD) & FD_CLOEXEC == 0 {
            _ = posix_spawn_file_actions_addclose(&actions, fd)
        }
    }
}

/// An agent process this client started.
final class SpawnedAgent: Sendable {
    let pid: pid_t
    /// The wait status once the process has exited.
    let exitStatus = Mutex<Int32?>(nil)

    init(pid: pid_t) { self.pid = pid }
}
