internal import CLockerSupport
internal import LockerCrypto
internal import LockerDevice
internal import LockerFormat
internal import LockerIO
internal import Synchronization
#if canImport(Glibc)
internal import Glibc
#endif

/// Another agent already serves the device directory: this one does not
/// start.
public struct AgentAlreadyServing: Error, Sendable {
    public let devicePath: String
    /// The other agent's pid, as its pid file gives it.
    public let pid: Int32?
}

/// The agent: holds a booted ``Device`` in this process and serves it on
/// the device directory's socket. See docs/agent-protocol.md.
public enum AgentServer {
    /// Concurrent connections beyond this are closed at once.
    static let maxConnections = 256
    /// Concurrent `watch` streams; a further watch request is refused
    /// (``AgentError/tooManyWatchers(limit:)``). Watchers stay connected,
    /// so this keeps the other connections' room for other requests.
    static let maxWatchers = 16
    /// Seconds a connection may stay silent, and the most a frame may take
    /// to arrive once it has begun.
    static let receiveSeconds = 10
    static let sendSeconds = 10
    /// How often grace expiry is applied.
    static let tickMilliseconds = 100
    /// How long a new agent waits for a departing one's lock (a reboot in
    /// progress: its drain of ``AgentCore/drainSeconds``, then the wipe)
    /// before concluding another agent is running. Below the client's wait
    /// for a started agent (5 s).
    static let lockWaitSeconds = 4.0
    /// Stack size of connection threads: with mlockall every stack page
    /// touched stays in RAM.
    static let threadStackBytes = 512 << 10

