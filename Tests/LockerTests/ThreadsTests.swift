import LockerIO
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("Lock and DetachedThread")
struct ThreadsTests {
    /// A counter that is not atomic: only the lock keeps its increments
    /// from being lost.
    final class Counter: @unchecked Sendable {
        var value = 0
    }

    @Test("a detached thread runs its body once, on a thread of its own, with the stack asked for")
    func detachedThreadRuns() throws {
        let caller = pthread_self()
        let seen = Mutex<(runs: Int, otherThread: Bool, stack: Int)>((0, false, 0))
        let done = Counter()
        let doneLock = Lock()
        #expect(DetachedThread.start(stackSize: 256 << 10) {
            var attributes = pthread_attr_t()
            var stack = 0
            // glibc's pthread_getattr_np, which the Glibc module does not
            // export.
            typealias GetAttributes = @convention(c) (pthread_t, UnsafeMutablePointer<pthread_attr_t>) -> Int32
            if let symbol = dlsym(nil, "pthread_getattr_np"),
               unsafeBitCast(symbol, to: GetAttributes.self)(pthread_self(), &attributes) == 0 {
                pthread_attr_getstacksize(&attributes, &stack)
                pthread_attr_destroy(&attributes)
            }
            let other = pthread_equal(pthread_self(), caller) == 0
            seen.withLock { $0 = ($0.runs + 1, other, stack) }
            doneLock.withLock { done.value = 1 }
        })
        var waited = 0
        while doneLock.withLock({ done.value }) == 0, waited < 5_000 {
            usleep(1_000)
            waited += 1
        }
        usleep(10_000)
        let result = seen.withLock { $0 }
        #expect(result.runs == 1)
        #expect(result.otherThread)
        #expect(result.stack >= 256 << 10)
        // glibc may hand the thread a cached stack of another thread that
        // ended, up to four times the size asked for (1 MiB: other tests'
        // threads), but never the 8 MiB default for a request of 256 KiB.
        #expect(result.stack <= 4 * (256 << 10), "the default stack, not the one asked for: \(result.stack)")
    }

    @Test("the lock keeps eight threads' increments of a plain counter from being lost")
    func lockExcludes() {
        let lock = Lock()
        let counter = Counter()
        let finished = Mutex(0)
        let threads = 8, increments = 20_000
        for _ in 0..<threads {
            DetachedThread.start(stackSize: 64 << 10) {
                for _ in 0..<increments {
                    lock.withLock { counter.value += 1 }
                }
                finished.withLock { $0 += 1 }
            }
        }
        var waited = 0
        while finished.withLock({ $0 }) < threads, waited < 20_000 {
            usleep(1_000)
            waited += 1
        }
        #expect(finished.withLock { $0 } == threads)
        #expect(lock.withLock { counter.value } == threads * increments)
    }

    @Test("a throwing body leaves the lock free")
    func throwingBodyUnlocks() {
        struct Failure: Error {}
        let lock = Lock()
        #expect(throws: Failure.self) { try lock.withLock { throw Failure() } }
        let other = Mutex(false)
        let done = Mutex(false)
        DetachedThread.start(stackSize: 64 << 10) {
            lock.withLock { other.withLock { $0 = true } }
            done.withLock { $0 = true }
        }
        var waited = 0
        while !done.withLock({ $0 }), waited < 5_000 {
            usleep(1_000)
            waited += 1
        }
        #expect(other.withLock { $0 })
    }

    /// The calling thread's count of blocks read from storage is given,
    /// and a read the page cache serves adds nothing to it.
    @Test func aReadFromThePageCacheReadsNoBlocks() throws {
        let path = "/tmp/locker-threadio-\(getpid())"
        defer { unlink(path) }
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0x5a, count: 64 << 10)
        #expect(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count)
        // Just written: every page of it is in the page cache.
        let before = try #require(ThreadIO.blocksRead())
        for _ in 0..<3 {
            #expect(bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) } == bytes.count)
        }
        #expect(ThreadIO.blocksRead() == before)
    }

    @Test("a condition's wait ends at its deadline when nothing signals, with the lock held again")
    func conditionWaitTimesOut() {
        let condition = Condition()
        condition.lock()
        let start = Condition.uptime()
        let signalled = condition.wait(untilUptime: start + 0.05)
        let waited = Condition.uptime() - start
        // Held again: another thread cannot take the lock now.
        let taken = Mutex(false)
        DetachedThread.start(stackSize: 64 << 10) {
            condition.withLock { taken.withLock { $0 = true } }
        }
        usleep(20_000)
        #expect(!taken.withLock { $0 })
        condition.unlock()
        #expect(!signalled)
        #expect(waited >= 0.05)
        var spins = 0
        while !taken.withLock({ $0 }), spins < 5_000 { usleep(1_000); spins += 1 }
        #expect(taken.withLock { $0 })
    }

    /// State the condition tests share, guarded by the condition's lock.
    final class Waiting: @unchecked Sendable {
        /// Threads that have taken the lock and are about to wait: seen
        /// under the lock, each is inside `wait`, which let go of it.
        var waiting = 0
        var go = false
    }

    @Test("a signal wakes a thread waiting on a condition, which let go of the lock while it waited")
    func conditionSignalWakes() {
        let condition = Condition()
        let state = Waiting()
        let result = Mutex<(woken: Bool, waited: Double)?>(nil)
        DetachedThread.start(stackSize: 64 << 10) {
            condition.lock()
            state.waiting += 1
            let start = Condition.uptime()
            var woken = true
            while !state.go && woken { woken = condition.wait(untilUptime: start + 5) }
            let waited = Condition.uptime() - start
            condition.unlock()
            result.withLock { $0 = (woken, waited) }
        }
        // Taking the lock while the other thread waits needs `wait` to
        // have let go of it; if it had not, this would get it only after
        // the 5 s deadline, and the thread would report a timeout.
        var spins = 0
        while condition.withLock({ state.waiting }) == 0, spins < 10_000 { usleep(1_000); spins += 1 }
        condition.withLock {
            state.go = true
            condition.signal()
        }
        spins = 0
        while result.withLock({ $0 }) == nil, spins < 20_000 { usleep(1_000); spins += 1 }
        let outcome = result.withLock { $0 }
        #expect(outcome?.woken == true)
        #expect((outcome?.waited ?? 5) < 5)
    }

    @Test("a broadcast wakes every thread waiting on a condition")
    func conditionBroadcastWakesAll() {
        let condition = Condition()
        let state = Waiting()
        let woken = Mutex(0)
        let waiters = 4
        for _ in 0..<waiters {
            DetachedThread.start(stackSize: 64 << 10) {
                condition.lock()
                state.waiting += 1
                let deadline = Condition.uptime() + 5
                var signalled = true
                while !state.go && signalled { signalled = condition.wait(untilUptime: deadline) }
                condition.unlock()
                if signalled { woken.withLock { $0 += 1 } }
            }
        }
        var spins = 0
        while condition.withLock({ state.waiting }) < waiters, spins < 10_000 { usleep(1_000); spins += 1 }
        condition.withLock {
            state.go = true
            condition.broadcast()
        }
        // Long enough for every woken thread to count itself, and short
        // of the waiters' deadline: a thread left waiting counts nothing.
        spins = 0
        while woken.withLock({ $0 }) < waiters, spins < 3_000 { usleep(1_000); spins += 1 }
        #expect(woken.withLock { $0 } == waiters)
    }
}

