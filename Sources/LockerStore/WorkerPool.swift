internal import FoundationEssentials
internal import LockerIO

/// Threads kept between calls of ``parallelFor(_:width:_:)``, so that a
/// fetch or store of many small objects, which runs one short round of
/// work after another, does not start and end a thread per helper per
/// round.
///
/// A round asks for helpers; an idle thread takes one, or a new thread is
/// started for it while the pool holds fewer than ``maxThreads``. A round
/// never waits for a helper that has not started: its caller does the
/// work itself and, once done, withdraws the helpers no thread took. So
/// rounds that overlap, or one started from inside another, cannot wait
/// on each other. A thread left idle for ``idleLifetime`` ends.
final class WorkerPool: @unchecked Sendable {
    /// The pool of the process.
    static let shared = WorkerPool()

    /// The most threads the pool holds at once.
    let maxThreads: Int
    /// How long a thread waits for work before it ends.
    let idleLifetime: TimeInterval

    /// Guards everything below; also what idle threads and finishing
    /// callers wait on.
    private let condition = Condition()
    /// Helpers asked for and not yet taken, oldest first.
    private var pending: [Round] = []
    private var threads = 0
    /// Threads alive and not running a round.
    private var idle = 0
    /// Threads started since the pool was made, for tests and measurement.
    private var started = 0

    /// Starts a thread and says whether it did.
    private let startThread: (@escaping @Sendable () -> Void) -> Bool

    /// `startThread` starts a thread and says whether it did (tests make
    /// it fail). A thread that cannot be started leaves its helper to the
    /// caller, which does the work itself.
    init(maxThreads: Int = 64, idleLifetime: TimeInterval = 5,
         startThread: @escaping (@escaping @Sendable () -> Void) -> Bool = { DetachedThread.start($0) }) {
        self.maxThreads = maxThreads
        self.idleLifetime = idleLifetime
        self.startThread = startThread
    }

    /// One call's work, run by its caller and by the helpers that start
    /// before the caller is done.
    final class Round {
        let work: () -> Void
        /// Under the pool's condition.
        var running = 0
        var closed = false
        init(_ work: @escaping () -> Void) { self.work = work }
    }

    /// Runs `work` on the calling thread and on up to `helpers` pool
    /// threads at once, and returns when every run of it that started has
    /// returned. `work` must take its share of a common supply of tasks
    /// and return when none is left, so that it is correct whether one
    /// thread runs it or many. No run of `work` starts after this returns.
    func run(helpers: Int, _ work: @escaping () -> Void) {
        let round = Round(work)
        if helpers > 0 {
            condition.lock()
            for _ in 0..<helpers { pending.append(round) }
            let waiting = idle
            let wanted = min(max(0, pending.count - waiting), maxThreads - threads)
            // A thread is counted idle from its start, before it first
            // waits, so that the next round does not start another for
            // the same helper.
            threads += wanted
            idle += wanted
            started += wanted
            // Threads idle before this round may be waiting and need
            // waking; those started here look at `pending` before they
            // first wait.
            if waiting > 0 { condition.broadcast() }
            condition.unlock()
            var failed = 0
            for _ in 0..<wanted {
                if !startThread({ [self] in serve() }) { failed += 1 }
            }
            if failed > 0 {
                // Not started (the process's thread limit): uncounted, so
                // that a later round tries again; this round's caller
                // withdraws the helpers no thread takes.
                condition.lock()
                threads -= failed
                idle -= failed
                started -= failed
                condition.unlock()
            }
        }
        work()
        guard helpers > 0 else { return }
        condition.lock()
        round.closed = true
        pending.removeAll { $0 === round }
        while round.running > 0 { condition.wait() }
        condition.unlock()
    }

    /// Counts of the pool's threads: alive now, and started since it was made.
    var threadCounts: (alive: Int, started: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (threads, started)
    }

    /// A thread's life: it was counted idle when it was started.
    private func serve() {
        condition.lock()
        while true {
            let deadline = Condition.uptime() + idleLifetime
            var timedOut = false
            while pending.isEmpty && !timedOut {
                timedOut = !condition.wait(untilUptime: deadline)
            }
            idle -= 1
            if pending.isEmpty {
                threads -= 1
                condition.unlock()
                return
            }
            let round = pending.removeFirst()
            round.running += 1
            condition.unlock()
            round.work()
            condition.lock()
            round.running -= 1
            idle += 1
            if round.running == 0 && round.closed { condition.broadcast() }
        }
    }
}