    /// Runs the agent for `devicePath` in this process until `reboot` (then
    /// exits 0). Never returns normally. Throws ``AgentAlreadyServing`` if
    /// another agent serves the directory (as soon as it answers on the
    /// socket, or once ``lockWaitSeconds`` have passed with its lock
    /// held), and other errors if the socket cannot be set up.
    public static func run(devicePath: String) throws -> Never {
        harden()
        // Blocked before any thread starts, so every thread inherits the
        // mask and only `sigwait` below sees these signals.
        var endSignals = Self.endSignals()
        _ = pthread_sigmask(SIG_BLOCK, &endSignals, nil)
        let paths = try AgentPaths(devicePath: devicePath)
        _ = chdir("/")

        let lockFD = open(paths.lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lockFD >= 0 else { throw AgentError.unavailable("cannot open \(paths.lockPath): \(ErrnoCode(errno).message)") }
        let lockDeadline = SocketIO.monotonicNow() + lockWaitSeconds
        while flock(lockFD, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            guard e == EWOULDBLOCK || e == EINTR else {
                throw AgentError.unavailable("cannot lock \(paths.lockPath): \(ErrnoCode(e).message)")
            }
            // Another agent holds the lock: it serves this directory, and
            // then answers on the socket, or it is just leaving, and the
            // lock comes free within the wait.
            let answers: Bool
            if case .connected(let connection)? = try? Connection.open(paths.socketPath) {
                connection.close()
                answers = true
            } else {
                answers = false
            }
            if answers || SocketIO.monotonicNow() > lockDeadline {
                throw AgentAlreadyServing(devicePath: paths.deviceDirectory, pid: AgentPaths.pid(inFile: paths.pidPath))
            }
            SocketIO.sleep(milliseconds: 20)
        }
        // lockFD stays open, and so locked, until the process ends.

        let fileSystem = FileSystem()
        try? fileSystem.writeFileAtomically(paths.pidPath, Array("\(getpid())\n".utf8), mode: 0o600)

        let core = AgentCore(directory: DeviceDirectory(path: paths.deviceDirectory), paths: paths)
        core.boot()
        let listener = try listen(on: paths.socketPath)
        core.listener = listener

        // Without its threads the agent would not evict keys or end on a
        // signal: it leaves, taking its socket and pid file with it.
        func abandon(_ thread: String) -> AgentError {
            _ = unlink(paths.socketPath)
            _ = unlink(paths.pidPath)
            return AgentError.unavailable("cannot start the agent's \(thread) thread")
        }
        guard DetachedThread.start(stackSize: 64 << 10, { core.tickForever() }) else { throw abandon("clock") }

        // Asked to end (SIGTERM, SIGINT, SIGHUP): the same steps as a
        // reboot request, so the keys are wiped and the socket and pid file
        // removed, not left to the kernel and the next agent.
        let ending = DetachedThread.start(stackSize: 64 << 10) {
            var set = Self.endSignals()
            var received: Int32 = 0
            while sigwait(&set, &received) != 0 {}
            core.reboot(acknowledge: {})
        }
        guard ending else { throw abandon("signal") }

        acceptForever(listener, core: core)
    }

    /// The signals that end the agent as a reboot does.
    private static func endSignals() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, signal) }
        return set
    }

    /// Process hardening before any key exists here.
    private static func harden() {
        _ = locker_set_undumpable()
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        lockMemory()
        // Each passcode check runs scrypt over 16 MiB. With the default,
        // rising threshold, the second check onwards took that block from
        // the heap, and the agent kept it (locked, under mlockall) for the
        // rest of its life in about one run of four: 30 MiB instead of 14.
        // Fixed at the default's starting value, it is unmapped each time.
        ProcessMemory.fixMmapThreshold(at: 128 << 10)
        // As the CLI caps them: each connection thread would otherwise
        // take an arena of its own (eight per core), and under mlockall
        // every page one touches stays resident.
        ProcessMemory.limitMallocArenas(to: 4)
        _ = signal(SIGPIPE, SIG_IGN)
        _ = umask(0o077)
    }

    /// mlockall, so no page of this process is swapped out. MCL_ONFAULT
    /// (where the kernel has it) locks pages as they are touched rather
    /// than populating every mapping (thread stacks) up front. Skipped
    /// under a finite RLIMIT_MEMLOCK without the privilege to exceed it:
    /// MCL_FUTURE would then turn a large allocation (scrypt) into a
    /// failure. Failure is ignored: every secret is also mlock'ed by
    /// SecretBytes.
    private static func lockMemory() {
        var limit = rlimit()
        let memlock = __rlimit_resource_t(8)  // RLIMIT_MEMLOCK on Linux
        if getrlimit(memlock, &limit) == 0, limit.rlim_cur != rlim_t.max, geteuid() != 0 { return }
        if mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0 {
            _ = mlockall(MCL_CURRENT | MCL_FUTURE)
        }
    }

    /// Binds the listening socket, mode 0600, replacing a stale socket.
    private static func listen(on path: String) throws -> Int32 {
        var st = stat()
        if lstat(path, &st) == 0 {
            // We hold the agent lock, so a socket here is a dead agent's.
            guard st.st_mode & S_IFMT == S_IFSOCK else {
                throw AgentError.unavailable("\(path) exists and is not a socket")
            }
            _ = unlink(path)
        }
        var address = try SocketIO.address(for: path)
        let fd = SocketIO.makeSocket()
        guard fd >= 0 else { throw AgentError.unavailable("socket: \(ErrnoCode(errno).message)") }
        let previous = umask(0o177)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        let bindErrno = errno
        _ = umask(previous)
        guard rc == 0 else { throw AgentError.unavailable("bind \(path): \(ErrnoCode(bindErrno).message)") }
        _ = chmod(path, 0o600)
        guard Glibc.listen(fd, 128) == 0 else { throw AgentError.unavailable("listen \(path): \(ErrnoCode(errno).message)") }
        return fd
    }

    private static func acceptForever(_ listener: Int32, core: AgentCore) -> Never {
        let ownUID = geteuid()
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                switch errno {
                case EINTR, ECONNABORTED, EAGAIN:
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    SocketIO.sleep(milliseconds: 100)
                    continue
                default:
                    // The listener is gone (reboot in progress): wait for
                    // the exit.
                    SocketIO.sleep(milliseconds: 100)
                    continue
                }
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // The peer check comes before anything is read.
            guard let peer = SocketIO.peerCredentials(fd), peer.uid == ownUID else {
                _ = close(fd)
                continue
            }
            guard core.admit() else {
                _ = close(fd)
                continue
            }
            SocketIO.setTimeouts(fd, receive: receiveSeconds, send: sendSeconds)
            let started = DetachedThread.start(stackSize: threadStackBytes) {
                AgentConnection(fd: fd, core: core).serve()
                core.release()
            }
            if !started {
                _ = close(fd)
                core.release()
            }
        }
    }
}

/// The agent's shared state: the device (if any), the connection count,
/// and the reboot path.
final class AgentCore: @unchecked Sendable {
    let directory: DeviceDirectory
    let paths: AgentPaths
    /// Set once before the first connection is accepted.
    var listener: Int32 = -1

    private struct Held {
        var device: Device?
        /// Set once `reboot` starts; the process ends moments later.
        var rebooting = false
        /// Requests admitted by ``serve(_:)`` and not yet answered.
        var inFlight = 0
        /// Why the last boot failed, if it did; each device request boots
        /// again first (``AgentCore/device()``).
        var bootError: (any Error)?
    }
    private let held = Mutex(Held())
    private let connections = Mutex(0)
    private let watchers = Mutex(0)
    /// Serializes initialize and reboot.
    private let lifecycle = Lock()

    init(directory: DeviceDirectory, paths: AgentPaths) {
        self.directory = directory
        self.paths = paths
    }

    func boot() {
        guard directory.exists else { return }
        do {
            let device = try Device.boot(at: directory)
            held.withLock { $0.device = device }
        } catch {
            held.withLock { $0.bootError = error }
        }
    }