@Suite("LocalPath")
struct LocalPathTests {
    @Test("a path splits into itself without trailing slashes, its parent and its last component",
          arguments: [
              ("/a/b/c", "/a/b/c", "/a/b", "c"),
              ("/a/b/c//", "/a/b/c", "/a/b", "c"),
              ("/a", "/a", "/", "a"),
              ("/", "/", "/", ""),
              ("//", "/", "/", ""),
              ("a", "a", ".", "a"),
              ("b/", "b", ".", "b"),
              ("a/b", "a/b", "a", "b"),
              ("a//b", "a//b", "a", "b"),
              ("ns/x/y", "ns/x/y", "ns/x", "y"),
              ("", "", ".", ""),
          ])
    func split(path: String, trimmed: String, parent: String, name: String) {
        let parts = LocalPath.split(path)
        #expect(parts.trimmed == trimmed)
        #expect(parts.parent == parent)
        #expect(parts.name == name)
        #expect(LocalPath.parent(of: path) == parent)
        #expect(LocalPath.name(of: path) == name)
    }

    @Test("walking up by parents from an absolute path ends at the root")
    func walkEndsAtRoot() {
        var current = "/usr/local/share/locker"
        var seen: [String] = []
        while current != "/", seen.count < 10 {
            current = LocalPath.parent(of: current)
            seen.append(current)
        }
        #expect(seen == ["/usr/local/share", "/usr/local", "/usr", "/"])
    }
}
