#if canImport(Glibc)
internal import Glibc
#endif
internal import CLockerSupport

// Every layer starts threads, guards shared fields and waits on conditions
// with these rather than with Foundation's `Thread`, `NSLock` and
// `NSCondition`, so that no executable links Foundation beyond
// FoundationEssentials: that part of Foundation brings ICU and
// CoreFoundation with it, megabytes of code that every `locker` call and
// the agent, which holds keys for hours, would otherwise map.

/// A non-recursive mutual-exclusion lock around a body of code, for state
/// spread over several fields that a `Mutex` cannot hold as one value.
public final class Lock: @unchecked Sendable {
    // Also the mutex of a ``Condition``, which waits on it.
    fileprivate let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the lock held. Calling it again from inside
    /// `body` deadlocks.
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A lock with a condition to wait on, as `NSCondition`: ``wait()`` and
/// ``wait(untilUptime:)`` let go of the lock while they wait and hold it
/// again when they return, so each must be called with the lock held.
/// Waits may end without a signal; callers wait in a loop on their own
/// predicate.
public final class Condition: @unchecked Sendable {
    private let mutex = Lock()
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        // Deadlines are read on the monotonic clock, so that a change of
        // the wall clock neither cuts a wait short nor stretches it.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex.mutex) }

    public func unlock() { pthread_mutex_unlock(mutex.mutex) }

    /// Runs `body` with the lock held. Calling it again from inside
    /// `body` deadlocks.
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        try mutex.withLock(body)
    }

    /// Waits for a signal or a broadcast. The lock must be held.
    public func wait() { pthread_cond_wait(condition, mutex.mutex) }

    /// Waits for a signal or a broadcast until `deadline`, in seconds of
    /// ``Condition/uptime()``. The lock must be held. Returns false if the
    /// deadline passed first.
    public func wait(untilUptime deadline: Double) -> Bool {
        let seconds = deadline.rounded(.down)
        var time = timespec(tv_sec: Int(seconds), tv_nsec: Int((deadline - seconds) * 1e9))
        return pthread_cond_timedwait(condition, mutex.mutex, &time) != ETIMEDOUT
    }

    /// Wakes one waiting thread, if any.
    public func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiting thread.
    public func broadcast() { pthread_cond_broadcast(condition) }

    /// Seconds on the monotonic clock that ``wait(untilUptime:)`` reads.
    public static func uptime() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// A detached thread, started once and never joined.
public enum DetachedThread {
    /// The stack a thread gets by default here (glibc takes the 8 MiB of
    /// `RLIMIT_STACK`), as Foundation's `Thread` gave the store's threads.
    public static let defaultStackSize = 8 << 20

    /// Starts `body` on a new thread with a stack of `stackSize` bytes
    /// (rounded up to the system's minimum). Returns false, and never runs
    /// `body`, if the thread could not be created.
    @discardableResult
    public static func start(stackSize: Int = defaultStackSize, _ body: @escaping @Sendable () -> Void) -> Bool {
        var attributes = pthread_attr_t()
        guard pthread_attr_init(&attributes) == 0 else { return false }
        defer { pthread_attr_destroy(&attributes) }
        _ = pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        _ = pthread_attr_setstacksize(&attributes, max(stackSize, Int(PTHREAD_STACK_MIN)))
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, &attributes, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            body.run()
            return nil
        }, box)
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            return false
        }
        return true
    }

    private final class Body: @unchecked Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}

/// What the calling thread has read from storage.
public enum ThreadIO {
    /// The blocks the calling thread has read from storage since it
    /// started: a read that the page cache serves adds none, so the
    /// difference across some reads says whether any of them waited for
    /// the disk. Nil where the kernel does not say.
    public static func blocksRead() -> Int? {
        let blocks = locker_thread_blocks_read()
        return blocks >= 0 ? Int(blocks) : nil
    }
}
