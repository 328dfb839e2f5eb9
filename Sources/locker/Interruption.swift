import FoundationEssentials
import Glibc
import LockerStore
import LockerIO
import Synchronization

/// What SIGINT, SIGTERM and SIGHUP do to a running command.
///
/// The signals are blocked in every thread and taken by one thread of
/// their own (`sigwait`), so that cleaning up is ordinary code, not a
/// signal handler. On the first signal:
/// - a terminal left without echo by a passcode prompt gets its settings
///   back;
/// - a command that takes part (``cooperating(_:)``: `put`, `get`) sees
///   ``check()`` throw ``Interrupted`` at its next chunk or file, unwinds
///   through its usual failure path, which removes what it had written
///   under temporary names, and the process then ends by the signal
///   (`init` takes part once it has its passcode, and never checks: it
///   finishes, and then ends by the signal);
/// - any other command ends at once.
///
/// If a taking-part command has not ended ``grace`` after the signal (it
/// waits on something that never comes, or on a disk that does not
/// answer), the cleanups registered with ``registerCleanup(_:)`` run (a
/// single `get`'s temporary file, the directory a `get -r` builds, and
/// through ``cleanups`` what a store being written had under temporary
/// names) and the process ends by the signal there and then. A second
/// signal does the same, unless the command is already unwinding
/// (``check()`` has thrown): its own cleanup, which removes everything, is
/// let finish.
///
/// A signal that was ignored when the process started (`nohup` ignores
/// SIGHUP, a shell ignores SIGINT in a background job) stays ignored.
///
/// Ending "by the signal" means what a shell expects (exit status 128 + n,
/// and a script stops on Ctrl-C): the default action is restored and the
/// signal raised again.
enum Interruption {
    static let signals: [Int32] = [SIGINT, SIGTERM, SIGHUP]
    /// How long a taking-part command has to unwind.
    static let grace: TimeInterval = 10

    /// The first signal received, or 0.
    private static let received = Atomic<Int32>(0)
    /// Whether ``check()`` has thrown: the command is unwinding.
    private static let unwinding = Atomic<Bool>(false)
    private static let shared = Mutex(Shared())
    /// Taken for good, exclusively, when the process starts to end by a
    /// signal; shared while a temporary is created and registered, or put
    /// in place and unregistered, so that the cleanups never run between
    /// the two halves, while the fetch's threads create their files at
    /// once. The one waiting to end goes first: no new share is given
    /// while it waits.
    nonisolated(unsafe) private static let ending: UnsafeMutablePointer<pthread_rwlock_t> = {
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(lock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
        return lock
    }()

    /// Runs `body` with no cleanup running meanwhile: either the cleanups
    /// have run (and the process is ending, so this waits for ever) or
    /// they run after `body` has returned. `body` must not call into
    /// ``Interruption`` except ``registerCleanup(_:)`` and
    /// ``unregisterCleanup(_:)``.
    static func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        pthread_rwlock_rdlock(ending)
        defer { pthread_rwlock_unlock(ending) }
        return try body()
    }

    private struct Shared: @unchecked Sendable {
        /// Settings of standard input to restore, while a prompt has
        /// turned echo off.
        var terminal: termios?
        /// What removes each thing written under a temporary name, by
        /// token.
        var cleanups: [Int: @Sendable () -> Void] = [:]
        var nextToken = 0
        /// Tokens whose temporaries a command is putting in place
        /// (``markPlacing(_:_:)``).
        var placing: Set<Int> = []
        /// Commands taking part that are running (0 or 1 in practice).
        var cooperating = 0
    }

    /// The thrown error of an interrupted command: nothing to print, the
    /// process ends by `signal`.
    struct Interrupted: Error {
        var signal: Int32
    }

