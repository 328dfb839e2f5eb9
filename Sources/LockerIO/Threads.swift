#if canImport(Glibc)
internal import Glibc
#endif
internal import CLockerSupport

// The device and agent layers start threads and guard shared fields with
// these rather than with Foundation's `Thread` and `NSLock`, so that the
// agent's executable links no Foundation: a process that holds keys for
// hours should map as little code as it can.

/// A non-recursive mutual-exclusion lock around a body of code, for state
/// spread over several fields that a `Mutex` cannot hold as one value.
public final class Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

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