    /// The device, or the error every device request gets without one.
    /// After a failed boot, each request boots again, and gets that
    /// boot's error if it fails too: a device directory restored from a
    /// copy is read at the next request, with no reboot.
    func device() throws -> Device {
        let (device, failed, rebooting) = held.withLock { ($0.device, $0.bootError != nil, $0.rebooting) }
        if let device { return device }
        // Reached only by a request still running when the reboot stopped
        // waiting: it is answered as not performed, never "not initialized".
        if rebooting { throw AgentRestarting() }
        guard failed else { throw DeviceError.notInitialized }
        return try lifecycle.withLock {
            // Another request may have booted it meanwhile.
            if let device = held.withLock({ $0.device }) { return device }
            do {
                let device = try Device.boot(at: directory)
                held.withLock {
                    $0.device = device
                    $0.bootError = nil
                }
                return device
            } catch {
                held.withLock { $0.bootError = error }
                throw error
            }
        }
    }

    /// Runs `body`, which performs one request and sends its reply, unless
    /// a reboot has begun: then it returns false without running it (the
    /// request is answered ``AgentRestarting``). A reboot waits for the
    /// bodies already running.
    func serve(_ body: () -> Void) -> Bool {
        let admitted = held.withLock { state -> Bool in
            guard !state.rebooting else { return false }
            state.inFlight += 1
            return true
        }
        guard admitted else { return false }
        defer { held.withLock { $0.inFlight -= 1 } }
        body()
        return true
    }

    /// Counts a new connection, unless ``AgentServer/maxConnections`` are
    /// open already. Each admitted one is released with ``release()``.
    func admit() -> Bool {
        Self.count(connections, upTo: AgentServer.maxConnections)
    }

    func release() {
        connections.withLock { $0 -= 1 }
    }

    /// Counts a new watcher, unless ``AgentServer/maxWatchers`` are
    /// watching already. Each admitted one is released with
    /// ``releaseWatcher()``.
    func admitWatcher() -> Bool {
        Self.count(watchers, upTo: AgentServer.maxWatchers)
    }

    func releaseWatcher() {
        watchers.withLock { $0 -= 1 }
    }

    /// Adds one to `counter` if it is below `limit`.
    private static func count(_ counter: borrowing Mutex<Int>, upTo limit: Int) -> Bool {
        counter.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func tickForever() -> Never {
        while true {
            SocketIO.sleep(milliseconds: AgentServer.tickMilliseconds)
            if let device = held.withLock({ $0.device }) { device.tick() }
        }
    }

    /// Creates the device. A live device (booted or created here) makes it
    /// ``DeviceError/alreadyInitialized``; a wiped one is replaced.
    func initialize(passcode: SecretBytes?, options: Device.Options) throws {
        try lifecycle.withLock {
            if let current = held.withLock({ $0.device }), current.state != .wiped {
                throw DeviceError.alreadyInitialized
            }
            let device = try Device.initialize(at: directory, passcode: passcode, options: options)
            let old = held.withLock { state -> Device? in
                let old = state.device
                state.device = device
                state.bootError = nil
                return old
            }
            old?.shutdown()
        }
    }

    /// Seconds a reboot waits for the requests already running to be
    /// answered before it wipes the keys anyway. A device operation under
    /// way (an unlock's scrypt) still finishes before the wipe, which waits
    /// for the device's lock; the drain lets its answer out. Well under
    /// ``AgentServer/lockWaitSeconds``, so that the next agent, started
    /// meanwhile, waits for this one instead of giving up.
    static let drainSeconds = 1.5

    /// Stops listening and taking requests, lets the running ones finish
    /// and be answered, wipes every key, then runs `acknowledge` and ends
    /// the process with status 0.
    func reboot(acknowledge: () -> Void) -> Never {
        // From here every new request is answered "restarting", unperformed,
        // and no new connection can reach this agent.
        held.withLock { $0.rebooting = true }
        _ = unlink(paths.socketPath)
        if listener >= 0 { _ = shutdown(listener, Int32(SHUT_RDWR)) }
        // A request the device has begun is answered before the process
        // ends, so no client is left guessing whether it took effect.
        let deadline = SocketIO.monotonicNow() + Self.drainSeconds
        while held.withLock({ $0.inFlight }) > 0, SocketIO.monotonicNow() < deadline {
            SocketIO.sleep(milliseconds: 2)
        }
        // After the drain: an initialize in flight held this lock and has
        // been answered.
        // Never released: the process ends inside.
        return lifecycle.withLock {
            let device = held.withLock { state -> Device? in
                let device = state.device
                state.device = nil
                return device
            }
            device?.shutdown()
            _ = unlink(paths.pidPath)
            acknowledge()
            _exit(0)
        }
    }
}