    /// Blocks the signals in this thread and every thread it starts from
    /// now on, and starts the thread that takes them. Call it first, before
    /// any other thread exists.
    static func install() {
        let taken = signals.filter { !isIgnored($0) }
        guard !taken.isEmpty else { return }
        var blocked = sigset_t()
        sigemptyset(&blocked)
        for signal in taken { sigaddset(&blocked, signal) }
        _ = pthread_sigmask(SIG_BLOCK, &blocked, nil)
        let started = DetachedThread.start(stackSize: 1 << 16) {
            var set = sigset_t()
            sigemptyset(&set)
            for signal in taken { sigaddset(&set, signal) }
            var pending: Int32 = 0
            while true {
                guard sigwait(&set, &pending) == 0 else { continue }
                handle(pending)
            }
        }
        // Without the thread, nothing would ever take these signals: they
        // keep their default action (the process ends at once, and its
        // temporaries may be left, as with no handling at all).
        if !started { _ = pthread_sigmask(SIG_UNBLOCK, &blocked, nil) }
    }

    /// Whether `signal`'s action is to be ignored, as inherited.
    private static func isIgnored(_ signal: Int32) -> Bool {
        var action = sigaction()
        guard sigaction(signal, nil, &action) == 0 else { return false }
        return unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// The signal received, if any.
    static var signal: Int32? {
        let s = received.load(ordering: .acquiring)
        return s == 0 ? nil : s
    }

    /// Throws ``Interrupted`` once a signal has been received.
    static func check() throws {
        if let signal {
            unwinding.store(true, ordering: .releasing)
            throw Interrupted(signal: signal)
        }
    }

    /// Runs `body` as a command that stops at ``check()`` when
    /// interrupted, and so gets ``grace`` to unwind.
    static func cooperating<T>(_ body: () throws -> T) rethrows -> T {
        shared.withLock { $0.cooperating += 1 }
        defer { shared.withLock { $0.cooperating -= 1 } }
        return try body()
    }

    /// Runs `body` with standard input's terminal settings `saved` to be
    /// restored should a signal arrive meanwhile.
    static func restoringTerminal<T>(_ saved: termios, _ body: () throws -> T) rethrows -> T {
        shared.withLock { $0.terminal = saved }
        defer { shared.withLock { $0.terminal = nil } }
        return try body()
    }

    /// Registers `cleanup`, which removes something written under a
    /// temporary name, to run if the process must end before the command
    /// removes or renames it itself. It may run on another thread, at the
    /// same time as the command's own cleanup, and must not call into
    /// ``Interruption``. Returns the token for ``unregisterCleanup(_:)``.
    static func registerCleanup(_ cleanup: @escaping @Sendable () -> Void) -> Int {
        shared.withLock {
            $0.nextToken += 1
            $0.cleanups[$0.nextToken] = cleanup
            return $0.nextToken
        }
    }

    /// Creates a temporary with `create` and registers the cleanup that
    /// `cleanup` makes for it, as one step: a process that ends by a
    /// signal meanwhile has either not created it or removes it. (Created
    /// first and registered after, a second Ctrl-C in between would leave
    /// it.) Returns what `create` made and the token for
    /// ``unregisterCleanup(_:)``.
    static func creatingTemporary<T, E: Error>(_ create: () throws(E) -> T,
                                               cleanup: (T) -> @Sendable () -> Void) throws(E) -> (made: T, token: Int) {
        try cleanups.creatingTemporary(create, cleanup: cleanup)
    }

    /// ``creatingTemporary(_:cleanup:)`` for a file `name` that `create`
    /// makes in the open directory `directory`, which must stay open until
    /// unregistered.
    static func creatingTemporary<T, E: Error>(_ name: String, in directory: Int32,
                                               _ create: () throws(E) -> T) throws(E) -> (made: T, token: Int) {
        try creatingTemporary(create, cleanup: { _ in { _ = unlinkat(directory, name, 0) } })
    }

    /// Runs `body`, which puts the temporary registered as `token` (if
    /// any) in its place, and if it returns, unregisters its cleanup, as
    /// one step: the cleanup never runs once the temporary is what it
    /// became (it would empty a directory just published). If `body`
    /// throws, the cleanup stays registered.
    static func finishingTemporary<T, E: Error>(_ token: Int?, _ body: () throws(E) -> T) throws(E) -> T {
        try cleanups.finishingTemporaries([token], body)
    }

    static func unregisterCleanup(_ token: Int) {
        shared.withLock { _ = $0.cleanups.removeValue(forKey: token) }
    }

    /// Marks the temporaries registered as `tokens` as being put in place
    /// (`placing` true), or no longer: should the process have to end
    /// without waiting for the command (see ``endNow()``), their cleanups
    /// do not run, for they could remove what the temporaries have just
    /// become.
    static func markPlacing(_ tokens: [Int], _ placing: Bool) {
        guard !tokens.isEmpty else { return }
        shared.withLock { state in
            if placing { state.placing.formUnion(tokens) } else { state.placing.subtract(tokens) }
        }
    }

    /// The cleanups above as a store takes them (`Store.Options`): what
    /// `put` writes under temporary names in the store is removed as a
    /// fetch's temporaries are, from whichever thread wrote it.
    static let cleanups = Cleanups()

    struct Cleanups: TemporaryCleanups {
        func holdingOffCleanups<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
            try Interruption.holdingOffCleanups(body)
        }

        func registerCleanup(_ cleanup: @escaping @Sendable () -> Void) -> Int {
            Interruption.registerCleanup(cleanup)
        }

        func unregisterCleanup(_ token: Int) {
            Interruption.unregisterCleanup(token)
        }

        func markPlacing(_ tokens: [Int], _ placing: Bool) {
            Interruption.markPlacing(tokens, placing)
        }
    }

    /// Ends the process by `signal`: its default action restored, and the
    /// signal raised again in this thread with it unblocked.
    static func end(by signal: Int32) -> Never {
        Glibc.signal(signal, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signal)
        _ = pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(signal)
        // Not reached for these signals; an exit status all the same.
        _exit(128 + signal)
    }

    private static func handle(_ signal: Int32) {
        let first = received.compareExchange(expected: 0, desired: signal, ordering: .acquiringAndReleasing).exchanged
        let cooperating = shared.withLock { state in
            if var saved = state.terminal {
                _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
                state.terminal = nil
                // The newline the user's Enter would have given.
                _ = Glibc.write(STDERR_FILENO, "\n", 1)
            }
            return state.cooperating > 0
        }
        if cooperating && (first || unwinding.load(ordering: .acquiring)) {
            guard first else { return }
            // The command unwinds and ends the process itself; this
            // thread steps in only if it does not in time.
            let started = DetachedThread.start(stackSize: 1 << 16) {
                // sleep(3) returns the whole seconds left if a signal
                // cuts it short (none should: this thread blocks them).
                var left = UInt32(grace.rounded(.up))
                while left > 0 { left = sleep(left) }
                endNow()
            }
            if started { return }
        }
        endNow()
    }

    /// Runs the registered cleanups and ends the process by the
    /// first signal received.
    private static func endNow() -> Never {
        // Never released: the process ends. (A second caller, the grace
        // timer or a later signal, waits below until it has.) A share
        // held by a thread stuck on a disk that does not answer must not
        // keep the process from ending: after 2 seconds the cleanups run
        // all the same, but for those of temporaries being put in place,
        // which such a thread may have just renamed (an object's data
        // file, a published directory). Those are left, as garbage.
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        deadline.tv_sec += 2
        let waited = pthread_rwlock_timedwrlock(ending, &deadline) == 0
        let signal = received.load(ordering: .acquiring)
        // The lock is kept: no command registers or renames a temporary
        // from here on.
        shared.withLock { state -> Never in
            for (token, cleanup) in state.cleanups where waited || !state.placing.contains(token) { cleanup() }
            end(by: signal)
        }
    }
}
